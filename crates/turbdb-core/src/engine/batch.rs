//! Serving a batch: the atoms the scheduler chose, for the pending sub-queries of every
//! query that waits on them. Each point of a point query adds the part of its stencil
//! that lies in the batch's atoms to its partial sums, through the same kernel as the
//! streaming executor ([`accumulate_any`]): with the cached atom itself as the block, one
//! contribution per atom, or — where the batch holds every atom of the point — with the
//! whole stencil gathered into one block ([`Gathered`]), or, for the points of a dense
//! query that share a home atom, out of one block of all their stencils ([`HomeBlock`]).
//! The sums do not depend on how
//! atoms are split into batches, nor on their order (up to rounding). A cutout's
//! sub-query copies its nodes out of the atom.

use std::sync::Arc;

use rayon::prelude::*;

use crate::engine::accumulate::{accumulate_any, Block, Runs};
use crate::engine::buffers::zeros_to_update;
use crate::engine::cache::AtomData;
use crate::engine::gather::{Gathered, Stencil};
use crate::engine::home_block::{HomeBlock, Neighbour};
use crate::engine::subquery::{home_atom, CutoutWork, PointWork};
use crate::interp::stencil::AxisWeights;
use crate::storage::morton;

/// What a query asks the engine to do.
#[derive(Debug)]
pub enum Work {
    /// Values, derivatives or Laplacians at points.
    Points(Arc<PointWork>),
    /// Stored values on a box of nodes.
    Cutout(CutoutWork),
}

impl Work {
    /// Sub-queries per time level (atoms needed).
    pub fn atoms(&self) -> usize {
        match self {
            Work::Points(w) => w.atoms.len(),
            Work::Cutout(w) => w.atoms.len(),
        }
    }

    /// The Morton code of sub-query `i`'s atom.
    pub fn code(&self, i: usize) -> u64 {
        match self {
            Work::Points(w) => w.atoms[i].code,
            Work::Cutout(w) => w.atoms[i].code,
        }
    }

    /// The sub-query of the atom with Morton code `code`, if the query needs it (its atoms
    /// are in storage order, so this is a binary search).
    pub fn index_of(&self, code: u64) -> Option<usize> {
        match self {
            Work::Points(w) => w.atoms.binary_search_by_key(&code, |a| a.code).ok(),
            Work::Cutout(w) => w.atoms.binary_search_by_key(&code, |a| a.code).ok(),
        }
    }

    /// The grid position (in atoms) of sub-query `i`'s atom.
    pub fn coords(&self, i: usize) -> [u32; 3] {
        match self {
            Work::Points(w) => w.atoms[i].coords,
            Work::Cutout(w) => w.atoms[i].coords,
        }
    }

    /// Points (or nodes) in sub-query `i`: its share of the workload.
    pub fn weight(&self, i: usize) -> u32 {
        match self {
            Work::Points(w) => w.atom_points.row(i).len() as u32,
            Work::Cutout(w) => w.nodes_in(i) as u32,
        }
    }

    /// Points, or nodes of a cutout.
    pub fn size(&self) -> usize {
        match self {
            Work::Points(w) => w.len(),
            Work::Cutout(w) => w.dims.iter().product(),
        }
    }

    /// The partial sums (or copied values) added when every sub-query is served once.
    pub fn contributions(&self) -> u64 {
        match self {
            Work::Points(w) => w.point_atoms.pairs() as u64,
            Work::Cutout(w) => w.dims.iter().product::<usize>() as u64,
        }
    }
}

/// What a query has accumulated so far, and the scratch space of its batches.
#[derive(Debug)]
pub enum Progress {
    /// A point query: `N × out_len` partial sums in the engine's order.
    Points {
        /// The partial sums.
        sums: Vec<f64>,
        /// Per atom of the query: its slot in the current batch, or [`NONE`].
        slot_of: Vec<u32>,
        /// Per point: the last batch that visited it.
        visited: Vec<u32>,
        /// This batch's number, for `visited`.
        epoch: u32,
    },
    /// A cutout: `(z, y, x, c)` float32 values.
    Cutout {
        /// The values.
        values: Vec<f32>,
    },
}

