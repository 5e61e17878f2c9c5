//! The plan of a batch query: every point's position in grid units, and the points grouped
//! by the cells their stencils touch. A cell is an aligned box of atoms inside one shard,
//! contiguous in storage order; it is the unit of work of the streaming executor.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::engine::atomset::{AtomSet, MAX_SIDE};
use crate::engine::buffers::{pooled, Buffer};
use crate::engine::cell_finder::CellFinder;
use crate::engine::cell_graph::CellGraph;
use crate::engine::colouring::Colouring;
use crate::engine::counting_sort::{bucket_sort, Buckets};
use crate::engine::simd::KernelPath;
use crate::error::{Error, Result};
use crate::interp::method::{Method, Operator};
use crate::interp::stencil::Kernel;
use crate::storage::axis::Axis;
use crate::storage::geometry::{FieldGeometry, ShardPos};
use crate::storage::morton;

/// Bytes a worker's cell block may take: it must stay in the L2 cache (2 MiB here) with
/// room to spare. Bigger cells mean fewer points whose stencils span several cells (each
/// such point costs weights and a second set of row sums); measured on lag8 at 1e6
/// points, 64×64×32-node float32 blocks (1.5 MiB) beat 64×32×32 by 7%, and float64
/// blocks of the same size, for pchip, were 7% slower than half that size.
const BLOCK_BUDGET: usize = 1600 << 10;

