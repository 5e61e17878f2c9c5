//! The streaming executor (Kanov et al.): each needed atom is read once per batch, in
//! storage order, and added to the partial sums of every point whose stencil touches it.
//! Cells run in parallel and add straight into their points' result rows; a cell waits for
//! its neighbours of earlier colours (see [`Plan::colours`] and [`Plan::graph`]), so every
//! point gets its cells' sums in colour order and the answer does not depend on the order
//! atoms arrive in nor on which worker finishes first.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::engine::accumulate::{Block, Contribution, Lane, Runs, TermSet, PADDING};
use crate::engine::buffers::Buffer;
use crate::engine::cache_sets;
use crate::engine::partitions::Partitions;
use crate::engine::plan::{Cell, Plan};
use crate::engine::short_copy::copy_row;
use crate::engine::simd::{KernelPath, Simd, SimdTask};
use crate::engine::weights::weights_xyz;
use crate::error::Result;
use crate::interp::stencil::AxisWeights;
use crate::storage::morton;
use crate::storage::reader::{le_f32_into, AtomRequest, AtomSource};

/// One stored time step of a query and its weight in the temporal interpolation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeLevel {
    /// Time index in the dataset.
    pub t: usize,
    /// Weight of that step.
    pub weight: f64,
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
    /// Time spent per phase.
    pub phases: PhaseTimes,
    /// The SIMD path the kernel ran on.
    pub kernel: Mutex<Option<KernelPath>>,
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

    /// The SIMD path the kernel last ran on, if it ran.
    pub fn kernel(&self) -> Option<KernelPath> {
        *self.kernel.lock().expect("stats")
    }

    fn ran_on(&self, path: KernelPath) {
        *self.kernel.lock().expect("stats") = Some(path);
    }
}

/// Where a query's time goes, in nanoseconds. `plan` and `scatter` are wall time (they run
/// before and after the cells); `read`, `weights` and `accumulate` are summed over the
/// workers (thread time), so with several threads they add up to more than the wall time.
#[derive(Debug, Default)]
pub struct PhaseTimes {
    /// Grouping the points by cell ([`Plan::new`]).
    pub plan: AtomicU64,
    /// Reading the cells' atoms and filling the cell blocks.
    pub read: AtomicU64,
    /// The points' stencil weights.
    pub weights: AtomicU64,
    /// The kernel: the weighted sums of the cells' rows.
    pub accumulate: AtomicU64,
    /// Putting the results back in the caller's order.
    pub scatter: AtomicU64,
}

impl PhaseTimes {
    /// Adds `elapsed` to a phase.
    pub fn add(phase: &AtomicU64, elapsed: Duration) {
        phase.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// `[(name, seconds)]` for plan, read, weights, accumulate and scatter.
    pub fn seconds(&self) -> [(&'static str, f64); 5] {
        let s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 * 1e-9;
        [
            ("plan", s(&self.plan)),
            ("read", s(&self.read)),
            ("weights", s(&self.weights)),
            ("accumulate", s(&self.accumulate)),
            ("scatter", s(&self.scatter)),
        ]
    }
}

/// In which order atoms are visited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Storage order, cells in parallel, each after its neighbours of earlier colours.
    Storage,
    /// The colours one after the other, one thread: the order the cell graph keeps, to test
    /// that it gives the same bits.
    Colours,
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
    execute_within(plan, source, levels, None, order, stats)
}

/// A value type of answers. The sums are float64 whatever the answer's type; they are
/// rounded once, as they are put back in the caller's order, by all the workers (numpy's
/// cast of a float64 answer afterwards was a serial pass: 1.5–1.7 ms a million points on a
/// 2-core Intel Xeon, load 1.2).
pub trait AnswerValue: Copy + Default + Send + Sync + 'static {
    /// Whether the kernel may sum stored float32 values along z in float32
    /// ([`TermSet::narrow`]).
    const NARROW_SUMS: bool;
    /// The answer's value of a sum.
    fn from_sum(sum: f64) -> Self;
}

impl AnswerValue for f64 {
    const NARROW_SUMS: bool = false;

    #[inline(always)]
    fn from_sum(sum: f64) -> f64 {
        sum
    }
}

