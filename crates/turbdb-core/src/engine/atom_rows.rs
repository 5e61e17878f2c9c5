//! A field's stencil summed straight out of the atoms it spans, without copying it first.
//!
//! The node engine sums the stencil of a point that shares no home block with others
//! ([`crate::engine::home_block`]) on its own; it used to copy the stencil's rows out of
//! the up to eight atoms it spans into a small dense block first
//! ([`crate::engine::gather`]), about 6 KB a lag8 point, and then sum the block. A row of
//! the stencil lies in one atom along y and z, so only its x nodes may be cut in two by an
//! atom's end: the rows are read where they lie, and the one vector of a row that straddles
//! the cut is put together from both atoms with a masked load
//! ([`crate::engine::simd::Simd::load_narrow_split`]). The sums are those of the block,
//! in the same order: the same answer. Only a field's sum (float32 rows) reads atoms so;
//! the derivatives' float64 rows are still gathered.
//!
//! Dense points keep their home blocks: one box copied for many points costs less than
//! reading each point's cut rows (`warm_profile`, lag8, one thread of the 2-core Intel Xeon,
//! fields on AVX2, load not recorded: at 24 points an atom 195 against 120 ns a point; at 4
//! to 7 an atom about even).

use std::marker::PhantomData;

use crate::engine::accumulate::PADDING;
use crate::engine::gather::MAX_SPANS;
use crate::engine::simd::Simd;
use crate::engine::whole_stencil::{sum_field, FieldRows};
use crate::interp::method::MAX_WIDTH;

/// One axis of a stencil: per node, the span (atom) it lies in and its offset in that
/// atom (in values).
#[derive(Clone, Copy)]
pub(crate) struct AxisRows {
    pub(crate) span: [u8; MAX_WIDTH],
    pub(crate) offset: [u32; MAX_WIDTH],
}

/// The rows of one stencil, read where they lie in its atoms.
#[derive(Clone, Copy)]
pub(crate) struct AtomRows<'a> {
    /// Per `(z span, y span)`, `z · MAX_SPANS + y`: where the stencil's x nodes start in
    /// row 0 of plane 0 of the atom of its first x span, and node 0 of the same row in the
    /// atom of its second.
    left: [*const f32; MAX_SPANS * MAX_SPANS],
    right: [*const f32; MAX_SPANS * MAX_SPANS],
    y: AxisRows,
    z: AxisRows,
    /// Values of a row in the first x span's atom; `None` where the x nodes lie in one.
    split: Option<usize>,
    atoms: PhantomData<&'a [f32]>,
}

impl<'a> AtomRows<'a> {
    /// The rows of a stencil: `atoms(ix, iy, iz)` is the atom of its x, y and z spans
    /// (`ix` < 2), each holding `atom_values` values and [`PADDING`] more; its x nodes
    /// start at value `x_start` of a row of the first x atom, of which `split` values are
    /// the stencil's (all of them if `spans[0]` is 1); `y` and `z` give every y and z
    /// node's span (< `spans[1]`, `spans[2]`) and offset.
    ///
    /// # Panics
    /// If an atom holds fewer values, or a node's offset or the x part lies outside one.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        atoms: impl Fn(usize, usize, usize) -> &'a [f32],
        atom_values: usize,
        spans: [usize; 3],
        x_start: usize,
        split: usize,
        y: AxisRows,
        z: AxisRows,
        width: usize,
    ) -> Self {
        assert!(
            spans[0] <= 2 && spans[1] <= MAX_SPANS && spans[2] <= MAX_SPANS && width <= MAX_WIDTH
        );
        let null = std::ptr::null();
        let (mut left, mut right) = ([null; MAX_SPANS * MAX_SPANS], [null; MAX_SPANS * MAX_SPANS]);
        // The farthest a row is read past its start, in values (see `vector`).
        let row_reach = x_start + split.max(1) + PADDING / 2;
        let last_row = y.offset[..width].iter().max().copied().unwrap_or(0) as usize
            + z.offset[..width].iter().max().copied().unwrap_or(0) as usize;
        for iz in 0..spans[2] {
            for iy in 0..spans[1] {
                let first = atoms(0, iy, iz);
                assert!(
                    first.len() >= atom_values + PADDING && last_row + row_reach <= first.len()
                );
                left[iz * MAX_SPANS + iy] = first[x_start..].as_ptr();
                right[iz * MAX_SPANS + iy] = if spans[0] == 2 {
                    let second = atoms(1, iy, iz);
                    assert!(
                        second.len() >= atom_values + PADDING && last_row + PADDING <= second.len()
                    );
                    second.as_ptr()
                } else {
                    first.as_ptr()
                };
            }
        }
        for k in 0..width {
            assert!((y.span[k] as usize) < spans[1] && (z.span[k] as usize) < spans[2]);
        }
        Self {
            left,
            right,
            y,
            z,
            split: (spans[0] == 2).then_some(split),
            atoms: PhantomData,
        }
    }
}

