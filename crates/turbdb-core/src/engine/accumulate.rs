//! The inner loop of every strategy: add one block's (an atom's or a cell's) contribution
//! to one point's partial sums. Rows of the block (an x run, all components together) are
//! added into per-x accumulators weighted by the y and z weights — fixed-length vector
//! fused multiply-adds on the SIMD path the CPU has ([`crate::engine::simd`]) — and the x
//! weights are applied once at the end.
//!
//! Arithmetic per lag8 point of a 3-component field: 8 × 8 rows of 24 values, one
//! multiply-add each (1 536); a gradient needs two z sums per row (its three terms share
//! them) and a Hessian three.

use crate::engine::simd::{KernelPath, Simd, SimdTask};
use crate::interp::method::Term;
use crate::interp::method::MAX_WIDTH;
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
        runs.set(wrapped_base, width, n, atom_start, atom);
        runs
    }

    /// [`Runs::new`] written in place: the kernel's per-point loop builds three of these
    /// per contribution, and a copy of one built on the stack (narrow stores read back as
    /// wide loads) stalls on store-to-load forwarding.
    #[inline(always)]
    pub fn set(
        &mut self,
        wrapped_base: usize,
        width: usize,
        n: usize,
        atom_start: usize,
        atom: usize,
    ) {
        self.count = 0;
        let atom_end = (atom_start + atom).min(n);
        let before_wrap = width.min(n - wrapped_base);
        for (k_start, node_start, len) in [
            (0, wrapped_base, before_wrap),
            (before_wrap, 0, width - before_wrap),
        ] {
            let lo = node_start.max(atom_start);
            let hi = (node_start + len).min(atom_end);
            if lo < hi {
                self.runs[self.count] = (k_start + lo - node_start, lo - atom_start, hi - lo);
                self.count += 1;
            }
        }
    }

    /// The runs `(first stencil node, first atom-local index, length)`.
    #[inline]
    pub fn runs(&self) -> &[(usize, usize, usize)] {
        &self.runs[..self.count]
    }
}

/// Most distinct (y order, z order) pairs an operator needs (the Hessian's six).
const MAX_PAIRS: usize = 6;

/// Vector registers of the x86-64 (AVX2) and portable paths: the kernel keeps its sums in
/// them and must leave room for the row being loaded and its weight.
const REGISTERS: usize = 16;

/// Most distinct z orders (0, 1 and 2).
const MAX_Z_ORDERS: usize = 3;

/// Most values in one row of a contribution (an x run of the widest stencil, all
/// components): longer rows go one component at a time.
pub(crate) const MAX_ROW: usize = 32;

/// What one evaluation needs to know about the operator.
#[derive(Debug, Clone)]
pub struct TermSet {
    slots: usize,
    /// Distinct `(y order, z order index)` pairs: one accumulator each.
    pairs: Vec<(usize, usize)>,
    /// Distinct z orders: each row is summed along z once per z order.
    z_orders: Vec<usize>,
    /// Per term: x order, accumulator, output slot.
    terms: Vec<(usize, usize, usize)>,
    /// Whether stored float32 rows are summed along z in float32 (see
    /// [`TermSet::narrow`]).
    narrow: bool,
}

impl TermSet {
    /// The terms of an operator with `slots` outputs per component.
    pub fn new(terms: &[Term], slots: usize) -> Self {
        let mut z_orders: Vec<usize> = Vec::new();
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        let mut out = Vec::new();
        for t in terms {
            let z = position_or_push(&mut z_orders, t.orders[2]);
            let pair = position_or_push(&mut pairs, (t.orders[1], z));
            out.push((t.orders[0], pair, t.slot));
        }
        assert!(pairs.len() <= MAX_PAIRS && z_orders.len() <= MAX_Z_ORDERS);
        Self {
            slots,
            pairs,
            z_orders,
            terms: out,
            narrow: false,
        }
    }

