//! The plan of a batch query: every point's position in grid units, and the points grouped
//! by the cell they lie in. A cell is an aligned box of atoms; its points' stencils reach
//! a few nodes past it (its halo), into the atoms around it. It is the unit of work of the
//! streaming executor, which reads the atoms of the cell and its halo into one block and
//! sums every point of the cell from that block alone.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use crate::engine::atomset::{AtomSet, MAX_X};
use crate::engine::buffers::{pooled, Buffer};
use crate::engine::cell_finder::CellFinder;
use crate::engine::counting_sort::{bucket_each, bucket_sort, Buckets, LEFT_OUT};
use crate::engine::home_four::{Home, HomeFour};
use crate::engine::simd::KernelPath;
use crate::error::{Error, Result};
use crate::interp::method::{Method, Operator};
use crate::interp::stencil::Kernel;
use crate::storage::axis::Axis;
use crate::storage::geometry::FieldGeometry;
use crate::storage::morton;

/// Bytes a worker's cell block (the cell and its halo) may take. About twice the L2 cache
/// (2 MiB a core here): a batch of neighbouring points reads a few of the block's planes,
/// not all of it, and a bigger cell reads fewer halo nodes. lag8 velocity on the 256³
/// benchmark step, one AVX2 thread of a 2-core Intel Xeon, load about 1.5: blocks of 71³
/// nodes (4.1 MiB) against 71 × 39 × 39 (1.3 MiB) read 62 against 75 ns a point and sum
/// 83 against 80; 135³ (29 MiB) summed in 105–110.
const BLOCK_BUDGET: usize = 4608 << 10;

/// Most atoms along one side of a cell.
pub const MAX_SIDE: usize = 8;
// An atom's place in a cell has a small Morton code ([`home`]).
const _: () = assert!(MAX_SIDE as u32 - 1 <= morton::MAX_SMALL);

/// The cell's sides, in atoms: from [`MAX_SIDE`] (a cell's box may span shards), halved along
/// the longest side (z first, x last: rows run along x, so a long x side means few, long
/// rows to copy) until the block of the cell and its halo, `block_bytes` a node, fits
/// [`BLOCK_BUDGET`] and every worker has a few cells to take.
fn cell_atoms(
    axes: &[Axis; 3],
    geometry: &FieldGeometry,
    width: usize,
    block_bytes: usize,
) -> [usize; 3] {
    let enough = 4 * rayon::current_num_threads();
    let mut atoms = [MAX_SIDE; 3];
    loop {
        let side = atoms.map(|c| c * geometry.atom);
        let cells = (0..3)
            .map(|a| axes[a].n.div_ceil(side[a]))
            .product::<usize>();
        let block = (0..3)
            .map(|a| side[a].min(axes[a].n) + width - 1)
            .product::<usize>();
        if block * block_bytes <= BLOCK_BUDGET && cells >= enough {
            break;
        }
        let longest = (0..3).max_by_key(|&a| (atoms[a], a)).expect("three axes");
        if atoms[longest] == 1 {
            break;
        }
        atoms[longest] /= 2;
    }
    atoms
}

/// A cell: its points, and the box of nodes their stencils need (the cell and its halo)
/// with the atoms they touch in it.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The cell's points: a range of [`Plan::order`] and [`Plan::sorted`].
    pub points: Range<usize>,
    /// The first node of the box along each axis, unwrapped (below 0 or past the grid on
    /// a periodic axis, where the halo wraps around).
    pub origin: [i64; 3],
    /// Nodes of the box along each axis.
    pub dims: [usize; 3],
    /// The first unwrapped atom of the box along each axis ([`unwrapped_atom`]).
    pub first_box_atom: [i64; 3],
    /// The atoms of the box the points' stencils touch, from `first_box_atom`.
    pub atoms: AtomSet,
}

