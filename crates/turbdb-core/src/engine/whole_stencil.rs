//! The kernel's fast paths for the commonest sums: a field's value (float32 answers), the
//! gradient, the Laplacian and the Hessian, at a point whose whole stencil lies in one
//! float32 block (which are compiled: [`crate::engine::fast_paths`]) — every point of
//! the streaming executor, whose cell blocks hold their halo. The stencil's width `W` and
//! the row's vector count are constants, so every loop unrolls and every sum stays in a
//! register, with none of the general kernel's runs, bounds and dispatch per point
//! ([`crate::engine::accumulate`]).
//!
//! For a field each row (an x run of `W` nodes, all components) is summed along z and then
//! y in float32, widened once and weighted along x in float64. The float32 sums add a few
//! roundings of 6e-8 of the field's magnitude, of the order of the float32 answer's own
//! rounding; float64 answers take the general kernel, whose sums are all float64. The
//! derivatives keep every sum in float64 (their sums cancel).

use crate::engine::accumulate::{Block, TermSet};
use crate::engine::atom_rows::AtomRows;
use crate::engine::fast_paths::{
    FastVisit, Probe, Summed, Visit, FIELD, GRADIENT, HESSIAN, LAPLACIAN, MAX_COMPONENTS,
};
use crate::engine::simd::{KernelPath, Simd, SimdTask};
use crate::interp::method::MAX_WIDTH;
use crate::interp::stencil::AxisWeights;

/// Most float64 lanes the widened row sums take: `2 · H · S::LANES` for the largest `H`
/// (3) and lanes (8, AVX-512) dispatched.
const MAX_LANES: usize = 48;

/// A float32 block in C order `(z, y, x, c)`, as the streaming executor fills it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WholeStencil<'a> {
    /// The block's values, with [`crate::engine::accumulate::PADDING`] more past its end.
    pub(crate) values: &'a [f32],
    /// Values from one y row to the next.
    pub(crate) row_stride: usize,
    /// Values from one z plane to the next.
    pub(crate) plane_stride: usize,
    /// Components per node.
    pub(crate) ncomp: usize,
}

/// The y rows of a field's stencil summed along z together ([`WholeStencil::field`]).
const ROWS: usize = 4;

impl<'a> WholeStencil<'a> {
    /// A float32 block of the general kernel, of `ncomp` components.
    pub(crate) fn of(block: Block<'a, f32>, ncomp: usize) -> Self {
        Self {
            values: block.values,
            row_stride: block.row * ncomp,
            plane_stride: block.plane * ncomp,
            ncomp,
        }
    }

    /// The index of the first value of the stencil whose first node is `offset` nodes
    /// along x, y and z from the block's first.
    #[inline(always)]
    pub(crate) fn start(&self, offset: [usize; 3]) -> usize {
        offset[2] * self.plane_stride + offset[1] * self.row_stride + offset[0] * self.ncomp
    }

    /// Panics unless a `W`-wide stencil whose first value is `start`, each row read as
    /// `len` values (whole vectors), lies in the block, and `len` covers a row and fits
    /// [`MAX_LANES`].
    #[inline(always)]
    fn assert_rows<const W: usize>(&self, start: usize, len: usize) {
        assert!(W <= MAX_WIDTH && len <= MAX_LANES && W * self.ncomp <= len);
        assert!(
            start + (W - 1) * (self.plane_stride + self.row_stride) + len <= self.values.len(),
            "a block must hold PADDING values past its end"
        );
    }

    /// Writes the field at one point to `out[c]` for each component: `start` is the index
    /// of the stencil's first value (its lowest x, y and z node), `w` its weights along x,
    /// y and z (the first `W` of each).
    ///
    /// # Panics
    /// If the stencil's rows, read as `H` whole vectors, do not lie in the block, or if
    /// `2 · H · S::LANES` exceeds [`MAX_LANES`] or `W` exceeds [`MAX_WIDTH`].
    #[inline(always)]
    pub(crate) fn field<S: Simd, const W: usize, const H: usize>(
        &self,
        simd: S,
        start: usize,
        w: [&[f64; MAX_WIDTH]; 3],
        out: &mut [f64],
    ) {
        self.assert_rows::<W>(start, H * 2 * S::LANES);
        let rows = BlockRows {
            // SAFETY: the stencil's first value is in the block (asserted above).
            first: unsafe { self.values.as_ptr().add(start) },
            row: self.row_stride,
            plane: self.plane_stride,
        };
        sum_field::<S, W, H, _>(simd, &rows, w, self.ncomp, out);
    }
}

