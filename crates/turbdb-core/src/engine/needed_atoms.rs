//! The atoms a point query's stencils reach, numbered in storage order, and each point's
//! list of them: the heart of the cut into sub-queries ([`crate::engine::subquery`]).
//!
//! Each point's stencil reaches a few atoms along each axis ([`stencil_atoms`]) and their
//! product in space: eight for most lag8 points in atoms of 8. Those are numbered through a
//! table with a slot for every atom the query's stencils can reach — the product of the
//! atoms reached along each axis, a few hundred for a query crowded about one place, the
//! whole grid of atoms for a uniform one — marked in one pass and read back in another, so
//! no point–atom pair costs more than an index and a load. Where that table would be large
//! beside the query (a few points scattered over a big grid), the atoms are numbered
//! through a hash map instead, chunk by chunk. Both give the same numbering and lists.

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::interp::stencil::Kernel;
use crate::storage::axis::Axis;
use crate::storage::geometry::{FieldGeometry, ShardPos};

use super::subquery::{NeededAtom, Rows};

/// Points per chunk of the parallel parts of the numbering.
pub(crate) const CHUNK: usize = 1 << 14;

/// Fewest slots the table may always have (the 4 096 atoms of a 128³ grid in atoms of 8);
/// past it, at most [`SLOTS_PER_POINT`] a point.
const MIN_SLOTS: usize = 1 << 12;
/// Most slots of the table a point may bring: it is filled once per query.
const SLOTS_PER_POINT: usize = 16;

/// What the numbering needs to know of the query.
pub(crate) struct Reach<'a> {
    pub(crate) kernel: &'a Kernel,
    pub(crate) axes: &'a [Axis; 3],
    /// The stored layout: atoms and shards.
    pub(crate) geometry: &'a FieldGeometry,
    /// The shards whose atoms may be kept (all where `None`).
    pub(crate) allowed: Option<&'a FxHashSet<ShardPos>>,
    /// Whether to work in the calling thread only (a query of at most one chunk).
    pub(crate) alone: bool,
}

impl Reach<'_> {
    /// Whether the query may keep `atom`.
    fn keeps(&self, atom: &NeededAtom) -> bool {
        self.allowed
            .is_none_or(|allowed| allowed.contains(&atom.place(self.geometry.atoms_per_side()).0))
    }

    /// The atoms along each axis that the stencil of grid position `s` reaches.
    #[inline(always)]
    fn along(&self, s: &[f64; 3], along: &mut [Vec<u32>; 3]) {
        for k in 0..3 {
            stencil_atoms(
                self.kernel,
                &self.axes[k],
                s[k],
                self.geometry.atom,
                &mut along[k],
            );
        }
    }
}

/// The atoms the stencils of the points at grid positions `positions` reach (those of
/// allowed shards), in storage order, and each point's list of them (by that number; along
/// z, then y, then x, as its stencil meets them).
pub(crate) fn number(positions: &[[f64; 3]], reach: &Reach<'_>) -> (Vec<NeededAtom>, Rows) {
    by_table(positions, reach).unwrap_or_else(|| by_hash(positions, reach))
}

/// Per axis, the atoms the query's stencils can reach, ascending, and the rank of each
/// atom of the axis among them (`u32::MAX` for none).
struct AxisAtoms {
    used: Vec<u32>,
    rank: Vec<u32>,
}

impl AxisAtoms {
    fn from_flags(flags: Vec<bool>) -> Self {
        let mut rank = vec![u32::MAX; flags.len()];
        let mut used = Vec::new();
        for (a, _) in flags.iter().enumerate().filter(|(_, &f)| f) {
            rank[a] = used.len() as u32;
            used.push(a as u32);
        }
        Self { used, rank }
    }
}

/// A slot of the table no stencil reaches (yet), or whose atom is left out.
const UNSEEN: u32 = u32::MAX;
const LEFT_OUT: u32 = u32::MAX - 1;

