//! The stencils of many points that lie in one atom, gathered once into one dense block.
//!
//! A dense query has hundreds of points in each atom (10⁶ points on a 128³ grid: 244 in
//! each of its 8³ atoms), and their stencils overlap almost entirely. Gathering each
//! point's stencil on its own ([`crate::engine::gather`]) copies about 6 KB a point — the
//! same rows again and again — and that copy cost three times the sums (`perf` on
//! `warm_profile 1000000`). Instead the batch kernel copies, once per group of points
//! with the same home atom, the box that holds all their stencils (at most
//! `(atom + width − 1)³` nodes: 15³ for lag8 in atoms of 8) out of the atoms around the
//! home, and sums every point of the group from it, as the streaming executor does with
//! its cell blocks. Sparse points (a few per atom) keep the per-point gather: a box per
//! point would copy more than its stencil.
//!
//! The fill prefetches nothing: its cost is the copy itself, not waiting for the atoms
//! (`warm_profile 32768`, lag8 field on the AVX2 path, 1 thread of the 2-core Intel Xeon
//! at 2.9 GHz, load 0.7–1.8: a second fill of each box, from atoms then in the L2 cache,
//! cost as much as the first, 165 ns a point; the next atom's rows prefetched meanwhile
//! gained nothing).

use crate::engine::accumulate::{Block, Runs, PADDING};
use crate::engine::short_copy::copy_exact;

/// Along one axis, the parts of a box that one atom fills, `(first box node, first atom
/// node, length)`, and how many there are (an atom appears at most three times).
type Parts = ([(usize, usize, usize); 3], usize);

/// One atom's values and where it lies: its coordinates in the grid of atoms.
pub(crate) struct Neighbour<'a> {
    pub(crate) coords: [u32; 3],
    pub(crate) values: &'a [f32],
}

/// The box of nodes that holds the stencils of a group of points.
pub(crate) struct HomeBlock {
    values: Vec<f32>,
    /// First node of the box along each axis (unwrapped: may be negative or past the grid
    /// on a periodic axis).
    origin: [i64; 3],
    /// Nodes along each axis.
    dims: [usize; 3],
    width: usize,
    /// Side of the home cube the space is made for.
    home: usize,
    ncomp: usize,
}

impl HomeBlock {
    /// Space for the boxes of stencils `width` nodes wide of points in a cube of `home`
    /// nodes a side (an atom, or a cube of atoms).
    pub(crate) fn new(width: usize, home: usize, ncomp: usize) -> Self {
        let side = home + width - 1;
        Self {
            values: vec![0.0; side * side * side * ncomp + PADDING],
            origin: [0; 3],
            dims: [0; 3],
            width,
            home,
            ncomp,
        }
    }

