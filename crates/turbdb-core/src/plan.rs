//! The plan of a batch query: every point's position in grid units, and the points grouped
//! by the cells their stencils touch. A cell is an aligned cube of atoms inside one shard,
//! contiguous in storage order; it is the unit of work of the streaming executor.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::geometry::{FieldGeometry, ShardPos};
use crate::method::{Method, Operator};
use crate::morton;
use crate::stencil::{Axis, Kernel};

/// Most atoms along one side of a cell. Big cells mean fewer points whose stencils span
/// several cells (each such point costs weights, a second set of row sums and a shared
/// partial row); small cells keep a worker's float64 block (32³ nodes at 4, 768 KiB for
/// three components) in its L2 cache, which measured faster than 64³ cells.
pub const CELL_ATOMS: usize = 4;

/// The cell side, in atoms: the largest power of two up to [`CELL_ATOMS`] (and the shard's
/// side) that still leaves every worker several cells of the grid to take.
fn cell_atoms(axes: &[Axis; 3], geometry: &FieldGeometry) -> usize {
    let enough = 4 * rayon::current_num_threads();
    let mut atoms = CELL_ATOMS.min(geometry.atoms_per_side());
    while atoms > 1 {
        let side = atoms * geometry.atom;
        if axes.iter().map(|a| a.n.div_ceil(side)).product::<usize>() >= enough {
            break;
        }
        atoms /= 2;
    }
    atoms
}

/// A cell: its shard, its first atom (global atom coordinates) and the points it serves.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The shard holding the cell.
    pub shard: ShardPos,
    /// Global coordinates `[ax, ay, az]` of the cell's first atom.
    pub first_atom: [usize; 3],
    /// Where each point's partial sums from this cell go: its row of the result, or, with
    /// [`SHARED`] set, a row of the shared partials (the point's stencil spans several
    /// cells; [`Plan::shared`] adds its rows up afterwards).
    pub outputs: Vec<u32>,
    /// The points' grid positions, gathered here so the executor reads them sequentially.
    pub positions: Vec<[f64; 3]>,
}

/// Flag on [`Cell::outputs`]: the row is one of the shared partials.
pub const SHARED: u32 = 1 << 31;

/// The points whose stencils span several cells. Each has one row of partial sums per
/// cell, written by that cell alone; their sum, always in the same order, is the point's
/// value, so results do not depend on which worker finished first.
#[derive(Debug, Default)]
pub struct SharedPoints {
    /// The points, ascending.
    pub points: Vec<u32>,
    /// Point `points[i]` owns the partial rows `offsets[i]..offsets[i + 1]`.
    pub offsets: Vec<u32>,
}

impl SharedPoints {
    /// Shared partial rows in all.
    pub fn rows(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0) as usize
    }
}

/// A query prepared for execution.
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
    /// Every point in grid units (wrapped on periodic axes).
    pub positions: Vec<[f64; 3]>,
    /// Cells with at least one point, in storage order.
    pub cells: Vec<Cell>,
    /// The points served by several cells.
    pub shared: SharedPoints,
    /// Atoms along one side of a cell.
    pub cell_atoms: usize,
}

impl Plan {
    /// Checks the points and groups them by cell. `points` are physical `[x, y, z]`.
    pub fn new(
        points: &[[f64; 3]],
        method: Method,
        operator: Operator,
        axes: [Axis; 3],
        geometry: FieldGeometry,
    ) -> Result<Self> {
        method.check_supports(operator)?;
        if points.len() >= SHARED as usize {
            return Err(Error::InvalidArgument(format!(
                "{} points is more than one batch can hold",
                points.len()
            )));
        }
        let kernel = Kernel::new(method, operator.max_order())?;
        for (axis, name) in axes.iter().zip(['x', 'y', 'z']) {
            kernel.check_axis(axis, name)?;
        }
        let positions = grid_positions(points, &axes)?;
        let cell_atoms = cell_atoms(&axes, &geometry);
        let (cells, shared) = group_by_cell(&positions, &kernel, &axes, &geometry, cell_atoms);
        Ok(Self {
            kernel,
            operator,
            axes,
            geometry,
            positions,
            cells,
            shared,
            cell_atoms,
        })
    }
}

