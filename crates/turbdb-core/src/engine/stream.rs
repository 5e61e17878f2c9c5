//! The streaming executor (Kanov et al.): each cell's points are summed from one block
//! holding the cell and its halo, the atoms their stencils touch read once per cell, in
//! storage order. Every point lies in one cell, which sums its whole stencil, so cells run
//! in parallel and the answer does not depend on the order atoms arrive in nor on which
//! worker finishes first. The price is the halo: atoms at a cell's border are also read
//! into its neighbours' blocks (on a 256³ grid in 8³ atoms, lag8, cells of 64³ nodes,
//! boxes of 71³: 1.37× the nodes copied).

use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::engine::accumulate::{Block, Contribution, Lane, Runs, TermSet, PADDING};
use crate::engine::buffers::{Buffer, Pooled};
use crate::engine::cache_sets;
use crate::engine::fast_paths::{FastVisit, Summed, Visit};
use crate::engine::partitions::Partitions;
use crate::engine::plan::{BlockValues, Cell, Plan};
use crate::engine::short_copy::{copy_bytes_exact, copy_row};
use crate::engine::simd::{KernelPath, Simd, SimdTask};
use crate::engine::weights::weights_xyz;
use crate::engine::whole_stencil::WholeStencil;
use crate::error::{Error, Result};
use crate::interp::method::Operator;
use crate::interp::stencil::AxisWeights;
use crate::storage::geometry::ShardPos;
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

/// Whether `levels` are one stored time read as stored (weight 1), not a blend.
fn one_stored_time(levels: &[TimeLevel]) -> bool {
    levels.len() == 1 && levels[0].weight == 1.0
}

/// The block the cells of a query of `operator` at `levels` fill, answered in float32 if
/// `float32` ([`BlockValues::of`]): what its plan sizes the cells for, and what
/// [`run_cell`] fills.
pub fn block_values(levels: &[TimeLevel], operator: Operator, float32: bool) -> BlockValues {
    BlockValues::of(!one_stored_time(levels), operator, float32)
}

/// Counters that show what an execution did.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Atoms read from the source.
    pub atoms_read: AtomicU64,
    /// Read calls made to the source.
    pub read_calls: AtomicU64,
    /// Partial sums added: one per point when streaming (its cell sums all time levels at
    /// once), one per (point, atom, time level) for the direct baselines.
    pub contributions: AtomicU64,
    /// Time spent per phase.
    pub phases: PhaseTimes,
    /// The SIMD path the kernel ran on.
    pub kernel: Mutex<Option<KernelPath>>,
    /// Set from another thread to stop the execution before its next cell (the service
    /// sets it when a client goes away): it then fails with [`Error::Stopped`].
    pub stop: Option<Arc<AtomicBool>>,
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

    /// [`Error::Stopped`] if the stop flag is set.
    fn check_stop(&self) -> Result<()> {
        match &self.stop {
            Some(stop) if stop.load(Ordering::Relaxed) => Err(Error::Stopped(
                "the query was stopped before it ended (its client went away)".into(),
            )),
            _ => Ok(()),
        }
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

/// In which order cells and atoms are visited.
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
    execute_within(plan, source, levels, None, order, stats)
}

/// A value type of answers. The sums are float64 whatever the answer's type; they are
/// rounded once, as they are put back in the caller's order, by all the workers (numpy's
/// cast of a float64 answer afterwards was a serial pass: 1.5–1.7 ms a million points on a
/// 2-core Intel Xeon, load 1.2).
pub trait AnswerValue: Pooled + Default + Sync {
    /// Whether the answers are float32 (else float64): then the kernel may sum stored
    /// float32 values along z in float32 ([`TermSet::narrow`]).
    const FLOAT32: bool;
    /// The answer's value of a sum.
    fn from_sum(sum: f64) -> Self;
}

impl AnswerValue for f64 {
    const FLOAT32: bool = false;

    #[inline(always)]
    fn from_sum(sum: f64) -> f64 {
        sum
    }
}

impl AnswerValue for f32 {
    const FLOAT32: bool = true;
    #[inline(always)]
    fn from_sum(sum: f64) -> f32 {
        sum as f32
    }
}

