//! Which atoms the node engine reads next, for which pending sub-queries.
//!
//! - `noshare`: each query alone, in arrival order (its atoms in storage order, a chunk at a
//!   time); other queries profit only from the shared cache.
//! - `liferaft`: one atom at a time, the one with the highest aged workload throughput
//!   over all time steps (Wang et al. §III), α fixed. The paper's atom is 64³ nodes, one
//!   of our regions (below), so LifeRaft takes one region at a time, with every pending
//!   atom in it: one of our 8³-node atoms at a time read a request per atom and ran at a
//!   quarter of `noshare`'s throughput.
//! - `jaws`: two-level batches (§V): the time step with the highest mean aged metric, then
//!   up to [`JAWS_REGIONS`] of its regions above their mean, each with every pending atom
//!   in it, in storage order (a region is [`REGION_BITS`]-aligned: 8³ of our 8³-node atoms,
//!   the paper's 64³-node atom), at most `k` atoms; α adapts (see [`crate::engine::alpha`])
//!   and ordered jobs are gated ([`crate::engine::jobs`]). Beyond the paper, the batch is
//!   widened to the pending regions that touch the chosen ones, within the `k` atoms, so
//!   that the stencils near their faces are summed once, not once in each of two batches
//!   ([`Workload::top_regions`]).
//!
//! Beyond the paper, small queries (at most [`SMALL_POINTS`] points) have their own lane:
//! the paper's batching is for throughput, while a small query is usually someone waiting
//! at a prompt. Small queries are served in arrival order, each whole, as soon as they
//! are queued, ahead of the metric batches, with every other pending atom of their regions
//! (one contiguous read each) and of the pending regions that touch them, within the `k`
//! atoms — sharing those reads with every query waiting on them. So a
//! small query waits only for the small queries before it and for at most one metric batch
//! per [`LANE_BURST`] of them, never for a deadline or a batch to fill; and the metric
//! batches (the medium and large queries) get at least one batch in [`LANE_BURST`]` + 1`,
//! so the lane cannot starve them either.
//!
//! A query that finds the engine idle is served at once, without queueing (any scheduler):
//! there is nothing to share it with, and a batch must not wait to fill.

use std::collections::VecDeque;

use crate::engine::workload::{StepKey, Workload};
use crate::error::{Error, Result};

/// Largest query (points) that the small-query lane protects: the "small".
pub const SMALL_POINTS: usize = 1000;
/// Small queries served in a row while metric batches wait, before one metric batch.
/// Four, not many more: a long burst gives up the metric batches' sharing
/// (bench/workload.py, lru, 3 alternating pairs: 16 → median 1.33× `noshare`, 2 →
/// 1.49–1.55×, none → 1.97×), while with no lane at all small queries waited longer than
/// under `noshare` at 64 and 256 clients (p99 571 vs 229 ms). Four rather than two since
/// a lane batch's queries share home blocks: two runs of three alternating pairs (2-core
/// Intel Xeon, AVX2, default threads) gave a lower small-query p99 with 64 clients in all
/// six (136–156 vs 160–181 ms, then 155–210 vs 185–214 at load 1.7–3.9, the replay's own
/// threads included), throughput at 64 clients 603–616 vs 559–590 q/s, then 455–568 vs
/// 477–541; at saturation the same, then 719–761 vs 732–801 q/s, and the medium p99 a few
/// per cent higher.
pub const LANE_BURST: usize = 4;
/// JAWS's batch size in regions: the paper's k = 15 (its atoms are our regions).
pub const JAWS_REGIONS: usize = 15;
/// A region is an aligned cube of `2^REGION_BITS` atoms a side (its atoms' Morton codes
/// share all but their low `3·REGION_BITS` bits): 8³ atoms, one shard of 64³ nodes when
/// atoms are 8³, so that a region's pending atoms are read in one contiguous run.
pub const REGION_BITS: u32 = 3;
/// Atoms served at a time for one query alone (noshare, the small-query lane, an idle
/// engine): bounds the memory of a batch (4096 velocity atoms are 25 MB).
pub const CHUNK_ATOMS: usize = 4096;

