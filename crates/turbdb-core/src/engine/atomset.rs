//! Which atoms of a cell a query needs: a set of up to 8 × 8 × 8 atoms, one 64-bit word
//! per z plane with bit `8·y + x` for atom `(x, y, z)`.

/// Most atoms along one side of a set.
pub const MAX_SIDE: usize = 8;

/// A set of atoms of one cell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AtomSet([u64; MAX_SIDE]);

/// Byte `y` of `BYTES[m]` is all ones where bit `y` of `m` is set.
const BYTES: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut m = 0;
    while m < 256 {
        let mut y = 0;
        while y < 8 {
            if m >> y & 1 == 1 {
                table[m] |= 0xff << (8 * y);
            }
            y += 1;
        }
        m += 1;
    }
    table
};

impl AtomSet {
    /// The atoms whose x, y and z indices are all in the masks (bit `i` for index `i`).
    #[inline]
    pub fn product(x: u8, y: u8, z: u8) -> Self {
        let plane = (u64::from(x) * 0x0101_0101_0101_0101) & BYTES[usize::from(y)];
        Self(std::array::from_fn(
            |k| if z >> k & 1 == 1 { plane } else { 0 },
        ))
    }

    /// Adds the atoms of `other`.
    #[inline]
    pub fn add(&mut self, other: &Self) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
    }

    /// Whether atom `(x, y, z)` is in the set.
    #[inline]
    pub fn contains(&self, x: usize, y: usize, z: usize) -> bool {
        self.0[z] >> (8 * y + x) & 1 == 1
    }

    /// Atoms in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_product_holds_exactly_the_atoms_in_all_three_masks() {
        let (mx, my, mz) = (0b1000_0110u8, 0b0000_0011u8, 0b1010_0000u8);
        let set = AtomSet::product(mx, my, mz);
        for z in 0..8 {
            for y in 0..8 {
                for x in 0..8 {
                    let expected = mx >> x & 1 == 1 && my >> y & 1 == 1 && mz >> z & 1 == 1;
                    assert_eq!(set.contains(x, y, z), expected, "atom {x} {y} {z}");
                }
            }
        }
        assert_eq!(set.len(), 3 * 2 * 2);
    }

    #[test]
    fn adding_sets_is_their_union() {
        let mut a = AtomSet::product(1, 1, 1);
        assert!(!a.is_empty() && AtomSet::default().is_empty());
        a.add(&AtomSet::product(0b10, 1, 0b100));
        assert!(a.contains(0, 0, 0) && a.contains(1, 0, 2) && !a.contains(1, 0, 0));
        assert_eq!(a.len(), 2);
    }
}
