//! The inner loop of every strategy: add one block's (an atom's or a cell's) contribution
//! to one point's partial sums. Rows of the block (x runs, all components together) are
//! added into per-x accumulators weighted by the y and z weights — a contiguous axpy in
//! eight-lane vectors ([`F64x8`]) — and the x weights are applied once at the end.

use crate::engine::lanes::F64x8;
use crate::interp::method::Term;
use crate::interp::stencil::AxisWeights;

/// Nodes of one point's stencil that lie in one atom, along one axis: runs of
/// `(first stencil node, first atom-local index, length)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Runs {
    runs: [(usize, usize, usize); 2],
    count: usize,
}

impl Runs {
    /// The stencil nodes starting at `wrapped_base` (its first node, wrapped into
    /// `0..n`), `width` of them wrapping past `n`, that fall in the atom of side `atom`
    /// starting at node `atom_start`.
    #[inline]
    pub fn new(
        wrapped_base: usize,
        width: usize,
        n: usize,
        atom_start: usize,
        atom: usize,
    ) -> Self {
        let mut runs = Runs::default();
        let atom_end = (atom_start + atom).min(n);
        let before_wrap = width.min(n - wrapped_base);
        for (k_start, node_start, len) in [
            (0, wrapped_base, before_wrap),
            (before_wrap, 0, width - before_wrap),
        ] {
            let lo = node_start.max(atom_start);
            let hi = (node_start + len).min(atom_end);
            if lo < hi {
                runs.runs[runs.count] = (k_start + lo - node_start, lo - atom_start, hi - lo);
                runs.count += 1;
            }
        }
        runs
    }

    /// The runs `(first stencil node, first atom-local index, length)`.
    #[inline]
    pub fn runs(&self) -> &[(usize, usize, usize)] {
        &self.runs[..self.count]
    }
}

/// Most distinct (y order, z order) pairs an operator needs (the Hessian's six).
const MAX_PAIRS: usize = 6;

/// What one evaluation needs to know about the operator.
#[derive(Debug, Clone)]
pub struct TermSet {
    slots: usize,
    /// Distinct `(y order, z order)` pairs: one accumulator each.
    pairs: Vec<(usize, usize)>,
    /// Per term: x order, accumulator, output slot.
    terms: Vec<(usize, usize, usize)>,
}

impl TermSet {
    /// The terms of an operator with `slots` outputs per component.
    pub fn new(terms: &[Term], slots: usize) -> Self {
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        let mut out = Vec::new();
        for t in terms {
            let pair = (t.orders[1], t.orders[2]);
            let index = pairs.iter().position(|&p| p == pair).unwrap_or_else(|| {
                pairs.push(pair);
                pairs.len() - 1
            });
            out.push((t.orders[0], index, t.slot));
        }
        assert!(pairs.len() <= MAX_PAIRS);
        Self {
            slots,
            pairs,
            terms: out,
        }
    }

    /// Output values per component.
    pub fn slots(&self) -> usize {
        self.slots
    }
}

/// A dense block of grid values in C order `(z, y, x, c)`: one atom, or one cell.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a, T> {
    /// The values.
    pub values: &'a [T],
    /// Nodes along x and y (the z extent is implied by the runs).
    pub dims: [usize; 2],
}

/// A value stored in a block.
pub trait Value: Copy {
    /// As float64.
    fn get(self) -> f64;
    /// The first eight values of `src`, as float64 lanes.
    fn lanes(src: &[Self]) -> F64x8;
}