    /// The same terms, with the z sums of stored float32 rows in float32 if `narrow`: for
    /// answers that are float32 anyway, whose rounding (6e-8 relative) is of the order of
    /// the error it adds, at a quarter of the instructions. Float64 answers keep every
    /// sum in float64.
    pub fn narrow(mut self, narrow: bool) -> Self {
        self.narrow = narrow;
        self
    }

    /// Whether the z sums of stored float32 rows run in float32.
    pub fn is_narrow(&self) -> bool {
        self.narrow
    }

    /// Whether the operator is the field itself: one term, no derivative.
    pub fn is_field(&self) -> bool {
        self.terms == [(0, 0, 0)] && self.pairs == [(0, 0)] && self.z_orders == [0]
    }

    /// Whether the operator is the gradient: the three first derivatives, in x, y, z order.
    pub fn is_gradient(&self) -> bool {
        self.terms == [(1, 0, 0), (0, 1, 1), (0, 2, 2)]
            && self.pairs == [(0, 0), (1, 0), (0, 1)]
            && self.z_orders == [0, 1]
            && self.slots == 3
    }

    /// Whether the operator is the Hessian: its six terms, xx, xy, xz, yy, yz, zz.
    pub fn is_hessian(&self) -> bool {
        self.terms
            == [
                (2, 0, 0),
                (1, 1, 1),
                (1, 2, 2),
                (0, 3, 3),
                (0, 4, 4),
                (0, 5, 5),
            ]
            && self.pairs == [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (0, 2)]
            && self.z_orders == [0, 1, 2]
            && self.slots == 6
    }

    /// Whether the operator is the Laplacian: the three second derivatives, summed.
    pub fn is_laplacian(&self) -> bool {
        self.terms == [(2, 0, 0), (0, 1, 0), (0, 2, 0)]
            && self.pairs == [(0, 0), (2, 0), (0, 1)]
            && self.z_orders == [0, 2]
            && self.slots == 1
    }

    /// Output values per component.
    pub fn slots(&self) -> usize {
        self.slots
    }
}

/// The index of `item` in `list`, appended if it is not there.
fn position_or_push<T: PartialEq>(list: &mut Vec<T>, item: T) -> usize {
    list.iter().position(|x| *x == item).unwrap_or_else(|| {
        list.push(item);
        list.len() - 1
    })
}

/// A dense block of grid values in C order `(z, y, x, c)`: one atom, or one cell.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a, T> {
    /// The values.
    pub values: &'a [T],
    /// Nodes from one y row to the next.
    pub row: usize,
    /// Nodes from one z plane to the next: at least `row` × the rows, more where the
    /// planes are padded to spread a stencil over the L1 sets ([`super::cache_sets`]).
    pub plane: usize,
}

impl<'a, T> Block<'a, T> {
    /// A block with no padding between its planes: `dims` nodes along x and y.
    pub fn dense(values: &'a [T], dims: [usize; 2]) -> Self {
        Self {
            values,
            row: dims[0],
            plane: dims[0] * dims[1],
        }
    }
}

/// The values of a block, by type.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// As stored.
    F32(&'a [f32]),
    /// Widened, or blended over time levels.
    F64(&'a [f64]),
}

/// A value stored in a block: float32 as stored, or float64.
pub trait Value: Copy {
    /// As float64.
    fn get(self) -> f64;
    /// A block's values with their type.
    fn values(values: &[Self]) -> Values<'_>;
}

impl Value for f32 {
    #[inline(always)]
    fn get(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn values(values: &[Self]) -> Values<'_> {
        Values::F32(values)
    }
}

impl Value for f64 {
    #[inline(always)]
    fn get(self) -> f64 {
        self
    }
    #[inline(always)]
    fn values(values: &[Self]) -> Values<'_> {
        Values::F64(values)
    }
}

/// A block value the kernel can load as vectors.
pub(crate) trait Lane: Value {
    /// `S::LANES` values from `src`, as float64.
    ///
    /// # Safety
    /// `src .. src + S::LANES` must be readable.
    unsafe fn load<S: Simd>(simd: S, src: *const Self) -> S::V;
}