/// The atom holding unwrapped node `u` of an axis of `n` nodes (`atoms` atoms of
/// `1 << shift` nodes), numbered on across the periodic images: image `k` of atom `g` is
/// `k · atoms + g`. Consecutive nodes are in the same or the next atom, also where the
/// grid is not a whole number of atoms.
#[inline(always)]
pub fn unwrapped_atom(u: i64, n: usize, atoms: usize, shift: u32) -> i64 {
    let n = n as i64;
    // Stencils reach at most one image past the grid: no division in the usual cases.
    let (image, node) = if u < 0 && u >= -n {
        (-1, u + n)
    } else if u < n && u >= 0 {
        (0, u)
    } else if u < 2 * n && u >= n {
        (1, u - n)
    } else {
        (u.div_euclid(n), u.rem_euclid(n))
    };
    image * atoms as i64 + (node >> shift)
}

/// A query prepared for execution.
///
/// The executor numbers the points in its own order, [`Plan::order`]: by the cell they lie
/// in, and inside a cell by atom (in Morton order). Neighbours, which share most of
/// their stencils, then come together, and every cell adds to a few runs of neighbouring
/// result rows instead of rows all over memory.
#[derive(Debug)]
pub struct Plan {
    /// Weights of the method, prepared for the operator's derivative orders.
    pub kernel: Kernel,
    /// What is computed.
    pub operator: Operator,
    /// The grid's axes `[x, y, z]`.
    pub axes: [Axis; 3],
    /// The stored layout.
    pub geometry: FieldGeometry,
    /// The caller's number of each point, in the executor's order.
    pub order: Buffer<u32>,
    /// The points in grid units (wrapped on periodic axes), in the executor's order.
    pub sorted: Buffer<[f64; 3]>,
    /// Cells with at least one point, in storage order. Each point is in one cell.
    pub cells: Vec<Cell>,
    /// Nodes along x and y of the widest cell box: every cell's block is laid out with
    /// these rows and planes, so that the padding of its planes is found once.
    pub block_rows: [usize; 2],
    /// The SIMD path the kernel runs on.
    kernel_path: KernelPath,
}

/// The values a cell's block holds, whose size sets how many atoms a cell may have
/// ([`cell_atoms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockValues {
    /// Float32: the stored values at one stored time, or a field's value for float32
    /// answers blended in float32 between stored times.
    Float32,
    /// Float64: the stored times blended in float64 (derivatives, float64 answers).
    Float64,
}

impl BlockValues {
    /// The block the streaming executor fills for a query of `operator`, answered in
    /// float32 if `float32`, that `blends` stored times (else reads one as stored): the
    /// stored float32 values; a field's value for float32 answers blended in float32 (its
    /// rounding, 6e-8 of a value, is that of the float32 sums that follow); other blends
    /// in float64, as a derivative's weights (1/h² for a second one) would magnify a
    /// float32 blend's rounding past what float32 answers round away.
    pub fn of(blends: bool, operator: Operator, float32: bool) -> Self {
        if !blends || (float32 && operator == Operator::Field) {
            Self::Float32
        } else {
            Self::Float64
        }
    }

    fn bytes(self) -> usize {
        match self {
            Self::Float32 => 4,
            Self::Float64 => 8,
        }
    }
}

impl Plan {
    /// Checks the points and groups them by cell. `points` are physical `[x, y, z]`;
    /// `block` is what the cells' blocks will hold ([`BlockValues::of`]), which sizes them.
    pub fn new(
        points: &[[f64; 3]],
        method: Method,
        operator: Operator,
        axes: [Axis; 3],
        geometry: FieldGeometry,
        block: BlockValues,
    ) -> Result<Self> {
        method.check_supports(operator)?;
        if points.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "{} points is more than one batch can hold",
                points.len()
            )));
        }
        let kernel = Kernel::new(method, operator.max_order())?;
        for (axis, name) in axes.iter().zip(['x', 'y', 'z']) {
            kernel.check_axis(axis, name)?;
        }
        let cell_atoms = cell_atoms(
            &axes,
            &geometry,
            kernel.width(),
            geometry.ncomp * block.bytes(),
        );
        let finder = CellFinder::new(&axes, geometry.atom, cell_atoms);
        let kernel_path = KernelPath::selected_for(operator.max_order())?;
        let CellOrder {
            order,
            sorted,
            start,
            bounds,
        } = cell_order(points, &finder, kernel_path)?;
        let cells = cells_of(&sorted, &start, &bounds, &finder, &kernel, &geometry);
        let widest = |k: usize| cells.iter().map(|c| c.dims[k]).max().unwrap_or(0);
        let block_rows = [widest(0), widest(1)];
        Ok(Self {
            kernel,
            operator,
            axes,
            geometry,
            order,
            sorted,
            cells,
            block_rows,
            kernel_path,
        })
    }

    /// The SIMD path the kernel runs on: [`KernelPath::selected_for`] the operator unless set.
    pub fn kernel_path(&self) -> KernelPath {
        self.kernel_path
    }

    /// Runs the kernel on `path` (to compare paths), if this CPU can run it.
    pub fn set_kernel_path(&mut self, path: KernelPath) -> Result<()> {
        path.check()?;
        self.kernel_path = path;
        Ok(())
    }
}

