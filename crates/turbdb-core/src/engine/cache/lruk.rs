//! LRU-K with K = 2 (O'Neil, O'Neil and Weikum, SIGMOD 1993), the page replacement of SQL
//! Server that the JAWS paper compares against: the atom whose second-to-last use lies
//! furthest back goes first; atoms used only once go before any used twice, the least
//! recent first. The last use of evicted atoms is remembered for a while (the retained
//! information period), so an atom read again soon counts as used twice.

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap;

use crate::engine::cache::{AtomKey, Policy, Ranking};

#[derive(Debug)]
pub(crate) struct LruK {
    /// Logical clock: one tick per use.
    now: u64,
    /// Per cached atom: (second-to-last use or 0, last use).
    uses: FxHashMap<AtomKey, (u64, u64)>,
    /// The cached atoms ordered by (second-to-last use, last use): the first goes first.
    order: BTreeSet<(u64, u64, AtomKey)>,
    /// Last use of recently evicted atoms, and their order of eviction (bounded).
    history: FxHashMap<AtomKey, u64>,
    evicted: VecDeque<AtomKey>,
    history_len: usize,
}

/// Atoms of history kept per byte of cache: as many as the cache holds of 6 KiB atoms.
const HISTORY_BYTES_PER_ATOM: usize = 6 << 10;

impl LruK {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            now: 0,
            uses: FxHashMap::default(),
            order: BTreeSet::new(),
            history: FxHashMap::default(),
            evicted: VecDeque::new(),
            history_len: (capacity / HISTORY_BYTES_PER_ATOM).max(16),
        }
    }

    fn record(&mut self, key: AtomKey, previous: u64) {
        self.now += 1;
        self.uses.insert(key, (previous, self.now));
        self.order.insert((previous, self.now, key));
    }
}

impl Policy for LruK {
    fn touch(&mut self, key: AtomKey) {
        if let Some((penultimate, last)) = self.uses.remove(&key) {
            self.order.remove(&(penultimate, last, key));
            self.record(key, last);
        }
    }

    fn admit(&mut self, key: AtomKey, _bytes: usize) {
        let previous = self.history.remove(&key).unwrap_or(0);
        self.record(key, previous);
    }

    fn forget(&mut self, key: &AtomKey) {
        if let Some((penultimate, last)) = self.uses.remove(key) {
            self.order.remove(&(penultimate, last, *key));
        }
    }

    fn victim(&mut self, _: &dyn Ranking) -> Option<AtomKey> {
        let (_, last, key) = self.order.pop_first()?;
        self.uses.remove(&key);
        self.history.insert(key, last);
        self.evicted.push_back(key);
        while self.evicted.len() > self.history_len {
            if let Some(old) = self.evicted.pop_front() {
                // Forget it unless it was evicted again later (then it is queued twice).
                if !self.evicted.contains(&old) {
                    self.history.remove(&old);
                }
            }
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::cache::tests::evictions;
    use crate::engine::cache::{NoRanking, PolicyKind};

    #[test]
    fn atoms_used_once_go_before_atoms_used_twice() {
        // Cache of 3: 1 used twice, then 2, 3 once each; 4 evicts 2 (used once, oldest),
        // 5 evicts 3, 6 evicts 4 — never 1, though it is the least recently used.
        let out = evictions(PolicyKind::LruK, 3, &[1, 1, 2, 3, 4, 5, 6], &NoRanking);
        assert_eq!(out, vec![2, 3, 4]);
    }

    #[test]
    fn among_atoms_used_twice_the_oldest_second_to_last_use_goes_first() {
        // Cache of 2. Uses (second-to-last, last) after 1 2 1 2 1: atom 1 (3, 5), atom 2
        // (2, 4): the miss on 3 evicts 2. After 3 is used again it is (6, 7): the miss on 4
        // evicts 1, whose second-to-last use (3) is the older.
        let out = evictions(PolicyKind::LruK, 2, &[1, 2, 1, 2, 1, 3, 3, 4], &NoRanking);
        assert_eq!(out, vec![2, 1]);
    }

    #[test]
    fn an_atom_read_again_soon_remembers_its_earlier_use() {
        // Cache of 2: 1 evicted by 2, 3; when 1 comes back its earlier use counts, so it
        // outlives 3 and 4, which were used once.
        let out = evictions(PolicyKind::LruK, 2, &[1, 2, 3, 1, 4, 5], &NoRanking);
        assert_eq!(out, vec![1, 2, 3, 4]);
    }
}
