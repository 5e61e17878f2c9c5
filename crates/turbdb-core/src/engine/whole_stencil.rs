//! The kernel's fast paths for the commonest sums: a field's value (float32 answers) and
//! the gradient, at a point whose whole stencil lies in one float32 block — every point of
//! the streaming executor, whose cell blocks hold their halo. The stencil's width `W` and
//! the row's vector count are constants, so every loop unrolls and every sum stays in a
//! register, with none of the general kernel's runs, bounds and dispatch per point
//! ([`crate::engine::accumulate`]).
//!
//! For a field each row (an x run of `W` nodes, all components) is summed along z and then
//! y in float32, widened once and weighted along x in float64. The float32 sums add a few
//! roundings of 6e-8 of the field's magnitude, of the order of the float32 answer's own
//! rounding; float64 answers take the general kernel, whose sums are all float64. The
//! gradient keeps every sum in float64 (its sums cancel).

use std::marker::PhantomData;

use crate::engine::accumulate::{Block, TermSet};
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

    /// Float32 vectors a row of a width-`width` stencil takes on a path of `lanes` float64
    /// lanes (twice as many float32 lanes): the field's `H`.
    pub(crate) fn vectors(&self, lanes: usize, width: usize) -> usize {
        (width * self.ncomp).div_ceil(2 * lanes)
    }

    /// Float64 vectors the same row takes, widened: the gradient's `V`.
    pub(crate) fn wide_vectors(&self, lanes: usize, width: usize) -> usize {
        (width * self.ncomp).div_ceil(lanes)
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
        let lanes = 2 * S::LANES;
        assert!(W <= MAX_WIDTH && 2 * H * S::LANES <= MAX_LANES && W * self.ncomp <= H * lanes);
        let (row, plane) = (self.row_stride, self.plane_stride);
        assert!(
            start + (W - 1) * (plane + row) + H * lanes <= self.values.len(),
            "a block must hold PADDING values past its end"
        );
        let [wx, wy, wz] = w;
        let wz: [f32; W] = std::array::from_fn(|k| wz[k] as f32);
        let base = self.values.as_ptr();
        let mut sums = [simd.splat_narrow(0.0); H];
        // Two y rows at a time, so 2 · H z sums are in flight and the multiply-adds do not
        // wait on each other.
        for y in (0..W).step_by(2) {
            let pair = y + 1 < W;
            let mut a = [simd.splat_narrow(0.0); H];
            let mut b = [simd.splat_narrow(0.0); H];
            for (z, &wz) in wz.iter().enumerate() {
                let f = simd.splat_narrow(wz);
                let ra = start + z * plane + y * row;
                let rb = ra + if pair { row } else { 0 };
                for h in 0..H {
                    // SAFETY: every row of the stencil, read to `H` whole vectors, lies in
                    // the block (asserted above).
                    let (xa, xb) = unsafe {
                        (
                            simd.load_narrow(base.add(ra + h * lanes)),
                            simd.load_narrow(base.add(rb + h * lanes)),
                        )
                    };
                    a[h] = simd.mul_add_narrow(xa, f, a[h]);
                    b[h] = simd.mul_add_narrow(xb, f, b[h]);
                }
            }
            let fa = simd.splat_narrow(wy[y] as f32);
            for h in 0..H {
                sums[h] = simd.mul_add_narrow(a[h], fa, sums[h]);
            }
            if pair {
                let fb = simd.splat_narrow(wy[y + 1] as f32);
                for h in 0..H {
                    sums[h] = simd.mul_add_narrow(b[h], fb, sums[h]);
                }
            }
        }
        let mut row_sums = [0.0f64; MAX_LANES];
        for (h, &s) in sums.iter().enumerate() {
            let [low, high] = simd.widen(s);
            simd.store(low, &mut row_sums[2 * h * S::LANES..]);
            simd.store(high, &mut row_sums[(2 * h + 1) * S::LANES..]);
        }
        match self.ncomp {
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
}

impl WholeStencil<'_> {
    /// Writes the `D`-th derivatives along each axis at one point to `out[3c + d]` for each
    /// component `c` and axis `d` — the gradient for `D` = 1, the Laplacian's terms for
    /// `D` = 2 — like [`Self::field`] (`w` holds each axis's weights of orders 0 to 2),
    /// with every sum in float64: each row is widened as it is read, summed along z with
    /// the value and derivative weights, then along y into the three (y, z) pairs the
    /// derivatives need. `V` float64 vectors a row; the `5 V` sums must fit the path's
    /// registers (AVX-512 has 32).
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
        let lanes = S::LANES;
        assert!(W <= MAX_WIDTH && V * lanes <= MAX_LANES && W * self.ncomp <= V * lanes);
        let (row, plane) = (self.row_stride, self.plane_stride);
        assert!(
            start + (W - 1) * (plane + row) + V * lanes <= self.values.len(),
            "a block must hold PADDING values past its end"
        );
        let [wx, wy, wz] = w;
        let base = self.values.as_ptr();
        let zero = simd.splat(0.0);
        // The (y, z) orders (0, 0), (D, 0) and (0, D): along x, y and z before x.
        let (mut flat, mut along_y, mut along_z) = ([zero; V], [zero; V], [zero; V]);
        for y in 0..W {
            let (mut value, mut slope) = ([zero; V], [zero; V]);
            for z in 0..W {
                let (f0, f1) = (simd.splat(wz[0][z]), simd.splat(wz[D][z]));
                let r = start + z * plane + y * row;
                for v in 0..V {
                    // SAFETY: every row of the stencil, read to `V` whole vectors, lies
                    // in the block (asserted above).
                    let x = unsafe { simd.load_f32(base.add(r + v * lanes)) };
                    value[v] = simd.mul_add(x, f0, value[v]);
                    slope[v] = simd.mul_add(x, f1, slope[v]);
                }
            }
            let (g0, g1) = (simd.splat(wy[0][y]), simd.splat(wy[D][y]));
            for v in 0..V {
                flat[v] = simd.mul_add(value[v], g0, flat[v]);
                along_y[v] = simd.mul_add(value[v], g1, along_y[v]);
                along_z[v] = simd.mul_add(slope[v], g0, along_z[v]);
            }
        }
        let nc = self.ncomp;
        for (d, (sums, wx)) in [(flat, &wx[D]), (along_y, &wx[0]), (along_z, &wx[0])]
            .into_iter()
            .enumerate()
        {
            let mut row_sums = [0.0f64; MAX_LANES];
            for (v, &s) in sums.iter().enumerate() {
                simd.store(s, &mut row_sums[v * lanes..]);
            }
            for c in 0..nc {
                let mut sum = 0.0;
                for k in 0..W {
                    sum += wx[k] * row_sums[k * nc + c];
                }
                out[3 * c + d] = sum;
            }
        }
    }
}