/// The error of the lowest-numbered bad point (parallel checking may report another).
fn first_bad_point(points: &[[f64; 3]], axes: &[Axis; 3]) -> Option<Error> {
    points.iter().enumerate().find_map(|(i, p)| {
        if !p.iter().all(|v| v.is_finite()) {
            return Some(Error::InvalidArgument(format!(
                "point {i} is not finite: {p:?}"
            )));
        }
        (0..3).find_map(|a| match axes[a].grid_position(p[a], ['x', 'y', 'z'][a]) {
            Err(Error::OutOfDomain(m)) => Some(Error::OutOfDomain(format!("point {i}: {m}"))),
            _ => None,
        })
    })
}

/// The grid position of a physical point, or `None` if it is not finite or outside a
/// non-periodic axis.
#[inline]
fn grid_position(p: &[f64; 3], axes: &[Axis; 3]) -> Option<[f64; 3]> {
    let mut s = [0.0; 3];
    for a in 0..3 {
        if !p[a].is_finite() {
            return None;
        }
        s[a] = axes[a].grid_position(p[a], 'x').ok()?;
    }
    Some(s)
}

/// Atoms a cell may hold (Morton numbers below this).
const CELL_ATOM_SLOTS: usize = MAX_SIDE * MAX_SIDE * MAX_SIDE;

/// The cell of a grid position (linear number) and its atom in the cell (Morton number):
/// those of the node at or below it.
#[inline]
fn home(s: &[f64; 3], finder: &CellFinder<'_>) -> (usize, u32) {
    let node = [0, 1, 2].map(|a| (s[a] as usize).min(finder.axes[a].n - 1));
    let cell = [0, 1, 2].map(|a| node[a] >> finder.side_shift[a]);
    let atom = [0, 1, 2].map(|a| ((node[a] & (finder.side[a] - 1)) >> finder.atom_shift) as u32);
    let [cx, cy, _] = finder.cells_per_axis;
    let cell = (cell[2] * cy + cell[1]) * cx + cell[0];
    (cell, morton::encode_small(atom[0], atom[1], atom[2]))
}

/// A point on its way to the executor's order.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Placed {
    /// The caller's number of the point.
    point: u32,
    /// Its atom in its cell ([`home`]).
    atom: u32,
    /// Its grid position.
    position: [f64; 3],
}

pooled!(Placed);