/// No slot: the atom is not in the current batch.
const NONE: u32 = u32::MAX;

impl Progress {
    /// Empty sums for `work`.
    pub fn new(work: &Work) -> Self {
        match work {
            Work::Points(w) => Progress::Points {
                sums: zeros_to_update(w.len() * w.out_len()),
                slot_of: vec![NONE; w.atoms.len()],
                visited: zeros_to_update(w.len()),
                epoch: 0,
            },
            Work::Cutout(w) => Progress::Cutout {
                values: vec![0.0; w.dims.iter().product::<usize>() * w.ncomp],
            },
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        match self {
            Progress::Points {
                sums,
                slot_of,
                visited,
                ..
            } => sums.len() * 8 + slot_of.len() * 4 + visited.len() * 4,
            Progress::Cutout { values } => values.len() * 4,
        }
    }
}

/// One query's share of a batch: the sub-queries served (its atom numbers, each with the
/// batch slot of the atom's data) at one time level of weight `scale`.
pub struct Part<'q> {
    /// What the query asks.
    pub work: &'q Work,
    /// Its sums so far.
    pub progress: &'q mut Progress,
    /// Weight of the time level.
    pub scale: f64,
    /// `(sub-query, batch slot)` pairs.
    pub atoms: Vec<(u32, u32)>,
}

impl<'q> Part<'q> {
    /// Every sub-query of `work`, each atom's data in the batch slot of its number (a
    /// query served whole from its atoms in sub-query order).
    pub fn whole(work: &'q Work, progress: &'q mut Progress, scale: f64) -> Self {
        Self {
            work,
            progress,
            scale,
            atoms: (0..work.atoms() as u32).map(|i| (i, i)).collect(),
        }
    }
}

/// Points whose stencils are prefetched ahead of the one being gathered.
const AHEAD: usize = 4;

/// Fewest atoms of a stencil at hand for the part in them to be gathered and summed at
/// once rather than atom by atom.
const GATHER_PIECES: usize = 2;

/// Points given to one task.
const TASK_POINTS: usize = 256;
/// Below this many points a batch runs on the calling thread: handing out tasks would
/// cost more than it saves.
const SERIAL_POINTS: usize = 512;

