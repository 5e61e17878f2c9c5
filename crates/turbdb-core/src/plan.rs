//! The plan of a batch query: every point's position in grid units, and the points grouped
//! by the cells their stencils touch. A cell is an aligned cube of atoms inside one shard,
//! contiguous in storage order; it is the unit of work of the streaming executor.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::geometry::{FieldGeometry, ShardPos};
use crate::method::{Method, Operator};
use crate::morton;
use crate::stencil::{Axis, Kernel};

/// Atoms along one side of a cell (capped at the partition's).
pub const CELL_ATOMS: usize = 4;

/// A cell: its shard, its first atom (global atom coordinates) and the points it serves.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The shard holding the cell.
    pub shard: ShardPos,
    /// Global coordinates `[ax, ay, az]` of the cell's first atom.
    pub first_atom: [usize; 3],
    /// Points whose stencils touch the cell (their index in the batch), with
    /// [`SHARED`] set on those whose stencils also touch other cells.
    pub points: Vec<u32>,
    /// Their grid positions, gathered here so the executor reads them sequentially.
    pub positions: Vec<[f64; 3]>,
}

/// Flag on [`Cell::points`]: the point's stencil spans several cells, so its partial sums
/// from different cells must be added, not stored.
pub const SHARED: u32 = 1 << 31;

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
        let cell_atoms = CELL_ATOMS.min(geometry.atoms_per_side());
        let cells = group_by_cell(&positions, &kernel, &axes, &geometry, cell_atoms);
        Ok(Self {
            kernel,
            operator,
            axes,
            geometry,
            positions,
            cells,
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

fn group_by_cell(
    positions: &[[f64; 3]],
    kernel: &Kernel,
    axes: &[Axis; 3],
    geometry: &FieldGeometry,
    cell_atoms: usize,
) -> Vec<Cell> {
    let side = cell_atoms * geometry.atom;
    let cells_per_axis: [usize; 3] = [0, 1, 2].map(|a| axes[a].n.div_ceil(side));
    let width = kernel.width();
    // The cells each point's stencil touches (at most 2 per axis for any stencil that is
    // narrower than a cell, up to 4 on tiny periodic grids).
    let cells_of = |s: &[f64; 3]| {
        let mut placement = crate::stencil::AxisWeights::default();
        let mut per_axis = [([0usize; 4], 0usize); 3];
        for a in 0..3 {
            kernel.base_only(s[a], &axes[a], &mut placement);
            per_axis[a] = cells_along(placement.wrapped, width, axes[a].n, side);
        }
        let mut out = [0u32; 64];
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
    // A counting sort by cell that carries each point's position along, so that every
    // cell's points end up contiguous in memory.
    let pairs: Vec<(u32, u32)> = positions
        .par_iter()
        .enumerate()
        .flat_map_iter(|(point, s)| {
            let (cells, count) = cells_of(s);
            let flag = if count > 1 { SHARED } else { 0 };
            (0..count).map(move |i| (cells[i], point as u32 | flag))
        })
        .collect();
    let total_cells = cells_per_axis.iter().product::<usize>();
    let mut counts = vec![0u32; total_cells + 1];
    for &(cell, _) in &pairs {
        counts[cell as usize + 1] += 1;
    }
    for c in 1..counts.len() {
        counts[c] += counts[c - 1];
    }
    let entries = counts[total_cells] as usize;
    let mut sorted_points = vec![0u32; entries];
    let mut sorted_positions = vec![[0.0f64; 3]; entries];
    let mut fill = counts.clone();
    for &(cell, point) in &pairs {
        let slot = fill[cell as usize] as usize;
        sorted_points[slot] = point;
        sorted_positions[slot] = positions[(point & !SHARED) as usize];
        fill[cell as usize] += 1;
    }
    drop(pairs);
    let per_shard = geometry.atoms_per_side();
    let occupied: Vec<usize> = (0..total_cells)
        .filter(|&c| counts[c + 1] > counts[c])
        .collect();
    let mut cells: Vec<(u64, Cell)> = occupied
        .par_iter()
        .map(|&c| {
            let (cx, cy, cz) = (
                c % cells_per_axis[0],
                c / cells_per_axis[0] % cells_per_axis[1],
                c / (cells_per_axis[0] * cells_per_axis[1]),
            );
            let first_atom = [cx * cell_atoms, cy * cell_atoms, cz * cell_atoms];
            let shard = first_atom.map(|a| a / per_shard);
            let code = morton::encode(
                first_atom[0] as u32,
                first_atom[1] as u32,
                first_atom[2] as u32,
            );
            // Within a cell, points in Morton order of their position: neighbours share
            // most of their stencils, so the executor finds the rows in cache.
            let range = counts[c] as usize..counts[c + 1] as usize;
            let mut order: Vec<(u64, u32)> = sorted_positions[range.clone()]
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    (
                        morton::encode(
                            s[0] as u32 & 0xfffff,
                            s[1] as u32 & 0xfffff,
                            s[2] as u32 & 0xfffff,
                        ),
                        i as u32,
                    )
                })
                .collect();
            order.sort_unstable();
            let points = order
                .iter()
                .map(|&(_, i)| sorted_points[range.start + i as usize])
                .collect();
            let positions = order
                .iter()
                .map(|&(_, i)| sorted_positions[range.start + i as usize])
                .collect();
            (
                code,
                Cell {
                    shard,
                    first_atom,
                    points,
                    positions,
                },
            )
        })
        .collect();
    cells.sort_unstable_by_key(|(code, _)| *code);
    cells.into_iter().map(|(_, cell)| cell).collect()
}