/// [`number`] through a table of the atoms the stencils can reach; `None` where the table
/// would hold more than [`MIN_SLOTS`] and [`SLOTS_PER_POINT`] slots a point.
fn by_table(positions: &[[f64; 3]], reach: &Reach<'_>) -> Option<(Vec<NeededAtom>, Rows)> {
    let grid = reach.geometry.atoms_per_axis();
    let axes = axis_atoms(positions, reach, grid)?;
    let [nx, ny, nz] = [0, 1, 2].map(|k| axes[k].used.len());
    // Each point's atoms as slots of the table, chunk by chunk.
    let (width, shift) = (reach.kernel.width(), reach.geometry.atom.trailing_zeros());
    let slots_of = |part: &[[f64; 3]]| {
        let mut slots = Vec::with_capacity(part.len() * 8);
        let mut counts = Vec::with_capacity(part.len());
        let mut along: [Vec<u32>; 3] = Default::default();
        for s in part {
            let first: [usize; 3] =
                std::array::from_fn(|k| reach.kernel.first_node(s[k], &reach.axes[k]));
            let runs: [Option<(usize, usize)>; 3] =
                std::array::from_fn(|k| atom_run(first[k], width, reach.axes[k].n, shift));
            if let [Some(x), Some(y), Some(z)] = runs {
                // No wrap (almost every point): the atoms along each axis are consecutive
                // and all reached, so their ranks are consecutive too.
                let (lo, count) = ([x.0, y.0, z.0], [x.1, y.1, z.1]);
                let rank = |k: usize| axes[k].rank[lo[k]] as usize;
                let base = (rank(2) * ny + rank(1)) * nx + rank(0);
                for dz in 0..count[2] {
                    for dy in 0..count[1] {
                        let row = base + (dz * ny + dy) * nx;
                        slots.extend((row..row + count[0]).map(|slot| slot as u32));
                    }
                }
                counts.push((count[0] * count[1] * count[2]) as u32);
                continue;
            }
            reach.along(s, &mut along);
            for &z in &along[2] {
                let rz = axes[2].rank[z as usize] as usize;
                for &y in &along[1] {
                    let row = (rz * ny + axes[1].rank[y as usize] as usize) * nx;
                    for &x in &along[0] {
                        slots.push((row + axes[0].rank[x as usize] as usize) as u32);
                    }
                }
            }
            counts.push((along[0].len() * along[1].len() * along[2].len()) as u32);
        }
        (slots, counts)
    };
    let chunks: Vec<(Vec<u32>, Vec<u32>)> = if reach.alone {
        positions.chunks(CHUNK).map(slots_of).collect()
    } else {
        positions.par_chunks(CHUNK).map(slots_of).collect()
    };
    // Mark the slots reached, listing each the first time.
    let mut table = vec![UNSEEN; nx * ny * nz];
    let mut reached: Vec<u32> = Vec::new();
    for (slots, _) in &chunks {
        for &slot in slots {
            let t = &mut table[slot as usize];
            if *t == UNSEEN {
                *t = 0;
                reached.push(slot);
            }
        }
    }
    // The atoms reached, in storage order, numbered in the table.
    let atom_of = |slot: u32| {
        let slot = slot as usize;
        let rest = slot / nx;
        NeededAtom::new([
            axes[0].used[slot % nx],
            axes[1].used[rest % ny],
            axes[2].used[rest / ny],
        ])
    };
    if reach.allowed.is_some() {
        reached.retain(|&slot| {
            let keep = reach.keeps(&atom_of(slot));
            if !keep {
                table[slot as usize] = LEFT_OUT;
            }
            keep
        });
    }
    // The slots reached in storage order (the atoms' Morton order).
    if grid.iter().all(|&count| count <= 1 << 10) {
        // Codes of 30 bits: sorted packed with their slot, one word each (faster than
        // sorting the slots by a code looked up at each comparison).
        let mut keys: Vec<u64> = reached
            .iter()
            .map(|&slot| atom_of(slot).code << 32 | u64::from(slot))
            .collect();
        keys.sort_unstable();
        reached = keys.into_iter().map(|key| key as u32).collect();
    } else {
        reached.sort_unstable_by_key(|&slot| atom_of(slot).code);
    }
    let mut atoms = Vec::with_capacity(reached.len());
    for (number, &slot) in reached.iter().enumerate() {
        table[slot as usize] = number as u32;
        atoms.push(atom_of(slot));
    }
    // Each point's list, by number.
    let mut starts = Vec::with_capacity(positions.len() + 1);
    starts.push(0u32);
    let mut items = Vec::with_capacity(chunks.iter().map(|c| c.0.len()).sum());
    let mut last = 0u32;
    for (slots, counts) in &chunks {
        if reach.allowed.is_none() {
            items.extend(slots.iter().map(|&s| table[s as usize]));
            starts.extend(counts.iter().map(|&count| {
                last += count;
                last
            }));
            continue;
        }
        let mut at = 0;
        for &count in counts {
            let mine = &slots[at..at + count as usize];
            at += count as usize;
            let kept = mine
                .iter()
                .map(|&s| table[s as usize])
                .filter(|&n| n != LEFT_OUT);
            let before = items.len();
            items.extend(kept);
            last += (items.len() - before) as u32;
            starts.push(last);
        }
    }
    Some((atoms, Rows::new(starts, items)))
}

