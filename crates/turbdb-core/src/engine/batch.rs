//! Serving a batch: the atoms the scheduler chose, for the pending sub-queries of every
//! query that waits on them. Each point of a point query adds the part of its stencil
//! that lies in the batch's atoms to its partial sums, through the same kernel as the
//! streaming executor ([`accumulate_any`]): where enough points of the batch — of one query
//! or of several — lie in one atom or one cube of atoms ([`HomeGroups`]), out of one block
//! of all their stencils ([`HomeBlock`]); else each with its whole stencil gathered into a
//! block ([`Gathered`]), or, with the cached atom itself as the block, one contribution
//! per atom. The sums do not depend on how atoms are split into batches, nor on their
//! order, nor on which other queries share the batch (up to rounding). A cutout's
//! sub-query copies its nodes out of the atom.

use std::sync::Arc;

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::engine::accumulate::{accumulate_any, Block, Runs};
use crate::engine::buffers::zeros_to_update;
use crate::engine::cache::AtomData;
use crate::engine::gather::{Gathered, Stencil};
use crate::engine::home_block::{HomeBlock, Neighbour};
use crate::engine::home_groups::{HomeGroups, HomeKey, Piece, Run};
use crate::engine::subquery::{CutoutWork, PointWork};
use crate::engine::weights::weights_on_any;
use crate::engine::whole_stencil::{FastSum, WholeStencil};
use crate::interp::stencil::AxisWeights;
use crate::storage::axis::Axis;
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
    /// Whether the query's answer is float32 ([`crate::engine::node::PointQuery::narrow`]).
    pub narrow: bool,
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
            narrow: false,
        }
    }

    /// The same part, for an answer rounded to float32 if `narrow`.
    pub fn narrow(self, narrow: bool) -> Self {
        Self { narrow, ..self }
    }
}

/// Points whose stencils are prefetched ahead of the one being gathered.
const AHEAD: usize = 4;

/// Fewest atoms of a stencil at hand for the part in them to be gathered and summed at
/// once rather than atom by atom.
const GATHER_PIECES: usize = 2;

/// Most points given to one task of a short list (a long one is cut into 8 tasks a thread).
const TASK_POINTS: usize = 256;
/// Fewest points given to one task: fewer would pay more to start their gathers than the
/// threads gain.
const MIN_TASK_POINTS: usize = 64;
/// Below this many points a batch runs on the calling thread: handing out tasks would
/// cost more than it saves.
const SERIAL_POINTS: usize = 512;
/// Below this many atoms (of all its queries together) a batch is set up on the calling
/// thread.
const PARALLEL_ATOMS: usize = 256;
/// A part whose batch serves at least one in this many of its points lists them by
/// scanning its marks (already in order) rather than sorting the ones it found.
const SCAN_MARKS: usize = 16;

/// Fewest points of one home atom, of all the batch's queries together, that are summed
/// from one block of all their stencils ([`HomeBlock`]) rather than each from its own
/// gathered stencil, for stencils narrower than 8 nodes (lag4, lag6: the block copies up to
/// 13³ nodes, a stencil 6³). Set when it held for every width, measured on lag8
/// (`warm_profile`, 1 thread, AMD EPYC Zen 3 AVX2, load ≈ 1.8): at 7 points an atom, 16 was
/// 5 % faster than 8 and 20 % faster than 4; at 24 an atom all three were 40 % faster than
/// gathering each stencil. A cube of atoms ([`HomeGroups`]) needs as many points for each
/// node of its box.
const GROUP_POINTS: usize = 16;

/// [`GROUP_POINTS`] for stencils 8 nodes wide or wider, whose gathers copy the most: a
/// cube of 4³ atoms (39³ nodes for lag8) then needs 2.2 points an atom, not 4.4. Measured
/// on the 2-core Intel Xeon (Emerald Rapids; `warm_profile`, fields on AVX2, 1 thread, the
/// least of 5 interleaved runs, load not recorded): cubes pay from about 3 points an atom
/// for lag8 (645 against 977 ns a point at 4; at 2 gathering is ahead, 1 012 against
/// 1 125), about 5 for lag6, about 8 for lag4 (gathering 403 against 480 at 4). A warm
/// 16 000-point uniform lag8 query through the engine (4 points an atom, 2 threads, this
/// build against the one before, 3 alternating rounds, load not recorded): 402–442 against
/// 592–702 ns a point, its gradient (AVX-512) 534–649 against 756–771.
const WIDE_GROUP_POINTS: usize = 8;

/// Most bytes of a home block: it stays in the L2 cache beside the task's other data.
const HOME_BLOCK_BYTES: usize = 768 << 10;

/// The fewest points a cube of `2^level` atoms (of side `atom`, `ncomp` components, on a
/// grid of `n` nodes) must hold for one block of their stencils `width` wide to pay
/// ([`GROUP_POINTS`] or [`WIDE_GROUP_POINTS`] for each home atom's box of nodes); `None`
/// above level 0 where the block would be wider than the grid or than [`HOME_BLOCK_BYTES`].
fn min_points(atom: usize, ncomp: usize, n: [usize; 3], width: u32, level: u32) -> Option<usize> {
    let side = |level: u32| (atom << level) + width as usize - 1;
    let nodes = side(level).pow(3);
    let fits = side(level) <= n.into_iter().min().unwrap_or(0)
        && nodes * ncomp * std::mem::size_of::<f32>() <= HOME_BLOCK_BYTES;
    let per_home = if width >= 8 {
        WIDE_GROUP_POINTS
    } else {
        GROUP_POINTS
    };
    (level == 0 || fits).then(|| (per_home * nodes).div_ceil(side(0).pow(3)))
}