/// Like [`execute`], adding only the atoms of the partitions `within` (every atom when
/// `None`): the partial sums those partitions contribute, as answers of type `T`. Cells
/// whose atoms all lie outside are skipped.
pub fn execute_within<T: AnswerValue>(
    plan: &Plan,
    source: &dyn AtomSource,
    levels: &[TimeLevel],
    within: Option<&Partitions>,
    order: Order,
    stats: &StreamStats,
) -> Result<Vec<T>> {
    let terms = TermSet::new(plan.operator.terms(), plan.operator.slots()).narrow(T::FLOAT32);
    let out_len = plan.geometry.ncomp * terms.slots();
    stats.ran_on(plan.kernel_path());
    // Every point lies in one cell, which sums its whole stencil and writes its answer
    // (in the executor's order, rows next to each other): cells run in any order, in
    // parallel, and each answer is the same bits whichever worker computes it.
    // Every row is written once, by its point's cell.
    let mut result = Buffer::to_overwrite(plan.order.len() * out_len, T::default());
    let target = &ResultRows::of(result.as_mut_ptr());
    let cell_in = CellInput {
        plan,
        source,
        levels,
        within,
        terms: &terms,
        stats,
        target,
    };
    match order {
        Order::Storage => plan.cells.par_iter().try_for_each(|cell| {
            stats.check_stop()?;
            SCRATCH.with_borrow_mut(|scratch| run_cell(&cell_in, cell, None, scratch))
        })?,
        Order::Shuffled(seed) => {
            let mut rng = SplitMix(seed);
            let mut cells: Vec<&Cell> = plan.cells.iter().collect();
            rng.shuffle(&mut cells);
            let mut scratch = Scratch::default();
            for cell in cells {
                stats.check_stop()?;
                run_cell(&cell_in, cell, Some(&mut rng), &mut scratch)?;
            }
        }
    }
    // Back to the caller's order of the points: a pass of its own, where the random
    // writes overlap (made in the cells' loop, one a point, they cost more than the sums).
    let scatter = Instant::now();
    // Not cleared first: every row is written below (a cleared 12 MB answer was a
    // `memset` a query).
    let mut answer: Vec<T> = Vec::with_capacity(result.len());
    let out = AnswerPtr(answer.as_mut_ptr());
    let out = &out;
    let row_bytes = out_len * std::mem::size_of::<T>();
    plan.order
        .par_chunks(SCATTER_CHUNK)
        .zip(result.par_chunks(SCATTER_CHUNK * out_len))
        .for_each(|(order, rows)| {
            for (i, (&p, row)) in order.iter().zip(rows.chunks_exact(out_len)).enumerate() {
                if let Some(&ahead) = order.get(i + SCATTER_AHEAD) {
                    prefetch_for_write(out.0.wrapping_add(ahead as usize * out_len));
                }
                // SAFETY: `order` is a permutation of the rows, so every row of `answer`
                // is written by one worker, once, inside its capacity; a row is whole
                // values of four or eight bytes. Fixed-size moves: `copy_from_slice`
                // called `memmove` for every row of a few values.
                unsafe {
                    copy_bytes_exact(
                        row.as_ptr().cast::<u8>(),
                        out.0.add(p as usize * out_len).cast::<u8>(),
                        row_bytes,
                    )
                };
            }
        });
    // SAFETY: every value was written above.
    unsafe { answer.set_len(result.len()) };
    PhaseTimes::add(&stats.phases.scatter, scatter.elapsed());
    Ok(answer)
}

/// Points a worker puts back in the caller's order at a time.
const SCATTER_CHUNK: usize = 1 << 14;

/// How many points ahead the scatter asks for the cache line it will write.
const SCATTER_AHEAD: usize = 16;

