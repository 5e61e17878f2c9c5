//! A query cut into sub-queries, one per atom it needs (Wang et al. §III-B: "each
//! sub-query is a set of positions that fall within the same atom, the sub-queries can be
//! executed in any order"). Here a sub-query of a point query is the set of points whose
//! stencil reaches into the atom; serving it adds that atom's part of their partial sums.
//! A cutout's sub-query is the set of its nodes inside the atom.
//!
//! The cut is made once, when the query is submitted, in the caller's thread: the points in
//! grid units sorted by the atom they lie in (neighbours share atoms), the atoms the query
//! needs in storage order, and both directions of the point–atom relation.

use std::sync::Arc;

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::engine::accumulate::TermSet;
use crate::engine::counting_sort::{bucket_sort, Buckets};
use crate::engine::needed_atoms::{self, Reach, CHUNK};
use crate::error::{Error, Result};
use crate::interp::method::{Method, Operator};
use crate::interp::stencil::Kernel;
use crate::storage::axis::Axis;
use crate::storage::geometry::{FieldGeometry, ShardPos};
use crate::storage::morton;

/// An atom a query needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeededAtom {
    /// Position in the grid of atoms, `[ax, ay, az]`.
    pub coords: [u32; 3],
    /// Morton code of `coords`: storage order.
    pub code: u64,
}

impl NeededAtom {
    pub(crate) fn new(coords: [u32; 3]) -> Self {
        Self {
            coords,
            code: morton::encode(coords[0], coords[1], coords[2]),
        }
    }

    /// The shard holding the atom and its position inside it.
    pub fn place(&self, atoms_per_shard: usize) -> (ShardPos, [usize; 3]) {
        let c = self.coords.map(|v| v as usize);
        (
            c.map(|v| v / atoms_per_shard),
            c.map(|v| v % atoms_per_shard),
        )
    }
}

/// A relation from `0..n` to lists of `u32`, stored compactly (compressed rows).
#[derive(Debug, Clone, Default)]
pub struct Rows {
    starts: Vec<u32>,
    items: Vec<u32>,
}

impl Rows {
    /// Row `i`.
    #[inline]
    pub fn row(&self, i: usize) -> &[u32] {
        &self.items[self.starts[i] as usize..self.starts[i + 1] as usize]
    }

    /// The relation whose row `i` is `items[starts[i]..starts[i + 1]]`.
    pub(crate) fn new(starts: Vec<u32>, items: Vec<u32>) -> Self {
        debug_assert_eq!(starts.last().map_or(0, |&s| s as usize), items.len());
        Self { starts, items }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of (row, item) pairs.
    pub fn pairs(&self) -> usize {
        self.items.len()
    }

    /// The transposed relation, with `columns` rows; each row's items ascending.
    fn transpose(&self, columns: usize) -> Rows {
        let mut starts = vec![0u32; columns + 1];
        for &c in &self.items {
            starts[c as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut at: Vec<u32> = starts[..columns].to_vec();
        let mut items = vec![0u32; self.items.len()];
        for r in 0..self.len() {
            for &c in self.row(r) {
                items[at[c as usize] as usize] = r as u32;
                at[c as usize] += 1;
            }
        }
        Rows { starts, items }
    }
}

/// A point query cut into sub-queries.
#[derive(Debug)]
pub struct PointWork {
    /// Weights of the method, prepared for the operator.
    pub kernel: Kernel,
    /// What is computed.
    pub operator: Operator,
    /// The operator's terms for the kernel.
    pub terms: TermSet,
    /// The grid's axes.
    pub axes: [Axis; 3],
    /// The stored layout.
    pub geometry: FieldGeometry,
    /// The points in grid units, in the engine's order (by the atom they lie in).
    pub positions: Vec<[f64; 3]>,
    /// The Morton code of each point's home atom, in the engine's order (ascending).
    pub homes: Vec<u64>,
    /// The caller's number of each point, in the engine's order.
    pub order: Vec<u32>,
    /// The atoms the query needs, in storage order; their index is the sub-query's number.
    pub atoms: Vec<NeededAtom>,
    /// Per atom, the points (engine's order) whose stencils reach into it.
    pub atom_points: Rows,
    /// Per point, the atoms its stencil reaches into.
    pub point_atoms: Rows,
    /// Whether atoms were left out (a query restricted to some partitions): its stencils
    /// may reach atoms it must not add.
    pub partial: bool,
}

impl PointWork {
    /// Cuts the query `points` (physical `[x, y, z]`) into sub-queries. With `partitions`,
    /// only atoms of those shards are kept: the query then yields partial sums.
    pub fn new(
        points: &[[f64; 3]],
        method: Method,
        operator: Operator,
        axes: [Axis; 3],
        geometry: FieldGeometry,
        partitions: Option<&[ShardPos]>,
    ) -> Result<Self> {
        method.check_supports(operator)?;
        if points.len() >= u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "{} points is more than one query can hold",
                points.len()
            )));
        }
        let kernel = Kernel::new(method, operator.max_order())?;
        for (axis, name) in axes.iter().zip(['x', 'y', 'z']) {
            kernel.check_axis(axis, name)?;
        }
        let terms = TermSet::new(operator.terms(), operator.slots());
        let a = geometry.atom;
        // A query of at most one chunk is cut in the calling thread: handing each step to
        // the pool and waiting for it (five times) took a quarter of a 1 000-point cut.
        let alone = points.len() <= CHUNK;
        // Grid positions, and the atom each point lies in (its home).
        let place = |p: &[f64; 3]| {
            let mut s = [0.0; 3];
            for k in 0..3 {
                s[k] = if p[k].is_finite() {
                    axes[k].grid_position(p[k], 'x').unwrap_or(f64::NAN)
                } else {
                    f64::NAN
                };
            }
            let home = home_atom(&s, a);
            (s, morton::encode(home[0], home[1], home[2]))
        };
        let placed: Vec<([f64; 3], u64)> = if alone {
            points.iter().map(place).collect()
        } else {
            points.par_iter().with_min_len(CHUNK).map(place).collect()
        };
        if let Some(i) = placed
            .iter()
            .position(|(s, _)| s.iter().any(|v| v.is_nan()))
        {
            return Err(bad_point(i, &points[i], &axes));
        }
        let by_home = by_home(&placed, alone);
        let positions: Vec<[f64; 3]> = by_home.iter().map(|&i| placed[i as usize].0).collect();
        let homes: Vec<u64> = by_home.iter().map(|&i| placed[i as usize].1).collect();
        drop(placed);