impl AtomRows<'_> {
    /// Writes the field at the stencil's point to `out[c]` for each of `ncomp` components,
    /// as [`crate::engine::whole_stencil::WholeStencil::field`] does from a block (the same
    /// sums in the same order: the same answer), `W` wide, rows of `H` float32 vectors.
    #[inline(always)]
    pub(crate) fn field<S: Simd, const W: usize, const H: usize>(
        &self,
        simd: S,
        w: [&[f64; MAX_WIDTH]; 3],
        ncomp: usize,
        out: &mut [f64],
    ) {
        let lanes = 2 * S::LANES;
        // The rows promise `PADDING` values past each row's start in its second atom.
        assert!(H * lanes <= PADDING);
        // The vector the first x atom's end cuts (those before it are that atom's, those
        // after it the second's), and its lanes in the first atom.
        let (cut, d) = self
            .split
            .map_or((H, 0), |split| (split / lanes, split % lanes));
        macro_rules! cut_at {
            ($cut:literal) => {
                sum_field::<S, W, H, _>(simd, &CutRows::<$cut> { rows: self, d }, w, ncomp, out)
            };
        }
        // A row takes at most three vectors (`fast_paths.rs`): a cut at 3 or past is none.
        match cut {
            0 => cut_at!(0),
            1 => cut_at!(1),
            2 => cut_at!(2),
            _ => cut_at!(3),
        }
    }
}

/// The rows of [`AtomRows`] whose vector `CUT` is the one an atom's end cuts, `d` lanes of
/// it in the first x atom: a constant, so that the sum's loops unroll with every load
/// known and its sums stay in registers (a choice made row by row kept them in memory,
/// and summing from the atoms ran slower than copying them first).
struct CutRows<'r, 'a, const CUT: usize> {
    rows: &'r AtomRows<'a>,
    d: usize,
}

// SAFETY: `AtomRows::new` checked that each row lies in its atoms, with at least
// `PADDING / 2` values readable past the part in the first x atom and `PADDING` past the
// start of the row in the second; `vector` reads whole vectors of at most 16 values
// (`PADDING / 2`) from the first up to the cut vector, and at most `PADDING` values from
// the second (the sum takes at most `PADDING` values a row: asserted by
// `AtomRows::field`).
unsafe impl<const CUT: usize> FieldRows for CutRows<'_, '_, CUT> {
    /// The row's start in the first x atom and its node 0 in the second.
    type Row = (*const f32, *const f32);

    #[inline(always)]
    fn row(&self, z: usize, y: usize) -> Self::Row {
        let rows = self.rows;
        let at = rows.z.span[z] as usize * MAX_SPANS + rows.y.span[y] as usize;
        let offset = (rows.z.offset[z] + rows.y.offset[y]) as usize;
        (
            rows.left[at].wrapping_add(offset),
            rows.right[at].wrapping_add(offset),
        )
    }