/// Asks for the cache line at `p` to be written soon (a hint: it never faults).
#[inline(always)]
fn prefetch_for_write<T>(p: *mut T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(
            p.cast_const().cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// What every cell of one execution shares.
struct CellInput<'a> {
    plan: &'a Plan,
    source: &'a dyn AtomSource,
    levels: &'a [TimeLevel],
    within: Option<&'a Partitions>,
    terms: &'a TermSet,
    stats: &'a StreamStats,
    target: &'a ResultRows,
}

/// The answer, shared by the workers (see `execute_within`).
struct AnswerPtr<T>(*mut T);
// SAFETY: `order` is a permutation, so workers write the rows of different points.
unsafe impl<T> Sync for AnswerPtr<T> {}
unsafe impl<T> Send for AnswerPtr<T> {}

/// The result the cells write, a row of `out_len` values a point, in the answer's type.
/// Not a type parameter: the cells' code (most of the release build's time) is compiled
/// once for both answer types, and a point's row is written by a branch that every point
/// of a query takes the same way.
#[derive(Clone, Copy)]
enum ResultRows {
    Float32(*mut f32),
    Float64(*mut f64),
}
// SAFETY: each point is in one cell, so workers write the rows of different points.
unsafe impl Sync for ResultRows {}
unsafe impl Send for ResultRows {}

impl ResultRows {
    /// The rows of a result of `T`s that starts at `start`.
    fn of<T: AnswerValue>(start: *mut T) -> Self {
        if T::FLOAT32 {
            ResultRows::Float32(start.cast())
        } else {
            ResultRows::Float64(start.cast())
        }
    }

    /// Writes `sums` (rounded to the answer's type) at value `at` of the result.
    ///
    /// # Safety
    /// `at .. at + sums.len()` must lie in the result, and no other thread may write it.
    #[inline(always)]
    unsafe fn write(self, at: usize, sums: &[f64]) {
        // SAFETY: as the caller promises.
        unsafe {
            match self {
                ResultRows::Float32(start) => {
                    let row = std::slice::from_raw_parts_mut(start.add(at), sums.len());
                    for (to, &sum) in row.iter_mut().zip(sums) {
                        *to = sum as f32;
                    }
                }
                ResultRows::Float64(start) => {
                    std::slice::from_raw_parts_mut(start.add(at), sums.len()).copy_from_slice(sums)
                }
            }
        }
    }

    /// Sets `len` values from `at` to zero.
    ///
    /// # Safety
    /// As [`Self::write`].
    unsafe fn clear(self, at: usize, len: usize) {
        // SAFETY: as the caller promises.
        unsafe {
            match self {
                ResultRows::Float32(start) => start.add(at).write_bytes(0, len),
                ResultRows::Float64(start) => start.add(at).write_bytes(0, len),
            }
        }
    }
}

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
    /// One point's sums.
    sums: Vec<f64>,
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

/// One atom a cell needs: its shard, where it lies there, and where it goes in the block.
#[derive(Clone, Copy)]
struct NeededAtom {
    shard: ShardPos,
    local: [usize; 3],
    /// Storage order in the shard (Morton code of `local`).
    code: u64,
    place: AtomPlace,
}

/// Along one axis, a box atom's atom of the grid and `(first box node, first atom node,
/// length)` of the part of the box it fills.
type AxisPart = (usize, (usize, usize, usize));

/// The atoms of a cell's box its points need, by shard and in storage order in each.
fn needed_atoms(plan: &Plan, cell: &Cell, plane: usize) -> Vec<NeededAtom> {
    let g = &plan.geometry;
    let (a, per_shard) = (g.atom, g.atoms_per_side());
    let atoms_per_axis = g.atoms_per_axis();
    // Along axis `k`, box atom `l`: the atom (global), and the part of the box it fills.
    let along = |k: usize, l: usize| {
        let (n, count) = (plan.axes[k].n as i64, atoms_per_axis[k] as i64);
        let u = cell.first_box_atom[k] + l as i64;
        let (image, atom) = (u.div_euclid(count), u.rem_euclid(count));
        let first = image * n + atom * a as i64;
        let len = (a as i64).min(n - atom * a as i64);
        let from = first.max(cell.origin[k]);
        let to = (first + len).min(cell.origin[k] + cell.dims[k] as i64);
        debug_assert!(from < to, "a needed atom overlaps the box");
        let part = (
            (from - cell.origin[k]) as usize,
            (from - first) as usize,
            (to - from) as usize,
        );
        (atom as usize, part)
    };
    // Each depends on its own axis alone: found once per atom of the box's sides, not
    // with six divisions per needed atom.
    let side = cell.atoms.side();
    let axes: [Vec<AxisPart>; 3] = [0, 1, 2].map(|k| (0..side[k]).map(|l| along(k, l)).collect());
    let shards = g.shards_per_axis();
    let atoms: Vec<NeededAtom> = cell
        .atoms
        .iter()
        .map(|l| {
            let parts = [axes[0][l[0]], axes[1][l[1]], axes[2][l[2]]];
            let global = parts.map(|(atom, _)| atom);
            let local = global.map(|v| v % per_shard);
            NeededAtom {
                shard: global.map(|v| v / per_shard),
                local,
                code: morton::encode(local[0] as u32, local[1] as u32, local[2] as u32),
                place: AtomPlace {
                    side: a,
                    nc: g.ncomp,
                    parts: parts.map(|(_, part)| part),
                    row: plan.block_rows[0],
                    plane,
                },
            }
        })
        .collect();
    // Shard by shard (any order of shards), storage order in each; the keys are sorted,
    // not the atoms (160 bytes each).
    let mut keys: Vec<(usize, u64, u32)> = atoms
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let [x, y, z] = n.shard;
            ((z * shards[1] + y) * shards[0] + x, n.code, i as u32)
        })
        .collect();
    keys.sort_unstable();
    keys.iter().map(|&(_, _, i)| atoms[i as usize]).collect()
}