impl AnswerValue for f32 {
    const NARROW_SUMS: bool = true;
    #[inline(always)]
    fn from_sum(sum: f64) -> f32 {
        sum as f32
    }
}

/// Like [`execute`], adding only the atoms of the partitions `within` (every atom when
/// `None`): the partial sums those partitions contribute, as answers of type `T`. Cells
/// outside are skipped.
pub fn execute_within<T: AnswerValue>(
    plan: &Plan,
    source: &dyn AtomSource,
    levels: &[TimeLevel],
    within: Option<&Partitions>,
    order: Order,
    stats: &StreamStats,
) -> Result<Vec<T>> {
    let kept = |cell: &Cell| within.map(|p| p.levels_in(cell.shard, levels));
    let terms = TermSet::new(plan.operator.terms(), plan.operator.slots()).narrow(T::NARROW_SUMS);
    let out_len = plan.geometry.ncomp * terms.slots();
    stats.ran_on(plan.kernel_path());
    // Cells add their partial sums straight into the result rows of their points. Cells of
    // one colour never share a point, so they run together; a cell runs once its neighbours
    // of earlier colours are done.
    // Cleared by all the workers: 24 MB for a million points, 0.9 ms on one thread of a
    // 2-core Intel Xeon (load 1.2), where the whole query takes 50 ms on 16 threads.
    let mut result = Buffer::to_overwrite(plan.order.len() * out_len, 0.0f64);
    result
        .par_chunks_mut(1 << 15)
        .for_each(|chunk| chunk.fill(0.0));
    let target = ResultPtr(result.as_mut_ptr());
    let target = &target;
    // One cell at the time levels it holds (none, outside `within`).
    let serve = |cell: &Cell, shuffle: Option<&mut SplitMix>, scratch: &mut Scratch| {
        let kept = kept(cell);
        let levels = kept.as_deref().unwrap_or(levels);
        if levels.is_empty() {
            return Ok(());
        }
        run_cell(
            plan, cell, source, levels, &terms, shuffle, stats, scratch, target,
        )
    };
    match order {
        Order::Storage => plan
            .graph
            .run(&|c| SCRATCH.with_borrow_mut(|scratch| serve(&plan.cells[c], None, scratch)))?,
        Order::Colours => {
            let mut scratch = Scratch::default();
            for &c in plan.colours.iter().flatten() {
                serve(&plan.cells[c], None, &mut scratch)?;
            }
        }
        Order::Shuffled(seed) => {
            let mut rng = SplitMix(seed);
            let mut cells: Vec<&Cell> = plan.cells.iter().collect();
            rng.shuffle(&mut cells);
            let mut scratch = Scratch::default();
            for cell in cells {
                serve(cell, Some(&mut rng), &mut scratch)?;
            }
        }
    }
    // Back to the caller's order of the points.
    let scatter = Instant::now();
    let mut answer = vec![T::default(); result.len()];
    let out = AnswerPtr(answer.as_mut_ptr());
    let out = &out;
    plan.order
        .par_iter()
        .zip(result.par_chunks_exact(out_len))
        .for_each(|(&p, row)| {
            // SAFETY: `order` is a permutation, so every row of `answer` is written by one
            // worker, once.
            let to =
                unsafe { std::slice::from_raw_parts_mut(out.0.add(p as usize * out_len), out_len) };
            for (to, &sum) in to.iter_mut().zip(row) {
                *to = T::from_sum(sum);
            }
        });
    PhaseTimes::add(&stats.phases.scatter, scatter.elapsed());
    Ok(answer)
}

/// The answer, shared by the workers of the scatter (see `execute_within`).
struct AnswerPtr<T>(*mut T);
// SAFETY: each worker writes the rows of different points.
unsafe impl<T> Sync for AnswerPtr<T> {}
unsafe impl<T> Send for AnswerPtr<T> {}

/// The result buffer, shared by the workers (see `execute` for why this is sound).
struct ResultPtr(*mut f64);
// SAFETY: cells running at the same time write the rows of different points.
unsafe impl Sync for ResultPtr {}
unsafe impl Send for ResultPtr {}

