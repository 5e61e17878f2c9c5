//! Which atoms of a cell's box (the cell and its halo) a query needs: a set of atoms in a
//! box of up to 64 atoms a side, one 64-bit word per (y, z) row with bit `x` for atom
//! `(x, y, z)`.

/// Most atoms along the x side of a set (the bits of a row).
pub const MAX_X: usize = 64;

/// A set of atoms in a box of `side` atoms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AtomSet {
    side: [usize; 3],
    rows: Vec<u64>,
}

impl AtomSet {
    /// The empty set of a box of `side` atoms (`side[0]` at most [`MAX_X`]).
    pub fn new(side: [usize; 3]) -> Self {
        assert!(side[0] <= MAX_X, "{} atoms along x", side[0]);
        Self {
            side,
            rows: vec![0; side[1] * side[2]],
        }
    }

    /// Adds the atoms whose indices lie in `lo[k] ..= hi[k]` along every axis `k`.
    #[inline]
    pub fn add_box(&mut self, lo: [usize; 3], hi: [usize; 3]) {
        debug_assert!((0..3).all(|k| lo[k] <= hi[k] && hi[k] < self.side[k]));
        // Bits lo..=hi of a row; `hi` is below 64, so the shift of `2 << hi` may overflow
        // only to zero, which the wrapping subtraction turns into all ones.
        let mask = (2u64 << hi[0]).wrapping_sub(1) & !((1u64 << lo[0]) - 1);
        for z in lo[2]..=hi[2] {
            let plane = &mut self.rows[z * self.side[1]..];
            for row in &mut plane[lo[1]..=hi[1]] {
                *row |= mask;
            }
        }
    }

    /// Whether atom `(x, y, z)` is in the set.
    #[inline]
    pub fn contains(&self, x: usize, y: usize, z: usize) -> bool {
        self.rows[z * self.side[1] + y] >> x & 1 == 1
    }

    /// The atoms of the set, `[x, y, z]`, z slowest.
    pub fn iter(&self) -> impl Iterator<Item = [usize; 3]> + '_ {
        let ny = self.side[1];
        self.rows.iter().enumerate().flat_map(move |(r, &row)| {
            let (y, z) = (r % ny, r / ny);
            // The set bits of the row, lowest first.
            let mut bits = row;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let x = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    [x, y, z]
                })
            })
        })
    }

    /// Atoms of the box along each axis.
    pub fn side(&self) -> [usize; 3] {
        self.side
    }

    /// Atoms in the set.
    pub fn len(&self) -> usize {
        self.rows.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.rows.iter().all(|&w| w == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_add_exactly_their_atoms() {
        let mut set = AtomSet::new([64, 3, 4]);
        set.add_box([1, 0, 2], [2, 1, 3]);
        set.add_box([63, 2, 0], [63, 2, 0]);
        set.add_box([0, 1, 3], [63, 1, 3]);
        let inside = |x: usize, y: usize, z: usize| {
            (1..=2).contains(&x) && y <= 1 && (2..=3).contains(&z)
                || (x, y, z) == (63, 2, 0)
                || (y, z) == (1, 3)
        };
        for z in 0..4 {
            for y in 0..3 {
                for x in 0..64 {
                    assert_eq!(set.contains(x, y, z), inside(x, y, z), "atom {x} {y} {z}");
                }
            }
        }
        assert_eq!(set.len(), 2 * 2 * 2 - 2 + 1 + 64);
        assert_eq!(set.iter().count(), set.len());
        assert!(set.iter().all(|[x, y, z]| set.contains(x, y, z)));
        assert!(!set.is_empty() && AtomSet::new([2, 2, 2]).is_empty());
    }
}