/// The executor's order of the points (by cell, then by atom in the cell), their grid
/// positions in that order and where each cell's points start (and the end); the first
/// non-finite or out-of-domain point is named.
fn cell_order(points: &[[f64; 3]], finder: &CellFinder<'_>, path: KernelPath) -> Result<CellOrder> {
    let axes = finder.axes;
    /// Sorts the points by home cell; a bad point is left out and noted.
    struct HomeCell<'a>(
        &'a [[f64; 3]],
        &'a CellFinder<'a>,
        AtomicBool,
        Option<HomeFour<'a>>,
    );
    impl Buckets for HomeCell<'_> {
        type Value = Placed;
        #[inline]
        fn bucket(&self, item: usize) -> Option<(usize, Placed)> {
            let Some(position) = grid_position(&self.0[item], self.1.axes) else {
                self.2.store(true, Ordering::Relaxed);
                return None;
            };
            let (cell, atom) = home(&position, self.1);
            let placed = Placed {
                point: item as u32,
                atom,
                position,
            };
            Some((cell, placed))
        }

        fn bucket_all(
            &self,
            first: usize,
            keys: &mut [u32],
            values: &mut [Placed],
            count: &mut [u32],
        ) {
            let Some(four) = &self.3 else {
                return bucket_each(self, first, keys, values, count);
            };
            four.each(&self.0[first..first + keys.len()], |i, home| {
                let point = (first + i) as u32;
                let (key, placed) = match home {
                    Some(Home {
                        cell,
                        atom,
                        position,
                    }) => (
                        cell,
                        Placed {
                            point,
                            atom,
                            position,
                        },
                    ),
                    None => match self.bucket(first + i) {
                        Some(kept) => kept,
                        None => {
                            keys[i] = LEFT_OUT;
                            return;
                        }
                    },
                };
                count[key] += 1;
                (keys[i], values[i]) = (key as u32, placed);
            });
        }
    }
    let by_home = HomeCell(
        points,
        finder,
        AtomicBool::new(false),
        HomeFour::new(finder, path),
    );
    let (placed, start) = bucket_sort(points.len(), finder.total_cells(), &by_home);
    if by_home.2.into_inner() {
        return Err(first_bad_point(points, axes).expect("a bad point"));
    }
    // Each cell's points by atom (a counting sort of one bucket per atom), written
    // straight into the executor's order.
    // Every slot of both is written below, once (each cell's part by its own points).
    let mut order = Buffer::to_overwrite(placed.len(), 0u32);
    let mut sorted = Buffer::to_overwrite(placed.len(), [0.0; 3]);
    let mut parts = Vec::new();
    let (mut order_rest, mut sorted_rest) = (&mut order[..], &mut sorted[..]);
    for (cell, w) in start.windows(2).enumerate() {
        let (o, o_tail) = order_rest.split_at_mut(w[1] - w[0]);
        let (s, s_tail) = sorted_rest.split_at_mut(w[1] - w[0]);
        if !o.is_empty() {
            parts.push((cell, &placed[w[0]..w[1]], o, s));
        }
        (order_rest, sorted_rest) = (o_tail, s_tail);
    }
    // Each cell's bounds are found here, while its points are read anyway: a pass of
    // their own over the sorted positions took 12 ms of 10⁶ lag8 points' 57 (one thread;
    // the plan went from 52 to 48 ns a point).
    let bounds = parts
        .into_par_iter()
        .map(|(cell, part, order, sorted)| {
            let mut at = [0usize; CELL_ATOM_SLOTS + 1];
            let (mut low, mut high) = ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]);
            for p in part {
                at[p.atom as usize + 1] += 1;
                for a in 0..3 {
                    low[a] = low[a].min(p.position[a]);
                    high[a] = high[a].max(p.position[a]);
                }
            }
            for k in 1..at.len() {
                at[k] += at[k - 1];
            }
            // Where each slot's point is in the part, then the slots filled in order: the
            // random writes go to this small list in the L1 cache, not to the positions.
            let mut from = vec![0u32; part.len()];
            for (i, p) in part.iter().enumerate() {
                let slot = &mut at[p.atom as usize];
                from[*slot] = i as u32;
                *slot += 1;
            }
            for ((&i, order), sorted) in from.iter().zip(order.iter_mut()).zip(sorted.iter_mut()) {
                let p = &part[i as usize];
                (*order, *sorted) = (p.point, p.position);
            }
            CellBounds { cell, low, high }
        })
        .collect();
    Ok(CellOrder {
        order,
        sorted,
        start,
        bounds,
    })
}

/// A cell with points, and the lowest and highest grid positions of its points along each
/// axis.
struct CellBounds {
    cell: usize,
    low: [f64; 3],
    high: [f64; 3],
}

/// The points in the executor's order ([`cell_order`]).
struct CellOrder {
    order: Buffer<u32>,
    sorted: Buffer<[f64; 3]>,
    /// Where each cell's points start in `order` and `sorted` (and the end).
    start: Vec<usize>,
    /// The cells with points, in the order of their numbers.
    bounds: Vec<CellBounds>,
}