/// Serves the sub-queries of `parts` from the atoms `data` (by batch slot); returns the
/// partial sums added (point–atom pairs, or nodes copied).
pub fn execute(parts: &mut [Part<'_>], data: &[AtomData]) -> u64 {
    enum Task<'a> {
        Points {
            work: &'a PointWork,
            slot_of: &'a [u32],
            sums: SumsPtr,
            scale: f64,
            points: &'a [u32],
        },
        Cutout {
            work: &'a CutoutWork,
            values: ValuesPtr,
            atoms: &'a [(u32, u32)],
        },
    }
    // Set up each part: mark its atoms' slots and list the points they serve, once each.
    let mut candidates: Vec<Vec<u32>> = Vec::with_capacity(parts.len());
    for part in parts.iter_mut() {
        let mut list = Vec::new();
        if let (
            Work::Points(work),
            Progress::Points {
                slot_of,
                visited,
                epoch,
                ..
            },
        ) = (part.work, &mut *part.progress)
        {
            *epoch = epoch.wrapping_add(1);
            if *epoch == 0 {
                visited.fill(0);
                *epoch = 1;
            }
            let every_atom = part.atoms.len() == work.atoms.len();
            for &(atom, slot) in &part.atoms {
                slot_of[atom as usize] = slot;
                if every_atom {
                    continue;
                }
                for &p in work.atom_points.row(atom as usize) {
                    if visited[p as usize] != *epoch {
                        visited[p as usize] = *epoch;
                        list.push(p);
                    }
                }
            }
            // Points in the engine's order (by home atom), so points of one home are
            // together in a task: every point, or, where there are enough of them for
            // blocks of homes to pay, those found, sorted.
            if every_atom {
                list.extend(0..work.positions.len() as u32);
            } else if list.len() >= part.atoms.len() * GROUP_POINTS / 2 {
                list.par_sort_unstable();
            }
        }
        candidates.push(list);
    }
    let mut tasks: Vec<Task<'_>> = Vec::new();
    let mut points = 0;
    for (part, list) in parts.iter_mut().zip(&candidates) {
        match (part.work, &mut *part.progress) {
            (Work::Points(work), Progress::Points { sums, slot_of, .. }) => {
                let sums = SumsPtr(sums.as_mut_ptr());
                points += list.len();
                // Large tasks for long lists, so fewer homes are split between tasks.
                let task = TASK_POINTS.max(list.len().div_ceil(8 * rayon::current_num_threads()));
                for chunk in list.chunks(task) {
                    tasks.push(Task::Points {
                        work,
                        slot_of,
                        sums,
                        scale: part.scale,
                        points: chunk,
                    });
                }
            }
            (Work::Cutout(work), Progress::Cutout { values }) => {
                let values = ValuesPtr(values.as_mut_ptr());
                points += part.atoms.len() * 64;
                for chunk in part.atoms.chunks(8) {
                    tasks.push(Task::Cutout {
                        work,
                        values,
                        atoms: chunk,
                    });
                }
            }
            _ => unreachable!("a query's progress matches its work"),
        }
    }
    let run = |task: &Task<'_>| -> u64 {
        match *task {
            Task::Points {
                work,
                slot_of,
                sums,
                scale,
                points,
            } => add_points(work, slot_of, data, sums, scale, points),
            Task::Cutout {
                work,
                values,
                atoms,
            } => {
                let mut copied = 0;
                for &(atom, slot) in atoms {
                    // SAFETY: the output holds the cutout's nodes; the nodes of different
                    // atoms are disjoint and each atom is in one task.
                    unsafe { work.copy(atom as usize, &data[slot as usize], values.0) };
                    copied += work.nodes_in(atom as usize) as u64;
                }
                copied
            }
        }
    };
    let added = if points < SERIAL_POINTS {
        tasks.iter().map(run).sum()
    } else {
        tasks.par_iter().map(run).sum()
    };
    // Unmark the slots for the next batch.
    for part in parts.iter_mut() {
        if let Progress::Points { slot_of, .. } = &mut *part.progress {
            for &(atom, _) in &part.atoms {
                slot_of[atom as usize] = NONE;
            }
        }
    }
    added
}

/// Fewest points of one home atom that are summed from one block of all their stencils
/// ([`HomeBlock`]) rather than each from its own gathered stencil: the block copies up to
/// 15³ nodes (lag8), a stencil 8³. Measured (`warm_profile`, lag8, 1 thread, AMD EPYC
/// Zen 3 AVX2, load ≈ 1.8): at 7 points an atom, 16 was 5 % faster than 8 and 20 % faster
/// than 4; at 24 an atom all three were 40 % faster than gathering each stencil.
const GROUP_POINTS: usize = 16;