/// The scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulerKind {
    /// Each query alone, in arrival order.
    Noshare,
    /// One region (the paper's atom) at a time by the aged workload throughput, α fixed.
    Liferaft,
    /// Two-level batches, adaptive α, job-aware gating.
    Jaws,
}

impl SchedulerKind {
    /// Parses `noshare`, `liferaft` or `jaws`.
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "noshare" => Ok(SchedulerKind::Noshare),
            "liferaft" => Ok(SchedulerKind::Liferaft),
            "jaws" => Ok(SchedulerKind::Jaws),
            _ => Err(Error::UnknownName(format!(
                "unknown scheduler {name:?}; valid: noshare, liferaft, jaws"
            ))),
        }
    }

    /// The name [`SchedulerKind::parse`] takes.
    pub fn name(&self) -> &'static str {
        match self {
            SchedulerKind::Noshare => "noshare",
            SchedulerKind::Liferaft => "liferaft",
            SchedulerKind::Jaws => "jaws",
        }
    }
}

/// What the scheduler needs to know of the queries.
pub trait QueryBook {
    /// Whether query `q` is still pending.
    fn alive(&self, q: u64) -> bool;
    /// Up to `max` of query `q`'s sub-queries not yet taken, all at one time step (the
    /// earliest level with any left), as atom codes in storage order.
    fn remaining(&mut self, q: u64, max: usize) -> Option<(StepKey, Vec<u64>)>;
}

/// A batch chosen: atoms of one time step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    /// The time step.
    pub step: StepKey,
    /// The atoms, in storage order.
    pub codes: Vec<u64>,
    /// Whose sub-queries are served.
    pub serve: Serve,
}

/// Whose sub-queries a batch serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// Everyone's waiting on the atoms (their whole queues are taken).
    All,
    /// Only this query's, from the queues (noshare).
    Only(u64),
    /// This query's, which was never queued (it found the engine idle).
    Direct(u64),
}

/// The scheduler's state.
#[derive(Debug)]
pub struct Scheduler {
    kind: SchedulerKind,
    k: usize,
    /// Queries in arrival order (noshare).
    fifo: VecDeque<u64>,
    /// Queries served directly, without queueing.
    direct: VecDeque<u64>,
    /// Small queries in arrival order (jaws's small-query lane).
    lane: VecDeque<u64>,
    /// Lane batches served since the last metric batch.
    lane_streak: usize,
}

impl Scheduler {
    /// A scheduler of kind `kind` with JAWS batches of up to `k` atoms.
    pub fn new(kind: SchedulerKind, k: usize) -> Self {
        Self {
            kind,
            k: k.max(1),
            fifo: VecDeque::new(),
            direct: VecDeque::new(),
            lane: VecDeque::new(),
            lane_streak: 0,
        }
    }

    /// The policy.
    pub fn kind(&self) -> SchedulerKind {
        self.kind
    }

    /// JAWS's batch size `k`.
    pub fn k(&self) -> usize {
        self.k
    }

    /// A query was queued; `small` if it has at most [`SMALL_POINTS`] points.
    pub fn queued(&mut self, q: u64, small: bool) {
        match self.kind {
            SchedulerKind::Noshare => self.fifo.push_back(q),
            SchedulerKind::Jaws if small => self.lane.push_back(q),
            SchedulerKind::Jaws | SchedulerKind::Liferaft => {}
        }
    }

    /// A query will be served directly (it found the engine idle).
    pub fn direct(&mut self, q: u64) {
        self.direct.push_back(q);
    }