    /// The stencil width and the side of the home cube the space is made for.
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.width, self.home)
    }

    /// Whether a box for stencils whose first nodes lie in `lo ..= hi` fits this space
    /// and the grid of `n` nodes (a box wider than the grid would hold a node twice).
    pub(crate) fn fits(&self, lo: [i64; 3], hi: [i64; 3], n: [usize; 3]) -> bool {
        let side = |k: usize| (hi[k] - lo[k]) as usize + self.width;
        let volume: usize = (0..3).map(side).product();
        (0..3).all(|k| hi[k] >= lo[k] && side(k) <= n[k])
            && volume * self.ncomp + PADDING <= self.values.len()
    }

    /// Fills the box for stencils whose first nodes lie in `lo ..= hi` (see
    /// [`Self::fits`]) with the nodes of `atoms` (side `atom`, on a grid of `n` nodes,
    /// `periodic` per axis). Nodes of the box in no atom given read as zero if
    /// `all_present` is false: an atom missing from the batch, or left out of the query
    /// (a partition's partial sums), adds nothing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fill(
        &mut self,
        lo: [i64; 3],
        hi: [i64; 3],
        atom: usize,
        n: [usize; 3],
        periodic: [bool; 3],
        atoms: &[Neighbour<'_>],
        all_present: bool,
    ) {
        debug_assert!(self.fits(lo, hi, n));
        let nc = self.ncomp;
        self.origin = lo;
        self.dims = std::array::from_fn(|k| (hi[k] - lo[k]) as usize + self.width);
        let [bx, by, bz] = self.dims;
        if !all_present {
            self.values[..bx * by * bz * nc].fill(0.0);
        }
        let (row_in, plane_in) = (atom * nc, atom * atom * nc);
        let (row_out, plane_out) = (bx * nc, bx * by * nc);
        for neighbour in atoms {
            // Per axis, the parts of the box this atom fills: `(first box node, first
            // atom node, length)`; on a periodic axis an atom may appear at both ends.
            let parts: [Parts; 3] = std::array::from_fn(|k| {
                let start = neighbour.coords[k] as usize * atom;
                let len = atom.min(n[k] - start);
                let images: &[i64] = if periodic[k] { &[-1, 0, 1] } else { &[0] };
                let mut found = ([(0, 0, 0); 3], 0);
                for &m in images {
                    let first = start as i64 + m * n[k] as i64;
                    let a = first.max(self.origin[k]);
                    let b = (first + len as i64).min(self.origin[k] + self.dims[k] as i64);
                    if a < b {
                        found.0[found.1] = (
                            (a - self.origin[k]) as usize,
                            (a - first) as usize,
                            (b - a) as usize,
                        );
                        found.1 += 1;
                    }
                }
                found
            });
            let values = neighbour.values;
            for &(oz, az, nz) in &parts[2].0[..parts[2].1] {
                for &(oy, ay, ny) in &parts[1].0[..parts[1].1] {
                    for &(ox, ax, nx) in &parts[0].0[..parts[0].1] {
                        let len = nx * nc;
                        let last = (az + nz - 1) * plane_in + (ay + ny - 1) * row_in + ax * nc;
                        assert!(last + len <= values.len(), "a part lies inside its atom");
                        let out_last = (oz + nz - 1) * plane_out + (oy + ny - 1) * row_out;
                        assert!(out_last + ox * nc + len <= self.values.len());
                        for z in 0..nz {
                            for y in 0..ny {
                                let from = (az + z) * plane_in + (ay + y) * row_in + ax * nc;
                                let to = (oz + z) * plane_out + (oy + y) * row_out + ox * nc;
                                // SAFETY: both rows of `len` values are in bounds (checked
                                // above for the last row; the others start before it).
                                unsafe {
                                    copy_exact(
                                        values.as_ptr().add(from),
                                        self.values.as_mut_ptr().add(to),
                                        len,
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The block, for the kernel.
    pub(crate) fn block(&self) -> Block<'_, f32> {
        Block::dense(&self.values[..], [self.dims[0], self.dims[1]])
    }

    /// Nodes from the box's first to the first of the stencil whose first nodes are
    /// `base` (unwrapped, inside the box), along each axis.
    #[inline(always)]
    pub(crate) fn offsets(&self, base: [i64; 3]) -> [usize; 3] {
        std::array::from_fn(|k| {
            let offset = (base[k] - self.origin[k]) as usize;
            debug_assert!(offset + self.width <= self.dims[k]);
            offset
        })
    }

    /// The runs of the stencil whose first nodes are `base` (unwrapped, inside the box).
    #[inline(always)]
    pub(crate) fn runs(&self, base: [i64; 3]) -> [Runs; 3] {
        let offsets = self.offsets(base);
        std::array::from_fn(|k| Runs::new(offsets[k], self.width, self.dims[k], 0, self.dims[k]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16³ periodic grid of one-component nodes, value = linear node index, in 8³ atoms.
    fn atom_values(coords: [u32; 3]) -> Vec<f32> {
        let mut v = vec![0f32; 8 * 8 * 8 + PADDING];
        for z in 0..8 {
            for y in 0..8 {
                for x in 0..8 {
                    let node = [
                        coords[0] as usize * 8 + x,
                        coords[1] as usize * 8 + y,
                        coords[2] as usize * 8 + z,
                    ];
                    v[(z * 8 + y) * 8 + x] = (node[0] + 16 * node[1] + 256 * node[2]) as f32;
                }
            }
        }
        v
    }

    #[test]
    fn a_box_across_the_periodic_seam_holds_each_node_from_its_atom() {
        let coords: Vec<[u32; 3]> = (0..8).map(|i| [i & 1, (i >> 1) & 1, i >> 2]).collect();
        let values: Vec<Vec<f32>> = coords.iter().map(|&c| atom_values(c)).collect();
        let atoms: Vec<Neighbour<'_>> = coords
            .iter()
            .zip(&values)
            .map(|(&coords, v)| Neighbour { coords, values: v })
            .collect();
        let mut block = HomeBlock::new(8, 8, 1);
        // Stencils of points in atom (0, 0, 0) start from −3 to 4: a box of 15 from −3.
        let (lo, hi) = ([-3; 3], [4; 3]);
        assert!(block.fits(lo, hi, [16; 3]));
        block.fill(lo, hi, 8, [16; 3], [true; 3], &atoms, true);
        let b = block.block();
        for z in 0..15i64 {
            for y in 0..15i64 {
                for x in 0..15i64 {
                    let node = [x, y, z].map(|v| (v - 3).rem_euclid(16) as usize);
                    let want = (node[0] + 16 * node[1] + 256 * node[2]) as f32;
                    let got = b.values[((z * 15 + y) * 15 + x) as usize];
                    assert_eq!(got, want, "box node ({x}, {y}, {z})");
                }
            }
        }
        let runs = block.runs([1, -3, 4]);
        assert_eq!(runs[0].runs(), &[(0, 4, 8)]);
        assert_eq!(runs[1].runs(), &[(0, 0, 8)]);
        assert_eq!(runs[2].runs(), &[(0, 7, 8)]);
    }

    #[test]
    fn nodes_of_a_missing_atom_read_as_zero() {
        let values = atom_values([0, 0, 0]);
        let atoms = [Neighbour {
            coords: [0, 0, 0],
            values: &values,
        }];
        let mut block = HomeBlock::new(4, 8, 1);
        block.values.fill(7.0);
        block.fill([6, 0, 0], [6, 0, 0], 8, [16; 3], [false; 3], &atoms, false);
        let b = block.block();
        // x nodes 6 and 7 are in the atom, 8 and 9 in the missing one.
        assert_eq!(&b.values[..4], &[6.0, 7.0, 0.0, 0.0]);
        assert!(!block.fits([0; 3], [13; 3], [16; 3]), "wider than the grid");
    }
}
