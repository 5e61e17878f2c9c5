//! Atoms in order of last use: a doubly linked list threaded through a slab, with an index
//! from atom to node, so touching, removing and taking the least recent are all O(1).

use rustc_hash::FxHashMap;

use crate::engine::cache::AtomKey;

const NIL: usize = usize::MAX;

#[derive(Debug, Clone, Copy)]
struct Node {
    key: AtomKey,
    /// Towards the most recent end.
    newer: usize,
    /// Towards the least recent end.
    older: usize,
}

/// A recency list of atoms.
#[derive(Debug, Default)]
pub(crate) struct Recency {
    nodes: Vec<Node>,
    free: Vec<usize>,
    index: FxHashMap<AtomKey, usize>,
    newest: Option<usize>,
    oldest: Option<usize>,
}

impl Recency {
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn contains(&self, key: &AtomKey) -> bool {
        self.index.contains_key(key)
    }

    /// Puts `key` at the most recent end (adding it if absent).
    pub(crate) fn touch(&mut self, key: AtomKey) {
        if let Some(&at) = self.index.get(&key) {
            self.unlink(at);
            self.link_newest(at);
            return;
        }
        let node = Node {
            key,
            newer: NIL,
            older: NIL,
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.nodes[at] = node;
                at
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.index.insert(key, at);
        self.link_newest(at);
    }

    /// Removes `key`; whether it was there.
    pub(crate) fn remove(&mut self, key: &AtomKey) -> bool {
        let Some(at) = self.index.remove(key) else {
            return false;
        };
        self.unlink(at);
        self.free.push(at);
        true
    }

    /// Removes and returns the least recently used atom.
    pub(crate) fn pop_oldest(&mut self) -> Option<AtomKey> {
        let key = self.nodes[self.oldest?].key;
        self.remove(&key);
        Some(key)
    }

    /// The atoms from the least to the most recently used.
    pub(crate) fn oldest_first(&self) -> impl Iterator<Item = AtomKey> + '_ {
        let mut at = self.oldest;
        std::iter::from_fn(move || {
            let node = self.nodes[at?];
            at = (node.newer != NIL).then_some(node.newer);
            Some(node.key)
        })
    }

    fn unlink(&mut self, at: usize) {
        let Node { newer, older, .. } = self.nodes[at];
        match newer {
            NIL => self.newest = (older != NIL).then_some(older),
            n => self.nodes[n].older = older,
        }
        match older {
            NIL => self.oldest = (newer != NIL).then_some(newer),
            o => self.nodes[o].newer = newer,
        }
    }

    fn link_newest(&mut self, at: usize) {
        self.nodes[at].newer = NIL;
        self.nodes[at].older = self.newest.unwrap_or(NIL);
        if let Some(newest) = self.newest {
            self.nodes[newest].newer = at;
        }
        self.newest = Some(at);
        if self.oldest.is_none() {
            self.oldest = Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: u64) -> AtomKey {
        AtomKey {
            field: 0,
            t: 0,
            code,
        }
    }

    #[test]
    fn touching_moves_to_the_recent_end_and_popping_takes_the_oldest() {
        let mut r = Recency::default();
        for c in 0..4 {
            r.touch(key(c));
        }
        r.touch(key(1));
        assert!(r.remove(&key(2)));
        assert!(!r.remove(&key(2)));
        let order: Vec<u64> = r.oldest_first().map(|k| k.code).collect();
        assert_eq!(order, vec![0, 3, 1]);
        assert_eq!(r.pop_oldest(), Some(key(0)));
        r.touch(key(7));
        assert_eq!(r.len(), 3);
        let order: Vec<u64> = r.oldest_first().map(|k| k.code).collect();
        assert_eq!(order, vec![3, 1, 7]);
        while r.pop_oldest().is_some() {}
        assert_eq!(r.len(), 0);
        assert_eq!(r.oldest_first().count(), 0);
    }
}