/// Adds, for each of `points`, the parts of its stencil in the batch's atoms: for a run of
/// points with the same home atom, out of one block of all their stencils; else the whole
/// stencil at once, gathered into a block, where the batch holds all of it; else atom by
/// atom.
fn add_points(
    work: &PointWork,
    slot_of: &[u32],
    data: &[AtomData],
    sums: SumsPtr,
    scale: f64,
    points: &[u32],
) -> u64 {
    let (a, nc) = (work.geometry.atom, work.geometry.ncomp);
    let width = work.kernel.width();
    let weights_of = |p: u32, w: &mut [AxisWeights; 3]| {
        let s = &work.positions[p as usize];
        for k in 0..3 {
            work.kernel.weights(s[k], &work.axes[k], &mut w[k]);
        }
    };
    // The part of the stencil in each of the batch's atoms, one contribution each.
    let by_atom = |p: u32, w: &[AxisWeights; 3], row: &mut [f64]| -> u64 {
        let mut added = 0;
        for &atom in work.point_atoms.row(p as usize) {
            let slot = slot_of[atom as usize];
            if slot == NONE {
                continue;
            }
            let start = work.atoms[atom as usize].coords.map(|c| c as usize * a);
            let runs =
                [0, 1, 2].map(|k| Runs::new(w[k].wrapped, width, work.axes[k].n, start[k], a));
            let block = Block::dense(&data[slot as usize][..], [a, a]);
            accumulate_any(nc, block, &runs, w, &work.terms, scale, row);
            added += 1;
        }
        added
    };
    let home_of = |p: u32| home_atom(&work.positions[p as usize], a);
    let mut gathered = Gathered::new(width, nc);
    // Where a stencil can reach past the atoms next to its home, points are not grouped.
    // The block's space is made on first use: sparse points never need it.
    let groupable = gathered.is_some() && width <= a + 1;
    let mut home_block: Option<HomeBlock> = None;
    let mut added = 0;
    let mut i = 0;
    while i < points.len() {
        let home = home_of(points[i]);
        let mut j = i + 1;
        while j < points.len() && home_of(points[j]) == home {
            j += 1;
        }
        let group = &points[i..j];
        i = j;
        if groupable && group.len() >= GROUP_POINTS {
            let block = home_block.get_or_insert_with(|| HomeBlock::new(width, a, nc));
            let summed = add_home(
                work,
                slot_of,
                data,
                block,
                home,
                group,
                &weights_of,
                &by_atom,
                sums,
                scale,
            );
            if let Some(summed) = summed {
                added += summed;
                continue;
            }
        }
        added += gather_each(
            work,
            slot_of,
            data,
            &mut gathered,
            group,
            &weights_of,
            &by_atom,
            sums,
            scale,
        );
    }
    added
}

/// [`add_points`] for a group of points with home atom `home`, out of one block of all
/// their stencils; `None` (nothing added) where the block would not fit.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn add_home(
    work: &PointWork,
    slot_of: &[u32],
    data: &[AtomData],
    block: &mut HomeBlock,
    home: [u32; 3],
    group: &[u32],
    weights_of: &impl Fn(u32, &mut [AxisWeights; 3]),
    by_atom: &impl Fn(u32, &[AxisWeights; 3], &mut [f64]) -> u64,
    sums: SumsPtr,
    scale: f64,
) -> Option<u64> {
    let (a, nc) = (work.geometry.atom, work.geometry.ncomp);
    let n = work.axes.map(|axis| axis.n);
    let (mut lo, mut hi) = ([i64::MAX; 3], [i64::MIN; 3]);
    for &p in group {
        let s = &work.positions[p as usize];
        for k in 0..3 {
            let base = work.kernel.base(s[k], &work.axes[k]);
            lo[k] = lo[k].min(base);
            hi[k] = hi[k].max(base);
        }
    }
    if !block.fits(lo, hi, n) {
        return None;
    }
    // The atoms around the home that the batch holds (a tiny grid meets one twice).
    let per_axis = work.geometry.atoms_per_axis();
    let mut neighbours: Vec<Neighbour<'_>> = Vec::with_capacity(27);
    let mut all_present = true;
    for dz in -1i64..=1 {
        for dy in -1i64..=1 {
            for dx in -1i64..=1 {
                let mut coords = [0u32; 3];
                let mut inside = true;
                for (k, d) in [dx, dy, dz].into_iter().enumerate() {
                    let c = home[k] as i64 + d;
                    let m = per_axis[k] as i64;
                    coords[k] = if work.axes[k].periodic {
                        c.rem_euclid(m) as u32
                    } else if (0..m).contains(&c) {
                        c as u32
                    } else {
                        inside = false;
                        0
                    };
                }
                if !inside || neighbours.iter().any(|nb| nb.coords == coords) {
                    continue;
                }
                let code = morton::encode(coords[0], coords[1], coords[2]);
                let slot = work
                    .atoms
                    .binary_search_by_key(&code, |atom| atom.code)
                    .ok()
                    .map(|i| slot_of[i])
                    .filter(|&slot| slot != NONE);
                match slot {
                    Some(slot) => neighbours.push(Neighbour {
                        coords,
                        values: &data[slot as usize],
                    }),
                    None => all_present = false,
                }
            }
        }
    }
    let periodic = work.axes.map(|axis| axis.periodic);
    block.fill(lo, hi, a, n, periodic, &neighbours, all_present);
    let mut added = 0;
    let mut w = [AxisWeights::default(); 3];
    for &p in group {
        weights_of(p, &mut w);
        let atoms = work.point_atoms.row(p as usize);
        // SAFETY: each point is in one task of the batch and the sums outlive it.
        let row = unsafe { sums.row(p, work.out_len()) };
        if atoms.iter().all(|&atom| slot_of[atom as usize] != NONE) {
            let runs = block.runs(w.map(|axis| axis.base));
            accumulate_any(nc, block.block(), &runs, &w, &work.terms, scale, row);
            added += atoms.len() as u64;
        } else {
            added += by_atom(p, &w, row);
        }
    }
    Some(added)
}

