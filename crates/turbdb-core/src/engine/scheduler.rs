//! Which atoms the node engine reads next, for which pending sub-queries.
//!
//! - `noshare`: each query alone, in arrival order (its atoms in storage order, a chunk at a
//!   time); other queries profit only from the shared cache.
//! - `liferaft`: one atom at a time, the one with the highest aged workload throughput
//!   over all time steps (Wang et al. §III), α fixed.
//! - `jaws`: two-level batches (§V): the time step with the highest mean aged metric, then
//!   up to `k` of its atoms above that mean, in storage order; α adapts (see
//!   [`crate::engine::alpha`]) and ordered jobs are gated ([`crate::engine::jobs`]).
//!
//! Beyond the paper, small queries (at most [`SMALL_POINTS`] points) get a deadline
//! proportional to what they would cost alone; a small query past its deadline is served
//! next, whole, sharing its atoms' reads with every other query waiting on them, every
//! other batch at most. So a stream of busy atoms cannot starve a small query, and the
//! lane cannot starve the rest.
//!
//! A query that finds the engine idle is served at once, without queueing (any scheduler):
//! there is nothing to share it with, and a batch must not wait to fill.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::engine::workload::{StepKey, Workload};
use crate::error::{Error, Result};

/// Largest query (points) that the small-query lane protects: the "small".
pub const SMALL_POINTS: usize = 1000;
/// A small query's deadline: its arrival plus this many milliseconds …
pub const FAIR_FLOOR_MS: f64 = 50.0;
/// … plus this many times what it would cost alone on a cold cache.
pub const FAIR_FACTOR: f64 = 4.0;
/// Atoms served at a time for one query alone (noshare, the small-query lane, an idle
/// engine): bounds the memory of a batch (4096 velocity atoms are 25 MB).
pub const CHUNK_ATOMS: usize = 4096;

/// The scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulerKind {
    /// Each query alone, in arrival order.
    Noshare,
    /// One atom at a time by the aged workload throughput, α fixed.
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
    /// Small queries by deadline.
    deadlines: BinaryHeap<Reverse<(Deadline, u64)>>,
    /// Whether the last batch was the small-query lane's.
    last_was_fair: bool,
}

/// A deadline in ms, ordered.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Deadline(f64);
impl Eq for Deadline {}
impl PartialOrd for Deadline {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Deadline {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Scheduler {
    /// A scheduler of kind `kind` with JAWS batches of up to `k` atoms.
    pub fn new(kind: SchedulerKind, k: usize) -> Self {
        Self {
            kind,
            k: k.max(1),
            fifo: VecDeque::new(),
            direct: VecDeque::new(),
            deadlines: BinaryHeap::new(),
            last_was_fair: false,
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

    /// A query was queued; `deadline` (ms) if it is small enough for the fair lane.
    pub fn queued(&mut self, q: u64, deadline: Option<f64>) {
        match self.kind {
            SchedulerKind::Noshare => self.fifo.push_back(q),
            SchedulerKind::Jaws => {
                if let Some(d) = deadline {
                    self.deadlines.push(Reverse((Deadline(d), q)));
                }
            }
            SchedulerKind::Liferaft => {}
        }
    }

    /// A query will be served directly (it found the engine idle).
    pub fn direct(&mut self, q: u64) {
        self.direct.push_back(q);
    }

    /// The next batch, or `None` if nothing is pending.
    pub fn next(
        &mut self,
        workload: &mut Workload,
        queries: &mut dyn QueryBook,
        now: f64,
    ) -> Option<Pick> {
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
                let (step, code) = workload.best_atom()?;
                Some(Pick {
                    step,
                    codes: vec![code],
                    serve: Serve::All,
                })
            }
            SchedulerKind::Jaws => {
                if !self.last_was_fair {
                    if let Some(pick) = self.overdue(queries, now) {
                        self.last_was_fair = true;
                        return Some(pick);
                    }
                }
                self.last_was_fair = false;
                let step = workload.best_step();
                let Some(step) = step else {
                    // Nothing queued by metric; the lane may still hold work.
                    return self.overdue(queries, f64::INFINITY);
                };
                let mut codes = workload.top_atoms(step, self.k);
                codes.sort_unstable();
                Some(Pick {
                    step,
                    codes,
                    serve: Serve::All,
                })
            }
        }
    }

