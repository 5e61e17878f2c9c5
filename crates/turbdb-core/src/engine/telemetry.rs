//! What the node engine reports about itself: queue depth, atoms and bytes read, the cache's
//! hits, the current α, batch sizes and response times by query size — published after
//! every batch, read by `/metrics`, `GET /v1/engine` and the benchmarks.

use crate::engine::jobs::gating::GatingCounters;

/// Upper bounds (seconds) of the response-time buckets; a last bucket takes the rest.
pub const RESPONSE_BOUNDS: [f64; 16] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Upper bounds (atoms) of the batch-size buckets; a last bucket takes the rest.
pub const BATCH_BOUNDS: [f64; 8] = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0];

/// Size classes of queries by points (or cutout nodes): at most this many.
pub const SIZE_CLASSES: [(&str, usize); 3] =
    [("small", 1000), ("medium", 100_000), ("large", usize::MAX)];

/// The class of a query of `size` points.
pub fn size_class(size: usize) -> usize {
    SIZE_CLASSES
        .iter()
        .position(|&(_, most)| size <= most)
        .unwrap_or(SIZE_CLASSES.len() - 1)
}

/// A histogram with fixed bucket bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Observations per bucket (`bounds.len() + 1` buckets, the last unbounded).
    pub counts: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// An empty histogram for `bounds`.
    pub fn new(bounds: &[f64]) -> Self {
        Self {
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Adds `value` against `bounds` (those it was made for).
    pub fn observe(&mut self, bounds: &[f64], value: f64) {
        let bucket = bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
        self.count += 1;
    }
}

/// A snapshot of the engine.
#[derive(Debug, Clone)]
pub struct EngineStats {
    /// Scheduler name.
    pub scheduler: &'static str,
    /// Cache policy name.
    pub policy: &'static str,
    /// I/O mode name.
    pub io: &'static str,
    /// JAWS's batch size `k`.
    pub batch_atoms: usize,
    /// Cache capacity and use, bytes; atoms held.
    pub cache_capacity: usize,
    /// Bytes of atoms in the cache.
    pub cache_bytes: usize,
    /// Atoms in the cache.
    pub cache_atoms: usize,
    /// Atom lookups that hit.
    pub cache_hits: u64,
    /// Atom lookups that missed.
    pub cache_misses: u64,
    /// Atoms evicted.
    pub cache_evictions: u64,
    /// Queries handed in.
    pub submitted: u64,
    /// Queries completed.
    pub completed: u64,
    /// Queries failed.
    pub failed: u64,
    /// Queries cancelled.
    pub cancelled: u64,
    /// Queries pending (queued, being served or held at a gate).
    pub pending: u64,
    /// Of those, held at a job's gate.
    pub held: u64,
    /// Sub-queries in the workload queues.
    pub queued_subqueries: u64,
    /// Atoms with pending sub-queries.
    pub queued_atoms: u64,
    /// Points of the pending queries (what admission counts).
    pub pending_points: u64,
    /// Atoms read from the store.
    pub atoms_read: u64,
    /// Read requests made.
    pub read_requests: u64,
    /// Bytes read from the store (alignment and merged gaps included).
    pub bytes_read: u64,
    /// Batches served.
    pub batches: u64,
    /// Atoms per batch.
    pub batch_sizes: Histogram,
    /// Partial sums added (point–atom pairs) and cutout nodes copied.
    pub contributions: u64,
    /// Points of batches summed out of one block of all the stencils of their home atom.
    pub block_points: u64,
    /// Of those, points whose block also served another query's points.
    pub block_points_shared: u64,
    /// The current age bias.
    pub alpha: f64,
    /// Measured milliseconds per atom read.
    pub t_b_ms: f64,
    /// Measured milliseconds per partial sum.
    pub t_m_ms: f64,
    /// Seconds spent serving batches (reading excluded when overlapped), queries served
    /// from the cache at submission and queries served alone.
    pub busy_seconds: f64,
    /// Seconds the engine's thread waited for a batch's reads (the part of reading not
    /// overlapped with computing the batch before).
    pub read_wait_seconds: f64,
    /// Seconds the engine's thread spent choosing batches (the scheduler, starting reads).
    pub schedule_seconds: f64,
    /// Seconds the engine's thread slept with nothing to do.
    pub idle_seconds: f64,
    /// Queries served at submission, every atom from the cache, without a batch.
    pub served_from_cache: u64,
    /// Large queries that found the engine idle and ran alone, by the streaming executor.
    pub served_alone: u64,
    /// Point queries whose cut was kept from an earlier query with the same points.
    pub cuts_reused: u64,
    /// Response times by size class ([`SIZE_CLASSES`]).
    pub response: [Histogram; 3],
    /// Jobs running.
    pub jobs: u64,
    /// Gating edges in the graph.
    pub gating_edges: u64,
    /// What the gating did.
    pub gating: GatingCounters,
}

impl EngineStats {
    /// An empty snapshot.
    pub fn new(
        scheduler: &'static str,
        policy: &'static str,
        io: &'static str,
        batch_atoms: usize,
        cache_capacity: usize,
    ) -> Self {
        Self {
            scheduler,
            policy,
            io,
            batch_atoms,
            cache_capacity,
            cache_bytes: 0,
            cache_atoms: 0,
            cache_hits: 0,
            cache_misses: 0,
            cache_evictions: 0,
            submitted: 0,
            completed: 0,
            failed: 0,
            cancelled: 0,
            pending: 0,
            held: 0,
            queued_subqueries: 0,
            queued_atoms: 0,
            pending_points: 0,
            atoms_read: 0,
            read_requests: 0,
            bytes_read: 0,
            batches: 0,
            batch_sizes: Histogram::new(&BATCH_BOUNDS),
            contributions: 0,
            block_points: 0,
            block_points_shared: 0,
            alpha: 0.0,
            t_b_ms: 0.0,
            t_m_ms: 0.0,
            busy_seconds: 0.0,
            read_wait_seconds: 0.0,
            schedule_seconds: 0.0,
            idle_seconds: 0.0,
            served_from_cache: 0,
            served_alone: 0,
            cuts_reused: 0,
            response: std::array::from_fn(|_| Histogram::new(&RESPONSE_BOUNDS)),
            jobs: 0,
            gating_edges: 0,
            gating: GatingCounters::default(),
        }
    }

    /// Cache hits over lookups (0 before any).
    pub fn hit_ratio(&self) -> f64 {
        let total = self.cache_hits + self.cache_misses;
        if total == 0 {
            0.0
        } else {
            self.cache_hits as f64 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let mut h = Histogram::new(&RESPONSE_BOUNDS);
        for v in [0.0005, 0.001, 0.0015, 500.0] {
            h.observe(&RESPONSE_BOUNDS, v);
        }
        assert_eq!((h.counts[0], h.counts[1], h.counts[16]), (2, 1, 1));
        assert_eq!(h.count, 4);
        assert_eq!(
            [
                size_class(1),
                size_class(1000),
                size_class(1001),
                size_class(10_000_000)
            ],
            [0, 0, 1, 2]
        );
    }
}
