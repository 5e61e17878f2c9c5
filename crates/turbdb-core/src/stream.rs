//! The streaming executor (Kanov et al.): each needed atom is read once per batch, in
//! storage order, and added to the partial sums of every point whose stencil touches it.
//! Cells run in parallel; each returns partial sums for its points, which are then added
//! into the result, so the answer does not depend on the order atoms arrive in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rayon::prelude::*;

use crate::accumulate::{accumulate_any, Runs, TermSet};
use crate::error::Result;
use crate::geometry::ShardPos;
use crate::morton;
use crate::plan::{Cell, Plan};
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
    fn read_atoms(&self, t: usize, shard: ShardPos, atoms: &[AtomRequest], out: &mut [f32]) -> Result<()>;
}

impl AtomSource for FieldReader {
    fn read_atoms(&self, t: usize, shard: ShardPos, atoms: &[AtomRequest], out: &mut [f32]) -> Result<()> {
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
    let result = Mutex::new(vec![0.0; plan.positions.len() * out_len]);
    let add = |cell: &Cell, partial: Vec<f64>| {
        let mut result = result.lock().expect("result");
        for (i, &p) in cell.points.iter().enumerate() {
            let target = &mut result[p as usize * out_len..][..out_len];
            for (r, v) in target.iter_mut().zip(&partial[i * out_len..][..out_len]) {
                *r += v;
            }
        }
    };
    match order {
        Order::Storage => plan.cells.par_iter().try_for_each(|cell| {
            let partial = run_cell(plan, cell, source, levels, &terms, None, stats)?;
            add(cell, partial);
            Ok(())
        })?,
        Order::Shuffled(seed) => {
            let mut rng = SplitMix(seed);
            let mut cells: Vec<&Cell> = plan.cells.iter().collect();
            rng.shuffle(&mut cells);
            for cell in cells {
                let partial = run_cell(plan, cell, source, levels, &terms, Some(&mut rng), stats)?;
                add(cell, partial);
            }
        }
    }
    Ok(result.into_inner().expect("result"))
}

/// The partial sums of one cell for its points (`points × ncomp × slots`).
fn run_cell(
    plan: &Plan,
    cell: &Cell,
    source: &dyn AtomSource,
    levels: &[TimeLevel],
    terms: &TermSet,
    mut shuffle: Option<&mut SplitMix>,
    stats: &StreamStats,
) -> Result<Vec<f64>> {
    let g = &plan.geometry;
    let (a, c_atoms, nc) = (g.atom, plan.cell_atoms, g.ncomp);
    let width = plan.kernel.width();
    let out_len = nc * terms.slots();
    let per_shard = g.atoms_per_side();

    // Weights of every point once per cell, and which of the cell's atoms each touches.
    let weights: Vec<[AxisWeights; 3]> = cell
        .points
        .iter()
        .map(|&p| {
            let s = plan.positions[p as usize];
            let mut w = [AxisWeights::default(); 3];
            for axis in 0..3 {
                plan.kernel.weights(s[axis], &plan.axes[axis], &mut w[axis]);
            }
            w
        })
        .collect();
    let n_atoms = c_atoms.pow(3);
    let mut counts = vec![0u32; n_atoms + 1];
    let mut touched: Vec<(u16, u32)> = Vec::with_capacity(cell.points.len() * 2);
    for (i, w) in weights.iter().enumerate() {
        let mut along = [[false; 8]; 3];
        for axis in 0..3 {
            let n = plan.axes[axis].n;
            for k in 0..width as i64 {
                let node = (w[axis].base + k).rem_euclid(n as i64) as usize;
                let atom = node / a;
                let first = cell.first_atom[axis];
                if atom >= first && atom < first + c_atoms {
                    along[axis][atom - first] = true;
                }
            }
        }
        for z in (0..c_atoms).filter(|&z| along[2][z]) {
            for y in (0..c_atoms).filter(|&y| along[1][y]) {
                for x in (0..c_atoms).filter(|&x| along[0][x]) {
                    let slot = (z * c_atoms + y) * c_atoms + x;
                    counts[slot + 1] += 1;
                    touched.push((slot as u16, i as u32));
                }
            }
        }
    }
    for s in 1..counts.len() {
        counts[s] += counts[s - 1];
    }
    let mut entries = vec![0u32; touched.len()];
    let mut fill = counts.clone();
    for &(slot, i) in &touched {
        entries[fill[slot as usize] as usize] = i;
        fill[slot as usize] += 1;
    }

    // The needed atoms in storage (Morton) order, or shuffled.
    let mut atoms: Vec<(usize, [usize; 3])> = morton::cube_order(c_atoms as u32)
        .into_iter()
        .map(|(x, y, z)| [x as usize, y as usize, z as usize])
        .map(|l| ((l[2] * c_atoms + l[1]) * c_atoms + l[0], l))
        .filter(|&(slot, l)| {
            counts[slot + 1] > counts[slot] && (0..3).all(|ax| (cell.first_atom[ax] + l[ax]) * a < plan.axes[ax].n)
        })
        .collect();
    let mut level_order: Vec<&TimeLevel> = levels.iter().collect();
    if let Some(rng) = shuffle.as_deref_mut() {
        rng.shuffle(&mut atoms);
        rng.shuffle(&mut level_order);
    }
    let requests: Vec<AtomRequest> = atoms
        .iter()
        .enumerate()
        .map(|(buffer_slot, &(_, l))| AtomRequest {
            local: [0, 1, 2].map(|ax| (cell.first_atom[ax] + l[ax]) % per_shard),
            slot: buffer_slot,
        })
        .collect();

    let atom_values = g.atom_values();
    let mut buffer = vec![0f32; atoms.len() * atom_values];
    let mut partial = vec![0.0; cell.points.len() * out_len];
    let mut contributions = 0u64;
    for level in level_order {
        if shuffle.is_some() {
            for request in &requests {
                source.read_atoms(level.t, cell.shard, std::slice::from_ref(request), &mut buffer)?;
            }
            stats.read_calls.fetch_add(requests.len() as u64, Ordering::Relaxed);
        } else {
            source.read_atoms(level.t, cell.shard, &requests, &mut buffer)?;
            stats.read_calls.fetch_add(1, Ordering::Relaxed);
        }
        stats.atoms_read.fetch_add(requests.len() as u64, Ordering::Relaxed);
        for (buffer_slot, &(slot, l)) in atoms.iter().enumerate() {
            let values = &buffer[buffer_slot * atom_values..][..atom_values];
            let start = [0, 1, 2].map(|ax| (cell.first_atom[ax] + l[ax]) * a);
            for &i in &entries[counts[slot] as usize..counts[slot + 1] as usize] {
                let w = &weights[i as usize];
                let runs = [0, 1, 2].map(|ax| Runs::new(w[ax].base, width, plan.axes[ax].n, start[ax], a));
                let out = &mut partial[i as usize * out_len..][..out_len];
                accumulate_any(nc, values, a, &runs, w, terms, level.weight, out);
                contributions += 1;
            }
        }
    }
    stats.contributions.fetch_add(contributions, Ordering::Relaxed);
    Ok(partial)
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
