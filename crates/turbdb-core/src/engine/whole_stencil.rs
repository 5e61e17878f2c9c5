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

/// The fast path that sums a query's stencils one point at a time (the node engine's
/// batches, whose points come one by one from home blocks and gathered stencils), chosen
/// once per query by [`FastSum::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FastSum {
    path: KernelPath,
    operator: Summed,
    width: usize,
}

/// The operators with fast paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Summed {
    Field,
    Gradient,
    Laplacian,
}

/// Most values a point's answer takes on a fast path: the gradient's `3 · ncomp`, with
/// `ncomp · W` at most [`MAX_LANES`] and `W` at least 4 (the sums are cleared per point:
/// no more than they need).
const MAX_OUT: usize = 3 * (MAX_LANES / 4);

impl FastSum {
    /// The fast path for stencils `width` wide of an operator of `terms` over `ncomp`
    /// components, if one is compiled: a field whose answer is float32 (`narrow`: its sums
    /// along z and y may run in float32, [`TermSet::narrow`]), the gradient or the
    /// Laplacian (whose sums are all float64), on the paths the streaming executor takes
    /// them ([`KernelPath::selected_for`]).
    pub(crate) fn of(terms: &TermSet, narrow: bool, width: usize, ncomp: usize) -> Option<FastSum> {
        let (operator, order) = if narrow && terms.is_field() {
            (Summed::Field, 0)
        } else if terms.is_gradient() {
            (Summed::Gradient, 1)
        } else if terms.is_laplacian() {
            (Summed::Laplacian, 2)
        } else {
            return None;
        };
        if ncomp * width > MAX_LANES || ncomp * terms.slots() > MAX_OUT {
            return None;
        }
        let path = KernelPath::selected_for(order).ok()?;
        let fast = FastSum {
            path,
            operator,
            width,
        };
        // A probe of an empty stencil: whether this width and row length are compiled.
        let probe = vec![0.0f32; width * width * width * ncomp + 2 * MAX_LANES];
        let block = WholeStencil {
            values: &probe,
            row_stride: width * ncomp,
            plane_stride: width * width * ncomp,
            ncomp,
        };
        let mut out = [0.0; MAX_OUT];
        fast.add(block, 0, &[AxisWeights::default(); 3], 1.0, &mut out)
            .then_some(fast)
    }

    /// Adds `scale` times the sums of the whole stencil of weights `w` whose first value
    /// is `start` in `block` to `out`; false (adding nothing) where this path has no
    /// compiled sum for the block's rows.
    #[inline]
    pub(crate) fn add(
        self,
        block: WholeStencil<'_>,
        start: usize,
        w: &[AxisWeights; 3],
        scale: f64,
        out: &mut [f64],
    ) -> bool {
        self.path.run(AddWhole {
            fast: self,
            block,
            start,
            w,
            scale,
            out,
        })
    }
}

/// [`FastSum::add`] as a task on its path.
struct AddWhole<'a, 'o> {
    fast: FastSum,
    block: WholeStencil<'a>,
    start: usize,
    w: &'a [AxisWeights; 3],
    scale: f64,
    out: &'o mut [f64],
}

impl SimdTask for AddWhole<'_, '_> {
    type Output = bool;

    #[inline(always)]
    fn run<S: Simd>(self, simd: S) -> bool {
        let AddWhole {
            fast,
            block,
            start,
            w,
            scale,
            out,
        } = self;
        let mut sums = [0.0; MAX_OUT];
        let (width, nc) = (fast.width, block.ncomp);
        macro_rules! field {
            ($w:literal, $h:literal) => {
                block.field::<S, $w, $h>(simd, start, [0, 1, 2].map(|a| &w[a].w[0]), &mut sums)
            };
        }
        macro_rules! by_row {
            ($sum:ident) => {{
                let w = [0, 1, 2].map(|a| &w[a].w);
                // Five sums a vector of a row: three vectors fit AVX-512's 32 registers,
                // two fit the 16 of the other paths.
                match (width, block.wide_vectors(S::LANES, width)) {
                    (4, 1) => block.$sum::<S, 4, 1>(simd, start, w, &mut sums),
                    (4, 2) => block.$sum::<S, 4, 2>(simd, start, w, &mut sums),
                    (4, 3) if S::LANES == 8 => block.$sum::<S, 4, 3>(simd, start, w, &mut sums),
                    (6, 2) => block.$sum::<S, 6, 2>(simd, start, w, &mut sums),
                    (6, 3) if S::LANES == 8 => block.$sum::<S, 6, 3>(simd, start, w, &mut sums),
                    (8, 2) => block.$sum::<S, 8, 2>(simd, start, w, &mut sums),
                    (8, 3) if S::LANES == 8 => block.$sum::<S, 8, 3>(simd, start, w, &mut sums),
                    _ => return false,
                }
            }};
        }
        let len = match fast.operator {
            Summed::Gradient => {
                by_row!(gradient);
                3 * nc
            }
            Summed::Laplacian => {
                by_row!(laplacian);
                nc
            }
            Summed::Field => {
                match (width, block.vectors(S::LANES, width)) {
                (4, 1) => field!(4, 1),
                (4, 2) => field!(4, 2),
                (6, 1) => field!(6, 1),
                (6, 2) => field!(6, 2),
                (6, 3) => field!(6, 3),
                (8, 1) => field!(8, 1),
                (8, 2) => field!(8, 2),
                    (8, 3) => field!(8, 3),
                    _ => return false,
                }
                nc
            }
        };
        for (o, s) in out[..len].iter_mut().zip(&sums[..len]) {
            *o = scale.mul_add(*s, *o);
        }
        true
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
    fn only_float32_answers_take_the_field_fast_path_and_the_hessian_none() {
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
        assert!(FastSum::of(&terms(Operator::Hessian), true, 4, 3).is_none());
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