/// The cell's sides, in atoms: from [`MAX_SIDE`] (at most the shard's side), halved along
/// the longest side (z first, x last: a stencil split along x costs most, as its rows are
/// summed in both cells) until the block of `block_bytes` per node fits [`BLOCK_BUDGET`]
/// and every worker has several cells of each colour to take.
fn cell_atoms(
    axes: &[Axis; 3],
    geometry: &FieldGeometry,
    width: usize,
    block_bytes: usize,
) -> [usize; 3] {
    let enough = 2 * rayon::current_num_threads();
    let mut atoms = [MAX_SIDE.min(geometry.atoms_per_side()); 3];
    loop {
        let side = atoms.map(|c| c * geometry.atom);
        let cells = (0..3)
            .map(|a| axes[a].n.div_ceil(side[a]))
            .product::<usize>();
        let fits = side.iter().product::<usize>() * block_bytes <= BLOCK_BUDGET;
        if fits && cells / Colouring::new(axes, side, width).colours() >= enough {
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

/// A cell: its shard, its first atom (global atom coordinates), the atoms its points need
/// and the points it serves.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The shard holding the cell.
    pub shard: ShardPos,
    /// Global coordinates `[ax, ay, az]` of the cell's first atom.
    pub first_atom: [usize; 3],
    /// The atoms the points' stencils touch.
    pub atoms: AtomSet,
    /// The cell's points in [`Plan::entries`].
    pub entries: Range<usize>,
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
    /// Cells with at least one point, in storage order.
    pub cells: Vec<Cell>,
    /// The cells of each colour (indices into `cells`, storage order). Cells of one colour
    /// never serve the same point, so they run together and add straight into the result;
    /// the colours run one after the other, always in the same order, so a point's sum is
    /// the same whichever worker finishes first.
    pub colours: Vec<Vec<usize>>,
    /// When each cell may run: after its neighbours of earlier colours (see [`CellGraph`]).
    pub graph: CellGraph,
    /// The points (executor's numbers) each cell serves, cell after cell, ascending.
    pub entries: Buffer<u32>,
    /// Atoms along each side of a cell, `[x, y, z]`.
    pub cell_atoms: [usize; 3],
    /// The SIMD path the kernel runs on.
    kernel_path: KernelPath,
}

impl Plan {
    /// Checks the points and groups them by cell. `points` are physical `[x, y, z]`.
    /// `levels` is the number of stored times the query blends (their block is float64).
    pub fn new(
        points: &[[f64; 3]],
        method: Method,
        operator: Operator,
        axes: [Axis; 3],
        geometry: FieldGeometry,
        levels: usize,
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
        let value_bytes = if levels > 1 { 8 } else { 4 };
        let cell_atoms = cell_atoms(
            &axes,
            &geometry,
            kernel.width(),
            geometry.ncomp * value_bytes,
        );
        let finder = CellFinder::new(&kernel, &axes, geometry.atom, cell_atoms);
        let (order, sorted) = cell_order(points, &finder)?;
        let (cells, entries) = group_by_cell(&sorted, &finder, &geometry, cell_atoms);
        let side = cell_atoms.map(|c| c * geometry.atom);
        let colouring = Colouring::new(&axes, side, kernel.width());
        let coords: Vec<[usize; 3]> = cells
            .iter()
            .map(|cell| [0, 1, 2].map(|a| cell.first_atom[a] / cell_atoms[a]))
            .collect();
        let mut colours = vec![Vec::new(); colouring.colours()];
        for (i, &c) in coords.iter().enumerate() {
            colours[colouring.colour(c)].push(i);
        }
        colours.retain(|c| !c.is_empty());
        let mut rank = vec![0; cells.len()];
        for (r, colour) in colours.iter().enumerate() {
            for &c in colour {
                rank[c] = r;
            }
        }
        let graph = CellGraph::new(&coords, &rank, &colouring);
        Ok(Self {
            kernel,
            operator,
            axes,
            geometry,
            order,
            sorted,
            cells,
            colours,
            graph,
            entries,
            cell_atoms,
            kernel_path: KernelPath::selected_for(operator.max_order())?,
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

/// The cells one chunk of points meets: their points and the atoms they need.
struct ChunkCells {
    /// Slot of each cell met.
    index: FxHashMap<usize, usize>,
    /// The cells, by slot.
    cells: Vec<usize>,
    lists: Vec<Vec<u32>>,
    atoms: Vec<AtomSet>,
    /// The last cells looked up, by their low bits: consecutive points mostly meet the
    /// same few cells, so most lookups end here.
    recent: [(usize, usize); 8],
}

impl Default for ChunkCells {
    fn default() -> Self {
        Self {
            index: FxHashMap::default(),
            cells: Vec::new(),
            lists: Vec::new(),
            atoms: Vec::new(),
            recent: [(usize::MAX, 0); 8],
        }
    }
}

impl ChunkCells {
    /// The slot of `cell`, made on first meeting.
    #[inline]
    fn slot(&mut self, cell: usize) -> usize {
        let recent = &mut self.recent[cell & 7];
        if recent.0 == cell {
            return recent.1;
        }
        let slot = *self.index.entry(cell).or_insert_with(|| {
            self.cells.push(cell);
            self.lists.push(Vec::new());
            self.atoms.push(AtomSet::default());
            self.cells.len() - 1
        });
        *recent = (cell, slot);
        slot
    }
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
    (cell, morton::encode(atom[0], atom[1], atom[2]) as u32)
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

/// The executor's order of the points (by cell, then by atom in the cell) and their grid
/// positions in that order; the first non-finite or out-of-domain point is named.
fn cell_order(
    points: &[[f64; 3]],
    finder: &CellFinder<'_>,
) -> Result<(Buffer<u32>, Buffer<[f64; 3]>)> {
    let axes = finder.axes;
    /// Sorts the points by home cell; a bad point is left out and noted.
    struct HomeCell<'a>(&'a [[f64; 3]], &'a CellFinder<'a>, AtomicBool);
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
    }
    let by_home = HomeCell(points, finder, AtomicBool::new(false));
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
    for w in start.windows(2) {
        let (o, o_tail) = order_rest.split_at_mut(w[1] - w[0]);
        let (s, s_tail) = sorted_rest.split_at_mut(w[1] - w[0]);
        if !o.is_empty() {
            parts.push((&placed[w[0]..w[1]], o, s));
        }
        (order_rest, sorted_rest) = (o_tail, s_tail);
    }
    parts.into_par_iter().for_each(|(part, order, sorted)| {
        let mut at = [0usize; CELL_ATOM_SLOTS + 1];
        for p in part {
            at[p.atom as usize + 1] += 1;
        }
        for k in 1..at.len() {
            at[k] += at[k - 1];
        }
        for p in part {
            let slot = &mut at[p.atom as usize];
            order[*slot] = p.point;
            sorted[*slot] = p.position;
            *slot += 1;
        }
    });
    Ok((order, sorted))
}

/// Groups the points (executor's order) by the cells their stencils touch, with the atoms
/// each cell needs.
fn group_by_cell(
    sorted: &[[f64; 3]],
    finder: &CellFinder<'_>,
    geometry: &FieldGeometry,
    cell_atoms: [usize; 3],
) -> (Vec<Cell>, Buffer<u32>) {
    // One pass over chunks of points: each chunk lists its points cell by cell (a few
    // hundred sequential streams) with the atoms they need; the lists are then joined in
    // chunk order, so every cell's points stay in the executor's order. Only the cells a
    // chunk meets are kept, so small queries on big grids stay small.
    let chunk = sorted
        .len()
        .div_ceil(4 * rayon::current_num_threads())
        .max(1 << 14);
    let chunks: Vec<ChunkCells> = sorted
        .par_chunks(chunk)
        .enumerate()
        .map(|(k, part)| {
            let mut found = ChunkCells::default();
            for (i, s) in part.iter().enumerate() {
                let point = (k * chunk + i) as u32;
                finder.visit(s, |cell, x, y, z| {
                    let at = found.slot(cell);
                    found.lists[at].push(point);
                    found.atoms[at].add(&AtomSet::product(x, y, z));
                });
            }
            found
        })
        .collect();
    let mut occupied: Vec<usize> = chunks
        .iter()
        .flat_map(|c| c.cells.iter().copied())
        .collect();
    occupied.sort_unstable();
    occupied.dedup();
    // Per occupied cell: its part of every chunk (by the chunk's slot), its entries and atoms.
    let slots: Vec<Vec<Option<usize>>> = occupied
        .iter()
        .map(|cell| chunks.iter().map(|c| c.index.get(cell).copied()).collect())
        .collect();
    let mut start = vec![0usize; occupied.len() + 1];
    for (i, of_chunks) in slots.iter().enumerate() {
        let len: usize = chunks
            .iter()
            .zip(of_chunks)
            .filter_map(|(c, s)| s.map(|s| c.lists[s].len()))
            .sum();
        start[i + 1] = start[i] + len;
    }
    assert!(
        start[occupied.len()] <= u32::MAX as usize,
        "too many (point, cell) pairs in one batch"
    );
    // Every slot is written below, once (each cell's part by its lists).
    let mut entries = Buffer::to_overwrite(start[occupied.len()], 0u32);
    let mut parts: Vec<&mut [u32]> = Vec::with_capacity(occupied.len());
    let mut rest = &mut entries[..];
    for w in start.windows(2) {
        let (head, tail) = rest.split_at_mut(w[1] - w[0]);
        parts.push(head);
        rest = tail;
    }
    parts
        .par_iter_mut()
        .zip(slots.par_iter())
        .for_each(|(part, of_chunks)| {
            let mut at = 0;
            for (c, s) in chunks.iter().zip(of_chunks) {
                if let Some(s) = *s {
                    part[at..at + c.lists[s].len()].copy_from_slice(&c.lists[s]);
                    at += c.lists[s].len();
                }
            }
        });
    let [cx, cy, _] = finder.cells_per_axis;
    let per_shard = geometry.atoms_per_side();
    let mut cells: Vec<(u64, Cell)> = occupied
        .iter()
        .zip(&slots)
        .enumerate()
        .map(|(i, (&c, of_chunks))| {
            let coords = [c % cx, c / cx % cy, c / (cx * cy)];
            let first_atom = [0, 1, 2].map(|a| coords[a] * cell_atoms[a]);
            let mut atoms = AtomSet::default();
            for (chunk, s) in chunks.iter().zip(of_chunks) {
                if let Some(s) = *s {
                    atoms.add(&chunk.atoms[s]);
                }
            }
            let cell = Cell {
                shard: first_atom.map(|a| a / per_shard),
                first_atom,
                atoms,
                entries: start[i]..start[i + 1],
            };
            let code = morton::encode(coords[0] as u32, coords[1] as u32, coords[2] as u32);
            (code, cell)
        })
        .collect();
    cells.sort_unstable_by_key(|(code, _)| *code);
    (cells.into_iter().map(|(_, cell)| cell).collect(), entries)
}