        // The atoms of every point's stencil, in storage order, and each point's list.
        let allowed: Option<FxHashSet<ShardPos>> = partitions.map(|p| p.iter().copied().collect());
        let reach = Reach {
            kernel: &kernel,
            axes: &axes,
            geometry: &geometry,
            allowed: allowed.as_ref(),
            alone,
        };
        let (atoms, point_atoms) = needed_atoms::number(&positions, &reach);
        let atom_points = point_atoms.transpose(atoms.len());
        Ok(Self {
            kernel,
            operator,
            terms,
            axes,
            geometry,
            positions,
            homes,
            order: by_home,
            atoms,
            atom_points,
            point_atoms,
            partial: partitions.is_some(),
        })
    }

    /// The points' order (see `order`), without a copy where no one else holds the cut.
    pub fn into_order(work: Arc<Self>) -> Vec<u32> {
        Arc::try_unwrap(work).map_or_else(|shared| shared.order.clone(), |work| work.order)
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether the query has no point.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Values per point in the result: components × operator slots.
    pub fn out_len(&self) -> usize {
        self.geometry.ncomp * self.terms.slots()
    }
}

/// The atom that grid position `s` lies in (its home): the cut orders points by it and
/// keeps its code ([`PointWork::homes`]), by which a batch groups points.
#[inline]
fn home_atom(s: &[f64; 3], atom: usize) -> [u32; 3] {
    // Atoms are a power of two wide (`FieldGeometry::new`): a shift, not a division.
    debug_assert!(atom.is_power_of_two());
    s.map(|v| (v.max(0.0) as u32) >> atom.trailing_zeros())
}

/// The points' numbers sorted by their home atom's code (ties in point order). The keys are
/// sorted themselves, packed with the number where they fit in one word: sorting numbers by
/// a key looked up elsewhere missed the cache on every comparison (half the cut of 10⁶
/// points). `alone`: sorted in the calling thread (a query of one chunk).
fn by_home(placed: &[([f64; 3], u64)], alone: bool) -> Vec<u32> {
    if let Some(order) = counted_by_home(placed) {
        return order;
    }
    if placed.iter().all(|&(_, code)| code <= u64::from(u32::MAX)) {
        sorted_numbers(
            placed,
            alone,
            |i, code| code << 32 | i as u64,
            |key| key as u32,
        )
    } else {
        sorted_numbers(placed, alone, |i, code| (code, i as u32), |(_, i)| i)
    }
}