impl Lane for f32 {
    #[inline(always)]
    unsafe fn load<S: Simd>(simd: S, src: *const f32) -> S::V {
        // SAFETY: passed on to the caller.
        unsafe { simd.load_f32(src) }
    }
}

impl Lane for f64 {
    #[inline(always)]
    unsafe fn load<S: Simd>(simd: S, src: *const f64) -> S::V {
        // SAFETY: passed on to the caller.
        unsafe { simd.load(src) }
    }
}

/// Values a block must hold past its last element, so a fixed-length row read starting
/// anywhere inside it stays in bounds (the lanes past the run are never used).
pub const PADDING: usize = 32;

/// One point's contribution from one block: the stencil, its nodes inside the block, and
/// where the sums go.
pub(crate) struct Contribution<'a, T> {
    pub(crate) block: Block<'a, T>,
    pub(crate) ncomp: usize,
    pub(crate) runs: &'a [Runs; 3],
    pub(crate) w: &'a [AxisWeights; 3],
    pub(crate) terms: &'a TermSet,
    pub(crate) scale: f64,
    pub(crate) out: &'a mut [f64],
}

impl<T: Lane> SimdTask for Contribution<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, simd: S) {
        self.add(simd);
    }
}

impl<T: Lane> Contribution<'_, T> {
    /// Adds `scale` × the contribution of the block to `out` (`[c * slots + slot]`).
    ///
    /// Each x run is summed on its own: every row of it (all components together, padded
    /// to whole vectors of `S::LANES`) is added, weighted by the y and z weights, into
    /// accumulators that stay in registers; the x weights are applied once at the end.
    /// `block.values` must extend [`PADDING`] values past the block.
    #[inline(always)]
    pub(crate) fn add<S: Simd>(self, simd: S) {
        if self.terms.narrow {
            self.add_as::<S, true>(simd)
        } else {
            self.add_as::<S, false>(simd)
        }
    }

    /// [`Self::add`], with float32 z sums of float32 rows if `NARROW` (and the terms
    /// allow it): a caller that adds many contributions chooses once, and each choice
    /// is compiled on its own.
    #[inline(always)]
    pub(crate) fn add_as<S: Simd, const NARROW: bool>(self, simd: S) {
        let row = self.runs[0].runs().iter().map(|r| r.2).max().unwrap_or(0) * self.ncomp;
        if row > MAX_ROW {
            return self.by_component(simd);
        }
        // A whole number of vectors per row; the fixed count lets the sums stay in registers.
        match row.div_ceil(S::LANES) {
            0 => {}
            1 => self.add_rows::<S, 1, NARROW>(simd),
            2 => self.add_rows::<S, 2, NARROW>(simd),
            3 => self.add_rows::<S, 3, NARROW>(simd),
            4 => self.add_rows::<S, 4, NARROW>(simd),
            5 => self.add_rows::<S, 5, NARROW>(simd),
            6 => self.add_rows::<S, 6, NARROW>(simd),
            7 => self.add_rows::<S, 7, NARROW>(simd),
            _ => self.add_rows::<S, 8, NARROW>(simd),
        }
    }

    /// [`Self::add_as`] with `V` vectors a row.
    #[inline(always)]
    fn add_rows<S: Simd, const V: usize, const NARROW: bool>(self, simd: S) {
        let Contribution {
            block,
            ncomp,
            runs,
            w,
            terms,
            scale,
            out,
        } = self;
        let row_stride = block.row * ncomp;
        let plane_stride = block.plane * ncomp;
        // Every row read below starts at or before the last row's start.
        let last = |r: &Runs| r.runs().iter().map(|&(_, l, n)| l + n - 1).max();
        let (Some(last_y), Some(last_z)) = (last(&runs[1]), last(&runs[2])) else {
            return;
        };
        let last_row = last_z * plane_stride + last_y * row_stride;
        for &(kx, lx, len) in runs[0].runs() {
            let first = lx * ncomp;
            // Float32 rows are read in vectors of twice the lanes.
            assert!(
                last_row + first + V.next_multiple_of(2) * S::LANES <= block.values.len(),
                "a block must hold PADDING values past its end"
            );
            // Made where used: made up front, the copy of the runs was not left out of the
            // float32 path that does not use it, and stalled on store-to-load forwarding.
            let rows = || Rows {
                values: block.values,
                first,
                row_stride,
                plane_stride,
                y: runs[1],
                z: runs[2],
            };
            let wx = |ox: usize| &w[0].w[ox][kx..kx + len];
            if let [(oy, _)] = terms.pairs[..] {
                let (wy, wz) = (&w[1].w[oy], &w[2].w[terms.z_orders[0]]);
                let sums = match T::values(block.values) {
                    Values::F32(values) if NARROW => NarrowRows {
                        values,
                        first,
                        row_stride,
                        plane_stride,
                        y: &runs[1],
                        z: &runs[2],
                    }
                    .sum_one::<S, V>(simd, wy, wz),
                    _ => rows().sum_one::<S, V>(simd, wy, wz),
                };
                for &(ox, _, slot) in &terms.terms {
                    apply_x(
                        simd,
                        &sums,
                        wx(ox),
                        ncomp,
                        scale,
                        &mut out[slot..],
                        terms.slots,
                    );
                }
            } else {
                // The gradient and the Laplacian (two z orders, three pairs) a fitted size,
                // two vectors of a row at a time; anything else (the Hessian) padded to
                // three z orders and six pairs, one vector at a time: every sum stays in a
                // register. (The pairs' sums exist only here: zeroing them for a field's
                // single pair cost a kilobyte of stores a contribution.)
                let mut acc = [[simd.splat(0.0); V]; MAX_PAIRS];
                match (terms.z_orders.len(), terms.pairs.len()) {
                    (2, 3) => rows().sum_by_z::<S, V, 2, 3, 2>(simd, w, terms, &mut acc),
                    _ => rows().sum_by_z::<S, V, 3, MAX_PAIRS, 1>(simd, w, terms, &mut acc),
                }
                for &(ox, pair, slot) in &terms.terms {
                    apply_x(
                        simd,
                        &acc[pair],
                        wx(ox),
                        ncomp,
                        scale,
                        &mut out[slot..],
                        terms.slots,
                    );
                }
            }
        }
    }

    /// Components one at a time, for rows longer than [`MAX_ROW`] (many components).
    #[inline(never)]
    fn by_component<S: Simd>(self, simd: S) {
        let ncomp = self.ncomp;
        let mut scalar: Vec<f64> = Vec::with_capacity(self.block.values.len() / ncomp + PADDING);
        let mut partial = vec![0f64; self.terms.slots];
        for c in 0..ncomp {
            scalar.clear();
            scalar.extend(self.block.values.chunks_exact(ncomp).map(|v| v[c].get()));
            scalar.resize(scalar.len() + PADDING, 0.0);
            partial.fill(0.0);
            Contribution {
                block: Block {
                    values: &scalar[..],
                    row: self.block.row,
                    plane: self.block.plane,
                },
                ncomp: 1,
                runs: self.runs,
                w: self.w,
                terms: self.terms,
                scale: self.scale,
                out: &mut partial,
            }
            .add(simd);
            for s in 0..self.terms.slots {
                self.out[c * self.terms.slots + s] += partial[s];
            }
        }
    }
}