impl WholeStencil<'_> {
    /// Writes the Hessian at one point to `out[6c + s]` for each component `c`, in the
    /// order xx, xy, xz, yy, yz, zz, like [`Self::derivatives`]: each row summed along z
    /// with the weights of orders 0, 1 and 2, then along y into the six (y, z) pairs of
    /// total order at most 2, each weighted along x at the end. Its `9 V` sums fit
    /// AVX-512's 32 registers for `V` up to 3, the 16 of the other paths for `V` = 1.
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
        let lanes = S::LANES;
        assert!(W <= MAX_WIDTH && V * lanes <= MAX_LANES && W * self.ncomp <= V * lanes);
        let (row, plane) = (self.row_stride, self.plane_stride);
        assert!(
            start + (W - 1) * (plane + row) + V * lanes <= self.values.len(),
            "a block must hold PADDING values past its end"
        );
        let [wx, wy, wz] = w;
        let base = self.values.as_ptr();
        let zero = simd.splat(0.0);
        // The (y, z) orders of the six terms, and the x order each is weighted with.
        const PAIRS: [(usize, usize, usize); 6] =
            [(0, 0, 2), (1, 0, 1), (0, 1, 1), (2, 0, 0), (1, 1, 0), (0, 2, 0)];
        let mut pairs = [[zero; V]; 6];
        for y in 0..W {
            let mut along_z = [[zero; V]; 3];
            for z in 0..W {
                // Written out, not `array::map`: a closure the compiler leaves outlined
                // cannot inline the path's intrinsics, and returns each vector in memory.
                let f = [
                    simd.splat(wz[0][z]),
                    simd.splat(wz[1][z]),
                    simd.splat(wz[2][z]),
                ];
                let r = start + z * plane + y * row;
                for v in 0..V {
                    // SAFETY: every row of the stencil, read to `V` whole vectors, lies
                    // in the block (asserted above).
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
            for (sums, &(oy, oz, _)) in pairs.iter_mut().zip(&PAIRS) {
                for v in 0..V {
                    sums[v] = simd.mul_add(along_z[oz][v], g[oy], sums[v]);
                }
            }
        }
        let nc = self.ncomp;
        for (slot, (sums, &(_, _, ox))) in pairs.iter().zip(&PAIRS).enumerate() {
            let mut row_sums = [0.0f64; MAX_LANES];
            for (v, &s) in sums.iter().enumerate() {
                simd.store(s, &mut row_sums[v * lanes..]);
            }
            for c in 0..nc {
                let mut sum = 0.0;
                for k in 0..W {
                    sum += wx[ox][k] * row_sums[k * nc + c];
                }
                out[6 * c + slot] = sum;
            }
        }
    }
}