/// Sums every point of one cell and writes its answer. The atoms of the cell and its halo
/// that the points need are read once per time level (merged reads, storage order, shard
/// by shard) into a block of the cell's box, and each point's whole stencil is summed
/// from it.
fn run_cell(
    input: &CellInput<'_>,
    cell: &Cell,
    mut shuffle: Option<&mut SplitMix>,
    scratch: &mut Scratch,
) -> Result<()> {
    let CellInput {
        plan,
        source,
        levels,
        within,
        terms,
        stats,
        target,
    } = *input;
    let g = &plan.geometry;
    let nc = g.ncomp;
    let out_len = nc * terms.slots();
    let Scratch {
        atoms: buffer,
        block32,
        block64,
        stencils,
        sums,
        planes,
    } = scratch;
    // At one stored time the block keeps the stored float32 values (half the cache of
    // float64); the time levels of pchip are blended into one block first (every point of
    // a query is at the same time), so the spatial sums run once either way. Which block
    // a query fills is the plan's rule, which sized its cells ([`block_values`]); a
    // field's value blended in float32 is summed on the float32 fast path.
    let single = one_stored_time(levels);
    let narrow = terms.is_narrow();
    let in_f32 = block_values(levels, plan.operator, narrow) == BlockValues::Float32;
    let value_bytes = if in_f32 { 4 } else { 8 };
    let dims = cell.dims;
    // The read's time: finding the atoms, then reading them into the block.
    let read = Instant::now();
    let [row, rows] = plan.block_rows;
    let plane = planes.plane(row, rows, nc * value_bytes, plan.kernel.width());
    let mut needed = needed_atoms(plan, cell, plane);
    let kept = |atom: &NeededAtom, level: &TimeLevel| {
        within.is_none_or(|p| p.contains(level.t, atom.shard))
    };
    if !needed
        .iter()
        .any(|atom| levels.iter().any(|l| kept(atom, l)))
    {
        // Outside `within`: these points get nothing from here.
        let rows = cell.points.start * out_len..cell.points.end * out_len;
        // SAFETY: the cell's rows of the result, written by no other cell.
        unsafe { target.clear(rows.start, rows.len()) };
        return Ok(());
    }
    let mut level_order: Vec<&TimeLevel> = levels.iter().collect();
    if let Some(rng) = shuffle.as_deref_mut() {
        rng.shuffle(&mut needed);
        rng.shuffle(&mut level_order);
    }

    let block_len = dims[2] * plane * nc + PADDING;
    // Nodes of atoms left out (`within`) must read as zero, and every level is then added
    // to zero; otherwise every node a stencil reads is written below, and stale values
    // from the previous cell elsewhere are harmless. Stencils read only the needed atoms'
    // nodes, so only those are cleared (the whole block is a few MiB).
    let from_zero = within.is_some();
    if in_f32 {
        block32.resize(block_len, 0.0);
    } else {
        block64.resize(block_len, 0.0);
    }
    if from_zero {
        for atom in &needed {
            if in_f32 {
                atom.place.clear_rows(block32);
            } else {
                atom.place.clear_rows(block64);
            }
        }
    }
    // The atoms are read a group at a time into a buffer that stays in the L2 cache, and
    // put into the block while they are there.
    let atom_values = g.atom_values();
    let group = (READ_GROUP_BYTES / (atom_values * 4)).max(1);
    for (k, level) in level_order.into_iter().enumerate() {
        let assign = k == 0 && !from_zero;
        let mut rest = &needed[..];
        while let Some(first) = rest.first() {
            // The atoms of one shard (one at a time when shuffled), at most a group.
            let run = if shuffle.is_some() {
                1
            } else {
                rest.iter()
                    .take(group)
                    .take_while(|n| n.shard == first.shard)
                    .count()
            };
            let (atoms, tail) = rest.split_at(run);
            rest = tail;
            if !kept(first, level) {
                continue;
            }
            let requests: Vec<AtomRequest> = atoms
                .iter()
                .enumerate()
                .map(|(slot, n)| AtomRequest {
                    local: n.local,
                    slot,
                })
                .collect();
            stats.read_calls.fetch_add(1, Ordering::Relaxed);
            stats
                .atoms_read
                .fetch_add(atoms.len() as u64, Ordering::Relaxed);
            // Straight from the mapped shard into the block where the source can hand
            // atoms in place, else through the buffer: copied at one stored time, else
            // weighed and added.
            let group = ShardGroup {
                source,
                t: level.t,
                shard: first.shard,
                requests: &requests,
                atom_values,
            };
            if single {
                let copied = group.in_place(&mut |slot, atom| {
                    atoms[slot].place.copy_stored_rows(atom, block32)
                })?;
                if !copied {
                    group.through(buffer, |slot, atom| {
                        atoms[slot].place.copy_rows(atom, block32, copy_row)
                    })?;
                }
            } else if in_f32 {
                group.blend(atoms, buffer, block32, level.weight as f32, assign)?;
            } else {
                group.blend(atoms, buffer, block64, level.weight, assign)?;
            }
        }
    }
    PhaseTimes::add(&stats.phases.read, read.elapsed());
    let points = cell.points.clone();
    let path = plan.kernel_path();
    sums.resize(nc * terms.slots(), 0.0);
    let row = plan.block_rows[0];
    // The kernel for this cell's block, each compiled for the path on its own (one
    // dispatch a cell): from a float32 block, a field's value, the gradient, the Laplacian
    // or the Hessian on a fast path where `fast_paths.rs` compiles one, else the general
    // kernel.
    // The cell's points, with its scratch (reborrowed: the fast path may not take them).
    macro_rules! cell_work {
        () => {
            CellWork {
                plan,
                points: points.clone(),
                cell,
                out_len,
                target,
                stencils: &mut *stencils,
                sums: &mut *sums,
                stats,
            }
        };
    }
    macro_rules! sum_with {
        ($sum:expr) => {
            path.run(CellPoints {
                work: cell_work!(),
                sum: $sum,
            })
        };
    }
    stats
        .contributions
        .fetch_add(points.len() as u64, Ordering::Relaxed);
    // The fast paths of `whole_stencil.rs`, from a float32 block, where compiled
    // (`fast_paths.rs`).
    if let Some(summed) = Summed::of(terms, narrow).filter(|_| in_f32) {
        let fast = Visit {
            summed,
            width: plan.kernel.width(),
            ncomp: nc,
            visitor: CellPoints {
                work: cell_work!(),
                sum: WholeStencil {
                    values: &block32[..],
                    row_stride: row * nc,
                    plane_stride: plane * nc,
                    ncomp: nc,
                },
            },
        };
        // Each fast path's loop over the points is its own `#[target_feature]` function.
        if path.dispatch(fast).is_some() {
            return Ok(());
        }
    }
    let (values32, values64) = (&block32[..], &block64[..]);
    macro_rules! general {
        ($t:ty, $narrow:literal, $values:expr) => {
            sum_with!(General::<$t, $narrow> {
                block: Block {
                    values: $values,
                    row,
                    plane
                },
                ncomp: nc,
                terms,
            })
        };
    }
    match (in_f32, narrow) {
        (true, true) => general!(f32, true, values32),
        (true, false) => general!(f32, false, values32),
        (false, _) => general!(f64, false, values64),
    }
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

/// The points of one cell and how each is summed from the block of its box.
struct CellPoints<'a, P> {
    work: CellWork<'a>,
    sum: P,
}