thread_local! {
    /// Each worker's buffers, kept from cell to cell and from query to query: a fresh
    /// block zeroed per task made small queries slow.
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Buffers a worker reuses from cell to cell (fresh large allocations would page-fault).
#[derive(Default)]
struct Scratch {
    atoms: Vec<f32>,
    /// The cell's values as stored, for a query at one stored time.
    block32: Vec<f32>,
    /// The cell's values blended over the time levels.
    block64: Vec<f64>,
    /// The stencils of a batch of points.
    stencils: Vec<Stencil>,
    /// The last cell shape's padded plane: cells of a query mostly share one shape.
    planes: PlaneMemo,
}

/// The padded plane ([`cache_sets::padded_plane`]) of the last block shape asked for.
#[derive(Default)]
struct PlaneMemo {
    /// `(row, rows, node bytes, stencil width)` and its plane.
    last: Option<([usize; 4], usize)>,
}

impl PlaneMemo {
    /// Nodes from one z plane of the block to the next.
    fn plane(&mut self, row: usize, rows: usize, node_bytes: usize, width: usize) -> usize {
        let key = [row, rows, node_bytes, width];
        match self.last {
            Some((k, plane)) if k == key => plane,
            _ => {
                let plane = cache_sets::padded_plane(row, rows, node_bytes, width);
                self.last = Some((key, plane));
                plane
            }
        }
    }
}

/// Adds one cell's partial sums to the result rows of its points. The cell's needed atoms
/// are read once per time level (merged reads, storage order) into a block of the cell, and
/// each point adds the part of its stencil that lies in the cell.
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
    target: &ResultPtr,
) -> Result<()> {
    let g = &plan.geometry;
    let (a, c_atoms, nc) = (g.atom, plan.cell_atoms, g.ncomp);
    let per_shard = g.atoms_per_side();
    let start = cell.first_atom.map(|v| v * a);
    // The cell clipped to the grid.
    let dims: [usize; 3] = [0, 1, 2].map(|ax| (c_atoms[ax] * a).min(plan.axes[ax].n - start[ax]));

    // The needed atoms in storage (Morton) order, or shuffled: Morton codes of the cube
    // around the cell, which is a power of two a side.
    let cube = c_atoms.iter().max().copied().unwrap_or(1) as u64;
    let mut atoms: Vec<[usize; 3]> = (0..cube.pow(3))
        .map(|code| {
            let (x, y, z) = morton::decode(code);
            [x as usize, y as usize, z as usize]
        })
        .filter(|l| (0..3).all(|ax| l[ax] < c_atoms[ax]) && cell.atoms.contains(l[0], l[1], l[2]))
        .collect();
    let mut level_order: Vec<&TimeLevel> = levels.iter().collect();
    if let Some(rng) = shuffle.as_deref_mut() {
        rng.shuffle(&mut atoms);
        rng.shuffle(&mut level_order);
    }
    // The atoms are read a group at a time into a buffer that stays in the L2 cache, and
    // put into the block while they are there: read whole into a buffer the size of the
    // block, they had left the cache before they were copied.
    let atom_values = g.atom_values();
    let group = (READ_GROUP_BYTES / (atom_values * 4)).max(1);
    let requests: Vec<AtomRequest> = atoms
        .iter()
        .enumerate()
        .map(|(i, l)| AtomRequest {
            local: [0, 1, 2].map(|ax| (cell.first_atom[ax] + l[ax]) % per_shard),
            slot: i % group,
        })
        .collect();

    let read = Instant::now();
    let Scratch {
        atoms: buffer,
        block32,
        block64,
        stencils,
        planes,
    } = scratch;
    buffer.resize(group.min(atoms.len()) * atom_values, 0.0);
    // At one stored time the block keeps the stored float32 values (half the cache of
    // float64); the time levels of pchip are blended into a float64 block first (every
    // point of a query is at the same time), so the spatial sums run once either way.
    let single = levels.len() == 1 && levels[0].weight == 1.0;
    let value_bytes = if single { 4 } else { 8 };
    let plane = planes.plane(dims[0], dims[1], nc * value_bytes, plan.kernel.width());
    let block_len = dims[2] * plane * nc + PADDING;
    // Stale values from the previous cell are harmless: only atoms read below are used.
    if single {
        block32.resize(block_len, 0.0);
    } else {
        block64.resize(block_len, 0.0);
    }
    for (k, level) in level_order.into_iter().enumerate() {
        for (requests, atoms) in requests.chunks(group).zip(atoms.chunks(group)) {
            // Where the atom of each slot goes in the block.
            let place = |slot: usize| AtomPlace {
                side: a,
                nc,
                origin: atoms[slot].map(|v| v * a),
                dims,
                plane,
            };
            // At one stored time, straight from the mapped shard into the block.
            if single
                && shuffle.is_none()
                && source.atoms_in_place(level.t, cell.shard, requests, &mut |slot, atom| {
                    place(slot).copy_stored_rows(atom, block32)
                })?
            {
                stats.read_calls.fetch_add(1, Ordering::Relaxed);
                stats
                    .atoms_read
                    .fetch_add(requests.len() as u64, Ordering::Relaxed);
                continue;
            }
            if shuffle.is_some() {
                for request in requests {
                    source.read_atoms(
                        level.t,
                        cell.shard,
                        std::slice::from_ref(request),
                        buffer,
                    )?;
                }
                stats
                    .read_calls
                    .fetch_add(requests.len() as u64, Ordering::Relaxed);
            } else {
                source.read_atoms(level.t, cell.shard, requests, buffer)?;
                stats.read_calls.fetch_add(1, Ordering::Relaxed);
            }
            stats
                .atoms_read
                .fetch_add(requests.len() as u64, Ordering::Relaxed);
            for slot in 0..atoms.len() {
                let atom = &buffer[slot * atom_values..][..atom_values];
                let at = place(slot);
                if single {
                    at.copy_rows(atom, block32, copy_row);
                } else if k == 0 {
                    let weight = level.weight;
                    at.copy_rows(atom, block64, |d, s| {
                        for (d, &s) in d.iter_mut().zip(s) {
                            *d = weight * f64::from(s);
                        }
                    });
                } else {
                    let weight = level.weight;
                    at.copy_rows(atom, block64, |d, s| {
                        for (d, &s) in d.iter_mut().zip(s) {
                            *d = weight.mul_add(f64::from(s), *d);
                        }
                    });
                }
            }
        }
    }
    PhaseTimes::add(&stats.phases.read, read.elapsed());
    let entries = &plan.entries[cell.entries.clone()];
    let place = (start, dims, plane);
    let path = plan.kernel_path();
    if single {
        path.run(CellPoints {
            plan,
            entries,
            values: &block32[..],
            place,
            terms,
            target,
            stencils,
            stats,
        });
    } else {
        path.run(CellPoints {
            plan,
            entries,
            values: &block64[..],
            place,
            terms,
            target,
            stencils,
            stats,
        });
    }
    stats
        .contributions
        .fetch_add(entries.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// Bytes of atoms read at a time (see [`run_cell`]): well inside the L2 cache.
const READ_GROUP_BYTES: usize = 128 << 10;

/// Points whose weights are computed together, then summed: few enough that their
/// stencils stay in the L1 cache, many enough that timing each phase costs nothing.
const BATCH: usize = 32;

/// One point's stencil in a cell.
#[derive(Debug, Default, Clone, Copy)]
struct Stencil {
    w: [AxisWeights; 3],
    runs: [Runs; 3],
}

/// The points of one cell and the cell block they add from.
struct CellPoints<'a, T> {
    plan: &'a Plan,
    /// The points (executor's numbers).
    entries: &'a [u32],
    /// The cell block.
    values: &'a [T],
    /// The block's first node, its extent and its plane (nodes from one z plane to the
    /// next).
    place: ([usize; 3], [usize; 3], usize),
    terms: &'a TermSet,
    target: &'a ResultPtr,
    stencils: &'a mut Vec<Stencil>,
    stats: &'a StreamStats,
}

impl<T: Lane> SimdTask for CellPoints<'_, T> {
    type Output = ();

    /// Adds, for every point, the part of its stencil inside the cell block to its result
    /// row: batch by batch, the weights of the batch's points, then their sums.
    #[inline(always)]
    fn run<S: Simd>(self, simd: S) {
        if self.terms.is_narrow() {
            self.add_all::<S, true>(simd)
        } else {
            self.add_all::<S, false>(simd)
        }
    }
}

