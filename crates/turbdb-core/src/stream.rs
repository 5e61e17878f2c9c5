//! The streaming executor (Kanov et al.): each needed atom is read once per batch, in
//! storage order, and added to the partial sums of every point whose stencil touches it.
//! Cells run in parallel; each returns partial sums for its points, which are then added
//! into the result, so the answer does not depend on the order atoms arrive in.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::accumulate::{accumulate_any, Block, Runs, TermSet, PADDING};
use crate::error::Result;
use crate::geometry::ShardPos;
use crate::morton;
use crate::plan::{Cell, Plan, CELL_ATOMS, SHARED};
use crate::reader::{AtomRequest, FieldReader};
use crate::stencil::AxisWeights;

/// One stored time step of a query and its weight in the temporal interpolation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeLevel {
    /// Time index in the dataset.
    pub t: usize,
    /// Weight of that step.
    pub weight: f64,
}

/// Where atoms come from: the store, a cache, or a test double.
pub trait AtomSource: Sync {
    /// Reads the requested atoms of shard `shard` at time `t` into `out` (atom slots).
    fn read_atoms(
        &self,
        t: usize,
        shard: ShardPos,
        atoms: &[AtomRequest],
        out: &mut [f32],
    ) -> Result<()>;
}

impl AtomSource for FieldReader {
    fn read_atoms(
        &self,
        t: usize,
        shard: ShardPos,
        atoms: &[AtomRequest],
        out: &mut [f32],
    ) -> Result<()> {
        FieldReader::read_atoms(self, t, shard, atoms, out)
    }
}

/// Counters that show what an execution did.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Atoms read from the source.
    pub atoms_read: AtomicU64,
    /// Read calls made to the source.
    pub read_calls: AtomicU64,
    /// Partial sums added: one per (point, cell) when streaming (all time levels at
    /// once), one per (point, atom, time level) for the direct baselines.
    pub contributions: AtomicU64,
}

impl StreamStats {
    /// `(atoms_read, read_calls, contributions)`.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.atoms_read.load(Ordering::Relaxed),
            self.read_calls.load(Ordering::Relaxed),
            self.contributions.load(Ordering::Relaxed),
        )
    }
}

/// In which order atoms are visited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Storage order, cells in parallel.
    Storage,
    /// A pseudo-random order from this seed, one thread (for testing order independence).
    Shuffled(u64),
}

/// Evaluates the plan: returns `N × ncomp × slots` values, point-major.
pub fn execute(
    plan: &Plan,
    source: &dyn AtomSource,
    levels: &[TimeLevel],
    order: Order,
    stats: &StreamStats,
) -> Result<Vec<f64>> {
    let terms = TermSet::new(plan.operator.terms(), plan.operator.slots());
    let out_len = plan.geometry.ncomp * terms.slots();
    // Cells write their partial sums straight into the result from every worker: a point
    // inside one cell to its own row, a point whose stencil spans cells to its row of the
    // shared partials for that cell. Every row has exactly one writer, so plain stores do.
    let mut result = vec![0.0f64; plan.positions.len() * out_len];
    let mut shared_rows = vec![0.0f64; plan.shared.rows() * out_len];
    let targets = (
        ResultPtr(result.as_mut_ptr()),
        ResultPtr(shared_rows.as_mut_ptr()),
    );
    let add = |cell: &Cell, partial: Vec<f64>| {
        let targets = &targets;
        for (&output, values) in cell.outputs.iter().zip(partial.chunks_exact(out_len)) {
            let (base, row) = if output & SHARED == 0 {
                (&targets.0, output as usize)
            } else {
                (&targets.1, (output & !SHARED) as usize)
            };
            // SAFETY: the row is inside its buffer, which outlives the workers, and no
            // other cell writes it (see above).
            let dst = unsafe { std::slice::from_raw_parts_mut(base.0.add(row * out_len), out_len) };
            dst.copy_from_slice(values);
        }
    };
    match order {
        Order::Storage => plan.cells.par_iter().try_for_each(|cell| {
            let partial = SCRATCH.with_borrow_mut(|scratch| {
                run_cell(plan, cell, source, levels, &terms, None, stats, scratch)
            })?;
            add(cell, partial);
            Ok(())
        })?,
        Order::Shuffled(seed) => {
            let mut rng = SplitMix(seed);
            let mut cells: Vec<&Cell> = plan.cells.iter().collect();
            rng.shuffle(&mut cells);
            let mut scratch = Scratch::default();
            for cell in cells {
                let partial = run_cell(
                    plan,
                    cell,
                    source,
                    levels,
                    &terms,
                    Some(&mut rng),
                    stats,
                    &mut scratch,
                )?;
                add(cell, partial);
            }
        }
    }
    add_shared_partials(plan, &shared_rows, &mut result, out_len);
    Ok(result)
}

