//! The node engine's atom cache: decoded atoms in memory, shared by every query, bounded in
//! bytes, with a pluggable replacement policy — [`lru`], [`lruk`] (LRU-2, the SQL Server
//! family the JAWS paper compares against), [`slru`] (a small protected segment refilled at
//! the end of each run) and [`urc`] (ranked by the scheduler's pending workload).
//!
//! Atoms are handed out as shared slices: an atom evicted while a batch still uses it lives
//! until the batch lets go, so memory is bounded by the cache plus what is in flight.

mod lru;
mod lruk;
mod recency;
mod slru;
mod urc;

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::engine::accumulate::PADDING;
use crate::error::{Error, Result};

/// Where an atom lives: the field (as numbered by the engine), the time step and the
/// Morton code of the atom's position in the whole grid (shards are Morton-ordered too, so
/// this is storage order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AtomKey {
    /// The engine's number of the field.
    pub field: u32,
    /// Time index.
    pub t: u32,
    /// Morton code of the atom's grid position (in atoms).
    pub code: u64,
}

/// A decoded atom: `A³·ncomp` float32 values in `(z, y, x, c)` order followed by
/// [`PADDING`] zeros, so the partial-sum kernel can read it as a block in place.
pub type AtomData = Arc<[f32]>;

/// An atom's values with the padding the kernel needs.
pub fn padded(mut values: Vec<f32>) -> AtomData {
    values.resize(values.len() + PADDING, 0.0);
    values.into()
}

/// Which replacement policy the cache uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Least recently used.
    Lru,
    /// LRU-K with K = 2: the atom whose second-to-last use is oldest goes first.
    LruK,
    /// Segmented LRU: a protected segment holds the run's most used atoms.
    Slru,
    /// Utility-ranked: atoms no pending query needs first, then by the scheduler's order.
    Urc,
}

impl PolicyKind {
    /// Parses `lru`, `lruk`, `slru` or `urc`.
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "lru" => Ok(PolicyKind::Lru),
            "lruk" | "lru-k" | "lru2" => Ok(PolicyKind::LruK),
            "slru" => Ok(PolicyKind::Slru),
            "urc" => Ok(PolicyKind::Urc),
            _ => Err(Error::UnknownName(format!(
                "unknown cache policy {name:?}; valid: lru, lruk, slru, urc"
            ))),
        }
    }

    /// The name [`PolicyKind::parse`] takes.
    pub fn name(&self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::LruK => "lruk",
            PolicyKind::Slru => "slru",
            PolicyKind::Urc => "urc",
        }
    }
}

/// What the scheduler knows about the atoms in the cache, for [`urc`].
pub trait Ranking {
    /// `None` if no pending query needs the atom; else `(rank of its time step, rank of
    /// the atom within it)`, higher meaning needed sooner.
    fn rank(&self, key: &AtomKey) -> Option<(f64, f64)>;
}

/// A ranking that knows of no pending work (for callers without a scheduler).
pub struct NoRanking;

impl Ranking for NoRanking {
    fn rank(&self, _: &AtomKey) -> Option<(f64, f64)> {
        None
    }
}

/// The order in which cached atoms leave. The cache tells the policy about every use,
/// arrival and removal; the policy picks victims.
pub(crate) trait Policy: Send {
    /// A cached atom was used.
    fn touch(&mut self, key: AtomKey);
    /// An atom of `bytes` bytes entered the cache (its first use).
    fn admit(&mut self, key: AtomKey, bytes: usize);
    /// An atom left the cache other than as a victim.
    fn forget(&mut self, key: &AtomKey);
    /// The next atom to evict, forgotten by the policy; `None` if it holds none.
    fn victim(&mut self, ranking: &dyn Ranking) -> Option<AtomKey>;
    /// A run of queries ended (SLRU refills its protected segment).
    fn end_run(&mut self) {}
}

/// Counters of the cache.
#[derive(Debug, Default, Clone, Copy)]
pub struct CacheCounters {
    /// Lookups that found the atom.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Atoms evicted to make room.
    pub evictions: u64,
}