/// The fast path that sums a query's stencils one point at a time (the node engine's
/// batches, whose points come one by one from home blocks and gathered stencils), chosen
/// once per query by [`FastSum::of`]. Each (operator, width, row) is a task of its own,
/// compiled for the path alone: one task for all of them held every variant's sums in
/// one stack frame and ran the Hessian twice as slow as the general kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FastSum {
    path: KernelPath,
    operator: Summed,
    width: usize,
    /// Vectors a row takes on the path: float32 ones for a field, float64 ones else.
    vectors: usize,
}

/// The operators with fast paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Summed {
    Field,
    Gradient,
    Laplacian,
    Hessian,
}

/// Most values a point's answer takes on a fast path: the Hessian's `6 · ncomp`, with
/// `ncomp · W` at most [`MAX_LANES`] and `W` at least 4.
const MAX_OUT: usize = 6 * (MAX_LANES / 4);

/// Expands `$compiled!(Kind, W, V)` for `$fast`'s operator, width and row where that sum
/// is compiled, else `$else`.
macro_rules! with_compiled {
    ($fast:expr, $compiled:ident, $else:expr) => {{
        use Summed::*;
        // The derivatives' `5 V` sums (the Hessian's `9 V`) fit AVX-512's 32 registers
        // for `V` up to 3, the 16 of the other paths for `V` up to 2 (1).
        let wide = $fast.path == KernelPath::Avx512;
        match ($fast.operator, $fast.width, $fast.vectors) {
            (Field, 4, 1) => $compiled!(FieldSum, 4, 1),
            (Field, 4, 2) => $compiled!(FieldSum, 4, 2),
            (Field, 6, 1) => $compiled!(FieldSum, 6, 1),
            (Field, 6, 2) => $compiled!(FieldSum, 6, 2),
            (Field, 6, 3) => $compiled!(FieldSum, 6, 3),
            (Field, 8, 1) => $compiled!(FieldSum, 8, 1),
            (Field, 8, 2) => $compiled!(FieldSum, 8, 2),
            (Field, 8, 3) => $compiled!(FieldSum, 8, 3),
            (Gradient, 4, 1) => $compiled!(GradientSum, 4, 1),
            (Gradient, 4, 2) => $compiled!(GradientSum, 4, 2),
            (Gradient, 4, 3) if wide => $compiled!(GradientSum, 4, 3),
            (Gradient, 6, 2) => $compiled!(GradientSum, 6, 2),
            (Gradient, 6, 3) if wide => $compiled!(GradientSum, 6, 3),
            (Gradient, 8, 2) => $compiled!(GradientSum, 8, 2),
            (Gradient, 8, 3) if wide => $compiled!(GradientSum, 8, 3),
            (Laplacian, 4, 1) => $compiled!(LaplacianSum, 4, 1),
            (Laplacian, 4, 2) => $compiled!(LaplacianSum, 4, 2),
            (Laplacian, 4, 3) if wide => $compiled!(LaplacianSum, 4, 3),
            (Laplacian, 6, 2) => $compiled!(LaplacianSum, 6, 2),
            (Laplacian, 6, 3) if wide => $compiled!(LaplacianSum, 6, 3),
            (Laplacian, 8, 2) => $compiled!(LaplacianSum, 8, 2),
            (Laplacian, 8, 3) if wide => $compiled!(LaplacianSum, 8, 3),
            (Hessian, 4, 1) => $compiled!(HessianSum, 4, 1),
            (Hessian, 4, 2) if wide => $compiled!(HessianSum, 4, 2),
            (Hessian, 4, 3) if wide => $compiled!(HessianSum, 4, 3),
            (Hessian, 6, 2) if wide => $compiled!(HessianSum, 6, 2),
            (Hessian, 6, 3) if wide => $compiled!(HessianSum, 6, 3),
            (Hessian, 8, 2) if wide => $compiled!(HessianSum, 8, 2),
            (Hessian, 8, 3) if wide => $compiled!(HessianSum, 8, 3),
            _ => $else,
        }
    }};
}