    /// The next batch, or `None` if nothing is pending.
    pub fn next(&mut self, workload: &mut Workload, queries: &mut dyn QueryBook) -> Option<Pick> {
        while let Some(&q) = self.direct.front() {
            if let Some((step, codes)) = queries.remaining(q, CHUNK_ATOMS) {
                return Some(Pick {
                    step,
                    codes,
                    serve: Serve::Direct(q),
                });
            }
            self.direct.pop_front();
        }
        match self.kind {
            SchedulerKind::Noshare => {
                while let Some(&q) = self.fifo.front() {
                    if let Some((step, codes)) = queries.remaining(q, CHUNK_ATOMS) {
                        return Some(Pick {
                            step,
                            codes,
                            serve: Serve::Only(q),
                        });
                    }
                    self.fifo.pop_front();
                }
                None
            }
            SchedulerKind::Liferaft => {
                let (step, codes) = workload.best_region(self.k, REGION_BITS)?;
                Some(Pick {
                    step,
                    codes,
                    serve: Serve::All,
                })
            }
            SchedulerKind::Jaws => {
                if self.lane_streak < LANE_BURST {
                    if let Some(pick) = self.lane_head(workload, queries) {
                        self.lane_streak += 1;
                        return Some(pick);
                    }
                }
                self.lane_streak = 0;
                let Some(step) = workload.best_step() else {
                    // No metric work: the lane may still hold some.
                    return self.lane_head(workload, queries);
                };
                let codes = workload.top_regions(step, JAWS_REGIONS, self.k, REGION_BITS);
                Some(Pick {
                    step,
                    codes,
                    serve: Serve::All,
                })
            }
        }
    }

