//! Evaluation restricted to a set of partitions (shards of given time steps): the partial
//! sums that the atoms of those partitions contribute. A node of a cluster adds only what it
//! stores and the mediator adds the nodes' sums, so stencils that cross partitions need no
//! replicated edges (Kanov et al. §3.3).

use rustc_hash::FxHashSet;

use crate::storage::geometry::ShardPos;

/// A set of partitions, each a (time index, shard position) pair.
#[derive(Debug, Clone, Default)]
pub struct Partitions {
    set: FxHashSet<(usize, ShardPos)>,
}

impl Partitions {
    /// The partitions listed.
    pub fn new(partitions: impl IntoIterator<Item = (usize, ShardPos)>) -> Self {
        Self {
            set: partitions.into_iter().collect(),
        }
    }

    /// Whether partition (`t`, `shard`) is in the set.
    pub fn contains(&self, t: usize, shard: ShardPos) -> bool {
        self.set.contains(&(t, shard))
    }
}