/// Adds `scale · Σ_k wx[k] · row sum[k·ncomp + c]` to `out[c · stride]` for each component
/// `c`: one pair's sums of an x run (`V` vectors) weighted along x. A function, not a
/// closure, so that it is compiled for the kernel's SIMD path (closures do not inherit
/// target features).
#[inline(always)]
fn apply_x<S: Simd, const V: usize>(
    simd: S,
    sums: &[S::V; V],
    wx: &[f64],
    ncomp: usize,
    scale: f64,
    out: &mut [f64],
    stride: usize,
) {
    let mut lanes = [0.0f64; MAX_ROW];
    for v in 0..V {
        simd.store(sums[v], &mut lanes[v * S::LANES..]);
    }
    match ncomp {
        1 => fold_x::<1>(&lanes, wx, scale, out, stride),
        2 => fold_x::<2>(&lanes, wx, scale, out, stride),
        3 => fold_x::<3>(&lanes, wx, scale, out, stride),
        _ => {
            for c in 0..ncomp {
                let sum: f64 = (0..wx.len()).map(|k| wx[k] * lanes[k * ncomp + c]).sum();
                out[c * stride] += scale * sum;
            }
        }
    }
}

/// Adds `scale · Σ_k wx[k] · lanes[k·NC + c]` to `out[c · stride]` for each component `c`:
/// the x weights applied to the row sums.
#[inline(always)]
fn fold_x<const NC: usize>(
    lanes: &[f64; MAX_ROW],
    wx: &[f64],
    scale: f64,
    out: &mut [f64],
    stride: usize,
) {
    let mut sums = [0.0f64; NC];
    for (k, &weight) in wx.iter().enumerate() {
        for c in 0..NC {
            sums[c] += weight * lanes[k * NC + c];
        }
    }
    for c in 0..NC {
        out[c * stride] += scale * sums[c];
    }
}