/// The atoms of each axis the table has slots for: the whole grid of atoms where it fits
/// the limit, else only the atoms the stencils reach along each axis, if their product
/// fits it (`None` where not).
fn axis_atoms(
    positions: &[[f64; 3]],
    reach: &Reach<'_>,
    grid: [usize; 3],
) -> Option<[AxisAtoms; 3]> {
    // Slots are numbered in a u32, below the two marks.
    let limit = MIN_SLOTS
        .max(SLOTS_PER_POINT * positions.len())
        .min(LEFT_OUT as usize);
    if grid.iter().product::<usize>() <= limit {
        return Some(grid.map(|count| AxisAtoms::from_flags(vec![true; count])));
    }
    let flag = |mut flags: [Vec<bool>; 3], part: &[[f64; 3]]| {
        let mut along: [Vec<u32>; 3] = Default::default();
        for s in part {
            reach.along(s, &mut along);
            for k in 0..3 {
                for &a in &along[k] {
                    flags[k][a as usize] = true;
                }
            }
        }
        flags
    };
    let none = || grid.map(|count| vec![false; count]);
    let flags = if reach.alone {
        flag(none(), positions)
    } else {
        positions
            .par_chunks(CHUNK)
            .fold(none, flag)
            .reduce(none, |mut a, b| {
                for k in 0..3 {
                    a[k].iter_mut().zip(&b[k]).for_each(|(x, &y)| *x |= y);
                }
                a
            })
    };
    let axes = flags.map(AxisAtoms::from_flags);
    (axes.iter().map(|a| a.used.len()).product::<usize>() <= limit).then_some(axes)
}

/// [`number`] through a hash map: each chunk numbers its atoms in order of first sight,
/// then one numbering in storage order joins them.
fn by_hash(positions: &[[f64; 3]], reach: &Reach<'_>) -> (Vec<NeededAtom>, Rows) {
    let cut_chunk = |part: &[[f64; 3]]| {
        let mut found = ChunkAtoms::with_capacity(part.len());
        let mut along: [Vec<u32>; 3] = Default::default();
        for s in part {
            reach.along(s, &mut along);
            let mut count = 0u32;
            for &z in &along[2] {
                for &y in &along[1] {
                    for &x in &along[0] {
                        let atom = NeededAtom::new([x, y, z]);
                        if !reach.keeps(&atom) {
                            continue;
                        }
                        found.push(atom);
                        count += 1;
                    }
                }
            }
            found.counts.push(count);
        }
        (found.list, found.counts, found.atoms)
    };
    let chunks: Vec<(Vec<u32>, Vec<u32>, Vec<NeededAtom>)> = if reach.alone {
        positions.chunks(CHUNK).map(cut_chunk).collect()
    } else {
        positions.par_chunks(CHUNK).map(cut_chunk).collect()
    };
    // One numbering for the whole query, in storage order.
    let mut atoms: Vec<NeededAtom> = chunks.iter().flat_map(|c| c.2.iter().copied()).collect();
    atoms.sort_unstable_by_key(|atom| atom.code);
    atoms.dedup_by_key(|atom| atom.code);
    let number: FxHashMap<u64, u32> = atoms
        .iter()
        .enumerate()
        .map(|(i, atom)| (atom.code, i as u32))
        .collect();
    let mut starts = Vec::with_capacity(positions.len() + 1);
    starts.push(0u32);
    let mut items = Vec::with_capacity(chunks.iter().map(|c| c.0.len()).sum());
    for (list, counts, local) in &chunks {
        let global: Vec<u32> = local.iter().map(|atom| number[&atom.code]).collect();
        items.extend(list.iter().map(|&l| global[l as usize]));
        for &count in counts {
            starts.push(starts.last().copied().unwrap_or(0) + count);
        }
    }
    (atoms, Rows::new(starts, items))
}