/// Most home codes a counting sort spans for each point: its counts then cost about what
/// the points do.
const COUNTED_SPAN_PER_POINT: usize = 4;
/// Fewest points counted rather than sorted: a small query's sort is short, and counting
/// measured no faster there (`cut_profile 150 … 6`).
const COUNTED_POINTS: usize = 2048;

/// [`by_home`] by counting ([`bucket_sort`]), where the homes' codes span few values (a
/// grid of a few thousand atoms, or points crowded into a corner of a larger one): each
/// point goes to its code's bucket, in point order, as the sorts order ties. The large
/// uniform queries of the workload trace (24 000 points on 4 096 atoms) are cut 10–20 %
/// faster so (`cut_profile 24000 400 uniform`, one thread, 2-core Intel Xeon, load not
/// recorded). `None` for a small query or
/// where the span is too wide.
fn counted_by_home(placed: &[([f64; 3], u64)]) -> Option<Vec<u32>> {
    if placed.len() < COUNTED_POINTS {
        return None;
    }
    let (lo, hi) = placed.iter().fold((u64::MAX, 0), |(lo, hi), &(_, code)| {
        (lo.min(code), hi.max(code))
    });
    let span = usize::try_from(hi.checked_sub(lo)?).ok()? + 1;
    if span > COUNTED_SPAN_PER_POINT * placed.len() {
        return None;
    }
    /// Each point's bucket: its home's code, from the lowest.
    struct Homes<'a>(&'a [([f64; 3], u64)], u64);
    impl Buckets for Homes<'_> {
        type Value = u32;
        fn bucket(&self, i: usize) -> Option<(usize, u32)> {
            Some(((self.0[i].1 - self.1) as usize, i as u32))
        }
    }
    // Copied out: the sort's buffer goes back to its pool, sized for the largest query.
    let (order, _) = bucket_sort(placed.len(), span, &Homes(placed, lo));
    Some(order.to_vec())
}

/// The points' numbers in the order of their keys `key(number, home code)`, which `number`
/// turns back into the number.
fn sorted_numbers<K: Ord + Send>(
    placed: &[([f64; 3], u64)],
    alone: bool,
    key: impl Fn(usize, u64) -> K + Sync + Send,
    number: impl Fn(K) -> u32 + Sync + Send,
) -> Vec<u32> {
    let key = |(i, &(_, code)): (usize, &([f64; 3], u64))| key(i, code);
    if alone {
        let mut keys: Vec<K> = placed.iter().enumerate().map(key).collect();
        keys.sort_unstable();
        keys.into_iter().map(number).collect()
    } else {
        let mut keys: Vec<K> = placed.par_iter().enumerate().map(key).collect();
        keys.par_sort_unstable();
        keys.into_par_iter().map(number).collect()
    }
}

/// The error for the bad point `i`, worded as the standalone engine words it.
fn bad_point(i: usize, p: &[f64; 3], axes: &[Axis; 3]) -> Error {
    if !p.iter().all(|v| v.is_finite()) {
        return Error::InvalidArgument(format!("point {i} is not finite: {p:?}"));
    }
    for (k, name) in ['x', 'y', 'z'].into_iter().enumerate() {
        if let Err(Error::OutOfDomain(m)) = axes[k].grid_position(p[k], name) {
            return Error::OutOfDomain(format!("point {i}: {m}"));
        }
    }
    Error::InvalidArgument(format!("point {i} cannot be placed on the grid: {p:?}"))
}

/// A cutout cut into sub-queries: the nodes of each atom it needs.
#[derive(Debug)]
pub struct CutoutWork {
    /// Components per node.
    pub ncomp: usize,
    /// Side of an atom.
    pub atom: usize,
    /// Output nodes along x, y, z.
    pub dims: [usize; 3],
    /// The atoms the cutout needs, in storage order.
    pub atoms: Vec<NeededAtom>,
    /// Per axis, per atom index along it: `(output index, node inside the atom)` pairs.
    pub along: [FxHashMap<u32, Vec<(u32, u32)>>; 3],
}