/// The points of one cell, where their answers go, and the scratch they are summed with.
struct CellWork<'a> {
    plan: &'a Plan,
    /// The points (executor's numbers).
    points: Range<usize>,
    cell: &'a Cell,
    /// Answer values per point.
    out_len: usize,
    target: &'a ResultRows,
    stencils: &'a mut Vec<Stencil>,
    sums: &'a mut [f64],
    stats: &'a StreamStats,
}

impl<P: PointSum> SimdTask for CellPoints<'_, P> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self, simd: S) {
        self.sum_points(simd)
    }
}

impl<P: PointSum> CellPoints<'_, P> {
    /// Sums every point with `sum` and writes its answer: batch by batch, the weights of
    /// the batch's points, then their sums.
    #[inline(always)]
    fn sum_points<S: Simd>(self, simd: S) {
        let CellPoints {
            work:
                CellWork {
                    plan,
                    points,
                    cell,
                    out_len,
                    target,
                    stencils,
                    sums,
                    stats,
                },
            sum,
        } = self;
        let width = plan.kernel.width();
        stencils.resize(BATCH, Stencil::default());
        let (mut weighing, mut summing) = (Duration::ZERO, Duration::ZERO);
        let mut batch = points.start;
        while batch < points.end {
            let end = (batch + BATCH).min(points.end);
            let begin = Instant::now();
            for (point, stencil) in (batch..end).zip(stencils.iter_mut()) {
                let position = &plan.sorted[point];
                weights_xyz(simd, &plan.kernel, position, &plan.axes, &mut stencil.w);
                if P::RUNS {
                    for axis in 0..3 {
                        // The whole stencil lies in the box: one run.
                        let offset = (stencil.w[axis].base - cell.origin[axis]) as usize;
                        let extent = cell.dims[axis];
                        stencil.runs[axis].set(offset, width, extent, 0, extent);
                    }
                }
            }
            let weighed = Instant::now();
            for (point, stencil) in (batch..end).zip(stencils.iter()) {
                sum.sum(simd, stencil, sums);
                // SAFETY: the row is inside the result, which outlives the workers, and
                // only this point's cell writes it (see `execute_within`).
                unsafe { target.write(point * out_len, &sums[..out_len]) };
            }
            let summed = Instant::now();
            weighing += weighed - begin;
            summing += summed - weighed;
            batch = end;
        }
        PhaseTimes::add(&stats.phases.weights, weighing);
        PhaseTimes::add(&stats.phases.accumulate, summing);
    }
}