/// Where a field's sum ([`sum_field`]) reads the rows of a stencil: in a block, or
/// straight out of the atoms the stencil spans
/// ([`crate::engine::atom_rows::AtomRows`]).
///
/// # Safety
/// An implementation promises that every row of its stencil (`z`, `y` < the stencil's
/// width) is readable as the whole vectors its sum takes ([`FieldRows::vector`] for each
/// `h` < `H`).
pub(crate) unsafe trait FieldRows {
    /// Where one row is.
    type Row: Copy;
    /// Row `y` of plane `z` of the stencil.
    fn row(&self, z: usize, y: usize) -> Self::Row;
    /// The row's values `h · 2 · LANES ..` as one float32 vector.
    fn vector<S: Simd>(&self, simd: S, row: Self::Row, h: usize) -> S::N;
}

/// The rows of a stencil in a dense block ([`WholeStencil::field`]).
struct BlockRows {
    /// The stencil's first value.
    first: *const f32,
    row: usize,
    plane: usize,
}

// SAFETY: `WholeStencil::field` asserts that the block holds every row, read whole.
unsafe impl FieldRows for BlockRows {
    type Row = *const f32;

    #[inline(always)]
    fn row(&self, z: usize, y: usize) -> *const f32 {
        self.first.wrapping_add(z * self.plane + y * self.row)
    }

    #[inline(always)]
    fn vector<S: Simd>(&self, simd: S, row: *const f32, h: usize) -> S::N {
        // SAFETY: the row's vectors are in the block (the impl's promise).
        unsafe { simd.load_narrow(row.add(h * 2 * S::LANES)) }
    }
}