impl CutoutWork {
    /// The cutout of nodes `nodes[axis]` (grid indices, each inside the grid).
    pub fn new(nodes: &[Vec<usize>; 3], geometry: &FieldGeometry) -> Self {
        let a = geometry.atom;
        let along: [FxHashMap<u32, Vec<(u32, u32)>>; 3] = std::array::from_fn(|k| {
            let mut map: FxHashMap<u32, Vec<(u32, u32)>> = FxHashMap::default();
            for (i, &node) in nodes[k].iter().enumerate() {
                map.entry((node / a) as u32)
                    .or_default()
                    .push((i as u32, (node % a) as u32));
            }
            map
        });
        let mut atoms = Vec::new();
        for &z in along[2].keys() {
            for &y in along[1].keys() {
                for &x in along[0].keys() {
                    atoms.push(NeededAtom::new([x, y, z]));
                }
            }
        }
        atoms.sort_unstable_by_key(|atom| atom.code);
        Self {
            ncomp: geometry.ncomp,
            atom: a,
            dims: [nodes[0].len(), nodes[1].len(), nodes[2].len()],
            atoms,
            along,
        }
    }

    /// Output nodes of sub-query `i` (its atom's nodes in the cutout).
    pub fn nodes_in(&self, i: usize) -> usize {
        let c = self.atoms[i].coords;
        (0..3).map(|k| self.along[k][&c[k]].len()).product()
    }

