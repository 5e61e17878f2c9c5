//! Utility-ranked caching as in the JAWS paper (§V-B): atoms that no pending query needs
//! leave first, least recently used first; then atoms of the time step with the lowest
//! mean workload throughput, within it the atom with the least pending work. The engine
//! ranks with [`crate::engine::workload::WithNextSteps`]: beyond the paper, atoms of the
//! steps that declared jobs will read next count as needed, after every pending atom and
//! before the idle ones. Ranking every
//! cached atom at every eviction would cost too much: idle atoms are looked for among the
//! least recently used few, and the order of the others is prepared in one pass and
//! prepared again after an eighth of the cache has been replaced; an atom that gained
//! pending work since it was prepared is skipped.

use crate::engine::cache::recency::Recency;
use crate::engine::cache::{AtomKey, Policy, Ranking};

/// Least recently used atoms looked at for an idle one before the prepared order is used.
const IDLE_LOOKS: usize = 32;

#[derive(Debug, Default)]
pub(crate) struct Urc {
    order: Recency,
    /// Victims in order, last first (popped from the end), with whether they had work.
    prepared: Vec<(AtomKey, bool)>,
    /// Evictions since the order was prepared.
    since: usize,
}

impl Urc {
    fn prepare(&mut self, ranking: &dyn Ranking) {
        let mut idle = Vec::new();
        let mut busy = Vec::new();
        for key in self.order.oldest_first() {
            match ranking.rank(&key) {
                None => idle.push(key),
                Some((step, atom)) => busy.push((step, atom, key)),
            }
        }
        busy.sort_unstable_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                .then(a.2.cmp(&b.2))
        });
        self.prepared.clear();
        self.prepared
            .extend(busy.into_iter().rev().map(|(_, _, key)| (key, true)));
        self.prepared
            .extend(idle.into_iter().rev().map(|key| (key, false)));
        self.since = 0;
    }
}

impl Policy for Urc {
    fn touch(&mut self, key: AtomKey) {
        self.order.touch(key);
    }

    fn admit(&mut self, key: AtomKey, _bytes: usize) {
        self.order.touch(key);
    }

    fn forget(&mut self, key: &AtomKey) {
        self.order.remove(key);
    }

    fn victim(&mut self, ranking: &dyn Ranking) -> Option<AtomKey> {
        let idle = self
            .order
            .oldest_first()
            .take(IDLE_LOOKS)
            .find(|key| ranking.rank(key).is_none());
        if let Some(key) = idle {
            self.order.remove(&key);
            return Some(key);
        }
        if self.since >= (self.order.len() / 8).max(64) {
            self.prepared.clear();
        }
        for attempt in 0..2 {
            if self.prepared.is_empty() {
                if attempt == 1 {
                    break;
                }
                self.prepare(ranking);
            }
            while let Some((key, had_work)) = self.prepared.pop() {
                if !self.order.contains(&key) || (!had_work && ranking.rank(&key).is_some()) {
                    continue;
                }
                self.order.remove(&key);
                self.since += 1;
                return Some(key);
            }
        }
        self.order.pop_oldest()
    }
}

#[cfg(test)]
mod tests {
    use rustc_hash::FxHashMap;

    use crate::engine::cache::tests::evictions;
    use crate::engine::cache::{AtomKey, PolicyKind, Ranking};

    /// Pending work by atom code: (time step rank, atom rank).
    struct Pending(FxHashMap<u64, (f64, f64)>);

    impl Ranking for Pending {
        fn rank(&self, key: &AtomKey) -> Option<(f64, f64)> {
            self.0.get(&key.code).copied()
        }
    }

    #[test]
    fn idle_atoms_go_first_then_the_lowest_ranked_step_and_atom() {
        // Atoms 1–4 pending: 1 and 2 in a busy step (rank 10), 3 and 4 in a quiet one (1);
        // within each, the atom with less work goes first. 5 and 6 have no pending work.
        let pending = Pending(FxHashMap::from_iter([
            (1, (10.0, 5.0)),
            (2, (10.0, 1.0)),
            (3, (1.0, 7.0)),
            (4, (1.0, 2.0)),
        ]));
        let out = evictions(
            PolicyKind::Urc,
            6,
            &[5, 1, 2, 6, 3, 4, 10, 11, 12, 13, 14, 15],
            &pending,
        );
        // 10 evicts 5, 11 evicts 6 (idle, least recent first), then each newcomer evicts
        // the idle one before it: 12 evicts 10, 13 evicts 11, and so on.
        assert_eq!(out, [5, 6, 10, 11, 12, 13]);
        // With every atom pending (20–23 in a step busier still): the quiet step first, less
        // work first, then the busy one.
        let mut pending = pending;
        pending.0.extend((20..24).map(|c| (c, (20.0, 1.0))));
        let out = evictions(PolicyKind::Urc, 4, &[1, 2, 3, 4, 20, 21, 22, 23], &pending);
        assert_eq!(out, [4, 3, 2, 1]);
    }
}