/// The field at one point whose stencil's rows `rows` gives, `W` wide, rows of `H`
/// float32 vectors, `ncomp` components, into `out[c]` (see [`WholeStencil::field`]).
#[inline(always)]
pub(crate) fn sum_field<S: Simd, const W: usize, const H: usize, R: FieldRows>(
    simd: S,
    rows: &R,
    w: [&[f64; MAX_WIDTH]; 3],
    ncomp: usize,
    out: &mut [f64],
) {
    let lanes = 2 * S::LANES;
    assert!(W <= MAX_WIDTH && H * lanes <= MAX_LANES && W * ncomp <= H * lanes);
    let [wx, wy, wz] = w;
    let wz: [f32; W] = std::array::from_fn(|k| wz[k] as f32);
    let mut sums = [simd.splat_narrow(0.0); H];
    // Four y rows at a time, so 4 · H z sums are in flight and the multiply-adds do
    // not wait on each other. (On AVX2 a velocity's 12 z sums, 3 y sums and z weight
    // take all 16 registers, and the fourth row's last two vectors become chains of
    // dependent multiply-adds; three rows avoid that but were no faster over the grid,
    // where misses dominate: docs/queries.md.)
    for y in (0..W).step_by(ROWS) {
        let count = (W - y).min(ROWS);
        let mut acc = [[simd.splat_narrow(0.0); H]; ROWS];
        for (z, &wz) in wz.iter().enumerate() {
            let f = simd.splat_narrow(wz);
            for (r, acc) in acc.iter_mut().enumerate().take(count) {
                let row = rows.row(z, y + r);
                for (h, acc) in acc.iter_mut().enumerate() {
                    *acc = simd.mul_add_narrow(rows.vector(simd, row, h), f, *acc);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate().take(count) {
            let fy = simd.splat_narrow(wy[y + r] as f32);
            for h in 0..H {
                sums[h] = simd.mul_add_narrow(acc[h], fy, sums[h]);
            }
        }
    }
    let mut row_sums = [0.0f64; MAX_LANES];
    for (h, &s) in sums.iter().enumerate() {
        let [low, high] = simd.widen(s);
        simd.store(low, &mut row_sums[2 * h * S::LANES..]);
        simd.store(high, &mut row_sums[(2 * h + 1) * S::LANES..]);
    }
    match ncomp {
        1 => fold_x::<1>(&row_sums, &wx[..W], out),
        2 => fold_x::<2>(&row_sums, &wx[..W], out),
        3 => fold_x::<3>(&row_sums, &wx[..W], out),
        nc => {
            for (c, out) in out[..nc].iter_mut().enumerate() {
                *out = (0..W).map(|k| wx[k] * row_sums[k * nc + c]).sum();
            }
        }
    }
}

impl WholeStencil<'_> {
    /// Writes the `D`-th derivatives along each axis at one point to `out[3c + d]` for each
    /// component `c` and axis `d` — the gradient for `D` = 1, the Laplacian's terms for
    /// `D` = 2 — like [`Self::field`] (`w` holds each axis's weights of orders 0 to 2),
    /// with every sum in float64: each row is widened as it is read, summed along z with
    /// the value and derivative weights, then along y into the three (y, z) pairs the
    /// derivatives need ([`Self::derivative_rows`]). `V` float64 vectors a row, five sums
    /// a vector: on AVX-512 (32 registers) a whole row at once, on the four-lane paths (16)
    /// two vectors of it at a time.
    ///
    /// # Panics
    /// As [`Self::field`], with `V · S::LANES` values a row.
    #[inline(always)]
    pub(crate) fn derivatives<S: Simd, const W: usize, const V: usize, const D: usize>(
        &self,
        simd: S,
        start: usize,
        w: [&[[f64; MAX_WIDTH]; 3]; 3],
        out: &mut [f64],
    ) {
        self.assert_rows::<W>(start, V * S::LANES);
        // By (y, z) order (0, 0), (D, 0) and (0, D): each x node's and component's sum.
        let mut sums = [[0.0f64; MAX_LANES]; 3];
        if S::WIDE {
            self.derivative_rows::<S, W, V, D>(simd, start, 0, w, &mut sums);
        } else {
            let mut first = 0;
            while first + 2 <= V {
                self.derivative_rows::<S, W, 2, D>(simd, start, first, w, &mut sums);
                first += 2;
            }
            if first < V {
                self.derivative_rows::<S, W, 1, D>(simd, start, first, w, &mut sums);
            }
        }
        let wx = w[0];
        // Along x, y and z: x's weights of order D on the first, of order 0 on the others.
        for (d, (sums, wx)) in sums.iter().zip([&wx[D], &wx[0], &wx[0]]).enumerate() {
            for c in 0..self.ncomp {
                out[3 * c + d] = along_x::<W>(sums, wx, self.ncomp, c);
            }
        }
    }

    /// [`Self::derivatives`]' sums along z and y of the `N` float64 vectors of each row
    /// from vector `first` on, written to `sums[d]` from value `first · S::LANES` on, for
    /// the (y, z) orders (0, 0), (D, 0) and (0, D); its `5 N` sums stay in the registers.
    #[inline(always)]
    fn derivative_rows<S: Simd, const W: usize, const N: usize, const D: usize>(
        &self,
        simd: S,
        start: usize,
        first: usize,
        w: [&[[f64; MAX_WIDTH]; 3]; 3],
        sums: &mut [[f64; MAX_LANES]; 3],
    ) {
        let lanes = S::LANES;
        let (row, plane) = (self.row_stride, self.plane_stride);
        let [_, wy, wz] = w;
        let base = self.values.as_ptr();
        let zero = simd.splat(0.0);
        let (mut flat, mut along_y, mut along_z) = ([zero; N], [zero; N], [zero; N]);
        for y in 0..W {
            let (mut value, mut slope) = ([zero; N], [zero; N]);
            for z in 0..W {
                let (f0, f1) = (simd.splat(wz[0][z]), simd.splat(wz[D][z]));
                let r = start + z * plane + y * row + first * lanes;
                for v in 0..N {
                    // SAFETY: every row of the stencil, read to its `V` whole vectors, lies
                    // in the block ([`Self::derivatives`] asserted it), and vectors
                    // `first .. first + N` are among them.
                    let x = unsafe { simd.load_f32(base.add(r + v * lanes)) };
                    value[v] = simd.mul_add(x, f0, value[v]);
                    slope[v] = simd.mul_add(x, f1, slope[v]);
                }
            }
            let (g0, g1) = (simd.splat(wy[0][y]), simd.splat(wy[D][y]));
            for v in 0..N {
                flat[v] = simd.mul_add(value[v], g0, flat[v]);
                along_y[v] = simd.mul_add(value[v], g1, along_y[v]);
                along_z[v] = simd.mul_add(slope[v], g0, along_z[v]);
            }
        }
        for (sums, vectors) in sums.iter_mut().zip([flat, along_y, along_z]) {
            for (v, &s) in vectors.iter().enumerate() {
                simd.store(s, &mut sums[(first + v) * lanes..]);
            }
        }
    }
}

/// The fast path that sums a query's stencils one point at a time (the node engine's
/// batches, whose points come one by one from home blocks and gathered stencils), chosen
/// once per query by [`FastSum::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FastSum {
    path: KernelPath,
    summed: Summed,
    width: usize,
}

/// Most values a point's answer takes on a fast path: the Hessian's `6 · ncomp` for the
/// most components a fast path has (the sums are cleared per point: no more than they
/// need).
const MAX_OUT: usize = 6 * MAX_COMPONENTS;

impl FastSum {
    /// The fast path for stencils `width` wide of an operator of `terms` over `ncomp`
    /// components, if one is compiled ([`crate::engine::fast_paths`]): a field whose
    /// answer is float32 (`narrow`), the gradient, the Laplacian or the Hessian, on the
    /// paths the streaming executor takes them ([`KernelPath::selected_for`]).
    pub(crate) fn of(terms: &TermSet, narrow: bool, width: usize, ncomp: usize) -> Option<FastSum> {
        let summed = Summed::of(terms, narrow)?;
        let path = KernelPath::selected_for(summed.order()).ok()?;
        path.dispatch(Visit {
            summed,
            width,
            ncomp,
            visitor: Probe,
        })?;
        Some(FastSum {
            path,
            summed,
            width,
        })
    }

    /// Adds `scale` times the sums of the whole stencil of weights `w` whose first value
    /// is `start` in `block` to `out`; false (adding nothing) where the block's
    /// components have no compiled sum.
    #[inline]
    pub(crate) fn add(
        self,
        block: WholeStencil<'_>,
        start: usize,
        w: &[AxisWeights; 3],
        scale: f64,
        out: &mut [f64],
    ) -> bool {
        let add = AddWhole {
            block,
            start,
            w,
            scale,
            out,
        };
        // One call a point, into the path's function, where the sum is chosen.
        self.path
            .run(Visit {
                summed: self.summed,
                width: self.width,
                ncomp: block.ncomp,
                visitor: add,
            })
            .is_some()
    }

    /// Whether the sum reads a stencil's rows straight out of its atoms
    /// ([`Self::add_from_atoms`]): a field's does.
    pub(crate) fn reads_atoms(self) -> bool {
        self.summed == Summed::Field
    }

    /// Adds `scale` times the field at one point whose stencil's rows `rows` reads
    /// straight out of its atoms to `out`; false (adding nothing) where the sum is not a
    /// field's, which takes rows from a block only.
    #[inline]
    pub(crate) fn add_from_atoms(
        self,
        rows: &AtomRows<'_>,
        w: &[AxisWeights; 3],
        scale: f64,
        out: &mut [f64],
        ncomp: usize,
    ) -> bool {
        if !self.reads_atoms() {
            return false;
        }
        let add = AddFromAtoms {
            rows,
            w,
            scale,
            out,
            ncomp,
        };
        self.path
            .run(Visit {
                summed: self.summed,
                width: self.width,
                ncomp,
                visitor: add,
            })
            .is_some()
    }
}

/// [`FastSum::add_from_atoms`] as a visit of its fast path.
struct AddFromAtoms<'a, 'r, 'o> {
    rows: &'r AtomRows<'a>,
    w: &'r [AxisWeights; 3],
    scale: f64,
    out: &'o mut [f64],
    ncomp: usize,
}