/// What serving a batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Partial sums added: point–atom pairs, or nodes copied.
    pub contributions: u64,
    /// Points summed out of a block of all the stencils of their home.
    pub from_home_blocks: u64,
    /// Of those, points whose block also served another query's points.
    pub across_queries: u64,
}

impl std::ops::Add for Served {
    type Output = Served;
    fn add(self, o: Served) -> Served {
        Served {
            contributions: self.contributions + o.contributions,
            from_home_blocks: self.from_home_blocks + o.from_home_blocks,
            across_queries: self.across_queries + o.across_queries,
        }
    }
}

impl std::iter::Sum for Served {
    fn sum<I: Iterator<Item = Served>>(iter: I) -> Served {
        iter.fold(Served::default(), |a, b| a + b)
    }
}

impl Served {
    /// Only partial sums added.
    fn added(contributions: u64) -> Self {
        Served {
            contributions,
            ..Served::default()
        }
    }
}

/// Serves the sub-queries of `parts` from the atoms `data` (by batch slot); says what it
/// added.
///
/// The points of all the point queries are grouped by home atom, or by cube of atoms
/// ([`HomeGroups`], [`min_points`]): where a group has enough of them, of one query or of
/// several, they are summed out of one block of all their stencils; the others each from
/// its own gathered stencil, or atom by atom where the batch holds only some of its
/// atoms.
pub fn execute(parts: &mut [Part<'_>], data: &[AtomData]) -> Served {
    enum Task<'a> {
        Points {
            part: usize,
            points: &'a [u32],
        },
        Homes {
            pieces: &'a [Piece],
        },
        Cutout {
            work: &'a CutoutWork,
            values: ValuesPtr,
            atoms: &'a [(u32, u32)],
        },
    }
    // Set up each part (in parallel: a query of many points has many to list).
    let total_atoms: usize = parts.iter().map(|p| p.atoms.len()).sum();
    // One query alone is set up on the calling thread (handing it to the pool and waiting
    // costs more than it saves; a query served from the cache runs in its caller's thread).
    let prepared: Vec<(Vec<u32>, Vec<Run>)> = if parts.len() < 2 || total_atoms < PARALLEL_ATOMS {
        parts.iter_mut().enumerate().map(prepare_part).collect()
    } else {
        parts.par_iter_mut().enumerate().map(prepare_part).collect()
    };
    let (candidates, runs): (Vec<Vec<u32>>, Vec<Vec<Run>>) = prepared.into_iter().unzip();
    // What the tasks need of each point query, and, where several share the batch, the
    // slot of each atom in the batch.
    let mut views: Vec<Option<PartView<'_>>> = Vec::with_capacity(parts.len());
    let point_parts = parts
        .iter()
        .filter(|p| matches!(p.work, Work::Points(_)))
        .count();
    let mut batch_slots: Option<FxHashMap<u64, u32>> = (point_parts > 1)
        .then(|| FxHashMap::with_capacity_and_hasher(total_atoms, Default::default()));
    let mut cutouts = Vec::new();
    for part in parts.iter_mut() {
        match (part.work, &mut *part.progress) {
            (Work::Points(work), Progress::Points { sums, slot_of, .. }) => {
                if let Some(batch_slots) = batch_slots.as_mut() {
                    for &(atom, slot) in &part.atoms {
                        batch_slots.insert(work.atoms[atom as usize].code, slot);
                    }
                }
                views.push(Some(PartView {
                    work,
                    slot_of,
                    sums: SumsPtr(sums.as_mut_ptr()),
                    scale: part.scale,
                    fast: FastSum::of(
                        &work.terms,
                        part.narrow,
                        work.kernel.width(),
                        work.geometry.ncomp,
                    ),
                }));
            }
            (Work::Cutout(work), Progress::Cutout { values }) => {
                views.push(None);
                cutouts.push((work, ValuesPtr(values.as_mut_ptr()), &part.atoms[..]));
            }
            _ => unreachable!("a query's progress matches its work"),
        }
    }
    // The runs of all the queries grouped by home, or by cube of atoms: the points in no
    // group go back to their queries, each to be gathered on its own.
    let threads = rayon::current_num_threads();
    let runs: Vec<Run> = runs.into_iter().flatten().collect();
    let geometry = views.iter().flatten().next().map(|v| {
        let work = v.work;
        (
            work.geometry.atom,
            work.geometry.ncomp,
            work.axes.map(|axis| axis.n),
        )
    });
    let homes = HomeGroups::new(runs, |width, level| {
        let (atom, ncomp, n) = geometry?;
        min_points(atom, ncomp, n, width, level)
    });
    let mut points = homes.grouped();
    let home_tasks = homes.tasks(task_points(points, threads));
    // Each query's points in no group: its whole list where none is in one (no copy).
    let in_groups = homes.grouped_by_part(views.len());
    let mut leftover: Vec<Vec<u32>> = vec![Vec::new(); views.len()];
    for (_, part, range) in &homes.leftover {
        if in_groups[*part as usize] > 0 {
            leftover[*part as usize].extend_from_slice(&candidates[*part as usize][range.clone()]);
        }
    }
    let mut tasks: Vec<Task<'_>> = home_tasks
        .iter()
        .map(|pieces| Task::Homes { pieces })
        .collect();
    for (part, list) in candidates.iter().enumerate() {
        let list = if in_groups[part] > 0 {
            &leftover[part]
        } else {
            list
        };
        points += list.len();
        let task = task_points(list.len(), threads);
        for chunk in list.chunks(task) {
            tasks.push(Task::Points {
                part,
                points: chunk,
            });
        }
    }
    for &(work, values, atoms) in &cutouts {
        points += atoms.len() * 64;
        for chunk in atoms.chunks(8) {
            tasks.push(Task::Cutout {
                work,
                values,
                atoms: chunk,
            });
        }
    }
    let view = |part: usize| views[part].as_ref().expect("a point query's part");
    let run = |task: &Task<'_>| -> Served {
        match *task {
            Task::Points { part, points } => Served::added(gather_each(view(part), data, points)),
            Task::Homes { pieces } => {
                let mut blocks = Vec::new();
                pieces
                    .iter()
                    .map(|piece| {
                        let home = Home {
                            piece,
                            lists: &candidates,
                            views: &views,
                            batch_slots: batch_slots.as_ref(),
                        };
                        home.add(data, &mut blocks)
                    })
                    .sum()
            }
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
                Served::added(copied)
            }
        }
    };
    let added = if points < SERIAL_POINTS {
        tasks.iter().map(run).sum()
    } else {
        tasks.par_iter().map(run).sum()
    };
    drop(tasks);
    drop(views);
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

