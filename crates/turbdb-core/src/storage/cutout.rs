//! Cutouts: a box of grid nodes (with a stride, wrapping on periodic axes) read atom by
//! atom in storage order and copied into a dense `(nz, ny, nx, ncomp)` array.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::storage::axis::Axis;
use crate::storage::morton;
use crate::storage::reader::{le_f32_into, AtomRequest, AtomSource};

/// Checks one axis's half-open range `[start, stop)` (unwrapped) and stride.
fn check_range(axis: &Axis, start: i64, stop: i64, stride: usize, name: char) -> Result<()> {
    if stride == 0 {
        return Err(Error::InvalidArgument("stride must be at least 1".into()));
    }
    if stop <= start {
        return Err(Error::InvalidArgument(format!(
            "{name} range [{start}, {stop}) is empty"
        )));
    }
    let n = axis.n as i64;
    if !axis.periodic && (start < 0 || stop > n) {
        return Err(Error::OutOfDomain(format!(
            "{name} range [{start}, {stop}) is outside the non-periodic axis [0, {n})"
        )));
    }
    Ok(())
}

/// How many nodes `start, start+stride, …` lie below `stop`, counted without listing them.
fn axis_count(start: i64, stop: i64, stride: usize) -> u128 {
    let span = (i128::from(stop) - i128::from(start)).max(0) as u128;
    span.div_ceil(stride as u128)
}

/// Checks a cutout before anything is allocated: every range, and that its values fit in
/// `max_bytes`. Returns the shape `[nz, ny, nx, ncomp]`; a cutout too large says how to
/// split it.
pub fn cutout_shape(
    axes: &[Axis; 3],
    ranges: [(i64, i64); 3],
    stride: usize,
    ncomp: usize,
    max_bytes: u64,
) -> Result<[usize; 4]> {
    for (i, name) in ['x', 'y', 'z'].into_iter().enumerate() {
        check_range(&axes[i], ranges[i].0, ranges[i].1, stride, name)?;
    }
    let [nx, ny, nz] = ranges.map(|(start, stop)| axis_count(start, stop, stride));
    let value_bytes = ncomp as u128 * 4;
    let total = [nx, ny, nz]
        .into_iter()
        .try_fold(value_bytes, |acc, n| acc.checked_mul(n));
    if let Some(bytes) = total.filter(|&b| b <= u128::from(max_bytes)) {
        debug_assert!(bytes <= usize::MAX as u128);
        return Ok([nz as usize, ny as usize, nx as usize, ncomp]);
    }
    let plane = nx.checked_mul(ny).and_then(|p| p.checked_mul(value_bytes));
    let split = if let Some(plane) = plane.filter(|&p| p <= u128::from(max_bytes)) {
        let planes = u128::from(max_bytes) / plane;
        format!(
            "split it along z into boxes of at most {planes} planes (z = (z0, z0 + {})), or take \
             a larger stride",
            planes * stride as u128
        )
    } else {
        "even one z-plane is too large: split it along x and y too, or take a larger stride"
            .to_string()
    };
    Err(Error::TooLarge(format!(
        "a cutout of {nx} × {ny} × {nz} nodes × {ncomp} components is {} of float32; one call \
         may return at most {}: {split}",
        human_bytes(total.map_or(f64::INFINITY, |b| b as f64)),
        human_bytes(max_bytes as f64)
    )))
}

/// A byte count for people: `512 B`, `3.0 GiB`, `1.2e+21 B`.
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if !bytes.is_finite() {
        return "more than 2¹²⁸ bytes".into();
    }
    let mut value = bytes;
    for unit in UNITS {
        if value < 1024.0 || unit == "PiB" {
            if unit == "B" {
                return format!("{value} B");
            }
            if value >= 1024.0 {
                return format!("{bytes:.1e} B");
            }
            return format!("{value:.1} {unit}");
        }
        value /= 1024.0;
    }
    unreachable!("the loop returns at PiB")
}

/// The nodes selected along one axis: `start, start+stride, …` below `stop` (half-open,
/// unwrapped), each wrapped into the grid on a periodic axis. Check the size first with
/// [`cutout_shape`]: this lists every node.
pub fn axis_nodes(
    axis: &Axis,
    start: i64,
    stop: i64,
    stride: usize,
    name: char,
) -> Result<Vec<usize>> {
    check_range(axis, start, stop, stride, name)?;
    let n = axis.n as i64;
    Ok((start..stop)
        .step_by(stride)
        .map(|i| i.rem_euclid(n) as usize)
        .collect())
}