    /// The small query with the earliest deadline at or before `now`, as a batch.
    fn overdue(&mut self, queries: &mut dyn QueryBook, now: f64) -> Option<Pick> {
        while let Some(&Reverse((deadline, q))) = self.deadlines.peek() {
            if deadline.0 > now {
                return None;
            }
            if queries.alive(q) {
                if let Some((step, codes)) = queries.remaining(q, CHUNK_ATOMS) {
                    return Some(Pick {
                        step,
                        codes,
                        serve: Serve::All,
                    });
                }
            }
            self.deadlines.pop();
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
        s.queued(1, None);
        s.queued(2, None);
        let first = s.next(&mut w, &mut book, 2.0).unwrap();
        assert_eq!((first.step, first.serve), (step(0), Serve::Only(1)));
        let second = s.next(&mut w, &mut book, 2.0).unwrap();
        assert_eq!(second.serve, Serve::Only(2));
        assert!(s.next(&mut w, &mut book, 2.0).is_none());
    }

    #[test]
    fn liferaft_takes_the_single_best_atom_and_jaws_a_batch_of_the_best_step() {
        let mut w = Workload::new(0.0, CostModel::default());
        let mut book = Book::default();
        push(&mut w, &mut book, 1, 0, &[1, 2, 3], 50, 0.0);
        push(&mut w, &mut book, 2, 0, &[2, 3], 50, 0.0);
        push(&mut w, &mut book, 3, 4, &[9], 60, 0.0);
        let mut liferaft = Scheduler::new(SchedulerKind::Liferaft, 15);
        let pick = liferaft.next(&mut w, &mut book, 0.0).unwrap();
        assert_eq!((pick.step, pick.codes.len()), (step(0), 1));
        assert!(pick.codes[0] == 2 || pick.codes[0] == 3);
        let mut jaws = Scheduler::new(SchedulerKind::Jaws, 15);
        let pick = jaws.next(&mut w, &mut book, 0.0).unwrap();
        // Step 0 (mean of 100, 100, 50 points) beats step 4 (60); atoms 2 and 3 are above
        // the mean, in storage order.
        assert_eq!((pick.step, pick.codes), (step(0), vec![2, 3]));
    }

    #[test]
    fn an_overdue_small_query_is_served_next_but_not_twice_in_a_row() {
        let mut w = Workload::new(0.0, CostModel::default());
        let mut book = Book::default();
        let mut s = Scheduler::new(SchedulerKind::Jaws, 15);
        push(&mut w, &mut book, 1, 0, &[1, 2], 500, 0.0); // busy
        push(&mut w, &mut book, 2, 7, &[40], 1, 0.0); // small and quiet
        push(&mut w, &mut book, 3, 8, &[50], 1, 0.0); // small and quiet
        s.queued(1, None);
        s.queued(2, Some(10.0));
        s.queued(3, Some(20.0));
        // Before its deadline the small query waits behind the busy step.
        assert_eq!(s.next(&mut w, &mut book, 5.0).unwrap().step, step(0));
        // Past both deadlines: the earliest goes first, then a metric batch, then the other.
        assert_eq!(s.next(&mut w, &mut book, 30.0).unwrap().step, step(7));
        let metric = s.next(&mut w, &mut book, 30.0).unwrap();
        assert_eq!(metric.serve, Serve::All);
        assert_eq!(s.next(&mut w, &mut book, 30.0).unwrap().step, step(8));
    }

    #[test]
    fn a_query_that_found_the_engine_idle_is_served_directly_first() {
        let mut w = Workload::new(0.0, CostModel::default());
        let mut book = Book::default();
        book.0
            .insert(9, vec![(step(2), 4), (step(2), 6), (step(3), 4)]);
        let mut s = Scheduler::new(SchedulerKind::Jaws, 15);
        s.direct(9);
        let pick = s.next(&mut w, &mut book, 0.0).unwrap();
        assert_eq!(
            (pick.step, pick.codes, pick.serve),
            (step(2), vec![4, 6], Serve::Direct(9))
        );
        let pick = s.next(&mut w, &mut book, 0.0).unwrap();
        assert_eq!((pick.step, pick.serve), (step(3), Serve::Direct(9)));
        assert!(s.next(&mut w, &mut book, 0.0).is_none());
    }
}