/// Points per task for a list of `len` points on `threads` threads: two tasks a thread
/// where that gives tasks of [`MIN_TASK_POINTS`] to [`TASK_POINTS`] points (a 1 000-point
/// query from the cache on 16 threads: 16 tasks, not 4), eight a thread for long lists (large
/// tasks, so fewer of them start their gathers cold).
fn task_points(len: usize, threads: usize) -> usize {
    len.div_ceil(2 * threads)
        .clamp(MIN_TASK_POINTS, TASK_POINTS)
        .max(len.div_ceil(8 * threads))
}

/// Sets up part `i` of a batch: marks its atoms' slots, lists the points they serve, once
/// each, in the engine's order (by home), and cuts the list into runs of one home where
/// its stencils fit a home block.
fn prepare_part((i, part): (usize, &mut Part<'_>)) -> (Vec<u32>, Vec<Run>) {
    let (
        Work::Points(work),
        Progress::Points {
            slot_of,
            visited,
            epoch,
            ..
        },
    ) = (part.work, &mut *part.progress)
    else {
        return Default::default();
    };
    *epoch = epoch.wrapping_add(1);
    if *epoch == 0 {
        visited.fill(0);
        *epoch = 1;
    }
    let every_atom = part.atoms.len() == work.atoms.len();
    let mut list = Vec::new();
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
    // All the points, or those found: picked out of the marks where they are many,
    // sorted where they are few.
    if every_atom {
        list.extend(0..work.positions.len() as u32);
    } else if list.len() * SCAN_MARKS >= work.positions.len() {
        list.clear();
        let marked = visited.iter().enumerate().filter(|(_, &v)| v == *epoch);
        list.extend(marked.map(|(p, _)| p as u32));
    } else {
        list.sort_unstable();
    }
    if !groupable(work) {
        return (list, Vec::new());
    }
    let key = HomeKey {
        width: work.kernel.width() as u32,
        owner: if work.partial { i as u32 + 1 } else { 0 },
        level: 0,
        code: 0,
    };
    let runs = HomeGroups::runs_of(i as u32, &list, |p| HomeKey {
        code: work.homes[p as usize],
        ..key
    });
    (list, runs)
}

/// What the tasks of a batch need of one point query.
struct PartView<'a> {
    work: &'a PointWork,
    /// Per atom of the query, its slot in the batch, or [`NONE`].
    slot_of: &'a [u32],
    sums: SumsPtr,
    /// Weight of the time level.
    scale: f64,
    /// The fast path for whole stencils from float32 blocks, if the query has one.
    fast: Option<FastSum>,
}

/// Whether a query's stencils fit a home block: rows the kernel takes whole, and no
/// stencil reaching past the atoms next to its home.
fn groupable(work: &PointWork) -> bool {
    let width = work.kernel.width();
    Gathered::supports(width, work.geometry.ncomp) && width <= work.geometry.atom + 1
}