/// How a point's sums are made from its stencil and its cell's block. A trait, not a
/// closure, so that the sum is compiled for the kernel's SIMD path.
trait PointSum: Copy {
    /// Whether the sum reads the stencil's runs (else they are not set).
    const RUNS: bool;
    /// Writes the point's sums to `out` (`[c * slots + slot]`).
    fn sum<S: Simd>(self, simd: S, stencil: &Stencil, out: &mut [f64]);
}

/// Nodes from a block's first node, `origin`, to the first of `stencil`, along each axis.
#[inline(always)]
fn offsets(stencil: &Stencil, origin: [i64; 3]) -> [usize; 3] {
    [0, 1, 2].map(|a| (stencil.w[a].base - origin[a]) as usize)
}

/// Any operator, from any block: the general kernel.
#[derive(Clone, Copy)]
struct General<'a, T, const NARROW: bool> {
    block: Block<'a, T>,
    ncomp: usize,
    terms: &'a TermSet,
}

impl<T: Lane, const NARROW: bool> PointSum for General<'_, T, NARROW> {
    const RUNS: bool = true;

    #[inline(always)]
    fn sum<S: Simd>(self, simd: S, stencil: &Stencil, out: &mut [f64]) {
        out.fill(0.0);
        Contribution {
            block: self.block,
            ncomp: self.ncomp,
            runs: &stencil.runs,
            w: &stencil.w,
            terms: self.terms,
            scale: 1.0,
            out,
        }
        .add_as::<S, NARROW>(simd);
    }
}