/// The atoms one chunk of points needs, numbered in order of first sight, with the list
/// of each point's atoms (by that number).
#[derive(Default)]
struct ChunkAtoms {
    index: FxHashMap<u64, u32>,
    atoms: Vec<NeededAtom>,
    list: Vec<u32>,
    counts: Vec<u32>,
    /// The last atoms looked up, by their low bits: neighbouring points share atoms.
    recent: [(u64, u32); 8],
}

impl ChunkAtoms {
    /// Room for `points` points of about eight atoms each (lag8, 8³ atoms): growing the
    /// index as it fills cost a tenth of the cut.
    fn with_capacity(points: usize) -> Self {
        Self {
            index: FxHashMap::with_capacity_and_hasher(points * 4, Default::default()),
            atoms: Vec::with_capacity(points * 4),
            list: Vec::with_capacity(points * 8),
            counts: Vec::with_capacity(points),
            recent: Default::default(),
        }
    }

    #[inline]
    fn push(&mut self, atom: NeededAtom) {
        let slot = &mut self.recent[(atom.code & 7) as usize];
        let number = if slot.0 == atom.code + 1 {
            slot.1
        } else {
            let next = self.atoms.len() as u32;
            let number = *self.index.entry(atom.code).or_insert(next);
            if number == next {
                self.atoms.push(atom);
            }
            *slot = (atom.code + 1, number);
            number
        };
        self.list.push(number);
    }
}

/// The atoms along an axis of `n` nodes (atoms `1 << shift` wide) of a stencil `width`
/// wide whose first node is `first`, where it does not wrap: the first and how many, all
/// consecutive. `None` where it wraps past the end of a periodic axis.
#[inline(always)]
fn atom_run(first: usize, width: usize, n: usize, shift: u32) -> Option<(usize, usize)> {
    (first + width <= n).then(|| {
        let lo = first >> shift;
        (lo, ((first + width - 1) >> shift) - lo + 1)
    })
}

