//! The workload queues of the node engine (Wang et al. §III-C, Fig. 7): one queue per
//! (field, time step, atom) holding the pending sub-queries of every query that needs that
//! atom, with what the schedulers rank them by — the pending points `W`, the arrival of
//! the oldest sub-query, whether the atom is cached — and, per time step, the sums that
//! give its mean aged metric.
//!
//! Priorities are static keys ([`static_key`]: the aged metric less the part that grows
//! with time, which is the same for all work), computed when a scheduler ranks the regions
//! of a step ([`Workload::top_regions`], [`Workload::best_region`]) from each atom's
//! `U_t`, which is kept current. When α or the cost model change (at the end of a run of
//! queries) every `U_t` is recomputed.

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use crate::engine::cache::{AtomKey, Ranking};
use crate::engine::metric::{static_key, workload_throughput, CostModel};
use crate::storage::morton;

/// A time step of a field: the first level of JAWS's two-level batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepKey {
    /// The engine's number of the field.
    pub field: u32,
    /// Time index.
    pub t: u32,
}

impl StepKey {
    /// The key of one of the step's atoms.
    pub fn atom(&self, code: u64) -> AtomKey {
        AtomKey {
            field: self.field,
            t: self.t,
            code,
        }
    }
}

/// A pending sub-query: query `query`'s sub-query `atom` at its time level `level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The query's id.
    pub query: u64,
    /// Index of the time level in the query's levels.
    pub level: u8,
    /// The query's number of the atom (its sub-query).
    pub atom: u32,
    /// Points (or nodes) the sub-query serves.
    pub points: u32,
}

/// Sub-queries an atom's queue holds without allocating: most queues are short, and one
/// allocation per queue was a sixth of the engine thread's time in the saturating replay.
const INLINE_ENTRIES: usize = 2;

/// The queue of one atom.
#[derive(Debug, Clone)]
pub struct AtomQueue {
    /// Pending sub-queries, in arrival order.
    pub entries: SmallVec<[Entry; INLINE_ENTRIES]>,
    /// Arrival (ms) of each entry.
    arrivals: SmallVec<[f64; INLINE_ENTRIES]>,
    /// Pending points `W`.
    pub points: u64,
    /// Arrival (ms) of the oldest entry.
    pub oldest: f64,
    /// Whether the atom is in the cache (`φ = 0`).
    pub cached: bool,
    /// `U_t` as last computed.
    u_t: f64,
}

/// The queues of one time step.
#[derive(Debug, Default)]
pub struct StepQueue {
    atoms: FxHashMap<u64, AtomQueue>,
    sum_u_t: f64,
    sum_oldest: f64,
}

impl StepQueue {
    /// Atoms with pending work.
    pub fn len(&self) -> usize {
        self.atoms.len()
    }

    /// Whether no atom has pending work.
    pub fn is_empty(&self) -> bool {
        self.atoms.is_empty()
    }
}

/// Every workload queue, by time step.
#[derive(Debug, Default)]
pub struct Workload {
    steps: FxHashMap<StepKey, StepQueue>,
    alpha: f64,
    cost: CostModel,
    /// Sub-queries pending.
    entries: u64,
    /// Points pending, over all sub-queries.
    points: u64,
    /// Each field's grid of atoms, where a point query has said it: which regions touch
    /// across a periodic seam.
    grids: FxHashMap<u32, AtomGrid>,
}

/// A field's grid in atoms: how many along each axis, and which axes are periodic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomGrid {
    /// Atoms along x, y, z (the last one may be partial).
    pub atoms: [u32; 3],
    /// Whether each axis wraps.
    pub periodic: [bool; 3],
}

impl AtomGrid {
    /// Regions of `2^bits` atoms a side along each axis.
    fn regions(&self, bits: u32) -> [u32; 3] {
        self.atoms.map(|a| a.div_ceil(1 << bits))
    }
}

impl Workload {
    /// Empty queues ranked with age bias `alpha` and costs `cost`.
    pub fn new(alpha: f64, cost: CostModel) -> Self {
        Self {
            alpha,
            cost,
            ..Self::default()
        }
    }

    /// Says that `field`'s grid is `grid`, so that regions across its periodic seams count
    /// as touching.
    pub fn set_grid(&mut self, field: u32, grid: AtomGrid) {
        self.grids.insert(field, grid);
    }

    /// Forgets `field`'s grid (the field was made again: its number is not seen again).
    pub fn forget_grid(&mut self, field: u32) {
        self.grids.remove(&field);
    }