impl FastSum {
    /// The fast path for stencils `width` wide of an operator of `terms` over `ncomp`
    /// components, if one is compiled: a field whose answer is float32 (`narrow`: its sums
    /// along z and y may run in float32, [`TermSet::narrow`]), the gradient, the Laplacian
    /// or the Hessian (whose sums are all float64), on the paths the streaming executor
    /// takes them ([`KernelPath::selected_for`]).
    pub(crate) fn of(terms: &TermSet, narrow: bool, width: usize, ncomp: usize) -> Option<FastSum> {
        let (operator, order) = if narrow && terms.is_field() {
            (Summed::Field, 0)
        } else if terms.is_gradient() {
            (Summed::Gradient, 1)
        } else if terms.is_laplacian() {
            (Summed::Laplacian, 2)
        } else if terms.is_hessian() {
            (Summed::Hessian, 2)
        } else {
            return None;
        };
        if ncomp * width > MAX_LANES || ncomp * terms.slots() > MAX_OUT {
            return None;
        }
        let path = KernelPath::selected_for(order).ok()?;
        // A field's rows are float32 vectors, of twice the float64 lanes.
        let lanes = path.lanes() * if operator == Summed::Field { 2 } else { 1 };
        let fast = FastSum {
            path,
            operator,
            width,
            vectors: (width * ncomp).div_ceil(lanes),
        };
        macro_rules! compiled {
            ($kind:ty, $w:literal, $v:literal) => {
                Some(fast)
            };
        }
        with_compiled!(fast, compiled, None)
    }

    /// Adds `scale` times the sums of the whole stencil of weights `w` whose first value
    /// is `start` in `block` to `out`.
    #[inline]
    pub(crate) fn add(
        self,
        block: WholeStencil<'_>,
        start: usize,
        w: &[AxisWeights; 3],
        scale: f64,
        out: &mut [f64],
    ) {
        macro_rules! run {
            ($kind:ty, $w:literal, $v:literal) => {
                self.path.run(AddWhole::<$kind, $w, $v> {
                    block,
                    start,
                    w,
                    scale,
                    out,
                    kind: PhantomData,
                })
            };
        }
        with_compiled!(self, run, unreachable!("FastSum::of gives compiled sums only"))
    }
}

/// One operator's sums of a whole stencil: [`WholeStencil`]'s method for it.
trait WholeSum {
    /// Values a component.
    const SLOTS: usize;
    /// Writes the sums at one point to `out`, `W` nodes wide, rows of `V` vectors.
    fn sum<S: Simd, const W: usize, const V: usize>(
        block: &WholeStencil<'_>,
        simd: S,
        start: usize,
        w: &[AxisWeights; 3],
        out: &mut [f64],
    );
}

struct FieldSum;
struct GradientSum;
struct LaplacianSum;
struct HessianSum;