impl PartView<'_> {
    /// Point `p`'s weights, on the SIMD path queries use.
    #[inline]
    fn weights(&self, p: u32, w: &mut [AxisWeights; 3]) {
        let s = &self.work.positions[p as usize];
        weights_on_any(&self.work.kernel, s, &self.work.axes, w);
    }

    /// Whether the batch serves every atom of point `p`'s stencil to this query.
    #[inline]
    fn all_at_hand(&self, p: u32) -> bool {
        let atoms = self.work.point_atoms.row(p as usize);
        atoms
            .iter()
            .all(|&atom| self.slot_of[atom as usize] != NONE)
    }

    /// Point `p`'s sums.
    ///
    /// # Safety
    /// Only the task that serves the point may touch them (each point is in one task).
    #[inline]
    unsafe fn row<'s>(&self, p: u32) -> &'s mut [f64] {
        // SAFETY: the caller's promise; the sums outlive the batch.
        unsafe { self.sums.row(p, self.work.out_len()) }
    }

    /// Adds the part of point `p`'s stencil in each of the batch's atoms, one contribution
    /// per atom.
    fn by_atom(&self, p: u32, w: &[AxisWeights; 3], data: &[AtomData], row: &mut [f64]) -> u64 {
        let work = self.work;
        let (a, nc, width) = (work.geometry.atom, work.geometry.ncomp, work.kernel.width());
        let mut added = 0;
        for &atom in work.point_atoms.row(p as usize) {
            let slot = self.slot_of[atom as usize];
            if slot == NONE {
                continue;
            }
            let start = work.atoms[atom as usize].coords.map(|c| c as usize * a);
            let runs =
                [0, 1, 2].map(|k| Runs::new(w[k].wrapped, width, work.axes[k].n, start[k], a));
            let block = Block::dense(&data[slot as usize][..], [a, a]);
            accumulate_any(nc, block, &runs, w, &work.terms, self.scale, row);
            added += 1;
        }
        added
    }
}

/// Some points of one home, of one query or several, and what summing them needs.
struct Home<'h, 'v> {
    piece: &'h Piece,
    /// Each part's points, as the piece's runs number them.
    lists: &'h [Vec<u32>],
    views: &'h [Option<PartView<'v>>],
    /// The batch slot of each of the batch's atoms, by Morton code, where the batch
    /// serves several queries.
    batch_slots: Option<&'h FxHashMap<u64, u32>>,
}

impl Home<'_, '_> {
    fn view(&self, part: u32) -> &PartView<'_> {
        self.views[part as usize]
            .as_ref()
            .expect("a point query's part")
    }

    /// `(part, point)` of each point of the piece.
    fn members(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.piece.runs.iter().flat_map(|(part, range)| {
            self.lists[*part as usize][range.clone()]
                .iter()
                .map(move |&p| (*part, p))
        })
    }

    /// Sums the points out of one block of all their stencils (`blocks`: the task's, one per
    /// stencil width); each point whose atoms the batch does not all serve to its query,
    /// atom by atom. Where the box would not fit (a grid smaller than it), each query's
    /// points are gathered one by one.
    fn add(&self, data: &[AtomData], blocks: &mut Vec<HomeBlock>) -> Served {
        let key = self.piece.key;
        // Every point's query is on the batch's field: one geometry and grid.
        let first = self.view(self.piece.runs[0].0).work;
        let (a, nc, width) = (
            first.geometry.atom,
            first.geometry.ncomp,
            key.width as usize,
        );
        let n = first.axes.map(|axis| axis.n);
        let (mut lo, mut hi) = ([i64::MAX; 3], [i64::MIN; 3]);
        for (part, p) in self.members() {
            let work = self.view(part).work;
            let s = &work.positions[p as usize];
            for k in 0..3 {
                let base = work.kernel.base(s[k], &work.axes[k]);
                lo[k] = lo[k].min(base);
                hi[k] = hi[k].max(base);
            }
        }
        let side = a << key.level;
        let block = match blocks.iter().position(|b| b.shape() == (width, side)) {
            Some(i) => &mut blocks[i],
            None => {
                blocks.push(HomeBlock::new(width, side, nc));
                blocks.last_mut().expect("just pushed")
            }
        };
        if !block.fits(lo, hi, n) {
            let gathered = self.piece.runs.iter().map(|(part, range)| {
                let points = &self.lists[*part as usize][range.clone()];
                gather_each(self.view(*part), data, points)
            });
            return Served::added(gathered.sum());
        }
        // The atoms that may fill the block: any of the batch's, or only its owner's (the
        // batch's only query's, if it has one).
        let slot_of_code = |code: u64| -> Option<u32> {
            let slot = match (key.owner, self.batch_slots) {
                (0, Some(batch_slots)) => batch_slots.get(&code).copied(),
                (owner, _) => {
                    let owner = self.view(owner.checked_sub(1).unwrap_or(self.piece.runs[0].0));
                    owner
                        .work
                        .atoms
                        .binary_search_by_key(&code, |atom| atom.code)
                        .ok()
                        .map(|i| owner.slot_of[i])
                }
            };
            slot.filter(|&s| s != NONE && !data[s as usize].is_empty())
        };
        let (neighbours, all_present) = atoms_of_box(first, lo, hi, width, data, slot_of_code);
        let periodic = first.axes.map(|axis| axis.periodic);
        block.fill(lo, hi, a, n, periodic, &neighbours, all_present);
        let block = &*block;
        let whole = WholeStencil::of(block.block(), nc);
        let mut served = Served::default();
        let mut w = [AxisWeights::default(); 3];
        for (part, p) in self.members() {
            let v = self.view(part);
            v.weights(p, &mut w);
            // SAFETY: each point is in one task of the batch.
            let row = unsafe { v.row(p) };
            if v.all_at_hand(p) {
                let base = w.map(|axis| axis.base);
                let start = whole.start(block.offsets(base));
                if !v
                    .fast
                    .is_some_and(|f| f.add(whole, start, &w, v.scale, row))
                {
                    let runs = block.runs(base);
                    accumulate_any(nc, block.block(), &runs, &w, &v.work.terms, v.scale, row);
                }
                served.contributions += v.work.point_atoms.row(p as usize).len() as u64;
                served.from_home_blocks += 1;
            } else {
                served.contributions += v.by_atom(p, &w, data, row);
            }
        }
        // The runs are in part order: more than one query if the ends differ.
        let runs = &self.piece.runs;
        if runs.first().map(|r| r.0) != runs.last().map(|r| r.0) {
            served.across_queries = served.from_home_blocks;
        }
        served
    }
}