/// The cells with points (each a range of `sorted`, from the counting sort's `start`), in
/// storage order, each with the box of its points' stencils and the atoms they touch.
fn cells_of(
    sorted: &[[f64; 3]],
    start: &[usize],
    bounds: &[CellBounds],
    finder: &CellFinder<'_>,
    kernel: &Kernel,
    geometry: &FieldGeometry,
) -> Vec<Cell> {
    let mut cells: Vec<(u64, Cell)> = bounds
        .par_iter()
        .map(|b| {
            let coords = finder.coords(b.cell);
            let code = morton::encode(coords[0] as u32, coords[1] as u32, coords[2] as u32);
            let range = start[b.cell]..start[b.cell + 1];
            (code, cell_box(sorted, range, b, finder, kernel, geometry))
        })
        .collect();
    cells.sort_unstable_by_key(|(code, _)| *code);
    cells.into_iter().map(|(_, cell)| cell).collect()
}

/// Points a cell must have per atom of its box for every atom of the box to be taken as
/// needed without looking at each point's stencil (a dense query needs them all).
const DENSE: usize = 4;

/// The cell of the points `sorted[range]` (grid positions, within `bounds`): the box of
/// their stencils and the atoms they touch.
fn cell_box(
    sorted: &[[f64; 3]],
    range: Range<usize>,
    bounds: &CellBounds,
    finder: &CellFinder<'_>,
    kernel: &Kernel,
    geometry: &FieldGeometry,
) -> Cell {
    let points = &sorted[range.clone()];
    let axes = finder.axes;
    let width = kernel.width() as i64;
    let shift = finder.atom_shift;
    let atoms_per_axis = geometry.atoms_per_axis();
    let atom_of = |a: usize, u: i64| unwrapped_atom(u, axes[a].n, atoms_per_axis[a], shift);
    // A stencil's first node never decreases with the position, so the box runs from the
    // stencil of the lowest position to that of the highest, along each axis.
    let lo = [0, 1, 2].map(|a| kernel.base(bounds.low[a], &axes[a]));
    let hi = [0, 1, 2].map(|a| kernel.base(bounds.high[a], &axes[a]));
    let first_box_atom = [0, 1, 2].map(|a| atom_of(a, lo[a]));
    let side = [0, 1, 2].map(|a| (atom_of(a, hi[a] + width - 1) - first_box_atom[a] + 1) as usize);
    assert!(
        side[0] <= MAX_X,
        "a cell's box spans {} atoms along x",
        side[0]
    );
    let mut atoms = AtomSet::new(side);
    if points.len() >= DENSE * side.iter().product::<usize>() {
        atoms.add_box([0; 3], side.map(|s| s - 1));
    } else {
        for s in points {
            let (mut first, mut last) = ([0; 3], [0; 3]);
            for a in 0..3 {
                let base = kernel.base(s[a], &axes[a]);
                first[a] = (atom_of(a, base) - first_box_atom[a]) as usize;
                last[a] = (atom_of(a, base + width - 1) - first_box_atom[a]) as usize;
            }
            atoms.add_box(first, last);
        }
    }
    Cell {
        points: range,
        origin: lo,
        dims: [0, 1, 2].map(|a| (hi[a] - lo[a] + width) as usize),
        first_box_atom,
        atoms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_blend_sizes_its_cells_for_the_block_it_fills() {
        use BlockValues::{Float32, Float64};
        // One stored time: the stored float32 values, whatever the answers.
        assert_eq!(BlockValues::of(false, Operator::Gradient, false), Float32);
        // Blended: float32 for a field's value in float32 answers, else float64.
        assert_eq!(BlockValues::of(true, Operator::Field, true), Float32);
        assert_eq!(BlockValues::of(true, Operator::Field, false), Float64);
        assert_eq!(BlockValues::of(true, Operator::Gradient, true), Float64);
        // lag8 velocity on 256³, a point every 16 nodes: a float64 block's plan has twice
        // the cells of a float32 block's (on two threads, which leave the cells' count free).
        let axes = [Axis::unit(256, true); 3];
        let geometry = FieldGeometry::new([256; 3], 3, 8, 64).unwrap();
        let points: Vec<[f64; 3]> = (0..16 * 16 * 16)
            .map(|i| [i % 16, i / 16 % 16, i / 256].map(|k| 16.0 * k as f64 + 0.5))
            .collect();
        let cells = |block: BlockValues| {
            let plan = Plan::new(
                &points,
                Method::Lagrange(8),
                Operator::Field,
                axes,
                geometry.clone(),
                block,
            );
            plan.unwrap().cells.len()
        };
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (narrow, wide) = two.install(|| (cells(Float32), cells(Float64)));
        assert_eq!((narrow, wide), (64, 128));
    }

    /// A coordinate along `axis`: mostly inside, else on an edge, past one, or not finite.
    fn coordinate(axis: Axis) -> impl Strategy<Value = f64> {
        let (lo, span) = (axis.origin, axis.spacing * axis.n as f64);
        let last = axis.origin + axis.spacing * (axis.n - 1) as f64;
        prop_oneof![
            8 => (0.0..1.0f64).prop_map(move |f| lo + f * span),
            1 => prop::sample::select(vec![
                lo,
                -0.0,
                last,
                lo + span,
                lo - 1e-12,
                last + 1e-12,
                lo + span - 1e-12,
                lo - 0.3 * span,
                lo + 2.7 * span,
                f64::NAN,
                f64::INFINITY,
                -f64::INFINITY,
            ]),
        ]
    }

    /// Three axes (each periodic or bounded, of its own node count and spacing), an atom
    /// side, a cell's atoms along each axis and points along them.
    fn grid_and_points() -> impl Strategy<Value = ([Axis; 3], usize, [usize; 3], Vec<[f64; 3]>)> {
        let axis = (8usize..70, any::<bool>(), -2.0..2.0f64, 0.01..0.5f64).prop_map(
            |(n, periodic, origin, spacing)| Axis {
                n,
                origin,
                spacing,
                periodic,
            },
        );
        let cells = prop::sample::select(vec![[2, 1, 4], [8, 8, 8], [1, 8, 2]]);
        (
            [axis.clone(), axis.clone(), axis],
            prop::sample::select(vec![4usize, 8]),
            cells,
        )
            .prop_flat_map(|(axes, atom, cells)| {
                let point = [0, 1, 2].map(|a| coordinate(axes[a]));
                (
                    Just(axes),
                    Just(atom),
                    Just(cells),
                    prop::collection::vec(point, 0..300),
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The four-point pass on every SIMD path the CPU has orders and places every point
        /// as the scalar pass does, bit for bit, and names the same bad point.
        #[test]
        fn four_points_at_a_time_place_points_as_one_at_a_time(
            (axes, atom, cells, points) in grid_and_points()
        ) {
            let finder = CellFinder::new(&axes, atom, cells);
            // Any bad point fails the whole plan: the good ones alone too.
            let good: Vec<[f64; 3]> =
                points.iter().copied().filter(|p| grid_position(p, &axes).is_some()).collect();
            let simd = KernelPath::supported().into_iter().filter(|p| *p != KernelPath::Portable);
            for path in simd {
                for points in [&points, &good] {
                    let scalar = cell_order(points, &finder, KernelPath::Portable);
                    let four = cell_order(points, &finder, path);
                    match (&scalar, &four) {
                        (Ok(s), Ok(f)) => {
                            prop_assert_eq!(&s.order[..], &f.order[..]);
                            prop_assert_eq!(&s.start, &f.start);
                            let bits = |o: &CellOrder| {
                                o.sorted.iter().map(|p| p.map(f64::to_bits)).collect::<Vec<_>>()
                            };
                            prop_assert_eq!(bits(s), bits(f));
                        }
                        (Err(s), Err(f)) => prop_assert_eq!(s.to_string(), f.to_string()),
                        _ => prop_assert!(false, "{}: {} against {}", path.name(), scalar.is_ok(), four.is_ok()),
                    }
                }
                // Each point the four-point pass places itself, as the scalar pass would.
                let Some(four) = HomeFour::new(&finder, path) else { continue };
                four.each(&points, |i, found| {
                    if let Some(found) = found {
                        let position = grid_position(&points[i], &axes).expect("a placed point is good");
                        let (cell, atom) = home(&position, &finder);
                        assert_eq!(found, Home { cell, atom, position }, "point {i}: {:?}", points[i]);
                    }
                });
            }
        }
    }
}