/// The rows of one x run of a contribution: their place in the block and their y and z
/// nodes.
struct Rows<'a, T> {
    values: &'a [T],
    /// Offset of the run in a row.
    first: usize,
    row_stride: usize,
    plane_stride: usize,
    y: Runs,
    z: Runs,
}

impl<T: Lane> Rows<'_, T> {
    /// Where the row at atom-local `(ly, lz)` starts.
    #[inline(always)]
    fn start(&self, ly: usize, lz: usize) -> usize {
        lz * self.plane_stride + ly * self.row_stride + self.first
    }

    /// Vector `v` of the row starting at `start`.
    ///
    /// # Safety
    /// The row's `V · S::LANES` values must lie in the block (see [`Contribution::add_rows`]).
    #[inline(always)]
    unsafe fn lane<S: Simd>(&self, simd: S, start: usize, v: usize) -> S::V {
        // SAFETY: the caller guarantees the row is in bounds.
        unsafe { T::load(simd, self.values.as_ptr().add(start + v * S::LANES)) }
    }

    /// The row at atom-local `(ly, lz)`, as `V` vectors.
    ///
    /// # Safety
    /// As [`Self::lane`].
    #[inline(always)]
    unsafe fn load<S: Simd, const V: usize>(&self, simd: S, ly: usize, lz: usize) -> [S::V; V] {
        let start = self.start(ly, lz);
        // SAFETY: passed on to the caller.
        std::array::from_fn(|v| unsafe { self.lane::<S>(simd, start, v) })
    }

    /// `Σ_y Σ_z wy·wz·row`, for a single (y order, z order) pair. Rows alternate between
    /// two sets of sums, so consecutive multiply-adds do not wait on each other.
    #[inline(always)]
    fn sum_one<S: Simd, const V: usize>(&self, simd: S, wy: &[f64], wz: &[f64]) -> [S::V; V] {
        if 2 * V + 4 >= REGISTERS {
            return self.sum_one_wide::<S, V>(simd, wy, wz);
        }
        let mut even = [simd.splat(0.0); V];
        let mut odd = [simd.splat(0.0); V];
        for &(kz0, lz0, nz) in self.z.runs() {
            for dz in 0..nz {
                let (wz, lz) = (wz[kz0 + dz], lz0 + dz);
                for &(ky0, ly0, ny) in self.y.runs() {
                    let mut dy = 0;
                    while dy + 1 < ny {
                        let (fa, fb) = (
                            simd.splat(wy[ky0 + dy] * wz),
                            simd.splat(wy[ky0 + dy + 1] * wz),
                        );
                        let (a, b) = (self.start(ly0 + dy, lz), self.start(ly0 + dy + 1, lz));
                        for v in 0..V {
                            // SAFETY: rows inside the runs are in bounds (checked by the
                            // caller).
                            let (xa, xb) =
                                unsafe { (self.lane::<S>(simd, a, v), self.lane::<S>(simd, b, v)) };
                            even[v] = simd.mul_add(xa, fa, even[v]);
                            odd[v] = simd.mul_add(xb, fb, odd[v]);
                        }
                        dy += 2;
                    }
                    if dy < ny {
                        let f = simd.splat(wy[ky0 + dy] * wz);
                        // SAFETY: as above.
                        let a = unsafe { self.load::<S, V>(simd, ly0 + dy, lz) };
                        for v in 0..V {
                            even[v] = simd.mul_add(a[v], f, even[v]);
                        }
                    }
                }
            }
        }
        let one = simd.splat(1.0);
        std::array::from_fn(|v| simd.mul_add(odd[v], one, even[v]))
    }

    /// [`Self::sum_one`] for rows of so many vectors that two sets of sums would not fit
    /// the registers: one set (`V` independent multiply-adds a row keep the FMA units
    /// busy enough), where two spilled one sum to the stack and every row waited on it.
    #[inline(always)]
    fn sum_one_wide<S: Simd, const V: usize>(&self, simd: S, wy: &[f64], wz: &[f64]) -> [S::V; V] {
        let mut sums = [simd.splat(0.0); V];
        for &(kz0, lz0, nz) in self.z.runs() {
            for dz in 0..nz {
                let (wz, lz) = (wz[kz0 + dz], lz0 + dz);
                for &(ky0, ly0, ny) in self.y.runs() {
                    for dy in 0..ny {
                        let f = simd.splat(wy[ky0 + dy] * wz);
                        let start = self.start(ly0 + dy, lz);
                        for v in 0..V {
                            // SAFETY: rows inside the runs are in bounds (checked by the
                            // caller).
                            let x = unsafe { self.lane::<S>(simd, start, v) };
                            sums[v] = simd.mul_add(x, f, sums[v]);
                        }
                    }
                }
            }
        }
        sums
    }

    /// The sums of every (y order, z order) pair of `terms` into `acc`: each row column is
    /// first summed along z once per z order (`Z` of them), then added into the pairs (`P`
    /// of them) with their y weights — two or three multiply-adds a value instead of one
    /// per pair. `terms` may have fewer z orders and pairs than `Z` and `P`: the first
    /// stands in for the missing ones, whose sums are not used.
    ///
    /// The rows go `W` vectors at a time (all rows for the first `W` vectors of a row,
    /// then the next `W`), so the `Z · W` column sums and `P · W` pair sums stay in
    /// registers.
    #[inline(always)]
    fn sum_by_z<S: Simd, const V: usize, const Z: usize, const P: usize, const W: usize>(
        &self,
        simd: S,
        w: &[AxisWeights; 3],
        terms: &TermSet,
        acc: &mut [[S::V; V]; MAX_PAIRS],
    ) {
        let z_orders: [usize; Z] =
            std::array::from_fn(|i| *terms.z_orders.get(i).unwrap_or(&terms.z_orders[0]));
        let pairs: [(usize, usize); P] =
            std::array::from_fn(|p| *terms.pairs.get(p).unwrap_or(&terms.pairs[0]));
        let wz: [&[f64; MAX_WIDTH]; Z] = std::array::from_fn(|i| &w[2].w[z_orders[i]]);
        let wy: [&[f64; MAX_WIDTH]; P] = std::array::from_fn(|p| &w[1].w[pairs[p].0]);
        let mut v0 = 0;
        while v0 + W <= V {
            let sums = self.sum_part::<S, Z, P, W>(simd, v0, &wz, &wy, &pairs);
            for p in 0..P {
                acc[p][v0..v0 + W].copy_from_slice(&sums[p]);
            }
            v0 += W;
        }
        while v0 < V {
            let sums = self.sum_part::<S, Z, P, 1>(simd, v0, &wz, &wy, &pairs);
            for p in 0..P {
                acc[p][v0] = sums[p][0];
            }
            v0 += 1;
        }
    }

    /// Vectors `v0 .. v0 + W` of every row, summed as [`Self::sum_by_z`] says.
    #[inline(always)]
    fn sum_part<S: Simd, const Z: usize, const P: usize, const W: usize>(
        &self,
        simd: S,
        v0: usize,
        wz: &[&[f64; MAX_WIDTH]; Z],
        wy: &[&[f64; MAX_WIDTH]; P],
        pairs: &[(usize, usize); P],
    ) -> [[S::V; W]; P] {
        let mut sums = [[simd.splat(0.0); W]; P];
        for &(ky0, ly0, ny) in self.y.runs() {
            for dy in 0..ny {
                let (ky, ly) = (ky0 + dy, ly0 + dy);
                let mut column = [[simd.splat(0.0); W]; Z];
                for &(kz0, lz0, nz) in self.z.runs() {
                    for dz in 0..nz {
                        let f: [S::V; Z] = std::array::from_fn(|i| simd.splat(wz[i][kz0 + dz]));
                        let start = self.start(ly, lz0 + dz) + v0 * S::LANES;
                        for v in 0..W {
                            // SAFETY: rows inside the runs are in bounds (checked by the
                            // caller), and `v0 + W` is at most their vector count.
                            let x = unsafe { self.lane::<S>(simd, start, v) };
                            for i in 0..Z {
                                column[i][v] = simd.mul_add(x, f[i], column[i][v]);
                            }
                        }
                    }
                }
                for p in 0..P {
                    let f = simd.splat(wy[p][ky]);
                    for v in 0..W {
                        sums[p][v] = simd.mul_add(column[pairs[p].1][v], f, sums[p][v]);
                    }
                }
            }
        }
        sums
    }
}