/// A fast path's sum of kind `K` ([`crate::engine::fast_paths`]), `W` wide, rows of `N`
/// vectors, from a float32 block whose first node is `origin`.
#[derive(Clone, Copy)]
struct Whole<'a, const W: usize, const N: usize, const K: u8> {
    block: WholeStencil<'a>,
    origin: [i64; 3],
}

impl<const W: usize, const N: usize, const K: u8> PointSum for Whole<'_, W, N, K> {
    const RUNS: bool = false;

    #[inline(always)]
    fn sum<S: Simd>(self, simd: S, stencil: &Stencil, out: &mut [f64]) {
        let start = self.block.start(offsets(stencil, self.origin));
        let w = [&stencil.w[0].w, &stencil.w[1].w, &stencil.w[2].w];
        self.block.answer::<S, W, N, K>(simd, start, w, out);
    }
}

/// A cell's points summed on the fast path [`crate::engine::fast_paths::visit`] chose,
/// entered on its SIMD path: each a function of its own.
impl FastVisit for CellPoints<'_, WholeStencil<'_>> {
    type Output = ();

    #[inline(always)]
    fn sum<S: Simd, const W: usize, const N: usize, const K: u8>(self, simd: S) {
        let CellPoints { work, sum: block } = self;
        let origin = work.cell.origin;
        simd.enter(CellPoints {
            work,
            sum: Whole::<W, N, K> { block, origin },
        })
    }
}

/// Where one atom goes in a cell block.
#[derive(Clone, Copy)]
struct AtomPlace {
    /// Nodes along a side of the atom.
    side: usize,
    /// Components.
    nc: usize,
    /// Along each axis, the part of the atom in the box: `(first box node, first atom
    /// node, length)`.
    parts: [(usize, usize, usize); 3],
    /// Nodes along a row of the block.
    row: usize,
    /// Nodes from one z plane of the block to the next.
    plane: usize,
}

impl AtomPlace {
    /// The atom's rows in the box: (first value in the atom, first value in the block,
    /// values in the row).
    #[inline(always)]
    fn rows(&self) -> impl Iterator<Item = (usize, usize, usize)> {
        let (a, nc, row, plane) = (self.side, self.nc, self.row, self.plane);
        let [(ox, ax, nx), (oy, ay, ny), (oz, az, nz)] = self.parts;
        (0..nz).flat_map(move |z| {
            (0..ny).map(move |y| {
                let src = (((az + z) * a + ay + y) * a + ax) * nc;
                let dst = ((oz + z) * plane + (oy + y) * row + ox) * nc;
                (src, dst, nx * nc)
            })
        })
    }

    /// Puts the atom's rows (clipped to the box) into `block` with `put(destination row,
    /// stored row)`.
    #[inline(always)]
    fn copy_rows<T>(&self, atom: &[f32], block: &mut [T], put: impl Fn(&mut [T], &[f32])) {
        for (src, dst, n) in self.rows() {
            put(&mut block[dst..dst + n], &atom[src..src + n]);
        }
    }

    /// Sets the atom's rows (clipped to the box) in `block` to zero.
    fn clear_rows<T: Copy + Default>(&self, block: &mut [T]) {
        for (_, dst, n) in self.rows() {
            block[dst..dst + n].fill(T::default());
        }
    }