/// The atoms (their coordinates along the axis, ascending) that hold nodes `first ..=
/// last` of `axis` in atoms of `atom` nodes: unwrapped past the ends of a periodic axis,
/// kept to the grid on a bounded one. A node past a periodic seam is wrapped before its
/// atom is found: on a grid that is not a whole number of atoms (20 nodes in atoms of 8)
/// the unwrapped atom numbers go on in steps of `atom` past the short last atom, so node 20
/// would be taken for the last atom's instead of node 0's.
fn atoms_along(first: i64, last: i64, axis: &Axis, atom: usize) -> Vec<u32> {
    let (n, a) = (axis.n as i64, atom as i64);
    let atoms =
        |from: i64, to: i64| -> Vec<u32> { ((from / a) as u32..=(to / a) as u32).collect() };
    if !axis.periodic {
        if first.max(0) > last.min(n - 1) {
            return Vec::new();
        }
        return atoms(first.max(0), last.min(n - 1));
    }
    if last - first + 1 >= n {
        return atoms(0, n - 1);
    }
    let from = first.rem_euclid(n);
    let to = from + (last - first);
    if to < n {
        return atoms(from, to);
    }
    // Across the seam: the atoms from `from` to the end, then those from node 0 on, which
    // may reach the first ones.
    let mut coords: Vec<u32> = atoms(0, to - n);
    coords.extend(atoms(from, n - 1));
    coords.dedup();
    coords
}

/// The atoms that hold the box of stencils `width` wide whose first nodes lie in
/// `lo ..= hi`, as far as `slot_of_code` gives their slots, and whether it gave all of
/// them (on a tiny periodic grid the box meets an atom twice: it is listed once).
fn atoms_of_box<'d>(
    work: &PointWork,
    lo: [i64; 3],
    hi: [i64; 3],
    width: usize,
    data: &'d [AtomData],
    slot_of_code: impl Fn(u64) -> Option<u32>,
) -> (Vec<Neighbour<'d>>, bool) {
    let a = work.geometry.atom;
    let along: [Vec<u32>; 3] =
        std::array::from_fn(|k| atoms_along(lo[k], hi[k] + width as i64 - 1, &work.axes[k], a));
    let mut found = Vec::with_capacity(along.iter().map(Vec::len).product());
    let mut all_present = true;
    for &z in &along[2] {
        for &y in &along[1] {
            for &x in &along[0] {
                match slot_of_code(morton::encode(x, y, z)) {
                    Some(slot) => found.push(Neighbour {
                        coords: [x, y, z],
                        values: &data[slot as usize],
                    }),
                    None => all_present = false,
                }
            }
        }
    }
    (found, all_present)
}