/// [`add_points`] point by point: each point's whole stencil gathered into a block where
/// the batch holds all of it (the rows of the next points prefetched meanwhile), else atom
/// by atom.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gather_each(
    work: &PointWork,
    slot_of: &[u32],
    data: &[AtomData],
    gathered: &mut Option<Gathered>,
    points: &[u32],
    weights_of: &impl Fn(u32, &mut [AxisWeights; 3]),
    by_atom: &impl Fn(u32, &[AxisWeights; 3], &mut [f64]) -> u64,
    sums: SumsPtr,
    scale: f64,
) -> u64 {
    let (a, nc) = (work.geometry.atom, work.geometry.ncomp);
    let width = work.kernel.width();
    let n = work.axes.map(|axis| axis.n);
    let atoms_of = |p: u32| {
        work.point_atoms.row(p as usize).iter().map(|&atom| {
            let slot = slot_of[atom as usize];
            (
                work.atoms[atom as usize].coords,
                (slot != NONE).then_some(slot),
            )
        })
    };
    // The stencils of this point and the next AHEAD, whose rows are being prefetched.
    let mut ring = [Stencil::default(); AHEAD + 1];
    let gathering = gathered.is_some();
    let plan = |p: u32, stencil: &mut Stencil| {
        weights_of(p, &mut stencil.w);
        if gathering {
            stencil.place(width, n, a, atoms_of(p));
            stencil.prefetch(a, nc, data);
        }
    };
    for (i, &p) in points.iter().take(AHEAD).enumerate() {
        plan(p, &mut ring[i]);
    }
    let mut added = 0;
    for (i, &p) in points.iter().enumerate() {
        if let Some(&next) = points.get(i + AHEAD) {
            plan(next, &mut ring[(i + AHEAD) % (AHEAD + 1)]);
        }
        let stencil = &ring[i % (AHEAD + 1)];
        let w = &stencil.w;
        // SAFETY: each point is in one task of the batch and the sums outlive it.
        let row = unsafe { sums.row(p, work.out_len()) };
        // A stencil split between batches is gathered too where two or more of its atoms are
        // at hand: its pieces summed one by one each pay the kernel's fixed cost.
        if let Some(g) = gathered
            .as_mut()
            .filter(|_| stencil.present() >= GATHER_PIECES)
        {
            let (block, runs) = g.gather(stencil, a, data);
            accumulate_any(nc, block, runs, w, &work.terms, scale, row);
            added += stencil.present() as u64;
            continue;
        }
        added += by_atom(p, w, row);
    }
    added
}