/// Sums each shared point's partial rows into its result row, in cell order.
fn add_shared_partials(plan: &Plan, shared_rows: &[f64], result: &mut [f64], out_len: usize) {
    let shared = &plan.shared;
    let base = ResultPtr(result.as_mut_ptr());
    let base = &base;
    shared
        .points
        .par_iter()
        .enumerate()
        .for_each(|(i, &point)| {
            let rows = shared.offsets[i] as usize..shared.offsets[i + 1] as usize;
            // SAFETY: each shared point is handled by one iteration and its row is in bounds.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(base.0.add(point as usize * out_len), out_len)
            };
            for row in rows {
                for (d, &v) in dst.iter_mut().zip(&shared_rows[row * out_len..][..out_len]) {
                    *d += v;
                }
            }
        });
}

/// The result buffer, shared by the workers (see `execute` for why this is sound).
struct ResultPtr(*mut f64);
// SAFETY: workers write disjoint rows (see `execute`).
unsafe impl Sync for ResultPtr {}
unsafe impl Send for ResultPtr {}

thread_local! {
    /// Each worker's buffers, kept from cell to cell and from query to query: a fresh
    /// float64 block (768 KiB) zeroed per task made small queries slow.
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Buffers a worker reuses from cell to cell (fresh large allocations would page-fault).
#[derive(Default)]
struct Scratch {
    atoms: Vec<f32>,
    block: Vec<f64>,
}

/// The partial sums of one cell for its points (`points × ncomp × slots`). The cell's
/// needed atoms are read once per time level (merged reads, storage order) into a float64
/// block of the cell, and each point adds the part of its stencil that lies in the cell.
#[allow(clippy::too_many_arguments)]
fn run_cell(
    plan: &Plan,
    cell: &Cell,
    source: &dyn AtomSource,
    levels: &[TimeLevel],
    terms: &TermSet,
    mut shuffle: Option<&mut SplitMix>,
    stats: &StreamStats,
    scratch: &mut Scratch,
) -> Result<Vec<f64>> {
    let g = &plan.geometry;
    let (a, c_atoms, nc) = (g.atom, plan.cell_atoms, g.ncomp);
    let width = plan.kernel.width();
    let out_len = nc * terms.slots();
    let per_shard = g.atoms_per_side();
    let start = cell.first_atom.map(|v| v * a);
    // The cell clipped to the grid.
    let dims: [usize; 3] = [0, 1, 2].map(|ax| (c_atoms * a).min(plan.axes[ax].n - start[ax]));

    // Which of the cell's atoms the points' stencils touch (weights come later, per point,
    // right before they are used, so they stay in cache).
    let mut needed = vec![false; c_atoms.pow(3)];
    let mut placement = AxisWeights::default();
    for &s in &cell.positions {
        let mut along = [[false; CELL_ATOMS]; 3];
        for axis in 0..3 {
            plan.kernel
                .base_only(s[axis], &plan.axes[axis], &mut placement);
            let runs = Runs::new(
                placement.wrapped,
                width,
                plan.axes[axis].n,
                start[axis],
                dims[axis],
            );
            for &(_, first, len) in runs.runs() {
                for atom in first / a..=(first + len - 1) / a {
                    along[axis][atom] = true;
                }
            }
        }
        for z in (0..c_atoms).filter(|&z| along[2][z]) {
            for y in (0..c_atoms).filter(|&y| along[1][y]) {
                for x in (0..c_atoms).filter(|&x| along[0][x]) {
                    needed[(z * c_atoms + y) * c_atoms + x] = true;
                }
            }
        }
    }

    // The needed atoms in storage (Morton) order, or shuffled.
    let mut atoms: Vec<[usize; 3]> = morton::cube_order(c_atoms as u32)
        .into_iter()
        .map(|(x, y, z)| [x as usize, y as usize, z as usize])
        .filter(|l| needed[(l[2] * c_atoms + l[1]) * c_atoms + l[0]])
        .collect();
    let mut level_order: Vec<&TimeLevel> = levels.iter().collect();
    if let Some(rng) = shuffle.as_deref_mut() {
        rng.shuffle(&mut atoms);
        rng.shuffle(&mut level_order);
    }
    let requests: Vec<AtomRequest> = atoms
        .iter()
        .enumerate()
        .map(|(slot, l)| AtomRequest {
            local: [0, 1, 2].map(|ax| (cell.first_atom[ax] + l[ax]) % per_shard),
            slot,
        })
        .collect();

    let atom_values = g.atom_values();
    let Scratch {
        atoms: buffer,
        block,
    } = scratch;
    buffer.resize(atoms.len() * atom_values, 0.0);
    // Stale values from the previous cell are harmless: only atoms read below are used.
    block.resize(dims.iter().product::<usize>() * nc + PADDING, 0.0);
    let mut partial = vec![0.0; cell.outputs.len() * out_len];
    // The time levels are blended into the block first (every point of a query is at the
    // same time), so the spatial sums run once whatever the temporal method.
    for (k, level) in level_order.into_iter().enumerate() {
        if shuffle.is_some() {
            for request in &requests {
                source.read_atoms(level.t, cell.shard, std::slice::from_ref(request), buffer)?;
            }
            stats
                .read_calls
                .fetch_add(requests.len() as u64, Ordering::Relaxed);
        } else {
            source.read_atoms(level.t, cell.shard, &requests, buffer)?;
            stats.read_calls.fetch_add(1, Ordering::Relaxed);
        }
        stats
            .atoms_read
            .fetch_add(requests.len() as u64, Ordering::Relaxed);
        for (slot, l) in atoms.iter().enumerate() {
            copy_atom_into_block(
                &buffer[slot * atom_values..][..atom_values],
                a,
                nc,
                l.map(|v| v * a),
                dims,
                block,
                (level.weight, k > 0),
            );
        }
    }
    let view = Block {
        values: &block[..],
        dims: [dims[0], dims[1]],
    };
    let mut w = [AxisWeights::default(); 3];
    for (i, &s) in cell.positions.iter().enumerate() {
        for axis in 0..3 {
            plan.kernel.weights(s[axis], &plan.axes[axis], &mut w[axis]);
        }
        let runs = [
            Runs::new(w[0].wrapped, width, plan.axes[0].n, start[0], dims[0]),
            Runs::new(w[1].wrapped, width, plan.axes[1].n, start[1], dims[1]),
            Runs::new(w[2].wrapped, width, plan.axes[2].n, start[2], dims[2]),
        ];
        accumulate_any(
            nc,
            view,
            &runs,
            &w,
            terms,
            1.0,
            &mut partial[i * out_len..][..out_len],
            width,
        );
    }
    stats
        .contributions
        .fetch_add(cell.positions.len() as u64, Ordering::Relaxed);
    Ok(partial)
}

/// Puts `weight` × an atom (side `a`) at its place `origin` in a cell block of `dims`,
/// adding to what is there if `add`.
fn copy_atom_into_block(
    atom: &[f32],
    a: usize,
    nc: usize,
    origin: [usize; 3],
    dims: [usize; 3],
    block: &mut [f64],
    (weight, add): (f64, bool),
) {
    let nx = a.min(dims[0] - origin[0]) * nc;
    for z in 0..a.min(dims[2] - origin[2]) {
        for y in 0..a.min(dims[1] - origin[1]) {
            let src = &atom[(z * a + y) * a * nc..][..nx];
            let dst = (((origin[2] + z) * dims[1] + origin[1] + y) * dims[0] + origin[0]) * nc;
            let row = block[dst..dst + nx].iter_mut().zip(src);
            match (weight == 1.0, add) {
                (true, false) => row.for_each(|(d, &s)| *d = f64::from(s)),
                (false, false) => row.for_each(|(d, &s)| *d = weight * f64::from(s)),
                (_, true) => row.for_each(|(d, &s)| *d = weight.mul_add(f64::from(s), *d)),
            }
        }
    }
}

/// A tiny deterministic generator for shuffling (no dependency for a test-only need).
pub struct SplitMix(pub u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}