    /// Whether two regions of `step` (aligned cubes of `2^bits` atoms a side, by the
    /// Morton codes of their positions) are the same or touch at a face, an edge or a
    /// corner, across a periodic seam too where the field's grid is known.
    fn regions_touch(&self, step: StepKey, bits: u32) -> impl Fn(u64, u64) -> bool {
        // Regions along each axis that wraps (none where the grid is not known).
        let wrap: [Option<u32>; 3] = match self.grids.get(&step.field) {
            Some(g) => {
                let regions = g.regions(bits);
                [0, 1, 2].map(|k| g.periodic[k].then_some(regions[k]))
            }
            None => [None; 3],
        };
        move |a, b| {
            let (a, b) = (morton::decode(a), morton::decode(b));
            let (a, b) = ([a.0, a.1, a.2], [b.0, b.1, b.2]);
            (0..3).all(|k| {
                let apart = a[k].abs_diff(b[k]);
                match wrap[k] {
                    Some(n) => apart.min(n.saturating_sub(apart)) <= 1,
                    None => apart <= 1,
                }
            })
        }
    }

    /// Sub-queries pending.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Points pending over all sub-queries (a point counts once per atom it needs).
    pub fn points(&self) -> u64 {
        self.points
    }

    /// Atoms with pending work.
    pub fn atoms(&self) -> usize {
        self.steps.values().map(StepQueue::len).sum()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The queue of an atom, if it has pending work.
    pub fn queue(&self, step: StepKey, code: u64) -> Option<&AtomQueue> {
        self.steps.get(&step)?.atoms.get(&code)
    }

    /// Adds a sub-query to its atom's queue; `cached` says whether the atom is cached now.
    pub fn push(&mut self, step: StepKey, code: u64, entry: Entry, arrival: f64, cached: bool) {
        let cost = self.cost;
        let queue = self.steps.entry(step).or_default();
        let atom = queue.atoms.entry(code).or_insert_with(|| AtomQueue {
            entries: SmallVec::new(),
            arrivals: SmallVec::new(),
            points: 0,
            oldest: arrival,
            cached,
            u_t: 0.0,
        });
        let fresh = atom.entries.is_empty();
        atom.entries.push(entry);
        atom.arrivals.push(arrival);
        atom.points += u64::from(entry.points);
        self.entries += 1;
        self.points += u64::from(entry.points);
        if fresh {
            queue.sum_oldest += atom.oldest;
        }
        let old_u_t = atom.u_t;
        atom.u_t = workload_throughput(atom.points as f64, atom.cached, &cost);
        queue.sum_u_t += atom.u_t - old_u_t;
    }

    /// Takes an atom's whole queue (every sub-query waiting on it).
    pub fn take_atom(&mut self, step: StepKey, code: u64) -> Option<AtomQueue> {
        let queue = self.steps.get_mut(&step)?;
        let atom = queue.atoms.remove(&code)?;
        queue.sum_u_t -= atom.u_t;
        queue.sum_oldest -= atom.oldest;
        self.entries -= atom.entries.len() as u64;
        self.points -= atom.points;
        if queue.atoms.is_empty() {
            self.steps.remove(&step);
        }
        Some(atom)
    }

    /// Takes the sub-queries of one query from an atom's queue, leaving the others'.
    pub fn take_query(&mut self, step: StepKey, code: u64, query: u64) -> Vec<Entry> {
        let Some(queue) = self.steps.get_mut(&step) else {
            return Vec::new();
        };
        let Some(atom) = queue.atoms.get(&code) else {
            return Vec::new();
        };
        if atom.entries.iter().all(|e| e.query == query) {
            return self
                .take_atom(step, code)
                .map(|a| a.entries.into_vec())
                .unwrap_or_default();
        }
        let atom = queue.atoms.get_mut(&code).expect("present");
        let mut taken = Vec::new();
        let mut k = 0;
        while k < atom.entries.len() {
            if atom.entries[k].query == query {
                taken.push(atom.entries.remove(k));
                atom.arrivals.remove(k);
            } else {
                k += 1;
            }
        }
        let points: u64 = taken.iter().map(|e| u64::from(e.points)).sum();
        atom.points -= points;
        self.entries -= taken.len() as u64;
        self.points -= points;
        let oldest = atom.arrivals.iter().copied().fold(f64::INFINITY, f64::min);
        queue.sum_oldest += oldest - atom.oldest;
        atom.oldest = oldest;
        Self::rerank(queue, code, &self.cost);
        taken
    }

    /// Forgets `points` pending points of a cancelled or failed query on an atom; its
    /// entries stay until the atom is served (and are skipped then).
    pub fn forget_points(&mut self, step: StepKey, code: u64, points: u32) {
        let Some(queue) = self.steps.get_mut(&step) else {
            return;
        };
        let Some(atom) = queue.atoms.get_mut(&code) else {
            return;
        };
        let points = u64::from(points).min(atom.points);
        atom.points -= points;
        self.points -= points;
        Self::rerank(queue, code, &self.cost);
    }

    /// Notes that an atom entered or left the cache.
    pub fn set_cached(&mut self, key: &AtomKey, cached: bool) {
        let step = StepKey {
            field: key.field,
            t: key.t,
        };
        let Some(queue) = self.steps.get_mut(&step) else {
            return;
        };
        match queue.atoms.get_mut(&key.code) {
            Some(atom) if atom.cached != cached => atom.cached = cached,
            _ => return,
        }
        Self::rerank(queue, key.code, &self.cost);
    }

    /// Recomputes an atom's `U_t` and its step's sum.
    fn rerank(queue: &mut StepQueue, code: u64, cost: &CostModel) {
        let atom = queue.atoms.get_mut(&code).expect("present");
        let old = atom.u_t;
        atom.u_t = workload_throughput(atom.points as f64, atom.cached, cost);
        queue.sum_u_t += atom.u_t - old;
    }

    /// New α and costs (end of a run): every `U_t`, key and sum is recomputed.
    pub fn reweigh(&mut self, alpha: f64, cost: CostModel) {
        self.alpha = alpha;
        self.cost = cost;
        for queue in self.steps.values_mut() {
            queue.sum_u_t = 0.0;
            queue.sum_oldest = 0.0;
            for atom in queue.atoms.values_mut() {
                atom.u_t = workload_throughput(atom.points as f64, atom.cached, &cost);
                queue.sum_u_t += atom.u_t;
                queue.sum_oldest += atom.oldest;
            }
        }
    }

    /// The mean static key of a step's atoms: its mean aged metric less `α·now`.
    fn mean_key(&self, queue: &StepQueue) -> f64 {
        let n = queue.atoms.len().max(1) as f64;
        static_key(queue.sum_u_t / n, queue.sum_oldest / n, self.alpha)
    }

    /// The time step whose atoms have the highest mean aged metric (JAWS's first level).
    pub fn best_step(&self) -> Option<StepKey> {
        self.steps
            .iter()
            .map(|(&step, queue)| (self.mean_key(queue), step))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, step)| step)
    }

    /// JAWS's second level over regions: up to `k` aligned cubes of `2^bits` atoms a side
    /// of `step` whose aged metric is at least the mean over the step's regions, highest
    /// first, and every pending atom in them, at most `max_atoms` in all, in storage
    /// order; the caller takes their queues. A region's metric is the paper's for one of
    /// its atoms (64³ nodes, the size of one of our 8³-atom regions): its pending points
    /// `W` against reading its uncached pending atoms, `U_t = W / (T_b·n + T_m·W)`, aged
    /// from its oldest sub-query. Taking regions whole makes a batch's reads contiguous
    /// runs (and its points' stencils whole) instead of atoms scattered over the step.
    ///
    /// Beyond the paper, the batch is then widened, within `max_atoms`, to the pending
    /// regions next to the chosen ones (below the mean, or past `k`), best first: a
    /// stencil near a region's face has atoms in its neighbour, and one served in two
    /// batches is summed twice (each time with its whole stencil gathered). On the
    /// benchmark's grid, where every region of a step touches every other,
    /// `bench/workload.py`'s saturating `jaws`/lru replay computed a median of 0.96 s
    /// instead of 1.14 (0.79–1.10 against 0.97–1.47) and served 875 instead of 809
    /// queries/s (nine runs each, three alternating rounds), 838 instead of 660 with
    /// `--driver futures` (six each; the 2-core Intel Xeon, fields on AVX2 and derivatives on
    /// AVX-512, 2 threads, load 1.9–4.8).
    pub fn top_regions(
        &mut self,
        step: StepKey,
        k: usize,
        max_atoms: usize,
        bits: u32,
    ) -> Vec<u64> {
        let Some(queue) = self.steps.get(&step) else {
            return Vec::new();
        };
        let ranked = self.best_regions_first(queue, bits);
        let mean = ranked.iter().map(|r| r.0).sum::<f64>() / ranked.len().max(1) as f64;
        let mut chosen: Vec<u64> = Vec::new();
        let mut regions: Vec<u64> = Vec::new();
        // The regions after the first that is not taken, best first.
        let mut rest: Vec<(u64, Vec<u64>)> = Vec::new();
        for (taken, (key, region, mut codes)) in ranked.into_iter().enumerate() {
            // Rounding must not leave the best region below its own mean: it is always taken.
            let below = key < mean - 1e-9 * mean.abs();
            let full = chosen.len() + codes.len() > max_atoms;
            if !rest.is_empty() || (taken > 0 && (taken >= k || below || full)) {
                rest.push((region, codes));
                continue;
            }
            codes.sort_unstable();
            codes.truncate(max_atoms.max(1));
            chosen.extend(codes);
            regions.push(region);
        }
        add_touching(
            &mut chosen,
            &regions,
            rest,
            max_atoms,
            self.regions_touch(step, bits),
        );
        chosen.sort_unstable();
        chosen
    }

    /// LifeRaft's pick: the region (as in [`Self::top_regions`]) with the highest aged
    /// metric over every time step, and its pending atoms in storage order, at most
    /// `max_atoms`; ties to the lower step, then the lower region.
    pub fn best_region(&self, max_atoms: usize, bits: u32) -> Option<(StepKey, Vec<u64>)> {
        let mut best: Option<(f64, StepKey, u64, Vec<u64>)> = None;
        for (&step, queue) in &self.steps {
            for (key, region, codes) in self.ranked_regions(queue, bits) {
                let better = best.as_ref().is_none_or(|(k, s, r, _)| {
                    key.total_cmp(k).then((*s, *r).cmp(&(step, region)))
                        == std::cmp::Ordering::Greater
                });
                if better {
                    best = Some((key, step, region, codes));
                }
            }
        }
        best.map(|(_, step, _, mut codes)| {
            codes.sort_unstable();
            codes.truncate(max_atoms.max(1));
            (step, codes)
        })
    }

    /// Every pending atom of `step` in the regions (aligned cubes of `2^bits` atoms a side)
    /// of `codes`, in storage order: a small query's atoms widened to whole regions, read
    /// as contiguous runs and served to every query waiting on them. `codes` alone when
    /// that would exceed `max_atoms`. Then, as in [`Self::top_regions`], the pending
    /// regions that touch those, best first, within `max_atoms`: the points of other
    /// queries near the regions' faces are summed once, and the lane's batches share
    /// more. On the benchmark's grid (where every region of a step touches every other)
    /// the saturating `jaws`/lru replay served a median of 853 instead of 774 queries/s,
    /// its small queries' p99 596 instead of 810 ms (nine runs each, three alternating
    /// rounds; the 2-core Intel Xeon, fields on AVX2 and derivatives on AVX-512, 2 threads,
    /// load about 2–4; 1 055 against 821 and 521
    /// against 699 ms in an hour before, with a prototype that made the same batches).
    pub fn regions_of(
        &self,
        step: StepKey,
        codes: &[u64],
        max_atoms: usize,
        bits: u32,
    ) -> Vec<u64> {
        let Some(queue) = self.steps.get(&step) else {
            return codes.to_vec();
        };
        let shift = 3 * bits;
        let mut regions: Vec<u64> = codes.iter().map(|c| c >> shift).collect();
        regions.sort_unstable();
        regions.dedup();
        // A region's atoms are one run of Morton codes: probe them where that is fewer
        // lookups than scanning every pending atom of the step (a big step, few regions).
        let mut wide: Vec<u64> = if regions.len() << shift < queue.atoms.len() {
            regions
                .iter()
                .flat_map(|r| (r << shift)..((r + 1) << shift))
                .filter(|c| queue.atoms.contains_key(c))
                .collect()
        } else {
            queue
                .atoms
                .keys()
                .copied()
                .filter(|c| regions.binary_search(&(c >> shift)).is_ok())
                .collect()
        };
        wide.extend_from_slice(codes);
        wide.sort_unstable();
        wide.dedup();
        if wide.len() > max_atoms.max(codes.len()) {
            return codes.to_vec();
        }
        let others = self
            .best_regions_first(queue, bits)
            .into_iter()
            .filter(|r| regions.binary_search(&r.1).is_err())
            .map(|(_, region, codes)| (region, codes));
        add_touching(
            &mut wide,
            &regions,
            others,
            max_atoms,
            self.regions_touch(step, bits),
        );
        wide.sort_unstable();
        wide
    }

    /// Each region of `queue` with pending atoms: `(static key, region, its atoms)`.
    fn ranked_regions(&self, queue: &StepQueue, bits: u32) -> Vec<(f64, u64, Vec<u64>)> {
        let (alpha, cost) = (self.alpha, self.cost);
        // Region → (pending points, uncached atoms, oldest arrival, atoms).
        let mut regions: FxHashMap<u64, (f64, f64, f64, Vec<u64>)> = FxHashMap::default();
        for (&code, atom) in &queue.atoms {
            let region =
                regions
                    .entry(code >> (3 * bits))
                    .or_insert((0.0, 0.0, f64::INFINITY, Vec::new()));
            region.0 += atom.points as f64;
            region.1 += f64::from(u8::from(!atom.cached));
            region.2 = region.2.min(atom.oldest);
            region.3.push(code);
        }
        regions
            .into_iter()
            .map(|(region, (points, uncached, oldest, codes))| {
                let u_t = if points > 0.0 {
                    points / (cost.t_b * uncached + cost.t_m * points)
                } else {
                    0.0
                };
                (static_key(u_t, oldest, alpha), region, codes)
            })
            .collect()
    }

    /// [`Self::ranked_regions`], the highest key first (ties to the lower region: storage
    /// order).
    fn best_regions_first(&self, queue: &StepQueue, bits: u32) -> Vec<(f64, u64, Vec<u64>)> {
        let mut ranked = self.ranked_regions(queue, bits);
        ranked.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        ranked
    }

    /// `(mean key of its step, pending points)` of a queued atom, for the URC cache.
    pub fn rank(&self, key: &AtomKey) -> Option<(f64, f64)> {
        let queue = self.steps.get(&StepKey {
            field: key.field,
            t: key.t,
        })?;
        let atom = queue.atoms.get(&key.code)?;
        Some((self.mean_key(queue), atom.points as f64))
    }
}