/// A query's sums, written by the tasks of one batch (each point by one task).
#[derive(Clone, Copy)]
struct SumsPtr(*mut f64);
// SAFETY: tasks write the rows of different points.
unsafe impl Send for SumsPtr {}
unsafe impl Sync for SumsPtr {}

impl SumsPtr {
    /// The sums of point `p`, `len` of them.
    ///
    /// # Safety
    /// The sums must outlive the slice, and no one else may touch that point's sums
    /// meanwhile (each point is in one task of a batch).
    #[inline(always)]
    unsafe fn row<'a>(self, p: u32, len: usize) -> &'a mut [f64] {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(p as usize * len), len) }
    }
}

/// A cutout's values, written by the tasks of one batch (each atom by one task).
#[derive(Clone, Copy)]
struct ValuesPtr(*mut f32);
// SAFETY: tasks write the nodes of different atoms.
unsafe impl Send for ValuesPtr {}
unsafe impl Sync for ValuesPtr {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cache::padded;
    use crate::engine::plan::Plan;
    use crate::engine::stream::{execute as stream, Order, StreamStats, TimeLevel};
    use crate::interp::method::{Method, Operator};
    use crate::storage::axis::Axis;
    use crate::storage::geometry::{FieldGeometry, ShardPos};
    use crate::storage::reader::{AtomRequest, AtomSource};

    /// A field computed on the fly: value = f(node, component).
    struct Analytic(FieldGeometry);

    impl Analytic {
        fn atom(&self, coords: [u32; 3]) -> Vec<f32> {
            let (a, nc) = (self.0.atom, self.0.ncomp);
            let mut v = vec![0f32; a * a * a * nc];
            for z in 0..a {
                for y in 0..a {
                    for x in 0..a {
                        let node = [
                            coords[0] as usize * a + x,
                            coords[1] as usize * a + y,
                            coords[2] as usize * a + z,
                        ];
                        for c in 0..nc {
                            v[((z * a + y) * a + x) * nc + c] =
                                ((node[0] * 7 + node[1] * 13 + node[2] * 29 + c * 3) % 17) as f32
                                    * 0.25;
                        }
                    }
                }
            }
            v
        }
    }

    impl AtomSource for Analytic {
        fn read_atoms(
            &self,
            _t: usize,
            shard: [usize; 3],
            atoms: &[AtomRequest],
            out: &mut [f32],
        ) -> crate::error::Result<()> {
            let per = self.0.atoms_per_side();
            let n = self.0.atom_values();
            for r in atoms {
                let coords = [0, 1, 2].map(|k| (shard[k] * per + r.local[k]) as u32);
                out[r.slot * n..(r.slot + 1) * n].copy_from_slice(&self.atom(coords));
            }
            Ok(())
        }
    }

    /// A method for each operator, each stencil width.
    const METHODS_AND_OPERATORS: [(Method, Operator); 4] = [
        (Method::Lagrange(8), Operator::Field),
        (Method::Lagrange(6), Operator::Gradient),
        (Method::Lagrange(4), Operator::Hessian),
        (Method::Fd4Lag4, Operator::Laplacian),
    ];