/// The atom cache.
pub struct AtomCache {
    capacity: usize,
    used: usize,
    atoms: FxHashMap<AtomKey, AtomData>,
    policy: Box<dyn Policy>,
    kind: PolicyKind,
    counters: CacheCounters,
    /// Bumped by [`Self::invalidate`]: atoms read before it (maybe from the old file) are
    /// not to be cached after it.
    generation: u64,
}

impl std::fmt::Debug for AtomCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomCache")
            .field("capacity", &self.capacity)
            .field("used", &self.used)
            .field("atoms", &self.atoms.len())
            .field("policy", &self.kind)
            .finish()
    }
}

impl AtomCache {
    /// A cache of at most `capacity` bytes of atoms.
    pub fn new(capacity: usize, kind: PolicyKind) -> Self {
        let policy: Box<dyn Policy> = match kind {
            PolicyKind::Lru => Box::<lru::Lru>::default(),
            PolicyKind::LruK => Box::new(lruk::LruK::new(capacity)),
            PolicyKind::Slru => Box::new(slru::Slru::new(capacity)),
            PolicyKind::Urc => Box::<urc::Urc>::default(),
        };
        Self {
            capacity,
            used: 0,
            atoms: FxHashMap::default(),
            policy,
            kind,
            counters: CacheCounters::default(),
            generation: 0,
        }
    }

    /// How many invalidations there were: reads prepared at one generation are cached only
    /// while it lasts.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The atom if it is cached (a hit, and a use), else `None` (a miss).
    pub fn get(&mut self, key: &AtomKey) -> Option<AtomData> {
        match self.atoms.get(key) {
            Some(data) => {
                self.counters.hits += 1;
                self.policy.touch(*key);
                Some(Arc::clone(data))
            }
            None => {
                self.counters.misses += 1;
                None
            }
        }
    }