/// Adds to `chosen` the atoms of each of the `candidates` (`(region, its pending atoms)`,
/// best first) that touches one of `regions` (`touch`), while they fit in `max_atoms`: a
/// batch widened to its neighbourhood.
fn add_touching(
    chosen: &mut Vec<u64>,
    regions: &[u64],
    candidates: impl IntoIterator<Item = (u64, Vec<u64>)>,
    max_atoms: usize,
    touch: impl Fn(u64, u64) -> bool,
) {
    for (region, codes) in candidates {
        let touches = regions.iter().any(|&r| touch(r, region));
        if touches && chosen.len() + codes.len() <= max_atoms {
            chosen.extend(codes);
        }
    }
}

impl Ranking for Workload {
    fn rank(&self, key: &AtomKey) -> Option<(f64, f64)> {
        Workload::rank(self, key)
    }
}

/// The pending work as the URC cache ranks atoms ([`Workload::rank`]), and beyond the
/// paper the time steps that the running jobs' next queries will read (`(field, time
/// index)`, [`crate::engine::jobs::JobGraph::next_steps`]): an atom that no pending query
/// needs but that lies in such a step is kept after every pending atom and before the
/// other idle ones. A job's next query is not handed in until its last is answered, so
/// its work is not pending yet while its step's atoms are still cached — as when a job
/// asks twice about one step. 12 alternating rounds of the saturating `jaws` replay
/// (bench/workload.py's trace, 2-core Intel Xeon, fields on AVX2, 2 threads, load not
/// recorded), this build against the one before: hit ratio median 0.165 against 0.134
/// (higher in 10 of 12 rounds), 874 against 884 MB read, throughput within the noise
/// (815 against 831 q/s); lruk in 6 of those rounds 0.094. Ranked among the pending atoms
/// instead (a rank of −1, above the old steps' negative aged keys) it gained less: 0.137
/// against 0.122 over 12 rounds, 0.128 against 0.129 over 6 more.
pub struct WithNextSteps<'a> {
    /// The scheduler's pending work.
    pub workload: &'a Workload,
    /// The steps the jobs' next queries read.
    pub next_steps: &'a FxHashSet<(u32, u32)>,
}