impl Value for f32 {
    #[inline(always)]
    fn get(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn lanes(src: &[Self]) -> F64x8 {
        F64x8::from_f32(src)
    }
}

impl Value for f64 {
    #[inline(always)]
    fn get(self) -> f64 {
        self
    }
    #[inline(always)]
    fn lanes(src: &[Self]) -> F64x8 {
        F64x8::from_f64(src)
    }
}

/// Values a block must hold past its last element, so a fixed-length row read starting
/// anywhere inside it stays in bounds (the lanes past the run are never used).
pub const PADDING: usize = 32;

/// Adds `scale` × the contribution of `block` to `out` (`[c * slots + slot]`) for the
/// stencil `w` of one point, whose nodes inside the block are `runs`.
///
/// Every row of the run is added, weighted by the y and z weights, into `P` accumulators
/// (one per distinct y/z derivative pair) of `V` four-lane vectors — a whole x run of the
/// widest stencil, so each row is the same fixed-length vector FMA and the accumulators
/// stay in registers; the x weights are applied once at the end. `block.values` must
/// extend [`PADDING`] values past the block.
#[inline(always)]
fn accumulate<const NC: usize, const V: usize, const P: usize, T: Value>(
    block: Block<'_, T>,
    runs: &[Runs; 3],
    w: &[AxisWeights; 3],
    terms: &TermSet,
    scale: f64,
    out: &mut [f64],
) {
    let row_stride = block.dims[0] * NC;
    let plane_stride = block.dims[1] * row_stride;
    let pairs: [(usize, usize); P] = std::array::from_fn(|p| terms.pairs[p]);
    for &(kx, lx, len) in runs[0].runs() {
        let mut acc = [[F64x8::zero(); V]; P];
        for &(kz0, lz0, nz) in runs[2].runs() {
            for dz in 0..nz {
                let (kz, plane) = (kz0 + dz, (lz0 + dz) * plane_stride);
                let wz: [f64; P] = std::array::from_fn(|p| w[2].w[pairs[p].1][kz]);
                for &(ky0, ly0, ny) in runs[1].runs() {
                    for dy in 0..ny {
                        let ky = ky0 + dy;
                        let start = plane + (ly0 + dy) * row_stride + lx * NC;
                        let row = &block.values[start..start + 8 * V];
                        let f: [F64x8; P] =
                            std::array::from_fn(|p| F64x8::splat(w[1].w[pairs[p].0][ky] * wz[p]));
                        for v in 0..V {
                            let x = T::lanes(&row[8 * v..]);
                            for p in 0..P {
                                acc[p][v] = x.mul_add(f[p], acc[p][v]);
                            }
                        }
                    }
                }
            }
        }
        for &(ox, pair, slot) in &terms.terms {
            let wx = &w[0].w[ox][kx..kx + len];
            let lanes: [[f64; 8]; V] = acc[pair].map(F64x8::to_array);
            let acc = lanes.as_flattened();
            let mut sums = [0.0f64; NC];
            for (k, &weight) in wx.iter().enumerate() {
                for c in 0..NC {
                    sums[c] = weight.mul_add(acc[k * NC + c], sums[c]);
                }
            }
            for c in 0..NC {
                out[c * terms.slots + slot] += scale * sums[c];
            }
        }
    }
}

/// [`accumulate`] with the operator's pair count.
#[inline]
fn accumulate_pairs<const NC: usize, const V: usize, T: Value>(
    block: Block<'_, T>,
    runs: &[Runs; 3],
    w: &[AxisWeights; 3],
    terms: &TermSet,
    scale: f64,
    out: &mut [f64],
) {
    match terms.pairs.len() {
        1 => accumulate::<NC, V, 1, T>(block, runs, w, terms, scale, out),
        2 => accumulate::<NC, V, 2, T>(block, runs, w, terms, scale, out),
        3 => accumulate::<NC, V, 3, T>(block, runs, w, terms, scale, out),
        4 => accumulate::<NC, V, 4, T>(block, runs, w, terms, scale, out),
        5 => accumulate::<NC, V, 5, T>(block, runs, w, terms, scale, out),
        _ => accumulate::<NC, V, 6, T>(block, runs, w, terms, scale, out),
    }
}

/// [`accumulate`] with as many lanes as the longest x run needs (rounded up to a whole
/// vector), so narrow stencils, and the parts of a stencil split between cells, do not pay
/// for the full width.
#[inline]
fn accumulate_nc<const NC: usize, T: Value>(
    block: Block<'_, T>,
    runs: &[Runs; 3],
    w: &[AxisWeights; 3],
    terms: &TermSet,
    scale: f64,
    out: &mut [f64],
) {
    let len = runs[0].runs().iter().map(|r| r.2).max().unwrap_or(0);
    match (len * NC).div_ceil(8) {
        0 => {}
        1 => accumulate_pairs::<NC, 1, T>(block, runs, w, terms, scale, out),
        2 => accumulate_pairs::<NC, 2, T>(block, runs, w, terms, scale, out),
        3 => accumulate_pairs::<NC, 3, T>(block, runs, w, terms, scale, out),
        _ => accumulate_pairs::<NC, 4, T>(block, runs, w, terms, scale, out),
    }
}

/// Adds one block's contribution for one point, for any component count (specialised for
/// 1, 2 and 3).
#[inline]
pub fn accumulate_any<T: Value>(
    ncomp: usize,
    block: Block<'_, T>,
    runs: &[Runs; 3],
    w: &[AxisWeights; 3],
    terms: &TermSet,
    scale: f64,
    out: &mut [f64],
) {
    match ncomp {
        1 => accumulate_nc::<1, T>(block, runs, w, terms, scale, out),
        2 => accumulate_nc::<2, T>(block, runs, w, terms, scale, out),
        3 => accumulate_nc::<3, T>(block, runs, w, terms, scale, out),
        _ => {
            // Other component counts: one component at a time through the scalar kernel.
            let mut scalar: Vec<f64> = Vec::with_capacity(block.values.len() / ncomp + PADDING);
            let mut partial = vec![0f64; terms.slots];
            for c in 0..ncomp {
                scalar.clear();
                scalar.extend(block.values.chunks_exact(ncomp).map(|v| v[c].get()));
                scalar.resize(scalar.len() + PADDING, 0.0);
                partial.fill(0.0);
                let one = Block {
                    values: &scalar[..],
                    dims: block.dims,
                };
                accumulate_nc::<1, f64>(one, runs, w, terms, scale, &mut partial);
                for s in 0..terms.slots {
                    out[c * terms.slots + s] += partial[s];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_where_the_stencil_wraps() {
        // n = 16, stencil of 8 from node 13: nodes 13 14 15 0 1 2 3 4
        let r = Runs::new(13, 8, 16, 0, 8);
        assert_eq!(r.runs(), &[(3, 0, 5)]);
        let r = Runs::new(13, 8, 16, 8, 8);
        assert_eq!(r.runs(), &[(0, 5, 3)]);
        // a grid of one atom: both pieces in it
        let r = Runs::new(5, 8, 8, 0, 8);
        assert_eq!(r.runs(), &[(0, 5, 3), (3, 0, 5)]);
        // partial last atom of a 20-node axis
        let r = Runs::new(14, 6, 20, 16, 8);
        assert_eq!(r.runs(), &[(2, 0, 4)]);
    }
}