impl FastVisit for AddFromAtoms<'_, '_, '_> {
    type Output = ();

    #[inline(always)]
    fn sum<S: Simd, const W: usize, const N: usize, const K: u8>(self, simd: S) {
        if K != FIELD {
            unreachable!("only a field's sum reads rows from atoms");
        }
        let w = self.w;
        let nc = self.ncomp;
        let mut sums = [0.0; MAX_COMPONENTS];
        self.rows
            .field::<S, W, N>(simd, [&w[0].w[0], &w[1].w[0], &w[2].w[0]], nc, &mut sums);
        for (o, s) in self.out[..nc].iter_mut().zip(&sums) {
            *o = self.scale.mul_add(*s, *o);
        }
    }
}

/// [`FastSum::add`] as a visit of its fast path.
struct AddWhole<'a, 'o> {
    block: WholeStencil<'a>,
    start: usize,
    w: &'a [AxisWeights; 3],
    scale: f64,
    out: &'o mut [f64],
}

impl FastVisit for AddWhole<'_, '_> {
    type Output = ();

    #[inline(always)]
    fn sum<S: Simd, const W: usize, const N: usize, const K: u8>(self, simd: S) {
        let sum = AddWholeSum::<W, N, K>(self);
        match K {
            // In the function of every other sum, the Hessian's nine sums a vector
            // spilled from the registers and it ran twice as slow as the general kernel:
            // a function of its own (one more call a point). The others are inlined (a
            // call more made the lag6 field 8 % slower).
            HESSIAN => simd.enter(sum),
            _ => sum.run(simd),
        }
    }
}

