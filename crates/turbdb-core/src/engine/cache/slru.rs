//! Segmented LRU as in the JAWS paper (§V-B): a small protected segment (5 % of the bytes,
//! as in its experiments) holds the atoms used most during the last run of queries, so
//! that a scan of a whole time step, used once, cannot flush the regions of interest that
//! many users come back to. Promotion happens once per run, which keeps the cost near
//! nil; atoms leaving the protected segment go to the recent end of the probationary one.

use rustc_hash::FxHashMap;

use crate::engine::cache::recency::Recency;
use crate::engine::cache::{AtomKey, Policy, Ranking};

/// Share of the cache's bytes given to the protected segment.
pub(crate) const PROTECTED_SHARE: f64 = 0.05;

#[derive(Debug)]
pub(crate) struct Slru {
    probationary: Recency,
    protected: Recency,
    protected_capacity: usize,
    /// Bytes of each cached atom.
    bytes: FxHashMap<AtomKey, usize>,
    /// Uses of each cached atom in the current run.
    uses: FxHashMap<AtomKey, u32>,
}

impl Slru {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            probationary: Recency::default(),
            protected: Recency::default(),
            protected_capacity: (capacity as f64 * PROTECTED_SHARE) as usize,
            bytes: FxHashMap::default(),
            uses: FxHashMap::default(),
        }
    }

    fn drop_key(&mut self, key: &AtomKey) {
        self.bytes.remove(key);
        self.uses.remove(key);
    }
}

impl Policy for Slru {
    fn touch(&mut self, key: AtomKey) {
        *self.uses.entry(key).or_default() += 1;
        if self.protected.contains(&key) {
            self.protected.touch(key);
        } else {
            self.probationary.touch(key);
        }
    }

    fn admit(&mut self, key: AtomKey, bytes: usize) {
        self.bytes.insert(key, bytes);
        self.uses.insert(key, 1);
        self.probationary.touch(key);
    }

    fn forget(&mut self, key: &AtomKey) {
        if !self.probationary.remove(key) {
            self.protected.remove(key);
        }
        self.drop_key(key);
    }

    fn victim(&mut self, _: &dyn Ranking) -> Option<AtomKey> {
        let key = self
            .probationary
            .pop_oldest()
            .or_else(|| self.protected.pop_oldest())?;
        self.drop_key(&key);
        Some(key)
    }

    /// The most used atoms of the run that fit take the protected segment; the ones they
    /// displace go to the recent end of the probationary segment.
    fn end_run(&mut self) {
        let mut ranked: Vec<(u32, AtomKey)> = self
            .uses
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(&k, &n)| (n, k))
            .collect();
        // Most used first; ties by key, so the choice does not depend on hashing.
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut chosen = Vec::new();
        let mut room = self.protected_capacity;
        for (_, key) in ranked {
            let bytes = self.bytes.get(&key).copied().unwrap_or(0);
            if bytes <= room {
                room -= bytes;
                chosen.push(key);
            }
        }
        let keep: rustc_hash::FxHashSet<AtomKey> = chosen.iter().copied().collect();
        let demoted: Vec<AtomKey> = self
            .protected
            .oldest_first()
            .filter(|k| !keep.contains(k))
            .collect();
        for key in demoted {
            self.protected.remove(&key);
            self.probationary.touch(key);
        }
        // Least used first, so the most used ends up most recent.
        for key in chosen.into_iter().rev() {
            if self.probationary.remove(&key) {
                self.protected.touch(key);
            }
        }
        for n in self.uses.values_mut() {
            *n = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::cache::tests::{atom, key};
    use crate::engine::cache::{AtomCache, NoRanking, PolicyKind};

    #[test]
    fn the_runs_most_used_atom_survives_a_scan() {
        // 40 slots of 64 bytes: 5 % protected = 2 slots (128 bytes).
        let mut cache = AtomCache::new(40 * 64, PolicyKind::Slru);
        let use_ = |cache: &mut AtomCache, code: u64| {
            if cache.get(&key(code)).is_none() {
                cache.insert(key(code), atom(64), &NoRanking);
            }
        };
        for _ in 0..5 {
            use_(&mut cache, 7); // a region of interest
        }
        for _ in 0..3 {
            use_(&mut cache, 8);
        }
        use_(&mut cache, 9);
        cache.end_run(); // 7 and 8 are promoted
        for code in 100..200 {
            use_(&mut cache, code); // a scan, each atom once
        }
        assert!(cache.contains(&key(7)) && cache.contains(&key(8)));
        assert!(!cache.contains(&key(9)));
    }

    #[test]
    fn without_promotion_slru_evicts_like_lru_and_demoted_atoms_become_probationary() {
        let mut cache = AtomCache::new(40 * 64, PolicyKind::Slru);
        for code in 0..40 {
            cache.get(&key(code));
            cache.insert(key(code), atom(64), &NoRanking);
        }
        cache.get(&key(0));
        cache.get(&key(0));
        cache.end_run(); // 0 protected (and one of the others: all used once)
        cache.get(&key(5));
        cache.get(&key(5));
        cache.get(&key(5));
        cache.end_run(); // 5 displaces 0, which goes to the recent end of probation
        let evicted = cache.insert(key(40), atom(64), &NoRanking);
        assert_eq!(evicted.len(), 1);
        assert_ne!(evicted[0].code, 5);
        assert!(cache.contains(&key(0)));
    }
}