impl WholeSum for FieldSum {
    const SLOTS: usize = 1;
    #[inline(always)]
    fn sum<S: Simd, const W: usize, const V: usize>(
        block: &WholeStencil<'_>,
        simd: S,
        start: usize,
        w: &[AxisWeights; 3],
        out: &mut [f64],
    ) {
        block.field::<S, W, V>(simd, start, [0, 1, 2].map(|a| &w[a].w[0]), out);
    }
}

/// The derivatives' sums: `$method` of [`WholeStencil`], `$slots` values a component.
macro_rules! derivative_sum {
    ($kind:ty, $method:ident, $slots:literal) => {
        impl WholeSum for $kind {
            const SLOTS: usize = $slots;
            #[inline(always)]
            fn sum<S: Simd, const W: usize, const V: usize>(
                block: &WholeStencil<'_>,
                simd: S,
                start: usize,
                w: &[AxisWeights; 3],
                out: &mut [f64],
            ) {
                block.$method::<S, W, V>(simd, start, [0, 1, 2].map(|a| &w[a].w), out);
            }
        }
    };
}
derivative_sum!(GradientSum, gradient, 3);
derivative_sum!(LaplacianSum, laplacian, 1);
derivative_sum!(HessianSum, hessian, 6);

/// [`FastSum::add`] of operator `K`, `W` nodes wide, rows of `V` vectors, as a task on its
/// path.
struct AddWhole<'a, 'o, K, const W: usize, const V: usize> {
    block: WholeStencil<'a>,
    start: usize,
    w: &'a [AxisWeights; 3],
    scale: f64,
    out: &'o mut [f64],
    kind: PhantomData<K>,
}