/// [`AddWhole`] with its sum chosen: a task of its own on the path.
struct AddWholeSum<'a, 'o, const W: usize, const N: usize, const K: u8>(AddWhole<'a, 'o>);

impl<const W: usize, const N: usize, const K: u8> SimdTask for AddWholeSum<'_, '_, W, N, K> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self, simd: S) {
        let AddWhole {
            block,
            start,
            w,
            scale,
            out,
        } = self.0;
        let mut sums = [0.0; MAX_OUT];
        let len = block.answer::<S, W, N, K>(simd, start, [&w[0].w, &w[1].w, &w[2].w], &mut sums);
        for (o, s) in out[..len].iter_mut().zip(&sums[..len]) {
            *o = scale.mul_add(*s, *o);
        }
    }
}

impl WholeStencil<'_> {
    /// Writes the answer of the fast path of kind `K` ([`crate::engine::fast_paths`]) at
    /// one point, `W` wide, rows of `N` vectors, to the start of `out` (`w` holds each
    /// axis's weights of orders 0 to 2); returns the values written. Only the arm of `K`
    /// is compiled.
    #[inline(always)]
    pub(crate) fn answer<S: Simd, const W: usize, const N: usize, const K: u8>(
        &self,
        simd: S,
        start: usize,
        w: [&[[f64; MAX_WIDTH]; 3]; 3],
        out: &mut [f64],
    ) -> usize {
        let nc = self.ncomp;
        match K {
            FIELD => {
                self.field::<S, W, N>(simd, start, [&w[0][0], &w[1][0], &w[2][0]], out);
                nc
            }
            GRADIENT => {
                self.gradient::<S, W, N>(simd, start, w, out);
                3 * nc
            }
            LAPLACIAN => {
                self.laplacian::<S, W, N>(simd, start, w, out);
                nc
            }
            _ => {
                // HESSIAN.
                self.hessian::<S, W, N>(simd, start, w, out);
                6 * nc
            }
        }
    }

    /// Writes the Hessian at one point to `out[6c + s]` for each component `c`, in the
    /// order xx, xy, xz, yy, yz, zz, like [`Self::derivatives`]: each row summed along z
    /// with the weights of orders 0, 1 and 2, then along y into the six (y, z) pairs of
    /// total order at most 2 ([`Self::hessian_rows`]), each weighted along x at the end.
    /// Nine sums a vector: on AVX-512 (32 registers) a whole row of up to three vectors
    /// at once, on the four-lane paths (16) one vector of it at a time.
    ///
    /// # Panics
    /// As [`Self::derivatives`].
    #[inline(always)]
    pub(crate) fn hessian<S: Simd, const W: usize, const V: usize>(
        &self,
        simd: S,
        start: usize,
        w: [&[[f64; MAX_WIDTH]; 3]; 3],
        out: &mut [f64],
    ) {
        self.assert_rows::<W>(start, V * S::LANES);
        // By term: each x node's and component's sum along z and y.
        let mut sums = [[0.0f64; MAX_LANES]; 6];
        if S::WIDE {
            self.hessian_rows::<S, W, V>(simd, start, 0, w, &mut sums);
        } else {
            for first in 0..V {
                self.hessian_rows::<S, W, 1>(simd, start, first, w, &mut sums);
            }
        }
        for (slot, (sums, &(_, _, ox))) in sums.iter().zip(&HESSIAN_TERMS).enumerate() {
            for c in 0..self.ncomp {
                out[6 * c + slot] = along_x::<W>(sums, &w[0][ox], self.ncomp, c);
            }
        }
    }

    /// [`Self::hessian`]'s sums along z and y of the `N` float64 vectors of each row from
    /// vector `first` on, written to `sums[term]` from value `first · S::LANES` on; its
    /// `9 N` sums stay in the registers.
    #[inline(always)]
    fn hessian_rows<S: Simd, const W: usize, const N: usize>(
        &self,
        simd: S,
        start: usize,
        first: usize,
        w: [&[[f64; MAX_WIDTH]; 3]; 3],
        sums: &mut [[f64; MAX_LANES]; 6],
    ) {
        let lanes = S::LANES;
        let (row, plane) = (self.row_stride, self.plane_stride);
        let [_, wy, wz] = w;
        let base = self.values.as_ptr();
        let zero = simd.splat(0.0);
        let mut terms = [[zero; N]; 6];
        for y in 0..W {
            let mut along_z = [[zero; N]; 3];
            for z in 0..W {
                // Written out, not `array::map`: a closure the compiler leaves outlined
                // cannot inline the path's intrinsics, and returns each vector in memory.
                let f = [
                    simd.splat(wz[0][z]),
                    simd.splat(wz[1][z]),
                    simd.splat(wz[2][z]),
                ];
                let r = start + z * plane + y * row + first * lanes;
                for v in 0..N {
                    // SAFETY: every row of the stencil, read to its `V` whole vectors, lies
                    // in the block ([`Self::hessian`] asserted it), and vectors
                    // `first .. first + N` are among them.
                    let x = unsafe { simd.load_f32(base.add(r + v * lanes)) };
                    for o in 0..3 {
                        along_z[o][v] = simd.mul_add(x, f[o], along_z[o][v]);
                    }
                }
            }
            let g = [
                simd.splat(wy[0][y]),
                simd.splat(wy[1][y]),
                simd.splat(wy[2][y]),
            ];
            for (sums, &(oy, oz, _)) in terms.iter_mut().zip(&HESSIAN_TERMS) {
                for v in 0..N {
                    sums[v] = simd.mul_add(along_z[oz][v], g[oy], sums[v]);
                }
            }
        }
        for (sums, vectors) in sums.iter_mut().zip(terms) {
            for (v, &s) in vectors.iter().enumerate() {
                simd.store(s, &mut sums[(first + v) * lanes..]);
            }
        }
    }
}