impl<T: Lane> CellPoints<'_, T> {
    /// [`CellPoints::run`], with the float32 z sums of [`TermSet::narrow`] if `NARROW`.
    #[inline(always)]
    fn add_all<S: Simd, const NARROW: bool>(self, simd: S) {
        let CellPoints {
            plan,
            entries,
            values,
            place: (start, dims, plane),
            terms,
            target,
            stencils,
            stats,
        } = self;
        let block = Block {
            values,
            row: dims[0],
            plane,
        };
        let nc = plan.geometry.ncomp;
        let width = plan.kernel.width();
        let out_len = nc * terms.slots();
        stencils.resize(BATCH, Stencil::default());
        let (mut weighing, mut summing) = (Duration::ZERO, Duration::ZERO);
        for batch in entries.chunks(BATCH) {
            let begin = Instant::now();
            for (&point, stencil) in batch.iter().zip(stencils.iter_mut()) {
                let position = &plan.sorted[point as usize];
                weights_xyz(simd, &plan.kernel, position, &plan.axes, &mut stencil.w);
                for axis in 0..3 {
                    stencil.runs[axis].set(
                        stencil.w[axis].wrapped,
                        width,
                        plan.axes[axis].n,
                        start[axis],
                        dims[axis],
                    );
                }
            }
            let weighed = Instant::now();
            for (&point, stencil) in batch.iter().zip(stencils.iter()) {
                // SAFETY: the row is inside the result, which outlives the workers, and no
                // cell running at the same time writes it (see `execute`).
                let row = unsafe {
                    std::slice::from_raw_parts_mut(target.0.add(point as usize * out_len), out_len)
                };
                Contribution {
                    block,
                    ncomp: nc,
                    runs: &stencil.runs,
                    w: &stencil.w,
                    terms,
                    scale: 1.0,
                    out: row,
                }
                .add_as::<S, NARROW>(simd);
            }
            let summed = Instant::now();
            weighing += weighed - begin;
            summing += summed - weighed;
        }
        PhaseTimes::add(&stats.phases.weights, weighing);
        PhaseTimes::add(&stats.phases.accumulate, summing);
    }
}

