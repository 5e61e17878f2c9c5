//! Least recently used: the atom unused for longest leaves first.

use crate::engine::cache::recency::Recency;
use crate::engine::cache::{AtomKey, Policy, Ranking};

#[derive(Debug, Default)]
pub(crate) struct Lru {
    order: Recency,
}

impl Policy for Lru {
    fn touch(&mut self, key: AtomKey) {
        self.order.touch(key);
    }

    fn admit(&mut self, key: AtomKey, _bytes: usize) {
        self.order.touch(key);
    }

    fn forget(&mut self, key: &AtomKey) {
        self.order.remove(key);
    }

    fn victim(&mut self, _: &dyn Ranking) -> Option<AtomKey> {
        self.order.pop_oldest()
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::cache::tests::evictions;
    use crate::engine::cache::{NoRanking, PolicyKind};

    #[test]
    fn the_least_recently_used_atom_is_evicted() {
        // Cache of 3: 1 2 3, use 1, then 4 evicts 2 (not 1), 5 evicts 3, 2 evicts 1.
        let out = evictions(PolicyKind::Lru, 3, &[1, 2, 3, 1, 4, 5, 2], &NoRanking);
        assert_eq!(out, vec![2, 3, 1]);
    }
}