/// The Hessian's terms xx, xy, xz, yy, yz, zz as their (y, z) derivative orders, and the
/// x order each is weighted with.
const HESSIAN_TERMS: [(usize, usize, usize); 6] = [
    (0, 0, 2),
    (1, 0, 1),
    (0, 1, 1),
    (2, 0, 0),
    (1, 1, 0),
    (0, 2, 0),
];

impl WholeStencil<'_> {
    /// Writes the gradient at one point to `out[3c + d]`: [`Self::derivatives`] of order 1.
    #[inline(always)]
    pub(crate) fn gradient<S: Simd, const W: usize, const V: usize>(
        &self,
        simd: S,
        start: usize,
        w: [&[[f64; MAX_WIDTH]; 3]; 3],
        out: &mut [f64],
    ) {
        self.derivatives::<S, W, V, 1>(simd, start, w, out);
    }

    /// Writes the Laplacian at one point to `out[c]`: the three [`Self::derivatives`] of
    /// order 2, summed.
    ///
    /// # Panics
    /// As [`Self::derivatives`], or for more than [`MAX_COMPONENTS`] components.
    #[inline(always)]
    pub(crate) fn laplacian<S: Simd, const W: usize, const V: usize>(
        &self,
        simd: S,
        start: usize,
        w: [&[[f64; MAX_WIDTH]; 3]; 3],
        out: &mut [f64],
    ) {
        let mut terms = [0.0; 3 * MAX_COMPONENTS];
        self.derivatives::<S, W, V, 2>(simd, start, w, &mut terms);
        for (c, out) in out[..self.ncomp].iter_mut().enumerate() {
            *out = terms[3 * c] + terms[3 * c + 1] + terms[3 * c + 2];
        }
    }
}

/// `Σ_k wx[k] · sums[k·nc + c]` over the `W` x nodes of a row's sums (nodes times
/// `nc` components): component `c` of one derivative term, weighted along x.
#[inline(always)]
fn along_x<const W: usize>(sums: &[f64], wx: &[f64; MAX_WIDTH], nc: usize, c: usize) -> f64 {
    let mut sum = 0.0;
    for k in 0..W {
        sum += wx[k] * sums[k * nc + c];
    }
    sum
}

