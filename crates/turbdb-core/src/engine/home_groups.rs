//! The points of every query in a batch grouped by where they lie, so that points that lie
//! together — of one query or of several — are summed out of one block of all their
//! stencils ([`crate::engine::home_block::HomeBlock`]) instead of each stencil being
//! gathered on its own out of atoms scattered in memory.
//!
//! A group is the points of one aligned cube of atoms: their home atom (level 0), or a
//! cube of 2 or 4 atoms a side (levels 1 and 2). A block costs its whole box of nodes
//! (the cube and a stencil's reach around it: 15³ nodes for lag8 in atoms of 8 at level
//! 0, 23³ at 1, 39³ at 2) where a gathered stencil costs 8³, so a group takes the highest
//! level whose cube holds enough points for its box, and a cube too sparse for that is
//! split into the cubes of the level below.
//!
//! Queries of a shared workload crowd into the same regions: in the trace of
//! `bench/workload.py` a query has about 14 points in each of its home atoms
//! (points-weighted mean), too few for a level-0 block, while all the queries of a step
//! together have about 127; and a large uniform query has about 7 points an atom, 450 in a
//! cube of 4³ atoms.

use std::ops::Range;

use rayon::prelude::*;

/// What points must share to be summed from one block: their stencil's width, whose atoms
/// may fill the block, and their cube of atoms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct HomeKey {
    /// Stencil width.
    pub(crate) width: u32,
    /// 0 where any of the batch's atoms may fill the block; else 1 + the one part whose
    /// atoms alone may (a query restricted to some partitions must not add the atoms it
    /// left out, though another query brought them into the batch).
    pub(crate) owner: u32,
    /// The cube's side is `2^level` atoms.
    pub(crate) level: u32,
    /// Morton code of the cube in the grid of such cubes (of the home atom at level 0).
    pub(crate) code: u64,
}

impl HomeKey {
    /// The key of the cube of level `level` that holds this one's (of level 0).
    fn at_level(self, level: u32) -> HomeKey {
        HomeKey {
            level,
            code: self.code >> (3 * level),
            ..self
        }
    }
}

/// Highest level of a group.
pub(crate) const MAX_LEVEL: u32 = 2;

/// Fewer runs than this are sorted on the calling thread.
const PARALLEL_SORT: usize = 1 << 13;

/// A run of one part's points with one home: its key, the part, and the run's place in
/// the part's list of points.
pub(crate) type Run = (HomeKey, u32, Range<usize>);

/// Some points of one home, for one task: `(part, range of the part's list)` each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) key: HomeKey,
    pub(crate) runs: Vec<(u32, Range<usize>)>,
}

/// A batch's points, grouped by [`HomeKey`].
#[derive(Debug, Default)]
pub(crate) struct HomeGroups {
    /// The runs in groups, group after group, each group's by part.
    runs: Vec<Run>,
    /// Each group's runs (in `runs`) and its number of points.
    groups: Vec<(Range<usize>, usize)>,
    /// The runs of points in no group.
    pub(crate) leftover: Vec<Run>,
}