/// Where one atom goes in a cell block.
struct AtomPlace {
    /// Nodes along a side of the atom.
    side: usize,
    /// Components.
    nc: usize,
    /// The atom's first node in the block.
    origin: [usize; 3],
    /// The block's extent (the cell clipped to the grid).
    dims: [usize; 3],
    /// Nodes from one z plane of the block to the next.
    plane: usize,
}

impl AtomPlace {
    /// The atom's rows clipped to the block: (first value in the atom, first value in the
    /// block, values in the row).
    #[inline(always)]
    fn rows(&self) -> impl Iterator<Item = (usize, usize, usize)> {
        let (a, nc, origin, dims, plane) = (self.side, self.nc, self.origin, self.dims, self.plane);
        let nx = a.min(dims[0] - origin[0]) * nc;
        let ys = a.min(dims[1] - origin[1]);
        (0..a.min(dims[2] - origin[2])).flat_map(move |z| {
            (0..ys).map(move |y| {
                let dst = ((origin[2] + z) * plane + (origin[1] + y) * dims[0] + origin[0]) * nc;
                ((z * a + y) * a * nc, dst, nx)
            })
        })
    }

    /// Puts the atom's rows (clipped to the block) into `block` with `put(destination row,
    /// stored row)`.
    #[inline(always)]
    fn copy_rows<T>(&self, atom: &[f32], block: &mut [T], put: impl Fn(&mut [T], &[f32])) {
        for (src, dst, n) in self.rows() {
            put(&mut block[dst..dst + n], &atom[src..src + n]);
        }
    }

    /// Copies the atom's rows (clipped to the block) from its stored bytes (little-endian
    /// float32 at any alignment, as read in place) into `block`.
    #[inline(always)]
    fn copy_stored_rows(&self, atom: &[u8], block: &mut [f32]) {
        for (src, dst, n) in self.rows() {
            le_f32_into(&atom[4 * src..4 * (src + n)], &mut block[dst..dst + n]);
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
