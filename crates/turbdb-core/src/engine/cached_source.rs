//! A point query whose every atom is in the node engine's cache has no read to share, so
//! the engine serves it at once in the caller's thread ([`NodeEngine::submit_points`]),
//! with the batch kernel over the atoms pinned here, instead of queuing it for a batch.
//! Pinning takes each atom's shared slice under the cache's lock, as a use of it (a hit in
//! every policy's bookkeeping): an atom evicted afterwards stays alive until the query
//! lets go, so the check and the sums cannot disagree.
//!
//! The batch kernel (each point's stencil gathered out of the cached atoms and summed once)
//! is used rather than the streaming executor (a sum per point and cell block). That one
//! takes atoms through [`AtomSource`](crate::storage::reader::AtomSource), which copies each
//! whole atom out of the cache, and again into its cell block; on a warm 1 000-point
//! lag8 query those copies (20 MB) cost more than they save (measured: 4.3 ms against
//! 2.7 ms on 2 cores, when the batch kernel still summed atom by atom).
//!
//! [`NodeEngine::submit_points`]: crate::engine::node::NodeEngine::submit_points

use crate::engine::batch::{execute, Part, Progress, Work};
use crate::engine::cache::{AtomCache, AtomData, AtomKey};
use crate::engine::stream::TimeLevel;

/// The atoms of one query at each of its time levels, taken from the cache.
pub(crate) struct PinnedAtoms {
    /// Per level, the atom of each sub-query (in the work's atom order).
    levels: Vec<Vec<AtomData>>,
}

impl PinnedAtoms {
    /// Takes from `cache` every atom that `work` needs at `levels` of the engine's field
    /// `field`, each a cache hit — if all of them are cached. Otherwise returns `None` and
    /// records nothing: the query goes to the queues, and its atoms are counted there.
    pub(crate) fn pin(
        cache: &mut AtomCache,
        field: u32,
        work: &Work,
        levels: &[TimeLevel],
    ) -> Option<Self> {
        let atoms = work.atoms();
        if atoms == 0 {
            return None;
        }
        let keys = |t: usize| {
            (0..atoms).map(move |i| AtomKey {
                field,
                t: t as u32,
                code: work.code(i),
            })
        };
        let pinned = levels
            .iter()
            .map(|l| cache.peek_all(keys(l.t)))
            .collect::<Option<Vec<Vec<AtomData>>>>()?;
        for l in levels {
            cache.used_all(keys(l.t));
        }
        let levels = pinned;
        Some(Self { levels })
    }

    /// Atoms pinned (sub-queries: atoms × time levels).
    pub(crate) fn len(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    /// Serves every sub-query of `work` from the pinned atoms, level by level with its
    /// weight; returns the partial sums added.
    pub(crate) fn serve(
        &self,
        work: &Work,
        progress: &mut Progress,
        levels: &[TimeLevel],
        narrow: bool,
    ) -> u64 {
        let mut added = 0;
        for (data, level) in self.levels.iter().zip(levels) {
            let part = Part::whole(work, progress, level.weight).narrow(narrow);
            added += execute(&mut [part], data).contributions;
        }
        added
    }
}