/// Where atoms of a step a job reads next rank: below every pending atom, whose step's
/// rank is its mean aged key (`U_t·(1−α) − oldest·α`: negative where the oldest
/// sub-query is old, so not 0 or −1 but the least value there is).
const NEXT_STEP_RANK: (f64, f64) = (f64::MIN, 0.0);

impl Ranking for WithNextSteps<'_> {
    fn rank(&self, key: &AtomKey) -> Option<(f64, f64)> {
        self.workload.rank(key).or_else(|| {
            self.next_steps
                .contains(&(key.field, key.t))
                .then_some(NEXT_STEP_RANK)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COST: CostModel = CostModel {
        t_b: 0.1,
        t_m: 0.001,
    };

    fn entry(query: u64, atom: u32, points: u32) -> Entry {
        Entry {
            query,
            level: 0,
            atom,
            points,
        }
    }

    fn step(t: u32) -> StepKey {
        StepKey { field: 0, t }
    }

    #[test]
    fn urc_keeps_pending_atoms_then_those_of_a_jobs_next_step_then_the_others() {
        use crate::engine::accumulate::PADDING;
        use crate::engine::cache::{padded, AtomCache, PolicyKind};

        let mut w = Workload::new(0.5, COST);
        w.push(step(1), 10, entry(1, 0, 50), 0.0, true); // pending, cached
        let next_steps: FxHashSet<(u32, u32)> = [(0, 2)].into_iter().collect();
        let ranking = WithNextSteps {
            workload: &w,
            next_steps: &next_steps,
        };
        let key = |t: u32, code: u64| step(t).atom(code);
        assert_eq!(ranking.rank(&key(1, 10)), w.rank(&key(1, 10)));
        assert_eq!(ranking.rank(&key(2, 20)), Some(NEXT_STEP_RANK));
        assert_eq!(ranking.rank(&key(3, 30)), None);
        assert!(
            NEXT_STEP_RANK.0 < w.rank(&key(1, 10)).unwrap().0,
            "below every pending atom, whose step keys are negative when old (aged by arrival)"
        );
        // A cache of three atoms, the atom of the job's next step the least recent: the
        // idle atom of another step goes first, then the next step's, never the pending one.
        let atom = || padded(vec![0.0; 512]);
        let mut cache = AtomCache::new(3 * (512 + PADDING) * 4, PolicyKind::Urc);
        for k in [key(2, 20), key(1, 10), key(3, 30)] {
            cache.insert(k, atom(), &ranking);
        }
        assert_eq!(cache.insert(key(3, 31), atom(), &ranking), vec![key(3, 30)]);
        assert_eq!(cache.insert(key(3, 32), atom(), &ranking), vec![key(3, 31)]);
        let ranking = WithNextSteps {
            workload: &w,
            next_steps: &FxHashSet::default(),
        };
        // Without the next step, its atom is idle and goes before the newer idle one.
        assert_eq!(cache.insert(key(3, 33), atom(), &ranking), vec![key(2, 20)]);
    }

    #[test]
    fn the_step_with_the_highest_mean_metric_is_chosen() {
        let mut w = Workload::new(0.0, COST);
        // Step 1: one hot atom (500 points) and three cold ones; step 2: four lukewarm.
        w.push(step(1), 10, entry(1, 0, 500), 0.0, false);
        for code in [11, 12, 13] {
            w.push(step(1), code, entry(1, 1, 1), 0.0, false);
        }
        for code in [20, 21, 22, 23] {
            w.push(step(2), code, entry(2, 0, 40), 0.0, false);
        }
        // Means of U_t = p / (0.1 + 0.001 p): step 1 (833 + 3·9.9) / 4 ≈ 216, step 2 ≈ 286.
        assert_eq!(w.best_step(), Some(step(2)));
    }

    /// Region `r`'s atom `i` (regions of 2³ atoms: `bits` = 1).
    fn code(r: u64, i: u64) -> u64 {
        (r << 3) | i
    }

    #[test]
    fn the_regions_above_the_mean_are_taken_whole_in_storage_order() {
        let mut w = Workload::new(0.0, COST);
        // Region 2 at (0, 1, 0): two hot atoms; regions 9 at (3, 0, 0) and 36 at (0, 0, 3),
        // which do not touch it: cold atoms, one point each.
        w.push(step(1), code(2, 6), entry(1, 0, 300), 0.0, false);
        w.push(step(1), code(2, 1), entry(2, 0, 200), 0.0, false);
        for i in 0..4 {
            w.push(step(1), code(9, i), entry(3, i as u32, 1), 0.0, false);
            w.push(step(1), code(36, i), entry(3, 4 + i as u32, 1), 0.0, false);
        }
        // The mean is pulled up by the hot region alone: only it is above.
        assert_eq!(
            w.top_regions(step(1), 15, 4096, 1),
            vec![code(2, 1), code(2, 6)]
        );
    }

    #[test]
    fn a_region_batch_keeps_to_k_regions_and_the_atom_budget() {
        let mut w = Workload::new(0.0, COST);
        // Three equal regions of four atoms: all at the mean. Region 9, at x = 3, touches
        // neither region 1 (x = 1) nor region 3 (x = 1, y = 1).
        for r in [1, 3, 9] {
            for i in 0..4 {
                w.push(step(1), code(r, i), entry(r, i as u32, 10), 0.0, false);
            }
        }
        assert_eq!(w.top_regions(step(1), 15, 4096, 1).len(), 12);
        // k = 2 regions: the first two in storage order (ties).
        let two = w.top_regions(step(1), 2, 4096, 1);
        assert_eq!(
            two,
            (0..4)
                .map(|i| code(1, i))
                .chain((0..4).map(|i| code(3, i)))
                .collect::<Vec<_>>()
        );
        // A budget of 6 atoms: one whole region (a second would not fit).
        assert_eq!(w.top_regions(step(1), 15, 6, 1).len(), 4);
        // A budget below one region: the first atoms of the best region.
        assert_eq!(
            w.top_regions(step(1), 15, 3, 1),
            vec![code(1, 0), code(1, 1), code(1, 2)]
        );
    }

    #[test]
    fn a_region_batch_is_widened_to_the_pending_regions_next_to_it_within_the_budget() {
        let mut w = Workload::new(0.0, COST);
        // A hot region at (0, 0, 0) and two cold ones, below the step's mean: region 1 at
        // (1, 0, 0) touches it, region 9 at (3, 0, 0) does not.
        for i in 0..4 {
            w.push(step(1), code(0, i), entry(1, i as u32, 100), 0.0, false);
            w.push(step(1), code(1, i), entry(2, i as u32, 1), 0.0, false);
            w.push(step(1), code(9, i), entry(3, i as u32, 1), 0.0, false);
        }
        let hot = (0..4).map(|i| code(0, i));
        let with_neighbour: Vec<u64> = hot.clone().chain((0..4).map(|i| code(1, i))).collect();
        assert_eq!(w.top_regions(step(1), 15, 4096, 1), with_neighbour);
        // The neighbour is taken past k too, but not past the atom budget.
        assert_eq!(w.top_regions(step(1), 1, 4096, 1), with_neighbour);
        assert_eq!(w.top_regions(step(1), 15, 6, 1), hot.collect::<Vec<_>>());
    }

    #[test]
    fn regions_across_a_periodic_seam_touch_where_the_grid_is_known() {
        // Four regions of 2³ atoms along x (8 atoms): region 0 at x = 0 is hot; region 9 at
        // x = 3 is across the seam from it, region 8 at x = 2 two regions away either way.
        let fill = |w: &mut Workload| {
            for i in 0..4 {
                w.push(step(1), code(0, i), entry(1, i as u32, 100), 0.0, false);
                w.push(step(1), code(9, i), entry(2, i as u32, 1), 0.0, false);
                w.push(step(1), code(8, i), entry(3, i as u32, 1), 0.0, false);
            }
        };
        let hot: Vec<u64> = (0..4).map(|i| code(0, i)).collect();
        let mut across = hot.clone();
        across.extend((0..4).map(|i| code(9, i)));
        let grid = |periodic| AtomGrid {
            atoms: [8, 8, 8],
            periodic: [periodic; 3],
        };
        // Unknown grid, or a bounded one: no seam.
        let mut w = Workload::new(0.0, COST);
        fill(&mut w);
        assert_eq!(w.top_regions(step(1), 15, 4096, 1), hot);
        w.set_grid(0, grid(false));
        assert_eq!(w.top_regions(step(1), 15, 4096, 1), hot);
        assert_eq!(w.regions_of(step(1), &[code(0, 1)], 4096, 1), hot);
        // Periodic: region 9 touches region 0 across the seam; region 8 still does not.
        w.set_grid(0, grid(true));
        assert_eq!(w.top_regions(step(1), 15, 4096, 1), across);
        assert_eq!(w.regions_of(step(1), &[code(0, 1)], 4096, 1), across);
        // Another field's grid says nothing of this one's.
        let mut other = Workload::new(0.0, COST);
        fill(&mut other);
        other.set_grid(1, grid(true));
        assert_eq!(other.top_regions(step(1), 15, 4096, 1), hot);
    }

    #[test]
    fn liferafts_region_is_the_best_over_every_step_taken_whole() {
        let mut w = Workload::new(0.0, COST);
        // Step 1: one hot region among cold ones (a low mean); step 2: lukewarm regions
        // (a higher mean, so JAWS's first level picks it).
        for i in 0..4 {
            w.push(step(1), code(3, i), entry(1, i as u32, 200), 0.0, false);
            w.push(step(1), code(4, i), entry(2, i as u32, 1), 0.0, false);
            w.push(step(1), code(6, i), entry(2, 4 + i as u32, 1), 0.0, false);
        }
        for r in [0, 1] {
            for i in 0..4 {
                w.push(step(2), code(r, i), entry(3, i as u32, 60), 0.0, false);
            }
        }
        assert_eq!(w.best_step(), Some(step(2)));
        let hot = (0..4).map(|i| code(3, i)).collect::<Vec<_>>();
        assert_eq!(w.best_region(4096, 1), Some((step(1), hot)));
        // At most the atom budget, from the start of the region.
        assert_eq!(
            w.best_region(2, 1),
            Some((step(1), vec![code(3, 0), code(3, 1)]))
        );
        assert_eq!(Workload::new(0.0, COST).best_region(4096, 1), None);
    }

    #[test]
    fn a_small_querys_atoms_are_widened_to_their_regions_within_the_budget() {
        let mut w = Workload::new(0.0, COST);
        // Regions 3 at (1, 1, 0) and 36 at (0, 0, 3), which do not touch.
        for i in 0..4 {
            w.push(step(1), code(3, i), entry(1, i as u32, 5), 0.0, false);
            w.push(step(1), code(36, i), entry(1, 4 + i as u32, 5), 0.0, false);
        }
        let region3 = (0..4).map(|i| code(3, i)).collect::<Vec<_>>();
        assert_eq!(w.regions_of(step(1), &[code(3, 2)], 4096, 1), region3);
        // An atom not pending any more is kept, the others of its region added.
        let mut with_gone = region3.clone();
        with_gone.push(code(7, 0));
        assert_eq!(
            w.regions_of(step(1), &[code(3, 1), code(7, 0)], 4096, 1),
            with_gone
        );
        // Over the budget, or at a step with nothing pending: the atoms asked for alone.
        assert_eq!(
            w.regions_of(step(1), &[code(3, 2), code(36, 0)], 6, 1),
            vec![code(3, 2), code(36, 0)]
        );
        assert_eq!(
            w.regions_of(step(2), &[code(3, 2)], 4096, 1),
            vec![code(3, 2)]
        );
        // With more atoms pending than the regions hold, the regions' codes are probed
        // instead of every pending atom scanned: the same answer (budgets that leave no
        // room for the regions around them).
        for r in 10..30 {
            w.push(step(1), code(r, 1), entry(2, r as u32, 5), 0.0, false);
        }
        assert_eq!(w.regions_of(step(1), &[code(3, 2)], 4, 1), region3);
        assert_eq!(
            w.regions_of(step(1), &[code(12, 0), code(36, 3)], 6, 1),
            vec![
                code(12, 0),
                code(12, 1),
                code(36, 0),
                code(36, 1),
                code(36, 2),
                code(36, 3)
            ]
        );
    }

    #[test]
    fn a_small_querys_regions_are_widened_to_the_pending_regions_next_to_them() {
        let mut w = Workload::new(0.0, COST);
        // Region 3 at (1, 1, 0); region 1 at (1, 0, 0) touches it, region 36 at (0, 0, 3)
        // does not; region 2 at (0, 1, 0) touches it too, with fewer points.
        for i in 0..4 {
            w.push(step(1), code(3, i), entry(1, i as u32, 5), 0.0, false);
            w.push(step(1), code(1, i), entry(2, i as u32, 50), 0.0, false);
            w.push(step(1), code(36, i), entry(3, i as u32, 50), 0.0, false);
        }
        w.push(step(1), code(2, 0), entry(4, 0, 1), 0.0, false);
        let all: Vec<u64> = (0..4)
            .map(|i| code(1, i))
            .chain([code(2, 0)])
            .chain((0..4).map(|i| code(3, i)))
            .collect();
        assert_eq!(w.regions_of(step(1), &[code(3, 2)], 4096, 1), all);
        // The best neighbour first, while it fits.
        let mut with_best: Vec<u64> = (0..4).map(|i| code(1, i)).collect();
        with_best.extend((0..4).map(|i| code(3, i)));
        assert_eq!(w.regions_of(step(1), &[code(3, 2)], 8, 1), with_best);
        let mut with_small = vec![code(2, 0)];
        with_small.extend((0..4).map(|i| code(3, i)));
        assert_eq!(w.regions_of(step(1), &[code(3, 2)], 7, 1), with_small);
    }

    #[test]
    fn a_cached_region_ranks_above_one_that_must_be_read() {
        let mut w = Workload::new(0.0, COST);
        // Region 9 at (3, 0, 0) does not touch region 7 at (1, 1, 1).
        for i in 0..4 {
            w.push(step(1), code(9, i), entry(1, i as u32, 5), 0.0, false);
            w.push(step(1), code(7, i), entry(2, i as u32, 5), 0.0, true);
        }
        assert_eq!(
            w.top_regions(step(1), 1, 4096, 1),
            (0..4).map(|i| code(7, i)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn an_atom_queued_again_after_it_was_taken_is_chosen_once() {
        let mut w = Workload::new(0.0, COST);
        // Atom 9 keeps the step's queue alive while atom 5 is queued, taken and queued
        // again: its second queue is ranked as itself, not with its first.
        w.push(step(1), 9, entry(1, 0, 1), 0.0, false);
        for q in 2..5 {
            w.push(step(1), 5, entry(q, 0, 50), 0.0, false);
        }
        w.take_atom(step(1), 5).unwrap();
        for q in 5..8 {
            w.push(step(1), 5, entry(q, 0, 50), 1.0, false);
        }
        assert_eq!(w.best_region(4096, 0), Some((step(1), vec![5])));
        w.take_atom(step(1), 5).unwrap();
        assert_eq!(w.best_region(4096, 0), Some((step(1), vec![9])));
    }

    #[test]
    fn age_bias_lets_old_quiet_work_overtake_busy_work() {
        let mut w = Workload::new(0.0, COST);
        w.push(step(1), 1, entry(1, 0, 1), 0.0, false); // old and quiet
        w.push(step(2), 2, entry(2, 0, 900), 5000.0, false); // new and busy
        assert_eq!(w.best_region(4096, 0), Some((step(2), vec![2])));
        w.reweigh(1.0, COST);
        assert_eq!(w.best_region(4096, 0), Some((step(1), vec![1])));
        assert_eq!(w.best_step(), Some(step(1)));
    }

    #[test]
    fn cached_atoms_rank_higher_and_taking_a_queue_takes_every_query() {
        let mut w = Workload::new(0.0, COST);
        w.push(step(1), 1, entry(1, 0, 10), 0.0, false);
        w.push(step(1), 2, entry(1, 1, 10), 0.0, false);
        w.push(step(1), 2, entry(2, 0, 5), 1.0, false);
        assert_eq!(w.best_region(4096, 0), Some((step(1), vec![2])));
        w.set_cached(&step(1).atom(1), true);
        assert_eq!(w.best_region(4096, 0), Some((step(1), vec![1])));
        assert_eq!((w.entries(), w.points()), (3, 25));
        let taken = w.take_atom(step(1), 2).unwrap();
        assert_eq!(taken.entries.len(), 2);
        assert_eq!((w.entries(), w.points(), w.atoms()), (1, 10, 1));
    }

    #[test]
    fn one_query_can_leave_an_atom_to_the_others() {
        let mut w = Workload::new(0.5, COST);
        w.push(step(3), 7, entry(1, 0, 10), 0.0, false);
        w.push(step(3), 7, entry(2, 4, 6), 2.0, false);
        assert_eq!(w.take_query(step(3), 7, 1), vec![entry(1, 0, 10)]);
        let left = w.queue(step(3), 7).unwrap();
        assert_eq!((left.points, left.oldest), (6, 2.0));
        assert_eq!(w.take_query(step(3), 7, 2).len(), 1);
        assert!(w.is_empty());
        assert!(w.rank(&step(3).atom(7)).is_none());
    }
}