/// [`Rows`] of stored float32 values, summed along z in float32. The y and z runs are
/// borrowed: a copy of them (made just before, from the stencil) was read back in wide
/// loads that stalled on store-to-load forwarding.
struct NarrowRows<'a> {
    values: &'a [f32],
    /// Offset of the run in a row.
    first: usize,
    row_stride: usize,
    plane_stride: usize,
    y: &'a Runs,
    z: &'a Runs,
}

impl NarrowRows<'_> {
    /// Where the row at atom-local `(ly, lz)` starts.
    #[inline(always)]
    fn start(&self, ly: usize, lz: usize) -> usize {
        lz * self.plane_stride + ly * self.row_stride + self.first
    }

    /// [`Rows::sum_one`] for stored float32 rows: each row column is summed along z in
    /// float32 (`2 · S::LANES` lanes a vector, no widening per value), widened once, and
    /// added along y in float64 — a quarter of the instructions of widening every value,
    /// at a relative error of a few float32 roundings of the z sums (about 1e-7 of the
    /// field's magnitude; a test holds it under 1e-6).
    #[inline(always)]
    fn sum_one<S: Simd, const V: usize>(&self, simd: S, wy: &[f64], wz: &[f64]) -> [S::V; V] {
        match V {
            1 | 2 => self.sum_narrow::<S, 1, V>(simd, wy, wz),
            3 | 4 => self.sum_narrow::<S, 2, V>(simd, wy, wz),
            5 | 6 => self.sum_narrow::<S, 3, V>(simd, wy, wz),
            _ => self.sum_narrow::<S, 4, V>(simd, wy, wz),
        }
    }

    /// [`Self::sum_one`] with `H` float32 vectors a row (`2 · H ≥ V`). Two y rows at
    /// a time, so `2 · H` z sums are in flight and the float32 multiply-adds do not wait
    /// on each other.
    #[inline(always)]
    fn sum_narrow<S: Simd, const H: usize, const V: usize>(
        &self,
        simd: S,
        wy: &[f64],
        wz: &[f64],
    ) -> [S::V; V] {
        let lanes = 2 * S::LANES;
        let wz: [f32; MAX_WIDTH] = std::array::from_fn(|k| wz.get(k).map_or(0.0, |&w| w as f32));
        let mut sums = [simd.splat(0.0); V];
        for &(ky0, ly0, ny) in self.y.runs() {
            let mut dy = 0;
            while dy < ny {
                // An odd last row is read twice (`b` repeats `a`) and its second sum dropped:
                // one loop with no branch inside, for the stencils a cell cuts to odd height.
                let pair = dy + 1 < ny;
                let mut a = [simd.splat_narrow(0.0); H];
                let mut b = [simd.splat_narrow(0.0); H];
                for &(kz0, lz0, nz) in self.z.runs() {
                    for dz in 0..nz {
                        let f = simd.splat_narrow(wz[kz0 + dz]);
                        let ra = self.start(ly0 + dy, lz0 + dz);
                        let rb = self.start(ly0 + dy + usize::from(pair), lz0 + dz);
                        for h in 0..H {
                            // SAFETY: rows inside the runs are in bounds, read to a whole
                            // number of float32 vectors (checked by the caller).
                            let (xa, xb) = unsafe {
                                (
                                    simd.load_narrow(self.values.as_ptr().add(ra + h * lanes)),
                                    simd.load_narrow(self.values.as_ptr().add(rb + h * lanes)),
                                )
                            };
                            a[h] = simd.mul_add_narrow(xa, f, a[h]);
                            b[h] = simd.mul_add_narrow(xb, f, b[h]);
                        }
                    }
                }
                add_widened(simd, &a, simd.splat(wy[ky0 + dy]), &mut sums);
                if pair {
                    add_widened(simd, &b, simd.splat(wy[ky0 + dy + 1]), &mut sums);
                }
                dy += 2;
            }
        }
        sums
    }
}