impl<K: WholeSum, const W: usize, const V: usize> SimdTask for AddWhole<'_, '_, K, W, V> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self, simd: S) {
        let mut sums = [0.0; MAX_OUT];
        K::sum::<S, W, V>(&self.block, simd, self.start, self.w, &mut sums);
        let len = K::SLOTS * self.block.ncomp;
        for (o, s) in self.out[..len].iter_mut().zip(&sums[..len]) {
            *o = self.scale.mul_add(*s, *o);
        }
    }
}

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
    #[inline(always)]
    pub(crate) fn laplacian<S: Simd, const W: usize, const V: usize>(
        &self,
        simd: S,
        start: usize,
        w: [&[[f64; MAX_WIDTH]; 3]; 3],
        out: &mut [f64],
    ) {
        let mut terms = [0.0; MAX_LANES];
        self.derivatives::<S, W, V, 2>(simd, start, w, &mut terms);
        for (c, out) in out[..self.ncomp].iter_mut().enumerate() {
            *out = terms[3 * c] + terms[3 * c + 1] + terms[3 * c + 2];
        }
    }
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
    use crate::engine::simd::{KernelPath, SimdTask};

    #[test]
    fn only_float32_answers_take_the_field_fast_path_and_derivatives_need_avx512_for_three_components() {
        use crate::interp::method::Operator;
        let terms = |op: Operator| TermSet::new(op.terms(), op.slots());
        let (field, gradient) = (terms(Operator::Field), terms(Operator::Gradient));
        let laplacian = terms(Operator::Laplacian);
        // Three components' rows of derivatives fit the registers on AVX-512 alone.
        let wide = KernelPath::Avx512.is_supported();
        for width in [4, 6, 8] {
            assert!(FastSum::of(&field, true, width, 3).is_some());
            assert!(FastSum::of(&field, false, width, 3).is_none());
            assert_eq!(FastSum::of(&gradient, false, width, 3).is_some(), wide);
            assert_eq!(FastSum::of(&laplacian, true, width, 3).is_some(), wide);
        }
        assert_eq!(FastSum::of(&terms(Operator::Hessian), true, 8, 3).is_some(), wide);
        // A row longer than the widest path's registers hold.
        assert!(FastSum::of(&field, true, 8, 7).is_none());
    }

    /// One point's field on a path, as a task.
    struct Field<'a, const W: usize, const H: usize> {
        block: WholeStencil<'a>,
        start: usize,
        w: [&'a [f64; MAX_WIDTH]; 3],
    }

    impl<const W: usize, const H: usize> SimdTask for Field<'_, W, H> {
        type Output = Vec<f64>;
        fn run<S: Simd>(self, simd: S) -> Vec<f64> {
            let mut out = vec![0.0; self.block.ncomp];
            self.block
                .field::<S, W, H>(simd, self.start, self.w, &mut out);
            out
        }
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

    fn check<const W: usize, const H: usize>(ncomp: usize) {
        let (values, row, plane) = test_block(ncomp, 5, 7919);
        let block = WholeStencil {
            values: &values,
            row_stride: row,
            plane_stride: plane,
            ncomp,
        };
        let weights: [[f64; MAX_WIDTH]; 3] = std::array::from_fn(|a| {
            std::array::from_fn(|k| ((k * 37 + a * 11) % 17) as f64 / 8.0 - 1.0)
        });
        let w = [&weights[0], &weights[1], &weights[2]];
        for corner in corners(W) {
            let start = corner[2] * plane + corner[1] * row + corner[0] * ncomp;
            let expected = triple_sum(&block, start, w, W);
            let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for path in KernelPath::supported() {
                if block.vectors(path.lanes(), W) != H {
                    continue;
                }
                let got = path.run(Field::<W, H> { block, start, w });
                for (g, e) in got.iter().zip(&expected) {
                    assert!(
                        (g - e).abs() <= 2e-6 * scale,
                        "{} W={W} nc={ncomp}: {g} vs {e}",
                        path.name()
                    );
                }
            }
        }
    }

    /// One point's derivatives of order `D` on a path, as a task.
    struct Derivatives<'a, const W: usize, const V: usize, const D: usize> {
        block: WholeStencil<'a>,
        start: usize,
        w: [&'a [[f64; MAX_WIDTH]; 3]; 3],
    }

    impl<const W: usize, const V: usize, const D: usize> SimdTask for Derivatives<'_, W, V, D> {
        type Output = Vec<f64>;
        fn run<S: Simd>(self, simd: S) -> Vec<f64> {
            let mut out = vec![0.0; 3 * self.block.ncomp];
            self.block
                .derivatives::<S, W, V, D>(simd, self.start, self.w, &mut out);
            out
        }
    }

    fn check_gradient<const W: usize, const V: usize>(ncomp: usize) {
        check_derivatives::<W, V, 1>(ncomp);
        check_derivatives::<W, V, 2>(ncomp);
    }

    fn check_derivatives<const W: usize, const V: usize, const D: usize>(ncomp: usize) {
        let (values, row, plane) = test_block(ncomp, 3, 6007);
        let block = WholeStencil {
            values: &values,
            row_stride: row,
            plane_stride: plane,
            ncomp,
        };
        let weights: [[[f64; MAX_WIDTH]; 3]; 3] = std::array::from_fn(|a| {
            std::array::from_fn(|o| {
                std::array::from_fn(|k| ((k * 29 + a * 7 + o * 13) % 19) as f64 / 9.0 - 1.0)
            })
        });
        let w = [&weights[0], &weights[1], &weights[2]];
        for corner in corners(W) {
            let start = corner[2] * plane + corner[1] * row + corner[0] * ncomp;
            // Along x, y, z: derivative weights along one axis, values along the others;
            // the answer is `[c * 3 + d]`.
            let by_derivative: Vec<Vec<f64>> = (0..3)
                .map(|d| {
                    let along = |axis: usize| &weights[axis][if axis == d { D } else { 0 }];
                    triple_sum(&block, start, [along(0), along(1), along(2)], W)
                })
                .collect();
            let expected: Vec<f64> = (0..ncomp)
                .flat_map(|c| by_derivative.iter().map(move |sums| sums[c]))
                .collect();
            let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for path in KernelPath::supported() {
                if block.wide_vectors(path.lanes(), W) != V {
                    continue;
                }
                let got = path.run(Derivatives::<W, V, D> { block, start, w });
                for (g, e) in got.iter().zip(&expected) {
                    assert!(
                        (g - e).abs() <= 1e-12 * scale,
                        "{} W={W} D={D} nc={ncomp}: {g} vs {e}",
                        path.name()
                    );
                }
            }
        }
    }

    /// One point's Hessian on a path, as a task.
    struct Hessian<'a, const W: usize, const V: usize> {
        block: WholeStencil<'a>,
        start: usize,
        w: [&'a [[f64; MAX_WIDTH]; 3]; 3],
    }

    impl<const W: usize, const V: usize> SimdTask for Hessian<'_, W, V> {
        type Output = Vec<f64>;
        fn run<S: Simd>(self, simd: S) -> Vec<f64> {
            let mut out = vec![0.0; 6 * self.block.ncomp];
            self.block
                .hessian::<S, W, V>(simd, self.start, self.w, &mut out);
            out
        }
    }

    fn check_hessian<const W: usize, const V: usize>(ncomp: usize) {
        let (values, row, plane) = test_block(ncomp, 2, 4481);
        let block = WholeStencil {
            values: &values,
            row_stride: row,
            plane_stride: plane,
            ncomp,
        };
        let weights: [[[f64; MAX_WIDTH]; 3]; 3] = std::array::from_fn(|a| {
            std::array::from_fn(|o| {
                std::array::from_fn(|k| ((k * 31 + a * 11 + o * 17) % 23) as f64 / 11.0 - 1.0)
            })
        });
        let w = [&weights[0], &weights[1], &weights[2]];
        // The orders along x, y, z of xx, xy, xz, yy, yz, zz.
        let orders = [[2, 0, 0], [1, 1, 0], [1, 0, 1], [0, 2, 0], [0, 1, 1], [0, 0, 2]];
        for corner in corners(W) {
            let start = corner[2] * plane + corner[1] * row + corner[0] * ncomp;
            let by_term: Vec<Vec<f64>> = orders
                .iter()
                .map(|o| triple_sum(&block, start, [0, 1, 2].map(|a| &weights[a][o[a]]), W))
                .collect();
            let expected: Vec<f64> = (0..ncomp)
                .flat_map(|c| by_term.iter().map(move |sums| sums[c]))
                .collect();
            let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for path in KernelPath::supported() {
                if block.wide_vectors(path.lanes(), W) != V {
                    continue;
                }
                let got = path.run(Hessian::<W, V> { block, start, w });
                for (g, e) in got.iter().zip(&expected) {
                    assert!(
                        (g - e).abs() <= 1e-12 * scale,
                        "{} W={W} nc={ncomp}: {g} vs {e}",
                        path.name()
                    );
                }
            }
        }
    }

    #[test]
    fn every_compiled_hessian_gives_the_triple_sums_on_every_path() {
        for ncomp in 1..=3 {
            check_hessian::<4, 1>(ncomp);
            check_hessian::<4, 2>(ncomp);
            check_hessian::<4, 3>(ncomp);
            check_hessian::<6, 2>(ncomp);
            check_hessian::<6, 3>(ncomp);
            check_hessian::<8, 2>(ncomp);
            check_hessian::<8, 3>(ncomp);
        }
    }

    #[test]
    fn every_compiled_gradient_and_laplacian_gives_the_triple_sums_on_every_path() {
        for ncomp in 1..=3 {
            check_gradient::<4, 1>(ncomp);
            check_gradient::<4, 2>(ncomp);
            check_gradient::<4, 3>(ncomp);
            check_gradient::<6, 2>(ncomp);
            check_gradient::<6, 3>(ncomp);
            check_gradient::<8, 2>(ncomp);
            check_gradient::<8, 3>(ncomp);
        }
    }

    #[test]
    fn every_compiled_width_and_row_gives_the_triple_sum_on_every_path() {
        for ncomp in 1..=4 {
            check::<4, 1>(ncomp);
            check::<4, 2>(ncomp);
            check::<6, 1>(ncomp);
            check::<6, 2>(ncomp);
            check::<6, 3>(ncomp);
            check::<8, 1>(ncomp);
            check::<8, 2>(ncomp);
            check::<8, 3>(ncomp);
        }
    }
}