/// Reads the cutout of nodes `nodes[axis]` at time index `t` into `out`
/// (C order `(z, y, x, c)`). Atoms are read once each, grouped by shard: in place from
/// the mapped shard file where the source can, else through a buffer.
pub fn read_cutout(
    source: &dyn AtomSource,
    t: usize,
    nodes: &[Vec<usize>; 3],
    atom: usize,
    atoms_per_shard: usize,
    ncomp: usize,
    out: &mut [f32],
) -> Result<()> {
    let [nx, ny, _] = [nodes[0].len(), nodes[1].len(), nodes[2].len()];
    // For each axis: atom index → the output positions and atom-local offsets it serves.
    let by_atom = |axis: usize| {
        let mut map: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
        for (i, &node) in nodes[axis].iter().enumerate() {
            map.entry(node / atom).or_default().push((i, node % atom));
        }
        map
    };
    let (ax, ay, az) = (by_atom(0), by_atom(1), by_atom(2));
    // Along x, runs of nodes next to each other both in the atom and in the output (stride
    // 1): (first output position, first atom offset, nodes), each copied at once.
    let x_runs: BTreeMap<usize, Vec<(usize, usize, usize)>> = ax
        .iter()
        .map(|(&a, nodes)| {
            let mut runs: Vec<(usize, usize, usize)> = Vec::new();
            for &(o, l) in nodes {
                match runs.last_mut() {
                    Some((o0, l0, n)) if *o0 + *n == o && *l0 + *n == l => *n += 1,
                    _ => runs.push((o, l, 1)),
                }
            }
            (a, runs)
        })
        .collect();
    // Every needed atom, grouped by shard, in Morton (storage) order.
    let mut shards: BTreeMap<u64, Vec<[usize; 3]>> = BTreeMap::new();
    for &z in az.keys() {
        for &y in ay.keys() {
            for &x in ax.keys() {
                let shard = [x, y, z].map(|v| (v / atoms_per_shard) as u32);
                shards
                    .entry(morton::encode(shard[0], shard[1], shard[2]))
                    .or_default()
                    .push([x, y, z]);
            }
        }
    }
    let values = atom.pow(3) * ncomp;
    for (_, mut atoms) in shards {
        atoms.sort_by_key(|a| morton::encode(a[0] as u32, a[1] as u32, a[2] as u32));
        let shard = atoms[0].map(|v| v / atoms_per_shard);
        let requests: Vec<AtomRequest> = atoms
            .iter()
            .enumerate()
            .map(|(slot, a)| AtomRequest {
                local: a.map(|v| v % atoms_per_shard),
                slot,
            })
            .collect();
        // Each x run of an atom: its first value in the atom and in `out`, and its values.
        let runs = |a: &[usize; 3]| {
            let (xs, ys, zs) = (&x_runs[&a[0]], &ay[&a[1]], &az[&a[2]]);
            zs.iter().flat_map(move |&(oz, lz)| {
                ys.iter().flat_map(move |&(oy, ly)| {
                    xs.iter().map(move |&(ox, lx, n)| {
                        (
                            ((lz * atom + ly) * atom + lx) * ncomp,
                            ((oz * ny + oy) * nx + ox) * ncomp,
                            n * ncomp,
                        )
                    })
                })
            })
        };
        // Straight from the mapped shard where the source can, else through a buffer.
        let in_place = source.atoms_in_place(t, shard, &requests, &mut |slot, bytes| {
            for (src, dst, n) in runs(&atoms[slot]) {
                le_f32_into(&bytes[4 * src..4 * (src + n)], &mut out[dst..dst + n]);
            }
        })?;
        if in_place {
            continue;
        }
        let mut buffer = vec![0f32; atoms.len() * values];
        source.read_atoms(t, shard, &requests, &mut buffer)?;
        for (slot, a) in atoms.iter().enumerate() {
            let data = &buffer[slot * values..][..values];
            for (src, dst, n) in runs(a) {
                out[dst..dst + n].copy_from_slice(&data[src..src + n]);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn periodic(n: usize) -> Axis {
        Axis::unit(n, true)
    }

    #[test]
    fn sizes_are_counted_without_overflow_and_refused_with_a_way_to_split() {
        let axes = [periodic(32); 3];
        let shape = cutout_shape(&axes, [(-3, 29), (0, 32), (0, 32)], 3, 3, 1 << 30).unwrap();
        assert_eq!(shape, [11, 11, 11, 3]);
        for n in [1i64 << 22, (1 << 22) + 1, 1 << 31, i64::MAX] {
            let err = cutout_shape(&axes, [(0, n), (0, n), (0, n)], 1, 3, 1 << 33).unwrap_err();
            assert!(matches!(err, Error::TooLarge(_)), "{err}");
            assert!(err.to_string().contains("split it along x and y"), "{err}");
        }
        let err = cutout_shape(&axes, [(0, 4096), (0, 4096), (0, 4096)], 1, 3, 1 << 33)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("768.0 GiB") && err.contains("at most 42 planes"),
            "{err}"
        );
        let wide = cutout_shape(&axes, [(i64::MIN, i64::MAX), (0, 1), (0, 1)], 1, 1, 1 << 33);
        assert!(matches!(wide, Err(Error::TooLarge(_))));
    }
}