    /// `count` pseudo-random points inside `axes` (a fixed seed).
    fn points_in(axes: &[Axis; 3], count: usize, seed: u64) -> Vec<[f64; 3]> {
        let mut state = seed;
        (0..count)
            .map(|_| {
                [0, 1, 2].map(|k| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let u = (state >> 11) as f64 / (1u64 << 53) as f64;
                    axes[k].origin + u * (axes[k].n - 1) as f64 * axes[k].spacing
                })
            })
            .collect()
    }

    /// The streaming executor's answer to a query of `points` on `source`, the query cut
    /// into sub-queries, and its atoms by sub-query.
    fn streaming_case(
        source: &Analytic,
        points: &[[f64; 3]],
        method: Method,
        operator: Operator,
        axes: [Axis; 3],
    ) -> (Vec<f64>, Work, Vec<AtomData>) {
        let geometry = source.0.clone();
        let plan = Plan::new(points, method, operator, axes, geometry.clone(), 1).unwrap();
        let levels = [TimeLevel { t: 0, weight: 1.0 }];
        let expected = stream(
            &plan,
            source,
            &levels,
            Order::Storage,
            &StreamStats::default(),
        )
        .unwrap();
        let work = Work::Points(Arc::new(
            PointWork::new(points, method, operator, axes, geometry, None).unwrap(),
        ));
        let data = (0..work.atoms())
            .map(|i| padded(source.atom(work.coords(i))))
            .collect();
        (expected, work, data)
    }

    /// Checks that serving `work` added every point–atom pair once (`added`) and that its
    /// sums equal `expected`, the streaming executor's answer in the caller's point order.
    fn assert_streaming_answer(
        work: &Work,
        progress: &Progress,
        added: u64,
        expected: &[f64],
        case: &str,
    ) {
        let (Work::Points(w), Progress::Points { sums, .. }) = (work, progress) else {
            unreachable!("a point query")
        };
        assert_eq!(added, w.point_atoms.pairs() as u64, "{case}");
        let out_len = w.out_len();
        for (i, &p) in w.order.iter().enumerate() {
            for v in 0..out_len {
                let (got, want) = (sums[i * out_len + v], expected[p as usize * out_len + v]);
                assert!(
                    (got - want).abs() <= 1e-9 * (1.0 + want.abs()),
                    "{case} point {p}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn a_batch_holding_every_atom_gathers_whole_stencils_and_gives_the_streaming_answer() {
        // Atoms of 4 nodes, so a stencil 8 wide spans two or three of them per axis; a grid
        // that is not a whole number of atoms (the last atom is short), a wrap on the
        // periodic axes and one bounded axis; one, three and four components.
        for (grid, ncomp, periodic) in [
            ([20, 16, 12], 3, [true, true, false]),
            ([12, 20, 16], 1, [true, false, true]),
            ([16, 12, 20], 4, [false, true, true]),
        ] {
            let geometry = FieldGeometry::new(grid, ncomp, 4, 8).unwrap();
            let axes = [0, 1, 2].map(|k| Axis {
                n: grid[k],
                origin: -1.0,
                spacing: 0.25,
                periodic: periodic[k],
            });
            let points = points_in(&axes, 200, grid[0] as u64);
            let source = Analytic(geometry.clone());
            for (method, operator) in METHODS_AND_OPERATORS {
                let (expected, work, data) =
                    streaming_case(&source, &points, method, operator, axes);
                let mut progress = Progress::new(&work);
                let added = execute(&mut [Part::whole(&work, &mut progress, 1.0)], &data);
                let case = format!("{grid:?} {ncomp} {method:?} {operator:?}");
                assert_streaming_answer(&work, &progress, added, &expected, &case);
            }
        }
    }

    #[test]
    fn batches_in_any_split_give_the_streaming_answer() {
        let geometry = FieldGeometry::new([24, 16, 32], 3, 8, 16).unwrap();
        let axes = [24, 16, 32].map(|n| Axis {
            n,
            origin: 0.0,
            spacing: 0.5,
            periodic: true,
        });
        let points = points_in(&axes, 300, 7);
        let source = Analytic(geometry.clone());
        for (method, operator) in [
            (Method::Lagrange(8), Operator::Field),
            (Method::Fd4Lag4, Operator::Gradient),
            (Method::Spline { m: 2, q: 8 }, Operator::Hessian),
        ] {
            let (expected, work, data) = streaming_case(&source, &points, method, operator, axes);
            let mut progress = Progress::new(&work);
            // Batches of 1, 2, 3, … atoms, in reverse storage order.
            let mut order: Vec<u32> = (0..work.atoms() as u32).rev().collect();
            let mut size = 1;
            let mut added = 0;
            while !order.is_empty() {
                let take: Vec<u32> = order.drain(..size.min(order.len())).collect();
                let atoms = take.iter().map(|&i| (i, i)).collect();
                let mut parts = [Part {
                    work: &work,
                    progress: &mut progress,
                    scale: 1.0,
                    atoms,
                }];
                added += execute(&mut parts, &data);
                size += 1;
            }
            assert_streaming_answer(&work, &progress, added, &expected, &format!("{method:?}"));
        }
    }

    #[test]
    fn dense_points_summed_from_one_block_per_home_atom_give_the_streaming_answer() {
        // Hundreds of points per atom of 8 nodes, so runs of points share a home atom: a
        // bounded axis, a grid of two atoms per axis (the box meets an atom at both ends),
        // whole batches and batches that split the points' atoms.
        for (grid, periodic) in [
            ([24, 16, 32], [true, false, true]),
            ([16, 16, 16], [true, true, true]),
        ] {
            let geometry = FieldGeometry::new(grid, 3, 8, 16).unwrap();
            let axes = [0, 1, 2].map(|k| Axis {
                n: grid[k],
                origin: 0.0,
                spacing: 0.5,
                periodic: periodic[k],
            });
            let points = points_in(&axes, 4000, 11);
            let source = Analytic(geometry.clone());
            let spline = (Method::Spline { m: 2, q: 8 }, Operator::Gradient);
            for (method, operator) in METHODS_AND_OPERATORS.into_iter().chain([spline]) {
                let (expected, work, data) =
                    streaming_case(&source, &points, method, operator, axes);
                for split in [work.atoms(), 3] {
                    let mut progress = Progress::new(&work);
                    let mut added = 0;
                    let all: Vec<u32> = (0..work.atoms() as u32).collect();
                    for batch in all.chunks(split) {
                        let mut parts = [Part {
                            work: &work,
                            progress: &mut progress,
                            scale: 1.0,
                            atoms: batch.iter().map(|&i| (i, i)).collect(),
                        }];
                        added += execute(&mut parts, &data);
                    }
                    let case = format!("{grid:?} {method:?} {operator:?} batches of {split}");
                    assert_streaming_answer(&work, &progress, added, &expected, &case);
                }
            }
        }
    }

    #[test]
    fn dense_points_of_complementary_partitions_add_up_to_the_whole_answer() {
        let grid = [32, 32, 16];
        let geometry = FieldGeometry::new(grid, 3, 8, 16).unwrap();
        let axes = grid.map(|n| Axis {
            n,
            origin: 0.0,
            spacing: 0.5,
            periodic: true,
        });
        let points = points_in(&axes, 3000, 5);
        let source = Analytic(geometry.clone());
        let method = Method::Lagrange(8);
        let (expected, _, _) = streaming_case(&source, &points, method, Operator::Field, axes);
        let shards: Vec<ShardPos> = (0..2)
            .flat_map(|y| (0..2).map(move |x| [x, y, 0]))
            .collect();
        let mut total = vec![0.0; expected.len()];
        for part in [&shards[..1], &shards[1..]] {
            let work = Work::Points(Arc::new(
                PointWork::new(
                    &points,
                    method,
                    Operator::Field,
                    axes,
                    geometry.clone(),
                    Some(part),
                )
                .unwrap(),
            ));
            let data: Vec<AtomData> = (0..work.atoms())
                .map(|i| padded(source.atom(work.coords(i))))
                .collect();
            let mut progress = Progress::new(&work);
            execute(&mut [Part::whole(&work, &mut progress, 1.0)], &data);
            let (Work::Points(w), Progress::Points { sums, .. }) = (&work, &progress) else {
                unreachable!("a point query")
            };
            for (i, &p) in w.order.iter().enumerate() {
                for c in 0..3 {
                    total[p as usize * 3 + c] += sums[i * 3 + c];
                }
            }
        }
        for (got, want) in total.iter().zip(&expected) {
            assert!(
                (got - want).abs() <= 1e-9 * (1.0 + want.abs()),
                "{got} vs {want}"
            );
        }
    }
}