/// Adds `f` × the float32 z sums `column`, widened, to the float64 `sums`. A function, not a
/// closure, so that it is compiled for the kernel's SIMD path.
#[inline(always)]
fn add_widened<S: Simd, const H: usize, const V: usize>(
    simd: S,
    column: &[S::N; H],
    f: S::V,
    sums: &mut [S::V; V],
) {
    for (h, &c) in column.iter().enumerate() {
        let [low, high] = simd.widen(c);
        sums[2 * h] = simd.mul_add(low, f, sums[2 * h]);
        if 2 * h + 1 < V {
            sums[2 * h + 1] = simd.mul_add(high, f, sums[2 * h + 1]);
        }
    }
}

/// Adds one block's contribution for one point, for any component count, on the path
/// queries use ([`KernelPath::selected`]; the preferred one the CPU has if `TURBDB_KERNEL` is
/// bad, an error the query's plan reports).
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
    let path = KernelPath::selected().unwrap_or_else(|_| KernelPath::best());
    accumulate_on(path, ncomp, block, runs, w, terms, scale, out);
}

/// Adds one block's contribution for one point, for any component count, on `path`.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn accumulate_on<T: Value>(
    path: KernelPath,
    ncomp: usize,
    block: Block<'_, T>,
    runs: &[Runs; 3],
    w: &[AxisWeights; 3],
    terms: &TermSet,
    scale: f64,
    out: &mut [f64],
) {
    let Block { row, plane, .. } = block;
    match T::values(block.values) {
        Values::F32(values) => path.run(Contribution {
            block: Block { values, row, plane },
            ncomp,
            runs,
            w,
            terms,
            scale,
            out,
        }),
        Values::F64(values) => path.run(Contribution {
            block: Block { values, row, plane },
            ncomp,
            runs,
            w,
            terms,
            scale,
            out,
        }),
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
