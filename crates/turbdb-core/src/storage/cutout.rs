//! Cutouts: a box of grid nodes (with a stride, wrapping on periodic axes) read atom by
//! atom in storage order and copied into a dense `(nz, ny, nx, ncomp)` array.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::storage::axis::Axis;
use crate::storage::morton;
use crate::storage::reader::{AtomRequest, AtomSource};

/// The nodes selected along one axis: `start, start+stride, …` below `stop` (half-open,
/// unwrapped), each wrapped into the grid on a periodic axis.
pub fn axis_nodes(
    axis: &Axis,
    start: i64,
    stop: i64,
    stride: usize,
    name: char,
) -> Result<Vec<usize>> {
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
    Ok((start..stop)
        .step_by(stride)
        .map(|i| i.rem_euclid(n) as usize)
        .collect())
}

/// Reads the cutout of nodes `nodes[axis]` at time index `t` into `out`
/// (C order `(z, y, x, c)`). Atoms are read once each, grouped by shard.
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
        let mut buffer = vec![0f32; atoms.len() * values];
        source.read_atoms(t, shard, &requests, &mut buffer)?;
        for (slot, a) in atoms.iter().enumerate() {
            let data = &buffer[slot * values..][..values];
            for &(oz, lz) in &az[&a[2]] {
                for &(oy, ly) in &ay[&a[1]] {
                    for &(ox, lx) in &ax[&a[0]] {
                        let src = ((lz * atom + ly) * atom + lx) * ncomp;
                        let dst = ((oz * ny + oy) * nx + ox) * ncomp;
                        out[dst..dst + ncomp].copy_from_slice(&data[src..src + ncomp]);
                    }
                }
            }
        }
    }
    Ok(())
}