/// Writes `Σ_k wx[k] · row_sums[k·NC + c]` to `out[c]` for each component `c`.
#[inline(always)]
fn fold_x<const NC: usize>(row_sums: &[f64; MAX_LANES], wx: &[f64], out: &mut [f64]) {
    let mut sums = [0.0f64; NC];
    for (k, &weight) in wx.iter().enumerate() {
        for c in 0..NC {
            sums[c] += weight * row_sums[k * NC + c];
        }
    }
    out[..NC].copy_from_slice(&sums);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::accumulate::PADDING;
    use crate::engine::simd::KernelPath;

    #[test]
    fn only_float32_answers_take_the_field_fast_path_and_derivatives_have_one_on_every_simd_path() {
        use crate::interp::method::Operator;
        let terms = |op: Operator| TermSet::new(op.terms(), op.slots());
        let (field, gradient) = (terms(Operator::Field), terms(Operator::Gradient));
        let (laplacian, hessian) = (terms(Operator::Laplacian), terms(Operator::Hessian));
        // The derivatives of vectors on every SIMD path (their rows summed in parts on the
        // four-lane ones).
        let vector = KernelPath::supported()
            .into_iter()
            .any(|path| path != KernelPath::Portable);
        for width in [4, 6, 8] {
            assert!(FastSum::of(&field, true, width, 3).is_some());
            assert!(FastSum::of(&field, false, width, 3).is_none());
            assert_eq!(FastSum::of(&gradient, false, width, 3).is_some(), vector);
            assert_eq!(FastSum::of(&laplacian, true, width, 3).is_some(), vector);
            assert_eq!(FastSum::of(&hessian, false, width, 3).is_some(), vector);
        }
        // A row longer than the widest path's registers hold.
        assert!(FastSum::of(&field, true, 8, 7).is_none());
    }

    /// `Σ wx wy wz f` node by node, in float64, for each component.
    fn triple_sum(
        block: &WholeStencil<'_>,
        start: usize,
        w: [&[f64; MAX_WIDTH]; 3],
        width: usize,
    ) -> Vec<f64> {
        (0..block.ncomp)
            .map(|c| {
                let mut sum = 0.0;
                for z in 0..width {
                    for y in 0..width {
                        for x in 0..width {
                            let at = start
                                + z * block.plane_stride
                                + y * block.row_stride
                                + x * block.ncomp
                                + c;
                            sum += w[0][x] * w[1][y] * w[2][z] * f64::from(block.values[at]);
                        }
                    }
                }
                sum
            })
            .collect()
    }

    /// The values of a block of 13 × 11 × 10 nodes with planes padded by `pad` nodes, of
    /// mixed signs (from `prime`), and its rows and planes in values.
    fn test_block(ncomp: usize, pad: usize, prime: usize) -> (Vec<f32>, usize, usize) {
        let (nx, ny, nz) = NODES;
        let (row, plane) = (nx * ncomp, (nx * ny + pad) * ncomp);
        let values = (0..nz * plane + PADDING)
            .map(|i| ((i * prime % 1000) as f32 / 500.0 - 1.0) * 3.0)
            .collect();
        (values, row, plane)
    }

    /// Nodes of [`test_block`] along x, y and z.
    const NODES: (usize, usize, usize) = (13, 11, 10);

    /// Where the stencils of the tests start: at the block's first node, at its last
    /// corner, and inside.
    fn corners(width: usize) -> [[usize; 3]; 3] {
        let (nx, ny, nz) = NODES;
        [[0, 0, 0], [nx - width, ny - width, nz - width], [1, 2, 1]]
    }

    /// One point's answer on the fast path [`crate::engine::fast_paths::visit`] chose.
    struct Answer<'a> {
        block: WholeStencil<'a>,
        start: usize,
        w: [&'a [[f64; MAX_WIDTH]; 3]; 3],
    }

    impl FastVisit for Answer<'_> {
        type Output = Vec<f64>;

        fn sum<S: Simd, const W: usize, const N: usize, const K: u8>(self, simd: S) -> Vec<f64> {
            let mut out = vec![0.0; 6 * self.block.ncomp];
            let len = self
                .block
                .answer::<S, W, N, K>(simd, self.start, self.w, &mut out);
            out.truncate(len);
            out
        }
    }

    /// The triple sums the answer of a fast path of `summed` must be, point-major:
    /// `Σ wx wy wz f` with the weights of each term's orders along x, y and z.
    fn expected(
        block: &WholeStencil<'_>,
        start: usize,
        weights: &[[[f64; MAX_WIDTH]; 3]; 3],
        summed: Summed,
        width: usize,
    ) -> Vec<f64> {
        // Each answer value's terms, as orders along (x, y, z), summed.
        let terms: Vec<Vec<[usize; 3]>> = match summed {
            Summed::Field => vec![vec![[0, 0, 0]]],
            Summed::Gradient => vec![vec![[1, 0, 0]], vec![[0, 1, 0]], vec![[0, 0, 1]]],
            Summed::Laplacian => vec![vec![[2, 0, 0], [0, 2, 0], [0, 0, 2]]],
            Summed::Hessian => [
                [2, 0, 0],
                [1, 1, 0],
                [1, 0, 1],
                [0, 2, 0],
                [0, 1, 1],
                [0, 0, 2],
            ]
            .map(|o| vec![o])
            .to_vec(),
        };
        let by_term: Vec<Vec<f64>> = terms
            .iter()
            .map(|sum| {
                let parts: Vec<Vec<f64>> = sum
                    .iter()
                    .map(|o| {
                        let w = [&weights[0][o[0]], &weights[1][o[1]], &weights[2][o[2]]];
                        triple_sum(block, start, w, width)
                    })
                    .collect();
                (0..block.ncomp)
                    .map(|c| parts.iter().map(|p| p[c]).sum())
                    .collect()
            })
            .collect();
        (0..block.ncomp)
            .flat_map(|c| by_term.iter().map(move |sums| sums[c]))
            .collect()
    }

    #[test]
    fn every_compiled_fast_path_gives_the_triple_sums_and_fields_of_1_and_3_components_have_one() {
        let weights: [[[f64; MAX_WIDTH]; 3]; 3] = std::array::from_fn(|a| {
            std::array::from_fn(|o| {
                std::array::from_fn(|k| ((k * 29 + a * 7 + o * 13) % 19) as f64 / 9.0 - 1.0)
            })
        });
        let w = [&weights[0], &weights[1], &weights[2]];
        let mut compiled = Vec::new();
        for ncomp in 1..=4 {
            let (values, row, plane) = test_block(ncomp, 3, 6007);
            let block = WholeStencil {
                values: &values,
                row_stride: row,
                plane_stride: plane,
                ncomp,
            };
            for summed in [
                Summed::Field,
                Summed::Gradient,
                Summed::Laplacian,
                Summed::Hessian,
            ] {
                // A field's sums along z and y are float32.
                let tolerance = if summed == Summed::Field { 2e-6 } else { 1e-12 };
                for width in [4, 6, 8] {
                    for corner in corners(width) {
                        let start = corner[2] * plane + corner[1] * row + corner[0] * ncomp;
                        let expected = expected(&block, start, &weights, summed, width);
                        let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                        for path in KernelPath::supported() {
                            let visit = Visit {
                                summed,
                                width,
                                ncomp,
                                visitor: Answer { block, start, w },
                            };
                            let Some(got) = path.run(visit) else { continue };
                            compiled.push((path, summed, width, ncomp));
                            assert_eq!(got.len(), expected.len());
                            for (g, e) in got.iter().zip(&expected) {
                                assert!(
                                    (g - e).abs() <= tolerance * scale,
                                    "{} {summed:?} W={width} nc={ncomp}: {g} vs {e}",
                                    path.name()
                                );
                            }
                        }
                    }
                }
            }
        }
        for path in KernelPath::supported() {
            let has = |summed, width, ncomp| compiled.contains(&(path, summed, width, ncomp));
            // The portable path is the general kernel's alone.
            let vector = path != KernelPath::Portable;
            for width in [4, 6, 8] {
                assert_eq!(has(Summed::Field, width, 1), vector, "{}", path.name());
                assert_eq!(has(Summed::Field, width, 3), vector, "{}", path.name());
                assert!(!has(Summed::Field, width, 4), "{}", path.name());
            }
            // Every derivative of scalars and vectors, at every width (summed in parts on
            // the four-lane paths), and none for four components.
            for summed in [Summed::Gradient, Summed::Laplacian, Summed::Hessian] {
                for width in [4, 6, 8] {
                    assert_eq!(has(summed, width, 1), vector, "{}", path.name());
                    assert_eq!(has(summed, width, 3), vector, "{}", path.name());
                    assert!(!has(summed, width, 4), "{}", path.name());
                }
            }
        }
    }
}