    #[inline(always)]
    fn vector<S: Simd>(&self, simd: S, (left, right): Self::Row, h: usize) -> S::N {
        let lanes = 2 * S::LANES;
        // SAFETY: see the impl: lanes before the cut are the first atom's, read from
        // `left`; the others the second's, read from `right`.
        unsafe {
            if h < CUT {
                simd.load_narrow(left.add(h * lanes))
            } else if h == CUT {
                simd.load_narrow_split(left.add(h * lanes), right, self.d)
            } else {
                simd.load_narrow(right.add((h - CUT) * lanes - self.d))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cache::{padded, AtomData};
    use crate::engine::fast_paths::{FastVisit, Summed, Visit, FIELD};
    use crate::engine::gather::{Gathered, Stencil};
    use crate::engine::simd::{KernelPath, SimdTask};
    use crate::engine::whole_stencil::WholeStencil;

    /// Splits of a row at every lane on one path: `load_narrow_split` against the lanes
    /// picked one by one.
    struct Splits;

    impl SimdTask for Splits {
        type Output = Vec<(usize, Vec<f32>, Vec<f32>)>;
        #[inline(always)]
        fn run<S: Simd>(self, simd: S) -> Self::Output {
            let lanes = 2 * S::LANES;
            let left: Vec<f32> = (0..lanes).map(|i| i as f32).collect();
            let right: Vec<f32> = (0..lanes).map(|i| 100.0 + i as f32).collect();
            (0..lanes)
                .map(|d| {
                    let mut got = [0f64; 16];
                    // SAFETY: `left` holds `lanes` values and `right` `lanes` ≥ `lanes − d`.
                    let v = unsafe { simd.load_narrow_split(left.as_ptr(), right.as_ptr(), d) };
                    for (k, half) in simd.widen(v).into_iter().enumerate() {
                        simd.store(half, &mut got[k * S::LANES..]);
                    }
                    let want = (0..lanes).map(|i| if i < d { left[i] } else { right[i - d] });
                    (
                        d,
                        got[..lanes].iter().map(|&v| v as f32).collect(),
                        want.collect(),
                    )
                })
                .collect()
        }
    }

    #[test]
    fn every_path_puts_a_cut_row_together_from_both_atoms() {
        for path in KernelPath::supported() {
            for (d, got, want) in path.run(Splits) {
                assert_eq!(got, want, "{} with {d} lanes from the left", path.name());
            }
        }
    }

    /// The field at one stencil from a block and from its atoms, on the path visited.
    struct Both<'a> {
        block: WholeStencil<'a>,
        rows: &'a AtomRows<'a>,
        w: [&'a [f64; MAX_WIDTH]; 3],
        ncomp: usize,
    }

    impl FastVisit for Both<'_> {
        type Output = ([f64; 3], [f64; 3]);
        #[inline(always)]
        fn sum<S: Simd, const W: usize, const N: usize, const K: u8>(
            self,
            simd: S,
        ) -> Self::Output {
            assert_eq!(K, FIELD);
            let (mut block, mut atoms) = ([0.0; 3], [0.0; 3]);
            self.block.field::<S, W, N>(simd, 0, self.w, &mut block);
            self.rows
                .field::<S, W, N>(simd, self.w, self.ncomp, &mut atoms);
            (block, atoms)
        }
    }

    /// A tiny xorshift, so the test needs no crate.
    fn random(state: &mut u64) -> f64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    }

    #[test]
    fn a_field_summed_from_its_atoms_equals_the_sum_of_its_gathered_block_on_every_path() {
        // 20 nodes a side in atoms of 8: the last atom is 4 nodes, so a stencil that wraps
        // may span three atoms along x (not summed from atoms: `atom_rows` says None).
        let (atom, n) = (8, 20);
        let mut state = 0x9e37_79b9_7f4a_7c15;
        let coords: Vec<[u32; 3]> = (0..27).map(|i| [i % 3, i / 3 % 3, i / 9]).collect();
        let mut checked = 0;
        for ncomp in [1, 3] {
            let data: Vec<AtomData> = coords
                .iter()
                .map(|_| {
                    padded(
                        (0..atom * atom * atom * ncomp)
                            .map(|_| random(&mut state) as f32)
                            .collect(),
                    )
                })
                .collect();
            for width in [4, 6, 8] {
                let mut gathered = Gathered::new(width, ncomp).expect("rows of the kernel");
                for x in 0..n {
                    let mut stencil = Stencil::default();
                    let first = [x, (3 * x + 5) % n, (7 * x + 2) % n];
                    for k in 0..3 {
                        stencil.w[k].wrapped = first[k];
                        for v in &mut stencil.w[k].w[0][..width] {
                            *v = random(&mut state);
                        }
                    }
                    let atoms = coords.iter().enumerate().map(|(i, &c)| (c, Some(i as u32)));
                    stencil.place(width, [n; 3], atom, atoms);
                    let Some(rows) = stencil.atom_rows(width, atom, ncomp, &data) else {
                        continue;
                    };
                    let (block, _) = gathered.gather(&stencil, atom, &data);
                    let w = [0, 1, 2].map(|k| &stencil.w[k].w[0]);
                    for path in KernelPath::supported() {
                        let both = Both {
                            block: WholeStencil::of(block, ncomp),
                            rows: &rows,
                            w,
                            ncomp,
                        };
                        let visit = Visit {
                            summed: Summed::Field,
                            width,
                            ncomp,
                            visitor: both,
                        };
                        // The portable path has no fast paths: nothing to compare there.
                        if let Some((from_block, from_atoms)) = path.run(visit) {
                            assert_eq!(
                                from_atoms,
                                from_block,
                                "{}: width {width}, {ncomp} components, first node {first:?}",
                                path.name()
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 0 || KernelPath::supported() == [KernelPath::Portable]);
    }
}