/// The atoms along one axis that the stencil of grid position `s` reaches into, each once,
/// in the order the stencil meets them. The stencil's nodes are one run, or two where it
/// wraps past the end of a periodic axis; each run covers a range of atoms, so this takes
/// a few shifts rather than a division per node (those were a third of the cut's time).
#[inline(always)]
pub(crate) fn stencil_atoms(kernel: &Kernel, axis: &Axis, s: f64, atom: usize, out: &mut Vec<u32>) {
    out.clear();
    let first = kernel.first_node(s, axis);
    let (n, width) = (axis.n, kernel.width());
    // Atoms are a power of two wide (`FieldGeometry::new`): shifts, not divisions by a
    // width known only at run time (a 1 000-point cut 5–8 % faster).
    debug_assert!(atom.is_power_of_two());
    let shift = atom.trailing_zeros();
    if let Some((lo, count)) = atom_run(first, width, n, shift) {
        out.extend(lo as u32..(lo + count) as u32);
        return;
    }
    let before_wrap = width.min(n - first);
    for (lo, len) in [(first, before_wrap), (0, width - before_wrap)] {
        if len == 0 {
            continue;
        }
        for a in (lo >> shift) as u32..=((lo + len - 1) >> shift) as u32 {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::method::Method;
    use proptest::prelude::*;

    #[test]
    fn stencil_atoms_are_those_of_its_nodes_in_order_even_where_it_wraps() {
        for (n, atom) in [(32, 8), (30, 8), (20, 4)] {
            for periodic in [true, false] {
                let axis = Axis::unit(n, periodic);
                for method in [Method::Lagrange(8), Method::Lagrange(4), Method::Nearest] {
                    let kernel = Kernel::new(method, 0).unwrap();
                    let mut got = Vec::new();
                    for i in 0..(n * 16) {
                        let s = i as f64 / 16.0;
                        stencil_atoms(&kernel, &axis, s, atom, &mut got);
                        let first = kernel.first_node(s, &axis);
                        let mut want: Vec<u32> = Vec::new();
                        for k in 0..kernel.width() {
                            let a = (((first + k) % n) / atom) as u32;
                            if !want.contains(&a) {
                                want.push(a);
                            }
                        }
                        assert_eq!(got, want, "{method:?} n {n} atom {atom} s {s}");
                    }
                }
            }
        }
    }

    /// Grid positions crowded about a centre (wrapped or clamped into the grid), or uniform.
    fn positions(
        n: [usize; 3],
        periodic: bool,
        count: usize,
        spread: Option<f64>,
        seed: u64,
    ) -> Vec<[f64; 3]> {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let centre: [f64; 3] = std::array::from_fn(|k| next() * n[k] as f64);
        (0..count)
            .map(|_| {
                std::array::from_fn(|k| {
                    let top = if periodic {
                        n[k] as f64
                    } else {
                        (n[k] - 1) as f64
                    };
                    let v = match spread {
                        Some(spread) => centre[k] + spread * (next() - 0.5),
                        None => next() * top,
                    };
                    if periodic {
                        v.rem_euclid(top)
                    } else {
                        v.clamp(0.0, top)
                    }
                })
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The table and the hash map number the same atoms the same way and list the same
        /// atoms for every point, on grids of partial atoms, across the periodic seam, with
        /// and without partitions, crowded or uniform, on one thread or in chunks.
        #[test]
        fn the_table_and_the_hash_map_agree(
            n in prop::array::uniform3(9usize..80),
            atom_shift in 2u32..4,
            periodic in any::<bool>(),
            method in prop::sample::select(vec![
                Method::Lagrange(8), Method::Lagrange(4), Method::Lagrange(6), Method::Nearest, Method::Fd4Lag4,
            ]),
            count in 1usize..3_000,
            spread in prop::option::of(1.0f64..40.0),
            partitioned in any::<bool>(),
            alone in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let atom = 1usize << atom_shift;
            let axes = n.map(|n| Axis::unit(n, periodic));
            let kernel = Kernel::new(method, 0).unwrap();
            prop_assume!(axes.iter().all(|axis| kernel.check_axis(axis, 'x').is_ok()));
            let positions = positions(n, periodic, count, spread, seed);
            // Shards two atoms wide.
            let geometry = FieldGeometry::new(n, 1, atom, 2 * atom).unwrap();
            let allowed: FxHashSet<ShardPos> = [[0, 0, 0], [1, 0, 1], [0, 1, 0]].into_iter().collect();
            let reach = Reach {
                kernel: &kernel,
                axes: &axes,
                geometry: &geometry,
                allowed: partitioned.then_some(&allowed),
                alone,
            };
            let (atoms, lists) = by_hash(&positions, &reach);
            let table = by_table(&positions, &reach);
            // A grid of at most MIN_SLOTS atoms always fits the table; a few points scattered
            // over a bigger one may take the hash map.
            let atoms_in_grid: usize = geometry.atoms_per_axis().iter().product();
            prop_assert!(table.is_some() || atoms_in_grid > MIN_SLOTS);
            if let Some((table_atoms, table_lists)) = table {
                prop_assert_eq!(&table_atoms, &atoms);
                prop_assert_eq!(table_lists.len(), positions.len());
                for p in 0..positions.len() {
                    prop_assert_eq!(table_lists.row(p), lists.row(p), "point {}", p);
                }
            }
            prop_assert_eq!(number(&positions, &reach).0, atoms);
        }
    }

    #[test]
    fn a_few_points_over_a_big_grid_are_numbered_through_the_hash_map() {
        let kernel = Kernel::new(Method::Lagrange(8), 0).unwrap();
        let axes = [Axis::unit(4096, true); 3];
        // Points far apart: every axis reaches many atoms, so the table of their product
        // would be far bigger than the query.
        let positions: Vec<[f64; 3]> = (0..64)
            .map(|i| [(i * 61) as f64 + 0.5, (i * 37) as f64, (i * 53) as f64])
            .collect();
        let geometry = FieldGeometry::new([4096; 3], 1, 8, 64).unwrap();
        let reach = Reach {
            kernel: &kernel,
            axes: &axes,
            geometry: &geometry,
            allowed: None,
            alone: true,
        };
        assert!(by_table(&positions, &reach).is_none());
        let (atoms, lists) = number(&positions, &reach);
        let mut along: [Vec<u32>; 3] = Default::default();
        let pairs: usize = positions
            .iter()
            .map(|s| {
                reach.along(s, &mut along);
                along.iter().map(Vec::len).product::<usize>()
            })
            .sum();
        assert_eq!(lists.pairs(), pairs);
        assert!(atoms.windows(2).all(|w| w[0].code < w[1].code));
        // Crowded about one place, the same number of points fits the table.
        let crowded: Vec<[f64; 3]> = (0..64)
            .map(|i| {
                [
                    1000.0 + (i % 4) as f64 * 3.3,
                    2000.5,
                    3000.0 + (i / 4) as f64,
                ]
            })
            .collect();
        assert!(by_table(&crowded, &reach).is_some());
    }
}