/// Grid-unit positions; the first non-finite or out-of-domain point is named.
fn grid_positions(points: &[[f64; 3]], axes: &[Axis; 3]) -> Result<Vec<[f64; 3]>> {
    let mut positions = vec![[0.0; 3]; points.len()];
    let ok = positions
        .par_chunks_mut(4096)
        .zip(points.par_chunks(4096))
        .all(|(out, chunk)| {
            out.iter_mut().zip(chunk).all(|(s, p)| {
                p.iter().all(|v| v.is_finite())
                    && (0..3).all(|a| match axes[a].grid_position(p[a], ['x', 'y', 'z'][a]) {
                        Ok(v) => {
                            s[a] = v;
                            true
                        }
                        Err(_) => false,
                    })
            })
        });
    if ok {
        Ok(positions)
    } else {
        Err(first_bad_point(points, axes).expect("a bad point"))
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

/// The distinct cells (along one axis) holding the `width` nodes from `wrapped` (the first
/// node, wrapped into `0..n`) on, wrapping past `n`.
pub fn cells_along(
    wrapped: usize,
    width: usize,
    n: usize,
    cell_side: usize,
) -> ([usize; 4], usize) {
    let mut out = [usize::MAX; 4];
    let mut count = 0;
    let before_wrap = width.min(n - wrapped);
    for (start, len) in [(wrapped, before_wrap), (0, width - before_wrap)] {
        if len == 0 {
            continue;
        }
        for cell in start / cell_side..=(start + len - 1) / cell_side {
            if count < out.len() && !out[..count].contains(&cell) {
                out[count] = cell;
                count += 1;
            }
        }
    }
    (out, count)
}

/// Most cells one stencil can touch (4 per axis on tiny periodic grids).
const MAX_CELLS: usize = 64;

/// Cells of a point kept between the two passes of the sort: 2 per axis.
const KEPT_CELLS: usize = 8;

/// A point's cell count and its first [`KEPT_CELLS`] cells.
type KeptCells = (u8, [u32; KEPT_CELLS]);

/// Groups the points by the cells their stencils touch (a parallel counting sort by cell,
/// then each cell's points in Morton order, so that neighbours, which share most of their
/// stencils, come together), and gives every point that several cells serve its rows of
/// shared partial sums.
fn group_by_cell(
    positions: &[[f64; 3]],
    kernel: &Kernel,
    axes: &[Axis; 3],
    geometry: &FieldGeometry,
    cell_atoms: usize,
) -> (Vec<Cell>, SharedPoints) {
    let side = cell_atoms * geometry.atom;
    let width = kernel.width();
    let cells_per_axis: [usize; 3] = [0, 1, 2].map(|a| axes[a].n.div_ceil(side));
    let total_cells = cells_per_axis.iter().product::<usize>();
    // The cells each point's stencil touches (linear cell numbers).
    let cells_of = |s: &[f64; 3]| {
        let mut placement = crate::stencil::AxisWeights::default();
        let mut per_axis = [([0usize; 4], 0usize); 3];
        for a in 0..3 {
            kernel.base_only(s[a], &axes[a], &mut placement);
            per_axis[a] = cells_along(placement.wrapped, width, axes[a].n, side);
        }
        let mut out = [0u32; MAX_CELLS];
        let mut count = 0;
        for &cz in &per_axis[2].0[..per_axis[2].1] {
            for &cy in &per_axis[1].0[..per_axis[1].1] {
                for &cx in &per_axis[0].0[..per_axis[0].1] {
                    out[count] = ((cz * cells_per_axis[1] + cy) * cells_per_axis[0] + cx) as u32;
                    count += 1;
                }
            }
        }
        (out, count)
    };
    // A parallel counting sort by cell, in two passes over chunks of points: count, then
    // place each (point, output row) at its chunk's next slot in the cell.
    let chunk = positions
        .len()
        .div_ceil(4 * rayon::current_num_threads())
        .max(1 << 14);
    // The first pass keeps each point's cells (up to KEPT_CELLS, almost always all of
    // them) so the second need not find them again.
    let (kept, mut next): (Vec<Vec<KeptCells>>, Vec<Vec<usize>>) = positions
        .par_chunks(chunk)
        .map(|part| {
            let mut per_cell = vec![0usize; total_cells];
            let kept = part
                .iter()
                .map(|s| {
                    let (cells, count) = cells_of(s);
                    for &c in &cells[..count] {
                        per_cell[c as usize] += 1;
                    }
                    let mut first = [0u32; KEPT_CELLS];
                    let n = count.min(KEPT_CELLS);
                    first[..n].copy_from_slice(&cells[..n]);
                    (count as u8, first)
                })
                .collect();
            (kept, per_cell)
        })
        .unzip();
    let mut cell_start = vec![0usize; total_cells + 1];
    let mut slot = 0;
    for c in 0..total_cells {
        cell_start[c] = slot;
        for per_cell in next.iter_mut() {
            let n = per_cell[c];
            per_cell[c] = slot;
            slot += n;
        }
    }
    cell_start[total_cells] = slot;
    // Shared points and their partial rows.
    let mut shared = SharedPoints {
        points: Vec::new(),
        offsets: vec![0],
    };
    for (point, &(count, _)) in kept.iter().flatten().enumerate() {
        if count > 1 {
            shared.points.push(point as u32);
            shared.offsets.push(shared.rows() as u32 + u32::from(count));
        }
    }
    let mut sorted = vec![(0u32, [0.0f64; 3]); slot];
    let out = SortedPtr(sorted.as_mut_ptr());
    let out = &out;
    let shared_ref = &shared;
    positions
        .par_chunks(chunk)
        .zip(kept.par_iter())
        .zip(next.par_iter_mut())
        .enumerate()
        .for_each(|(k, ((part, kept), next))| {
            let first_point = k * chunk;
            // This chunk's shared points start here in `shared.points`.
            let mut shared_index = shared_ref
                .points
                .partition_point(|&p| (p as usize) < first_point);
            for (i, s) in part.iter().enumerate() {
                let point = (first_point + i) as u32;
                let (count, first) = (usize::from(kept[i].0), &kept[i].1);
                let all;
                let cells: &[u32] = if count <= KEPT_CELLS {
                    &first[..count]
                } else {
                    all = cells_of(s).0;
                    &all[..count]
                };
                let first_row = if count > 1 {
                    shared_index += 1;
                    shared_ref.offsets[shared_index - 1]
                } else {
                    0
                };
                for (j, &c) in cells.iter().enumerate() {
                    let output = if count > 1 {
                        SHARED | (first_row + j as u32)
                    } else {
                        point
                    };
                    let at = next[c as usize];
                    next[c as usize] += 1;
                    // SAFETY: every slot below `sorted.len()` is handed out exactly once.
                    unsafe { out.0.add(at).write((output, *s)) };
                }
            }
        });
    // Each occupied cell: its points in Morton order of their positions (neighbours
    // share most of their stencils, so the executor finds the rows in cache).
    let per_shard = geometry.atoms_per_side();
    let mut cells: Vec<(u64, Cell)> = (0..cell_start.len() - 1)
        .into_par_iter()
        .filter(|&c| cell_start[c + 1] > cell_start[c])
        .map(|c| {
            let coords = [
                c % cells_per_axis[0],
                c / cells_per_axis[0] % cells_per_axis[1],
                c / (cells_per_axis[0] * cells_per_axis[1]),
            ];
            let range = &sorted[cell_start[c]..cell_start[c + 1]];
            let mut order: Vec<u64> = range
                .iter()
                .enumerate()
                .map(|(i, (_, s))| {
                    let code = morton::encode(
                        s[0] as u32 & 0x3ff,
                        s[1] as u32 & 0x3ff,
                        s[2] as u32 & 0x3ff,
                    );
                    code << 32 | i as u64
                })
                .collect();
            order.sort_unstable();
            let entry = |&key: &u64| &range[key as u32 as usize];
            let first_atom = coords.map(|c| c * cell_atoms);
            let cell = Cell {
                shard: first_atom.map(|a| a / per_shard),
                first_atom,
                outputs: order.iter().map(|key| entry(key).0).collect(),
                positions: order.iter().map(|key| entry(key).1).collect(),
            };
            let code = morton::encode(coords[0] as u32, coords[1] as u32, coords[2] as u32);
            (code, cell)
        })
        .collect();
    cells.sort_unstable_by_key(|(code, _)| *code);
    (cells.into_iter().map(|(_, cell)| cell).collect(), shared)
}

/// The cell-sorted entries, written by all workers at distinct slots.
struct SortedPtr(*mut (u32, [f64; 3]));
// SAFETY: workers write disjoint slots.
unsafe impl Sync for SortedPtr {}