    /// Adds the atom's rows (clipped to the box), read from its stored bytes as
    /// [`Self::copy_stored_rows`] reads them, times `weight` into `block` (into zeros if
    /// `assign`): one time level of a blend.
    #[inline(always)]
    fn blend_stored_rows<T: BlendValue>(
        &self,
        atom: &[u8],
        block: &mut [T],
        weight: T,
        assign: bool,
    ) {
        for (src, dst, n) in self.rows() {
            let from = atom[4 * src..4 * (src + n)].chunks_exact(4);
            let values = from.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            for (d, s) in block[dst..dst + n].iter_mut().zip(values) {
                weigh_in(d, s, weight, assign);
            }
        }
    }

    /// Copies the atom's rows (clipped to the box) from its stored bytes (little-endian
    /// float32 at any alignment, as read in place) into `block`.
    #[inline(always)]
    fn copy_stored_rows(&self, atom: &[u8], block: &mut [f32]) {
        for (src, dst, n) in self.rows() {
            let (from, to) = (&atom[4 * src..4 * (src + n)], &mut block[dst..dst + n]);
            if cfg!(target_endian = "little") {
                // SAFETY: both hold `4 n` bytes, a `&mut` never overlaps a `&`, and any
                // four bytes are a float32 (stored little-endian, as this CPU reads them).
                unsafe { copy_bytes_exact(from.as_ptr(), to.as_mut_ptr().cast::<u8>(), 4 * n) }
            } else {
                le_f32_into(from, to);
            }
        }
    }
}

/// One read of a cell: the atoms of one shard at one time step, a group at a time.
struct ShardGroup<'a> {
    source: &'a dyn AtomSource,
    t: usize,
    shard: ShardPos,
    requests: &'a [AtomRequest],
    atom_values: usize,
}

impl ShardGroup<'_> {
    /// Hands `put` each atom (slot, stored bytes) read in place; `false`, having handed
    /// nothing, where the source cannot.
    fn in_place(&self, put: &mut dyn FnMut(usize, &[u8])) -> Result<bool> {
        self.source
            .atoms_in_place(self.t, self.shard, self.requests, put)
    }

    /// Reads the atoms into `buffer` and hands `put` each (slot, values).
    fn through(&self, buffer: &mut Vec<f32>, mut put: impl FnMut(usize, &[f32])) -> Result<()> {
        buffer.resize(self.requests.len() * self.atom_values, 0.0);
        self.source
            .read_atoms(self.t, self.shard, self.requests, buffer)?;
        for (slot, atom) in buffer.chunks_exact(self.atom_values).enumerate() {
            put(slot, atom);
        }
        Ok(())
    }

    /// Adds the atoms (`atoms`, by slot) times `weight` into `block` (into zeros if
    /// `assign`): one time level of a blend, in place where the source allows.
    fn blend<T: BlendValue>(
        &self,
        atoms: &[NeededAtom],
        buffer: &mut Vec<f32>,
        block: &mut [T],
        weight: T,
        assign: bool,
    ) -> Result<()> {
        let blended = self.in_place(&mut |slot, atom| {
            atoms[slot]
                .place
                .blend_stored_rows(atom, block, weight, assign)
        })?;
        if !blended {
            self.through(buffer, |slot, atom| {
                atoms[slot]
                    .place
                    .copy_rows(atom, block, |d, s| blend(d, s, weight, assign))
            })?;
        }
        Ok(())
    }
}

/// A value of a blended block: float32 for float32 answers, float64 for float64 ones.
trait BlendValue: Copy + std::ops::Mul<Output = Self> + std::ops::Add<Output = Self> {
    fn from_f32(v: f32) -> Self;
}

impl BlendValue for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl BlendValue for f64 {
    fn from_f32(v: f32) -> Self {
        f64::from(v)
    }
}

/// `d = weight · s` for each value if `assign`, else `d += weight · s`: one time level of
/// a blend.
#[inline(always)]
fn blend<T: BlendValue>(d: &mut [T], s: &[f32], weight: T, assign: bool) {
    for (d, &s) in d.iter_mut().zip(s) {
        weigh_in(d, s, weight, assign);
    }
}

/// One value of [`blend`]. Unfused: `mul_add` is a call to libm's `fma` in a build
/// without FMA.
#[inline(always)]
fn weigh_in<T: BlendValue>(d: &mut T, s: f32, weight: T, assign: bool) {
    let term = weight * T::from_f32(s);
    *d = if assign { term } else { *d + term };
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
