//! The streaming executor (Kanov et al.): each needed atom is read once per batch, in
//! storage order, and added to the partial sums of every point whose stencil touches it.
//! Cells run in parallel; each returns partial sums for its points, which are then added
//! into the result, so the answer does not depend on the order atoms arrive in.

use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::accumulate::{accumulate_any, Block, Runs, TermSet, PADDING};
use crate::error::Result;
use crate::geometry::ShardPos;
use crate::morton;
use crate::plan::{Cell, Plan, SHARED};
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
    /// (atom, point) contributions added.
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
    // Cells write their partial sums straight into the result from every worker. A point
    // whose stencil spans cells gets several contributions, added atomically (the f64 bits
    // as an atomic u64, compare-and-swap); a point inside one cell is written by that cell
    // alone, with a plain store.
    let mut result = vec![0.0f64; plan.positions.len() * out_len];
    let base = ResultPtr(result.as_mut_ptr());
    let add = |cell: &Cell, partial: Vec<f64>| {
        let base = &base;
        for (i, &entry) in cell.points.iter().enumerate() {
            let p = (entry & !SHARED) as usize;
            let values = &partial[i * out_len..][..out_len];
            for (k, &v) in values.iter().enumerate() {
                // SAFETY: p * out_len + k is inside `result`, which outlives the workers.
                // Slots of an unshared point are touched by this cell only; slots of a
                // shared point are only ever accessed atomically.
                let slot = unsafe { base.0.add(p * out_len + k) };
                if entry & SHARED == 0 {
                    unsafe { slot.write(v) };
                } else {
                    let atomic = unsafe { AtomicU64::from_ptr(slot.cast::<u64>()) };
                    let _ = atomic.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                        Some((f64::from_bits(bits) + v).to_bits())
                    });
                }
            }
        }
    };
    match order {
        Order::Storage => {
            plan.cells
                .par_iter()
                .try_for_each_init(Scratch::default, |scratch, cell| {
                    let partial =
                        run_cell(plan, cell, source, levels, &terms, None, stats, scratch)?;
                    add(cell, partial);
                    Ok(())
                })?
        }
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
    Ok(result)
}

/// The result buffer, shared by the workers (see `execute` for why this is sound).
struct ResultPtr(*mut f64);
// SAFETY: workers write disjoint slots, or the same slots only through atomics.
unsafe impl Sync for ResultPtr {}
unsafe impl Send for ResultPtr {}

/// Buffers a worker reuses from cell to cell (fresh large allocations would page-fault).
#[derive(Default)]
struct Scratch {
    atoms: Vec<f32>,
    block: Vec<f32>,
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
        let mut along = [[false; 8]; 3];
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
    let mut partial = vec![0.0; cell.points.len() * out_len];
    for level in level_order {
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
            );
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
                level.weight,
                &mut partial[i * out_len..][..out_len],
                width,
            );
        }
    }
    stats.contributions.fetch_add(
        (cell.positions.len() * levels.len()) as u64,
        Ordering::Relaxed,
    );
    Ok(partial)
}

/// Copies an atom (side `a`) to its place `origin` in a cell block of `dims`.
fn copy_atom_into_block(
    atom: &[f32],
    a: usize,
    nc: usize,
    origin: [usize; 3],
    dims: [usize; 3],
    block: &mut [f32],
) {
    let nx = a.min(dims[0] - origin[0]) * nc;
    for z in 0..a.min(dims[2] - origin[2]) {
        for y in 0..a.min(dims[1] - origin[1]) {
            let src = &atom[(z * a + y) * a * nc..][..nx];
            let dst = (((origin[2] + z) * dims[1] + origin[1] + y) * dims[0] + origin[0]) * nc;
            block[dst..dst + nx].copy_from_slice(src);
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