    /// Every atom of `keys` if all of them are cached, else `None`; nothing is recorded
    /// (see [`AtomCache::used_all`]). One lookup per atom, up to the first missing one.
    pub fn peek_all(&self, keys: impl ExactSizeIterator<Item = AtomKey>) -> Option<Vec<AtomData>> {
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            found.push(Arc::clone(self.atoms.get(&key)?));
        }
        Some(found)
    }

    /// Records the use of cached atoms taken with [`AtomCache::peek_all`]: each a hit.
    pub fn used_all(&mut self, keys: impl Iterator<Item = AtomKey>) {
        for key in keys {
            self.counters.hits += 1;
            self.policy.touch(key);
        }
    }

    /// Whether the atom is cached (not a use).
    pub fn contains(&self, key: &AtomKey) -> bool {
        self.atoms.contains_key(key)
    }

    /// Caches an atom just read, evicting others to make room; returns the atoms evicted.
    /// An atom larger than the whole cache is not kept.
    pub fn insert(&mut self, key: AtomKey, data: AtomData, ranking: &dyn Ranking) -> Vec<AtomKey> {
        let bytes = data.len() * 4;
        let mut evicted = Vec::new();
        if bytes > self.capacity || self.atoms.contains_key(&key) {
            return evicted;
        }
        while self.used + bytes > self.capacity {
            let Some(victim) = self.policy.victim(ranking) else {
                break;
            };
            if let Some(old) = self.atoms.remove(&victim) {
                self.used -= old.len() * 4;
                self.counters.evictions += 1;
                evicted.push(victim);
            }
        }
        if self.used + bytes > self.capacity {
            return evicted; // the policy holds nothing more to give up
        }
        self.used += bytes;
        self.atoms.insert(key, data);
        self.policy.admit(key, bytes);
        evicted
    }

    /// Drops every cached atom of `field` at time `t` (the step was rewritten); returns them.
    pub fn invalidate(&mut self, field: u32, t: u32) -> Vec<AtomKey> {
        self.drop_where(|k| k.field == field && k.t == t)
    }

    /// Drops every cached atom of `field` (it was made again: its number is never given
    /// again, so they would only take room); returns them.
    pub fn forget_field(&mut self, field: u32) -> Vec<AtomKey> {
        self.drop_where(|k| k.field == field)
    }

    /// Drops the atoms `which` picks; reads under way at the old generation are not cached.
    fn drop_where(&mut self, which: impl Fn(&AtomKey) -> bool) -> Vec<AtomKey> {
        self.generation += 1;
        let gone: Vec<AtomKey> = self.atoms.keys().filter(|k| which(k)).copied().collect();
        for key in &gone {
            if let Some(old) = self.atoms.remove(key) {
                self.used -= old.len() * 4;
            }
            self.policy.forget(key);
        }
        gone
    }

    /// A run of queries ended.
    pub fn end_run(&mut self) {
        self.policy.end_run();
    }

    /// Bytes of atoms held.
    pub fn used(&self) -> usize {
        self.used
    }

    /// The most bytes it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Atoms held.
    pub fn len(&self) -> usize {
        self.atoms.len()
    }

    /// Whether it holds no atom.
    pub fn is_empty(&self) -> bool {
        self.atoms.is_empty()
    }

    /// The policy.
    pub fn policy(&self) -> PolicyKind {
        self.kind
    }

    /// Hits, misses and evictions so far.
    pub fn counters(&self) -> CacheCounters {
        self.counters
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn key(code: u64) -> AtomKey {
        AtomKey {
            field: 0,
            t: 0,
            code,
        }
    }

    /// An atom of `bytes` bytes (padding included).
    pub(crate) fn atom(bytes: usize) -> AtomData {
        vec![0f32; bytes / 4].into()
    }

    /// Replays `uses` (a code per use: a miss is read and inserted) on a cache of
    /// `slots` atoms of 64 bytes and returns the evicted codes in order.
    pub(crate) fn evictions(
        kind: PolicyKind,
        slots: usize,
        uses: &[u64],
        ranking: &dyn Ranking,
    ) -> Vec<u64> {
        let mut cache = AtomCache::new(slots * 64, kind);
        let mut out = Vec::new();
        for &code in uses {
            if cache.get(&key(code)).is_none() {
                out.extend(
                    cache
                        .insert(key(code), atom(64), ranking)
                        .iter()
                        .map(|k| k.code),
                );
            }
        }
        out
    }

    #[test]
    fn the_cache_stays_within_its_bytes_and_counts_hits() {
        let mut cache = AtomCache::new(256, PolicyKind::Lru);
        for code in 0..10 {
            assert!(cache.get(&key(code)).is_none());
            cache.insert(key(code), atom(64), &NoRanking);
            assert!(cache.used() <= 256);
        }
        assert_eq!(cache.len(), 4);
        assert!(cache.get(&key(9)).is_some());
        let c = cache.counters();
        assert_eq!((c.hits, c.misses, c.evictions), (1, 10, 6));
        // Too big for the whole cache: not kept, nothing evicted.
        assert!(cache.insert(key(99), atom(512), &NoRanking).is_empty());
        assert!(!cache.contains(&key(99)));
        let before = cache.generation();
        assert_eq!(cache.invalidate(0, 0).len(), 4);
        assert_eq!(cache.used(), 0);
        // Reads chosen before an invalidation are not to be cached after it.
        assert_eq!(cache.generation(), before + 1);
    }

    #[test]
    fn a_field_forgotten_leaves_the_cache_whole_steps_and_all_and_others_stay() {
        let mut cache = AtomCache::new(1 << 20, PolicyKind::Urc);
        for (field, t, code) in [(1, 0, 5), (1, 3, 5), (2, 0, 5), (1, 0, 6)] {
            cache.insert(AtomKey { field, t, code }, atom(64), &NoRanking);
        }
        let before = cache.generation();
        let mut gone = cache.forget_field(1);
        gone.sort();
        assert_eq!(
            gone.iter().map(|k| (k.t, k.code)).collect::<Vec<_>>(),
            [(0, 5), (0, 6), (3, 5)]
        );
        assert_eq!((cache.len(), cache.used()), (1, 64));
        assert!(cache.contains(&AtomKey {
            field: 2,
            t: 0,
            code: 5
        }));
        assert_eq!(cache.generation(), before + 1);
    }

    #[test]
    fn policies_parse_by_name() {
        for kind in [
            PolicyKind::Lru,
            PolicyKind::LruK,
            PolicyKind::Slru,
            PolicyKind::Urc,
        ] {
            assert_eq!(PolicyKind::parse(kind.name()).unwrap(), kind);
        }
        assert!(PolicyKind::parse("fifo").is_err());
    }
}