impl HomeGroups {
    /// The runs of part `part`'s `points` (ordered so that the points of a home are
    /// together), whose keys `key` gives.
    pub(crate) fn runs_of(part: u32, points: &[u32], key: impl Fn(u32) -> HomeKey) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for (i, &p) in points.iter().enumerate() {
            let k = key(p);
            match runs.last_mut() {
                Some(last) if last.0 == k => last.2.end = i + 1,
                _ => runs.push((k, part, i..i + 1)),
            }
        }
        runs
    }

    /// Groups the runs (of any parts, keys of level 0) by cube: at the highest level whose
    /// cube holds at least `min_points(width, level)` points (`None`: no box of that level
    /// fits), trying the cubes of the level below where it does not; the points of home
    /// atoms too sparse for any level are left over.
    pub(crate) fn new(mut runs: Vec<Run>, min_points: impl Fn(u32, u32) -> Option<usize>) -> Self {
        // Runs are far fewer than points (a query has a dozen points or more in a home);
        // in Morton order, each cube's runs are together at every level.
        if runs.len() >= PARALLEL_SORT {
            runs.par_sort_unstable_by_key(|r| (r.0, r.1, r.2.start));
        } else {
            runs.sort_unstable_by_key(|r| (r.0, r.1, r.2.start));
        }
        let mut found = HomeGroups::default();
        found.split(&runs, MAX_LEVEL, &min_points);
        found
    }

    /// Groups `runs` by their cubes of level `level`, or below (see [`Self::new`]).
    fn split(&mut self, runs: &[Run], level: u32, min_points: &impl Fn(u32, u32) -> Option<usize>) {
        for same in runs.chunk_by(|a, b| a.0.at_level(level) == b.0.at_level(level)) {
            let points: usize = same.iter().map(|r| r.2.len()).sum();
            let key = same[0].0.at_level(level);
            if min_points(key.width, level).is_some_and(|min| points >= min) {
                // The cube's runs by part, so a query's points stay together.
                let start = self.runs.len();
                self.runs
                    .extend(same.iter().map(|r| (key, r.1, r.2.clone())));
                self.runs[start..].sort_by_key(|r| (r.1, r.2.start));
                self.groups.push((start..self.runs.len(), points));
            } else if level > 0 && min_points(key.width, 0).is_some_and(|min| points >= min) {
                // Smaller cubes need fewer points, but never fewer than one atom does.
                self.split(same, level - 1, min_points);
            } else {
                self.leftover.extend_from_slice(same);
            }
        }
    }

    /// Points in groups.
    pub(crate) fn grouped(&self) -> usize {
        self.groups.iter().map(|g| g.1).sum()
    }

    /// Points in groups, per part (of `parts`).
    pub(crate) fn grouped_by_part(&self, parts: usize) -> Vec<usize> {
        let mut count = vec![0; parts];
        for (_, part, range) in &self.runs {
            count[*part as usize] += range.len();
        }
        count
    }

    /// The groups cut into tasks of about `task_points` points: whole groups together
    /// until a task has that many, a group of more than twice that many in pieces of that
    /// size (each piece fills its own block: it pays for the balance between the workers).
    pub(crate) fn tasks(&self, task_points: usize) -> Vec<Vec<Piece>> {
        let task_points = task_points.max(1);
        let mut tasks = Vec::new();
        let mut current: Vec<Piece> = Vec::new();
        let mut size = 0;
        let mut close = |piece: Piece, points: usize, current: &mut Vec<Piece>| {
            size += points;
            current.push(piece);
            if size >= task_points {
                tasks.push(std::mem::take(current));
                size = 0;
            }
        };
        for (range, points) in &self.groups {
            let runs = &self.runs[range.clone()];
            let key = runs[0].0;
            if *points <= 2 * task_points {
                let runs = runs.iter().map(|r| (r.1, r.2.clone())).collect();
                close(Piece { key, runs }, *points, &mut current);
                continue;
            }
            let mut piece = Piece {
                key,
                runs: Vec::new(),
            };
            let mut in_piece = 0;
            for (_, part, run) in runs {
                let mut at = run.start;
                while at < run.end {
                    let take = (task_points - in_piece).min(run.end - at);
                    piece.runs.push((*part, at..at + take));
                    at += take;
                    in_piece += take;
                    if in_piece == task_points {
                        let full = std::mem::take(&mut piece.runs);
                        close(Piece { key, runs: full }, in_piece, &mut current);
                        in_piece = 0;
                    }
                }
            }
            if in_piece > 0 {
                close(piece, in_piece, &mut current);
            }
        }
        if !current.is_empty() {
            tasks.push(current);
        }
        tasks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: u64, width: u32, owner: u32) -> HomeKey {
        HomeKey {
            width,
            owner,
            level: 0,
            code,
        }
    }

    /// Groups of level 0 only, of at least `min` points.
    fn level0(min: usize) -> impl Fn(u32, u32) -> Option<usize> {
        move |_, level| (level == 0).then_some(min)
    }

    /// The `(part, point)` pairs of a task's pieces, given each part's list.
    fn members(pieces: &[Piece], lists: &[Vec<u32>]) -> Vec<(u32, u32)> {
        pieces
            .iter()
            .flat_map(|piece| piece.runs.iter())
            .flat_map(|(part, range)| {
                lists[*part as usize][range.clone()]
                    .iter()
                    .map(|&p| (*part, p))
            })
            .collect()
    }

    #[test]
    fn runs_are_the_points_of_one_home_together() {
        let homes = [5u64, 5, 9, 9, 9, 5];
        let runs = HomeGroups::runs_of(2, &[0, 1, 2, 3, 4, 5], |p| key(homes[p as usize], 8, 0));
        assert_eq!(
            runs,
            vec![
                (key(5, 8, 0), 2, 0..2),
                (key(9, 8, 0), 2, 2..5),
                (key(5, 8, 0), 2, 5..6)
            ]
        );
    }

    #[test]
    fn points_of_different_parts_in_one_home_form_one_group() {
        // Home 5: two points of part 0 and two of part 1 (a group of 4 across the parts);
        // home 9: one point of part 1 (left over); home 5 at another width: left over.
        let lists = vec![vec![10, 11, 12], vec![30, 32, 31]];
        let mut runs =
            HomeGroups::runs_of(0, &lists[0], |p| key(5, if p == 12 { 6 } else { 8 }, 0));
        runs.extend(HomeGroups::runs_of(1, &lists[1], |p| {
            key(if p == 31 { 9 } else { 5 }, 8, 0)
        }));
        let found = HomeGroups::new(runs, level0(4));
        assert_eq!(found.grouped(), 4);
        assert_eq!(found.grouped_by_part(3), vec![2, 2, 0]);
        let tasks = found.tasks(100);
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0][0].key, key(5, 8, 0));
        assert_eq!(
            members(&tasks[0], &lists),
            vec![(0, 10), (0, 11), (1, 30), (1, 32)]
        );
        let mut left: Vec<(u32, Range<usize>)> =
            found.leftover.iter().map(|r| (r.1, r.2.clone())).collect();
        left.sort_by_key(|r| (r.0, r.1.start));
        assert_eq!(left, vec![(0, 2..3), (1, 2..3)]);
    }

    #[test]
    fn an_owned_home_groups_only_its_own_part() {
        // Parts 0 and 1 share home 7, but part 1 keeps to its partitions (owner 2).
        let lists = [vec![0, 1, 2], vec![0, 1, 2]];
        let mut runs = HomeGroups::runs_of(0, &lists[0], |_| key(7, 8, 0));
        runs.extend(HomeGroups::runs_of(1, &lists[1], |_| key(7, 8, 2)));
        let pieces: Vec<Piece> = HomeGroups::new(runs.clone(), level0(3)).tasks(100).concat();
        assert_eq!(pieces.len(), 2, "one block each");
        let found = HomeGroups::new(runs, level0(4));
        assert_eq!(found.grouped(), 0);
        assert_eq!(found.leftover.len(), 2);
    }

    #[test]
    fn tasks_cover_every_point_once_and_split_only_large_groups() {
        // Four homes of 3, 40, 5 and 7 points, each spread over two parts.
        let mut lists = vec![Vec::new(), Vec::new()];
        let mut homes = Vec::new();
        for (code, count) in [(1u64, 3u32), (2, 40), (3, 5), (4, 7)] {
            for p in 0..count {
                lists[(p % 2) as usize].push(homes.len() as u32);
                homes.push(code);
            }
        }
        let runs: Vec<Run> = (0..2)
            .flat_map(|part| {
                HomeGroups::runs_of(part, &lists[part as usize], |p| {
                    key(homes[p as usize], 4, 0)
                })
            })
            .collect();
        let found = HomeGroups::new(runs, level0(3));
        let tasks = found.tasks(8);
        let mut seen: Vec<(u32, u32)> = tasks.iter().flat_map(|t| members(t, &lists)).collect();
        seen.sort_unstable();
        let mut all: Vec<(u32, u32)> = (0..2u32)
            .flat_map(|part| lists[part as usize].iter().map(move |&p| (part, p)))
            .collect();
        all.sort_unstable();
        assert_eq!(seen, all);
        for task in &tasks {
            for piece in task {
                let points: usize = piece.runs.iter().map(|r| r.1.len()).sum();
                assert!(points <= 16, "{piece:?}");
                for (part, range) in &piece.runs {
                    for &p in &lists[*part as usize][range.clone()] {
                        assert_eq!(homes[p as usize], piece.key.code);
                    }
                }
            }
        }
        let pieces_of_home_2 = tasks.iter().flatten().filter(|p| p.key.code == 2).count();
        assert_eq!(pieces_of_home_2, 40 / 8);
    }

    #[test]
    fn a_cube_too_sparse_for_its_level_is_split_into_the_cubes_below() {
        // Level-1 cube 0 (atoms 0..8): 3 points in each atom, 24 together. Level-1 cube 1
        // (atoms 8..16): 5 points in atom 8, 1 in atom 9.
        let mut homes = Vec::new();
        for atom in 0..8u64 {
            homes.extend([atom; 3]);
        }
        homes.extend([8u64; 5]);
        homes.push(9);
        let list: Vec<u32> = (0..homes.len() as u32).collect();
        let runs = HomeGroups::runs_of(0, &list, |p| key(homes[p as usize], 8, 0));
        // Level 1 needs 20 points, level 0 needs 4; level 2 is not allowed.
        let min = |_, level| [Some(4), Some(20), None][level as usize];
        let found = HomeGroups::new(runs, min);
        let pieces = found.tasks(1000).concat();
        let keys: Vec<(u32, u64)> = pieces.iter().map(|p| (p.key.level, p.key.code)).collect();
        assert_eq!(keys, vec![(1, 0), (0, 8)]);
        assert_eq!(found.grouped(), 24 + 5);
        assert_eq!(found.leftover.len(), 1);
        assert_eq!(found.leftover[0].0.code, 9);
    }
}