/// Adds each of `points`' stencils on its own: a field's whole stencil summed straight out
/// of its atoms; others gathered whole into a block where the batch holds at least
/// [`GATHER_PIECES`] of its atoms (the rows of the next points prefetched meanwhile); else
/// atom by atom.
fn gather_each(view: &PartView<'_>, data: &[AtomData], points: &[u32]) -> u64 {
    let work = view.work;
    let (a, nc) = (work.geometry.atom, work.geometry.ncomp);
    let width = work.kernel.width();
    let n = work.axes.map(|axis| axis.n);
    let mut gathered = Gathered::new(width, nc);
    let atoms_of = |p: u32| {
        work.point_atoms.row(p as usize).iter().map(|&atom| {
            let slot = view.slot_of[atom as usize];
            (
                work.atoms[atom as usize].coords,
                (slot != NONE).then_some(slot),
            )
        })
    };
    // The stencils of this point and the next AHEAD, whose rows are being prefetched.
    let mut ring = [Stencil::default(); AHEAD + 1];
    let gathering = gathered.is_some();
    // A field's whole stencils are summed where they lie, without a copy
    // ([`crate::engine::atom_rows`]); prefetching their rows then only cost time
    // (`warm_profile 1000`, lag8, 1 thread of the 2-core Intel Xeon, fields on AVX2, load
    // not recorded: 500 against 640 ns a point).
    let from_atoms = view.fast.filter(|f| f.reads_atoms());
    let plan = |p: u32, stencil: &mut Stencil| {
        view.weights(p, &mut stencil.w);
        if gathering {
            stencil.place(width, n, a, atoms_of(p));
            if from_atoms.is_none() {
                stencil.prefetch(a, nc, data);
            }
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
        // SAFETY: each point is in one task of the batch.
        let row = unsafe { view.row(p) };
        // A stencil split between batches is gathered too where two or more of its atoms are
        // at hand: its pieces summed one by one each pay the kernel's fixed cost.
        if let Some(g) = gathered
            .as_mut()
            .filter(|_| stencil.present() >= GATHER_PIECES)
        {
            if let Some((fast, rows)) =
                from_atoms.and_then(|f| Some((f, stencil.atom_rows(width, a, nc, data)?)))
            {
                if fast.add_from_atoms(&rows, w, view.scale, row, nc) {
                    added += stencil.present() as u64;
                    continue;
                }
            }
            let (block, runs) = g.gather(stencil, a, data);
            let whole = WholeStencil::of(block, nc);
            if !view
                .fast
                .is_some_and(|f| f.add(whole, 0, w, view.scale, row))
            {
                accumulate_any(nc, block, runs, w, &work.terms, view.scale, row);
            }
            added += stencil.present() as u64;
            continue;
        }
        added += view.by_atom(p, w, data, row);
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
    use crate::engine::plan::{BlockValues, Plan};
    use crate::engine::stream::{execute as stream, Order, StreamStats, TimeLevel};
    use crate::interp::method::{Method, Operator};
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
        let extent = axes.map(|axis| (axis.n - 1) as f64);
        points_near(axes, count, seed, [0.0; 3], extent)
    }

    /// `count` pseudo-random points in the box of `extent` nodes from node `low` on each
    /// axis (a fixed seed).
    fn points_near(
        axes: &[Axis; 3],
        count: usize,
        seed: u64,
        low: [f64; 3],
        extent: [f64; 3],
    ) -> Vec<[f64; 3]> {
        let mut state = seed;
        (0..count)
            .map(|_| {
                [0, 1, 2].map(|k| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let u = (state >> 11) as f64 / (1u64 << 53) as f64;
                    axes[k].origin + (low[k] + u * extent[k]) * axes[k].spacing
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
        let plan = Plan::new(
            points,
            method,
            operator,
            axes,
            geometry.clone(),
            BlockValues::Float32,
        )
        .unwrap();
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
    fn atoms_along_an_axis_are_those_of_the_wrapped_nodes() {
        for (n, atom) in [(20, 8), (16, 8), (13, 4), (8, 8), (5, 4)] {
            for periodic in [true, false] {
                let axis = Axis {
                    n,
                    origin: 0.0,
                    spacing: 1.0,
                    periodic,
                };
                for first in -30i64..50 {
                    for last in first..first + 30 {
                        let mut expected: Vec<u32> = (first..=last)
                            .filter_map(|u| match periodic {
                                true => Some(u.rem_euclid(n as i64)),
                                false => (0..n as i64).contains(&u).then_some(u),
                            })
                            .map(|node| (node as usize / atom) as u32)
                            .collect();
                        expected.sort_unstable();
                        expected.dedup();
                        assert_eq!(
                            atoms_along(first, last, &axis, atom),
                            expected,
                            "n {n} atom {atom} periodic {periodic}: nodes {first}..={last}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_batch_holding_every_atom_gathers_whole_stencils_and_gives_the_streaming_answer() {
        // Atoms of 4 nodes, so a stencil 8 wide spans two or three of them per axis; grids
        // that are not a whole number of atoms (the last atom is short: 18 and 13 nodes in
        // atoms of 4, 20 in atoms of 8), so that a box across the seam meets the first atom
        // where the unwrapped atom numbers go on past the last; axes of one atom (8 nodes)
        // or one and a half (12), where a stencil wraps back into the atom it started in;
        // a wrap on the periodic axes and one bounded axis; one, three and four components.
        for (grid, ncomp, periodic, atom) in [
            ([20, 16, 12], 3, [true, true, false], 4),
            ([12, 20, 16], 1, [true, false, true], 4),
            ([16, 12, 20], 4, [false, true, true], 4),
            ([18, 13, 16], 3, [true, true, true], 4),
            ([20, 20, 20], 1, [true, true, true], 8),
            ([20, 12, 20], 3, [true, false, true], 8),
            ([8, 16, 16], 3, [true, false, false], 8),
            ([16, 8, 16], 1, [true, true, true], 8),
            ([12, 16, 12], 3, [true, false, true], 8),
        ] {
            let geometry = FieldGeometry::new(grid, ncomp, atom, 2 * atom).unwrap();
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
                let added =
                    execute(&mut [Part::whole(&work, &mut progress, 1.0)], &data).contributions;
                let case = format!("{grid:?} atom {atom} {ncomp} {method:?} {operator:?}");
                assert_streaming_answer(&work, &progress, added, &expected, &case);
            }
        }
    }

    #[test]
    fn tasks_are_two_a_thread_for_short_lists_and_eight_for_long_ones() {
        let tasks = |len: usize, threads: usize| len.div_ceil(task_points(len, threads));
        // A 1 000-point query from the cache: every one of 16 threads gets a task.
        assert_eq!(tasks(1000, 16), 16);
        assert_eq!(tasks(1000, 2), 4);
        // Never fewer than MIN_TASK_POINTS points a task, nor more than TASK_POINTS for a
        // list that eight tasks a thread would cut finer; long lists in eight a thread.
        assert_eq!(task_points(100, 16), MIN_TASK_POINTS);
        assert_eq!(task_points(2000, 2), TASK_POINTS);
        assert_eq!(tasks(1_000_000, 16), 128);
        for len in 1..3000 {
            for threads in [1, 2, 4, 16] {
                let task = task_points(len, threads);
                assert!(task >= MIN_TASK_POINTS, "{len} points, {threads} threads");
                assert!(
                    task <= TASK_POINTS.max(len.div_ceil(8 * threads)),
                    "{len}, {threads}"
                );
                assert!(tasks(len, threads) <= (8 * threads).max(len.div_ceil(MIN_TASK_POINTS)));
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
                    narrow: false,
                }];
                added += execute(&mut parts, &data).contributions;
                size += 1;
            }
            assert_streaming_answer(&work, &progress, added, &expected, &format!("{method:?}"));
        }
    }

    #[test]
    fn sparse_lag8_points_are_summed_from_cubes_and_sparse_lag6_points_are_gathered() {
        // About 3 points an atom of 8 nodes on a 64³ grid: enough for a lag8 cube of 4³
        // atoms (WIDE_GROUP_POINTS), too few for lag6's, whose stencils gather cheaper.
        let grid = [64; 3];
        let geometry = FieldGeometry::new(grid, 3, 8, 64).unwrap();
        let axes = grid.map(|n| Axis::unit(n, true));
        let points = points_in(&axes, 3 * 512, 5);
        let source = Analytic(geometry.clone());
        for (method, from_cubes) in [(Method::Lagrange(8), true), (Method::Lagrange(6), false)] {
            let (expected, work, data) =
                streaming_case(&source, &points, method, Operator::Field, axes);
            let mut progress = Progress::new(&work);
            let mut parts = [Part {
                work: &work,
                progress: &mut progress,
                scale: 1.0,
                atoms: (0..work.atoms() as u32).map(|i| (i, i)).collect(),
                narrow: false,
            }];
            let served = execute(&mut parts, &data);
            let case = format!("{method:?}");
            if from_cubes {
                assert!(served.from_home_blocks >= 1200, "{case}: {served:?}");
            } else {
                assert_eq!(served.from_home_blocks, 0, "{case}: {served:?}");
            }
            assert_streaming_answer(&work, &progress, served.contributions, &expected, &case);
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
                            narrow: false,
                        }];
                        added += execute(&mut parts, &data).contributions;
                    }
                    let case = format!("{grid:?} {method:?} {operator:?} batches of {split}");
                    assert_streaming_answer(&work, &progress, added, &expected, &case);
                }
            }
        }
    }

    #[test]
    fn whole_stencils_take_the_fast_paths_and_agree_with_the_streaming_answer() {
        // Dense points (home blocks) and sparse ones (gathered stencils), every atom in one
        // batch and batches that split stencils, a time level of weight 0.5: a field's
        // float32 sums differ from the float64 answer by float32 rounding only, the
        // derivatives' (all float64) not at all.
        let geometry = FieldGeometry::new([32, 24, 16], 3, 8, 16).unwrap();
        let axes = [32, 24, 16].map(|n| Axis {
            n,
            origin: 0.0,
            spacing: 0.5,
            periodic: true,
        });
        let source = Analytic(geometry.clone());
        for (count, method, operator) in [
            (4000, Method::Lagrange(8), Operator::Field),
            (4000, Method::Lagrange(6), Operator::Field),
            (4000, Method::Lagrange(4), Operator::Field),
            (4000, Method::Lagrange(6), Operator::Gradient),
            (4000, Method::Lagrange(8), Operator::Gradient),
            (4000, Method::Fd4Lag4, Operator::Laplacian),
            (4000, Method::Lagrange(6), Operator::Laplacian),
            (4000, Method::Lagrange(4), Operator::Hessian),
            (4000, Method::Lagrange(8), Operator::Hessian),
            (150, Method::Lagrange(8), Operator::Field),
            (150, Method::Lagrange(4), Operator::Gradient),
            (150, Method::Fd4Lag4, Operator::Laplacian),
            (150, Method::Lagrange(6), Operator::Hessian),
        ] {
            let points = points_in(&axes, count, 3);
            let (expected, work, data) = streaming_case(&source, &points, method, operator, axes);
            let Work::Points(w) = &work else {
                unreachable!("a point query")
            };
            // Every operator here has a fast path on every SIMD path but the portable one.
            let fast = FastSum::of(&w.terms, true, w.kernel.width(), 3);
            let order = if operator == Operator::Field { 0 } else { 2 };
            let path = crate::engine::simd::KernelPath::selected_for(order).unwrap();
            assert_eq!(
                fast.is_some(),
                path != crate::engine::simd::KernelPath::Portable
            );
            let largest = expected.iter().fold(0f64, |m, v| m.max(v.abs()));
            let tolerance = if operator == Operator::Field {
                1e-6 * largest
            } else {
                1e-9 * (1.0 + largest)
            };
            for split in [work.atoms(), 5] {
                let mut progress = Progress::new(&work);
                let all: Vec<u32> = (0..work.atoms() as u32).collect();
                for batch in all.chunks(split) {
                    let mut parts = [Part {
                        work: &work,
                        progress: &mut progress,
                        scale: 0.5,
                        atoms: batch.iter().map(|&i| (i, i)).collect(),
                        narrow: true,
                    }];
                    execute(&mut parts, &data);
                }
                let Progress::Points { sums, .. } = &progress else {
                    unreachable!("a point query")
                };
                let out_len = w.out_len();
                for (i, &p) in w.order.iter().enumerate() {
                    for v in 0..out_len {
                        let got = sums[i * out_len + v];
                        let want = 0.5 * expected[p as usize * out_len + v];
                        assert!(
                            (got - want).abs() <= tolerance,
                            "{count} {method:?} {operator:?} batches of {split}, point {p}: {got} vs {want}"
                        );
                    }
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

    #[test]
    fn queries_sharing_homes_in_one_batch_give_their_own_answers() {
        // Three queries crowding into one region (each too sparse per atom for a block of
        // its own, dense together), one with another stencil width and operator, one
        // spread over the grid (a few points an atom: blocks of cubes of atoms), and one
        // restricted to some partitions: in one batch whose slots all of them share.
        let grid = [64, 64, 48];
        let geometry = FieldGeometry::new(grid, 3, 8, 32).unwrap();
        let axes = grid.map(|n| Axis::unit(n, true));
        let source = Analytic(geometry.clone());
        let lag8 = (Method::Lagrange(8), Operator::Field);
        let near = |count, seed, low: f64, extent: f64| {
            points_near(&axes, count, seed, [low; 3], [extent; 3])
        };
        let queries = [
            (near(12, 1, 20.0, 6.0), lag8, None),
            (near(10, 2, 20.0, 6.0), lag8, None),
            (near(9, 3, 21.0, 4.0), lag8, None),
            (
                near(30, 4, 18.0, 10.0),
                (Method::Lagrange(6), Operator::Gradient),
                None,
            ),
            (points_in(&axes, 2500, 5), lag8, None),
            (
                near(40, 6, 20.0, 30.0),
                lag8,
                Some(vec![[0, 0, 0], [1, 0, 1]]),
            ),
        ];
        let works: Vec<Work> = queries
            .iter()
            .map(|(points, (method, operator), partitions)| {
                let work = PointWork::new(
                    points,
                    *method,
                    *operator,
                    axes,
                    geometry.clone(),
                    partitions.as_deref(),
                );
                Work::Points(Arc::new(work.unwrap()))
            })
            .collect();
        // One slot per atom any query needs, in storage order.
        let mut codes: Vec<u64> = works
            .iter()
            .flat_map(|w| (0..w.atoms()).map(|i| w.code(i)))
            .collect();
        codes.sort_unstable();
        codes.dedup();
        let data: Vec<AtomData> = codes
            .iter()
            .map(|&code| {
                let (x, y, z) = morton::decode(code);
                padded(source.atom([x, y, z]))
            })
            .collect();
        let slot = |code: u64| codes.binary_search(&code).unwrap() as u32;
        // Each query's answer served alone, whole (the partial one's only this way).
        let alone: Vec<Vec<f64>> = works
            .iter()
            .map(|work| {
                let own: Vec<AtomData> = (0..work.atoms())
                    .map(|i| Arc::clone(&data[slot(work.code(i)) as usize]))
                    .collect();
                let mut progress = Progress::new(work);
                execute(&mut [Part::whole(work, &mut progress, 1.0)], &own);
                let Progress::Points { sums, .. } = progress else {
                    unreachable!()
                };
                sums
            })
            .collect();
        for batch_atoms in [codes.len(), 37] {
            let mut progress: Vec<Progress> = works.iter().map(Progress::new).collect();
            let mut served = Served::default();
            for batch in codes.chunks(batch_atoms) {
                let mut parts: Vec<Part<'_>> = works
                    .iter()
                    .zip(progress.iter_mut())
                    .map(|(work, progress)| Part {
                        work,
                        progress,
                        scale: 1.0,
                        atoms: (0..work.atoms() as u32)
                            .filter(|&i| batch.binary_search(&work.code(i as usize)).is_ok())
                            .map(|i| (i, slot(work.code(i as usize))))
                            .collect(),
                        narrow: false,
                    })
                    .collect();
                served = served + execute(&mut parts, &data);
            }
            for (q, (work, progress)) in works.iter().zip(&progress).enumerate() {
                let case = format!("query {q}, batches of {batch_atoms} atoms");
                let Progress::Points { sums, .. } = progress else {
                    unreachable!()
                };
                for (got, want) in sums.iter().zip(&alone[q]) {
                    assert!(
                        (got - want).abs() <= 1e-9 * (1.0 + want.abs()),
                        "{case}: {got} vs {want}"
                    );
                }
                if queries[q].2.is_none() {
                    let (points, (method, operator), _) = &queries[q];
                    let (expected, _, _) =
                        streaming_case(&source, points, *method, *operator, axes);
                    let added = work.contributions();
                    assert_streaming_answer(work, progress, added, &expected, &case);
                }
            }
            let total: u64 = works.iter().map(Work::contributions).sum();
            assert_eq!(served.contributions, total, "every point–atom pair once");
            if batch_atoms == codes.len() {
                assert!(served.across_queries >= 31, "{served:?}");
                assert!(served.from_home_blocks >= 1500, "{served:?}");
            }
        }
    }
}