    /// Copies sub-query `i`'s nodes from its atom's values into `out` (`(z, y, x, c)`).
    ///
    /// # Safety
    /// `out` must point to `dims` nodes × `ncomp` values; no other thread may write the
    /// nodes of this atom at the same time (the nodes of different atoms are disjoint).
    pub unsafe fn copy(&self, i: usize, atom: &[f32], out: *mut f32) {
        let (a, nc) = (self.atom, self.ncomp);
        let [nx, ny, _] = self.dims;
        let c = self.atoms[i].coords;
        let (xs, ys, zs) = (
            &self.along[0][&c[0]],
            &self.along[1][&c[1]],
            &self.along[2][&c[2]],
        );
        for &(oz, lz) in zs {
            for &(oy, ly) in ys {
                for &(ox, lx) in xs {
                    let src = ((lz as usize * a + ly as usize) * a + lx as usize) * nc;
                    let dst = ((oz as usize * ny + oy as usize) * nx + ox as usize) * nc;
                    // SAFETY: `dst` is a node of the output (the caller's contract); `src`
                    // is inside the atom.
                    unsafe {
                        std::ptr::copy_nonoverlapping(atom.as_ptr().add(src), out.add(dst), nc)
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Counting and sorting order the points alike: by home code, ties in point order.
        #[test]
        fn counting_by_home_orders_points_as_the_sort_does(
            codes in prop::collection::vec(0u64..16384, 1..6000),
            stretch in prop::sample::select(vec![1u64, 3, 40]),
            offset in prop::sample::select(vec![0u64, 1 << 20, u64::from(u32::MAX) - 3000, 1 << 40]),
        ) {
            let placed: Vec<([f64; 3], u64)> =
                codes.iter().map(|&c| ([0.0; 3], c * stretch + offset)).collect();
            let mut sorted: Vec<u32> = (0..placed.len() as u32).collect();
            sorted.sort_by_key(|&i| (placed[i as usize].1, i));
            let span = (codes.iter().max().unwrap() - codes.iter().min().unwrap()) * stretch + 1;
            let counts = codes.len() >= COUNTED_POINTS
                && span <= (COUNTED_SPAN_PER_POINT * codes.len()) as u64;
            let counted = counted_by_home(&placed);
            prop_assert_eq!(counted.is_some(), counts, "a span of {} for {} points", span, codes.len());
            if let Some(counted) = counted {
                prop_assert_eq!(counted, sorted.clone());
            }
            prop_assert_eq!(by_home(&placed, true), sorted.clone());
            prop_assert_eq!(by_home(&placed, false), sorted);
        }
    }

    #[test]
    fn many_points_in_a_narrow_span_of_homes_are_counted_and_a_wide_span_sorted() {
        let n = COUNTED_POINTS as u64;
        // Codes n−1, n−2, …, 0, twice over: each code's two points in point order.
        let narrow: Vec<([f64; 3], u64)> = (0..2 * n).map(|i| ([0.0; 3], n - 1 - i % n)).collect();
        let counted = counted_by_home(&narrow).expect("a span of n codes for 2n points");
        assert_eq!(
            &counted[..4],
            &[
                n as u32 - 1,
                2 * n as u32 - 1,
                n as u32 - 2,
                2 * n as u32 - 2
            ]
        );
        assert_eq!(by_home(&narrow, false), counted);
        // One far code makes the span too wide to count: the points are sorted.
        let mut wide = narrow.clone();
        wide[0].1 = 1 << 30;
        assert_eq!(counted_by_home(&wide), None);
        let sorted = by_home(&wide, true);
        assert_eq!((sorted[0], *sorted.last().unwrap()), (n as u32 - 1, 0));
        assert_eq!(by_home(&[], true), Vec::<u32>::new());
    }

    fn axes(n: usize, periodic: bool) -> [Axis; 3] {
        [Axis::unit(n, periodic); 3]
    }

    #[test]
    fn every_point_is_listed_under_each_atom_its_stencil_reaches() {
        let geometry = FieldGeometry::new([32, 32, 32], 3, 8, 16).unwrap();
        let points = vec![
            [3.5, 3.5, 3.5],
            [12.0, 1.2, 30.9],
            [31.5, 0.5, 7.99],
            [3.6, 3.4, 3.5],
        ];
        let work = PointWork::new(
            &points,
            Method::Lagrange(8),
            Operator::Field,
            axes(32, true),
            geometry,
            None,
        )
        .unwrap();
        // Points 0 and 3 lie in atom (0, 0, 0) and come first; their stencils (nodes 0…7)
        // stay in it.
        assert_eq!(
            work.order[..2].iter().copied().collect::<FxHashSet<_>>(),
            FxHashSet::from_iter([0, 3])
        );
        for p in 0..2 {
            let atoms = work.point_atoms.row(p);
            assert_eq!(atoms.len(), 1);
            assert_eq!(work.atoms[atoms[0] as usize].coords, [0, 0, 0]);
        }
        // Point 2 (31.5, 0.5, 7.99) wraps in x and y: nodes 28…3 in x and y, 4…11 in z.
        let p = work.order.iter().position(|&i| i == 2).unwrap();
        let mut coords: Vec<[u32; 3]> = work
            .point_atoms
            .row(p)
            .iter()
            .map(|&a| work.atoms[a as usize].coords)
            .collect();
        coords.sort();
        assert_eq!(coords.len(), 8);
        assert!(coords.contains(&[3, 3, 0]) && coords.contains(&[0, 0, 1]));
        // Both directions of the relation agree, and atoms are in storage order.
        for (a, atom) in work.atoms.iter().enumerate() {
            for &p in work.atom_points.row(a) {
                assert!(
                    work.point_atoms.row(p as usize).contains(&(a as u32)),
                    "{atom:?}"
                );
            }
        }
        assert!(work.atoms.windows(2).all(|w| w[0].code < w[1].code));
        assert_eq!(work.atom_points.pairs(), work.point_atoms.pairs());
    }

    #[test]
    fn partitions_keep_only_their_atoms() {
        let geometry = FieldGeometry::new([32, 32, 32], 1, 8, 16).unwrap();
        let points = vec![[15.5, 15.5, 15.5]]; // nodes 12…19: atoms 1 and 2, shards 0 and 1
        let all = PointWork::new(
            &points,
            Method::Lagrange(8),
            Operator::Field,
            axes(32, true),
            geometry.clone(),
            None,
        )
        .unwrap();
        assert_eq!(all.atoms.len(), 8);
        let part = PointWork::new(
            &points,
            Method::Lagrange(8),
            Operator::Field,
            axes(32, true),
            geometry,
            Some(&[[0, 0, 0]]),
        )
        .unwrap();
        assert_eq!(part.atoms.len(), 1);
        assert_eq!(part.atoms[0].coords, [1, 1, 1]);
    }

    #[test]
    fn bad_points_are_named_as_the_standalone_engine_names_them() {
        let geometry = FieldGeometry::new([16, 16, 16], 1, 8, 16).unwrap();
        let err = PointWork::new(
            &[[1.0; 3], [f64::NAN, 0.0, 0.0]],
            Method::Lagrange(4),
            Operator::Field,
            axes(16, true),
            geometry.clone(),
            None,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "point 1 is not finite: [NaN, 0.0, 0.0]");
        let err = PointWork::new(
            &[[1.0; 3], [1.0, 99.0, 1.0]],
            Method::Lagrange(4),
            Operator::Field,
            axes(16, false),
            geometry,
            None,
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::OutOfDomain(ref m) if m.starts_with("point 1: y = 99")),
            "{err}"
        );
    }

    #[test]
    fn a_cutout_lists_each_node_under_its_atom() {
        let geometry = FieldGeometry::new([16, 16, 16], 2, 4, 8).unwrap();
        let nodes = [vec![3, 4, 5], vec![0], vec![15, 0]];
        let work = CutoutWork::new(&nodes, &geometry);
        assert_eq!(work.atoms.len(), 2 * 2);
        assert_eq!(
            (0..work.atoms.len())
                .map(|i| work.nodes_in(i))
                .sum::<usize>(),
            3 * 2
        );
    }
}