    /// The oldest small query with sub-queries left, whole (up to [`CHUNK_ATOMS`] atoms of
    /// its first time level with any left), widened to every pending atom of its regions
    /// (up to `k` atoms) and served to every query waiting on them: a region is one
    /// contiguous read, and small queries crowd into the same regions of interest, so one
    /// lane batch serves many of them (bench/workload.py, lru, 3 alternating pairs, 2-core
    /// AMD EPYC AVX-512, load 1.5–2.2: median 1.53× → 1.71× `noshare`, small p99 866 →
    /// 720 ms at 1 024 clients).
    fn lane_head(&mut self, workload: &Workload, queries: &mut dyn QueryBook) -> Option<Pick> {
        while let Some(&q) = self.lane.front() {
            if queries.alive(q) {
                if let Some((step, codes)) = queries.remaining(q, CHUNK_ATOMS) {
                    if !codes.is_empty() {
                        let codes = workload.regions_of(step, &codes, self.k, REGION_BITS);
                        return Some(Pick {
                            step,
                            codes,
                            serve: Serve::All,
                        });
                    }
                }
            }
            self.lane.pop_front();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use rustc_hash::FxHashMap;

    use super::*;
    use crate::engine::metric::CostModel;
    use crate::engine::workload::Entry;

    /// Queries as lists of (step, code) not yet taken.
    #[derive(Default)]
    struct Book(FxHashMap<u64, Vec<(StepKey, u64)>>);

    impl QueryBook for Book {
        fn alive(&self, q: u64) -> bool {
            self.0.contains_key(&q)
        }
        fn remaining(&mut self, q: u64, max: usize) -> Option<(StepKey, Vec<u64>)> {
            let left = self.0.get_mut(&q)?;
            let step = left.first()?.0;
            let codes: Vec<u64> = left
                .iter()
                .filter(|s| s.0 == step)
                .take(max)
                .map(|s| s.1)
                .collect();
            left.retain(|s| !(s.0 == step && codes.contains(&s.1)));
            Some((step, codes))
        }
    }

    fn step(t: u32) -> StepKey {
        StepKey { field: 0, t }
    }

    fn push(
        w: &mut Workload,
        book: &mut Book,
        q: u64,
        t: u32,
        codes: &[u64],
        points: u32,
        at: f64,
    ) {
        for (i, &code) in codes.iter().enumerate() {
            w.push(
                step(t),
                code,
                Entry {
                    query: q,
                    level: 0,
                    atom: i as u32,
                    points,
                },
                at,
                false,
            );
            book.0.entry(q).or_default().push((step(t), code));
        }
    }

    #[test]
    fn noshare_serves_queries_alone_in_arrival_order() {
        let mut w = Workload::new(0.5, CostModel::default());
        let mut book = Book::default();
        let mut s = Scheduler::new(SchedulerKind::Noshare, 15);
        push(&mut w, &mut book, 1, 0, &[5, 3], 1, 0.0);
        push(&mut w, &mut book, 2, 1, &[3], 900, 1.0);
        s.queued(1, false);
        s.queued(2, false);
        let first = s.next(&mut w, &mut book).unwrap();
        assert_eq!((first.step, first.serve), (step(0), Serve::Only(1)));
        let second = s.next(&mut w, &mut book).unwrap();
        assert_eq!(second.serve, Serve::Only(2));
        assert!(s.next(&mut w, &mut book).is_none());
    }

    #[test]
    fn liferaft_takes_the_single_best_region_and_jaws_a_batch_of_the_best_step() {
        let mut w = Workload::new(0.0, CostModel::default());
        let mut book = Book::default();
        push(&mut w, &mut book, 1, 0, &[1, 2, 3], 50, 0.0);
        push(&mut w, &mut book, 2, 0, &[2, 3], 50, 0.0);
        push(&mut w, &mut book, 3, 4, &[9], 60, 0.0);
        // A second region of step 0, colder than the first and not touching it (region 9,
        // two regions away along x: Morton codes from 9 · 512).
        push(&mut w, &mut book, 4, 0, &[4700], 20, 0.0);
        let mut liferaft = Scheduler::new(SchedulerKind::Liferaft, 15);
        let pick = liferaft.next(&mut w, &mut book).unwrap();
        assert_eq!((pick.step, pick.codes), (step(0), vec![1, 2, 3]));
        let mut jaws = Scheduler::new(SchedulerKind::Jaws, 15);
        let pick = jaws.next(&mut w, &mut book).unwrap();
        // Step 0 (its regions: 250 and 20 points) beats step 4 (60); its region
        // above the mean is taken whole, in storage order.
        assert_eq!((pick.step, pick.codes), (step(0), vec![1, 2, 3]));
    }

    /// The next pick, its sub-queries taken from the queues as the engine takes them.
    fn serve(s: &mut Scheduler, w: &mut Workload, book: &mut Book) -> Option<Pick> {
        let pick = s.next(w, book)?;
        for &code in &pick.codes {
            if let Some(queue) = w.take_atom(pick.step, code) {
                for e in queue.entries {
                    if let Some(left) = book.0.get_mut(&e.query) {
                        left.retain(|&(st, c)| !(st == pick.step && c == code));
                    }
                }
            }
        }
        book.0.retain(|_, left| !left.is_empty());
        Some(pick)
    }

    #[test]
    fn small_queries_are_served_at_once_whole_and_in_arrival_order() {
        let mut w = Workload::new(0.0, CostModel::default());
        let mut book = Book::default();
        let mut s = Scheduler::new(SchedulerKind::Jaws, 15);
        push(&mut w, &mut book, 1, 0, &[1, 2, 3], 50_000, 0.0); // large and busy
        push(&mut w, &mut book, 2, 7, &[40, 41], 1, 1.0); // small
        push(&mut w, &mut book, 3, 8, &[50], 1, 2.0); // small
        s.queued(1, false);
        s.queued(2, true);
        s.queued(3, true);
        // No deadline to wait for: the small queries go first, whole, oldest first.
        let first = serve(&mut s, &mut w, &mut book).unwrap();
        assert_eq!(
            (first.step, first.codes, first.serve),
            (step(7), vec![40, 41], Serve::All)
        );
        assert_eq!(serve(&mut s, &mut w, &mut book).unwrap().step, step(8));
        let metric = serve(&mut s, &mut w, &mut book).unwrap();
        assert_eq!((metric.step, metric.codes), (step(0), vec![1, 2, 3]));
        assert!(serve(&mut s, &mut w, &mut book).is_none());
    }

    #[test]
    fn a_small_query_is_widened_to_its_regions_and_shares_their_reads() {
        let mut w = Workload::new(0.0, CostModel::default());
        let mut book = Book::default();
        let mut s = Scheduler::new(SchedulerKind::Jaws, 4096);
        // Query 1 has atoms in region 0 (codes below 512) and in region 9, which does not
        // touch it (two regions away along x: codes from 9 · 512).
        push(&mut w, &mut book, 1, 0, &[1, 2, 9, 4700], 5_000, 0.0);
        push(&mut w, &mut book, 2, 0, &[2], 3, 1.0);
        s.queued(1, false);
        s.queued(2, true);
        let pick = serve(&mut s, &mut w, &mut book).unwrap();
        // The small query's region is read whole, in storage order, for every query.
        assert_eq!((pick.codes, pick.serve), (vec![1, 2, 9], Serve::All));
        assert!(!book.0.contains_key(&2));
        assert_eq!(book.0[&1], vec![(step(0), 4700)]);
    }

    proptest::proptest! {
        /// Whatever the mix, at most LANE_BURST lane batches run between metric batches
        /// while metric work waits, every query completes, and the small query of rank r
        /// (in arrival order among the small ones) is done within r + 1 batches plus one
        /// metric batch per LANE_BURST of them, however much large work is queued — under
        /// noshare it would wait for every query that arrived before it.
        #[test]
        fn the_small_query_lane_is_bounded_and_starves_no_one(
            mix in proptest::collection::vec((proptest::bool::ANY, 0u32..4, 1usize..6), 1..40)
        ) {
            let mut w = Workload::new(0.5, CostModel::default());
            let mut book = Book::default();
            let mut s = Scheduler::new(SchedulerKind::Jaws, 4);
            let mut smalls = Vec::new();
            for (i, &(small, t, atoms)) in mix.iter().enumerate() {
                let q = i as u64 + 1;
                let codes: Vec<u64> = (0..atoms as u64).map(|a| a * 3 + q % 5).collect();
                let points = if small { 10 } else { 20_000 };
                push(&mut w, &mut book, q, t, &codes, points, i as f64);
                s.queued(q, small);
                if small {
                    smalls.push(q);
                }
            }
            let mut done: Vec<u64> = Vec::new();
            let (mut batches, mut streak) = (0usize, 0usize);
            let mut finished_at: FxHashMap<u64, usize> = FxHashMap::default();
            while serve(&mut s, &mut w, &mut book).is_some() {
                batches += 1;
                proptest::prop_assert!(batches <= 10_000, "the scheduler loops");
                if s.lane_streak > 0 {
                    streak += 1;
                    proptest::prop_assert!(streak <= LANE_BURST);
                } else {
                    streak = 0;
                }
                for q in 1..=mix.len() as u64 {
                    if !book.0.contains_key(&q) && !done.contains(&q) {
                        done.push(q);
                        finished_at.insert(q, batches);
                    }
                }
            }
            proptest::prop_assert_eq!(done.len(), mix.len(), "every query completes");
            for (rank, q) in smalls.iter().enumerate() {
                let bound = rank + 1 + rank / LANE_BURST;
                proptest::prop_assert!(
                    finished_at[q] <= bound,
                    "small query {} (#{} small) done after {} batches, bound {}",
                    q, rank, finished_at[q], bound
                );
            }
        }
    }

    #[test]
    fn a_query_that_found_the_engine_idle_is_served_directly_first() {
        let mut w = Workload::new(0.0, CostModel::default());
        let mut book = Book::default();
        book.0
            .insert(9, vec![(step(2), 4), (step(2), 6), (step(3), 4)]);
        let mut s = Scheduler::new(SchedulerKind::Jaws, 15);
        s.direct(9);
        let pick = s.next(&mut w, &mut book).unwrap();
        assert_eq!(
            (pick.step, pick.codes, pick.serve),
            (step(2), vec![4, 6], Serve::Direct(9))
        );
        let pick = s.next(&mut w, &mut book).unwrap();
        assert_eq!((pick.step, pick.serve), (step(3), Serve::Direct(9)));
        assert!(s.next(&mut w, &mut book).is_none());
    }
}
