//! Where every voxel of a field lives: the grid cut into partitions (one Zarr shard per
//! partition and time step) and atoms (one inner chunk), with the shard file names.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::storage::morton;

/// Bytes of one stored value (little-endian float32).
pub const VALUE_BYTES: usize = 4;

/// Largest atom side: an atom is read whole, so it must stay small.
pub const MAX_ATOM: usize = 64;

/// Most atoms along one side of a partition (a shard index of 64³ entries is 4 MiB).
pub const MAX_ATOMS_PER_SIDE: usize = 64;

/// Largest atom in bytes (all components): the unit every read allocates.
pub const MAX_ATOM_BYTES: usize = 64 << 20;

/// The stored layout of one field of a dataset. Axis arrays are ordered `[x, y, z]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldGeometry {
    /// Grid points per axis, `[nx, ny, nz]`.
    pub grid: [usize; 3],
    /// Components per grid point (3 for a vector, 1 for a scalar).
    pub ncomp: usize,
    /// Side A of an atom (inner chunk) in voxels.
    pub atom: usize,
    /// Side P of a partition (shard) in voxels; a multiple of `atom`.
    pub partition: usize,
}

/// Position of a shard in the shard grid of one time step, `[sx, sy, sz]`.
pub type ShardPos = [usize; 3];

impl FieldGeometry {
    /// Checks the invariants the storage relies on.
    pub fn new(grid: [usize; 3], ncomp: usize, atom: usize, partition: usize) -> Result<Self> {
        let invalid = |m: String| Err(Error::InvalidArgument(m));
        if grid.contains(&0) {
            return invalid(format!("grid {grid:?} has an empty axis"));
        }
        if ncomp == 0 {
            return invalid("a field needs at least one component".into());
        }
        if !atom.is_power_of_two() || !partition.is_power_of_two() || partition < atom {
            return invalid(format!(
                "atom ({atom}) and partition ({partition}) must be powers of two with atom <= partition"
            ));
        }
        if atom > MAX_ATOM || partition / atom > MAX_ATOMS_PER_SIDE {
            return invalid(format!(
                "atom ({atom}) must be at most {MAX_ATOM} and partition ({partition}) at most \
                 {MAX_ATOMS_PER_SIDE} atoms wide"
            ));
        }
        let atom_bytes = ncomp
            .checked_mul(atom.pow(3) * VALUE_BYTES)
            .filter(|&b| b <= MAX_ATOM_BYTES);
        if atom_bytes.is_none() {
            return invalid(format!(
                "an atom of {atom}³ voxels × {ncomp} components exceeds {} MiB; use fewer \
                 components per field or smaller atoms",
                MAX_ATOM_BYTES >> 20
            ));
        }
        if grid
            .iter()
            .any(|&n| n.div_ceil(atom) > morton::MAX_COORD as usize)
        {
            return invalid(format!(
                "grid {grid:?} is too large for 21-bit Morton codes"
            ));
        }
        let step_bytes = grid
            .iter()
            .try_fold(ncomp * VALUE_BYTES, |acc, &n| acc.checked_mul(n));
        if step_bytes.is_none_or(|b| b > isize::MAX as usize) {
            return invalid(format!(
                "grid {grid:?} × {ncomp} components is too large to address"
            ));
        }
        Ok(Self {
            grid,
            ncomp,
            atom,
            partition,
        })
    }

    /// Atoms along one side of a partition.
    pub fn atoms_per_side(&self) -> usize {
        self.partition / self.atom
    }

    /// Inner chunks in one shard (the length of a shard index).
    pub fn chunks_per_shard(&self) -> usize {
        self.atoms_per_side().pow(3)
    }

    /// Values in one atom (all components).
    pub fn atom_values(&self) -> usize {
        self.atom.pow(3) * self.ncomp
    }

    /// Bytes of one uncompressed atom.
    pub fn atom_bytes(&self) -> usize {
        self.atom_values() * VALUE_BYTES
    }

    /// Bytes of one atom as turbdb stores it: raw float32 plus a crc32c.
    pub fn stored_atom_bytes(&self) -> usize {
        self.atom_bytes() + 4
    }

    /// Bytes of a shard index including its crc32c.
    pub fn index_bytes(&self) -> usize {
        self.chunks_per_shard() * 16 + 4
    }

    /// Shards per axis, `[sx, sy, sz]`; edge shards may be partial.
    pub fn shards_per_axis(&self) -> [usize; 3] {
        self.grid.map(|n| n.div_ceil(self.partition))
    }

    /// Atoms per axis over the whole grid; edge atoms may be partial.
    pub fn atoms_per_axis(&self) -> [usize; 3] {
        self.grid.map(|n| n.div_ceil(self.atom))
    }

    /// Every shard position of one time step, in Morton order of the shard grid.
    pub fn shard_positions(&self) -> Vec<ShardPos> {
        let [sx, sy, sz] = self.shards_per_axis();
        let mut all: Vec<ShardPos> = (0..sz)
            .flat_map(|z| (0..sy).flat_map(move |y| (0..sx).map(move |x| [x, y, z])))
            .collect();
        all.sort_by_key(|p| morton::encode(p[0] as u32, p[1] as u32, p[2] as u32));
        all
    }

    /// Local atom positions `[ax, ay, az]` inside a shard in storage (Morton) order.
    pub fn local_atom_order(&self) -> Vec<[usize; 3]> {
        morton::cube_order(self.atoms_per_side() as u32)
            .into_iter()
            .map(|(x, y, z)| [x as usize, y as usize, z as usize])
            .collect()
    }

    /// Position of a local atom in the shard index (C order over `(z, y, x)`).
    pub fn index_slot(&self, local: [usize; 3]) -> usize {
        let n = self.atoms_per_side();
        (local[2] * n + local[1]) * n + local[0]
    }

    /// Whether the atom at local position `local` of shard `shard` holds any grid point.
    pub fn atom_in_grid(&self, shard: ShardPos, local: [usize; 3]) -> bool {
        (0..3).all(|a| shard[a] * self.partition + local[a] * self.atom < self.grid[a])
    }

    /// The Zarr v3 key of a shard relative to the field's array directory
    /// (default chunk key encoding, "/" separator, array axes `(t, z, y, x, c)`).
    pub fn shard_key(&self, t: usize, shard: ShardPos) -> PathBuf {
        Path::new("c")
            .join(t.to_string())
            .join(shard[2].to_string())
            .join(shard[1].to_string())
            .join(shard[0].to_string())
            .join("0")
    }

    /// The directory holding the shards of time step `t`.
    pub fn step_dir(&self, root: &Path, t: usize) -> PathBuf {
        root.join("c").join(t.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_edge_shards_are_counted() {
        let g = FieldGeometry::new([100, 64, 65], 3, 8, 64).unwrap();
        assert_eq!(g.shards_per_axis(), [2, 1, 2]);
        assert_eq!(g.shard_positions().len(), 4);
        assert!(g.atom_in_grid([1, 0, 1], [4, 7, 0]));
        assert!(!g.atom_in_grid([1, 0, 1], [5, 0, 0]));
        assert!(!g.atom_in_grid([0, 0, 1], [0, 0, 1]));
    }

    #[test]
    fn rejects_atoms_larger_than_partitions() {
        assert!(FieldGeometry::new([8, 8, 8], 1, 16, 8).is_err());
        assert!(FieldGeometry::new([8, 8, 8], 1, 6, 12).is_err());
    }

    #[test]
    fn rejects_layouts_whose_sizes_would_overflow() {
        assert!(FieldGeometry::new([8, 8, 8], 1, 128, 128).is_err());
        assert!(FieldGeometry::new([8, 8, 8], 1, 1, 1 << 20).is_err());
        assert!(FieldGeometry::new([8, 8, 8], 1 << 40, 8, 64).is_err());
        let huge = 1 << 23;
        assert!(FieldGeometry::new([huge, huge, huge], 3, 8, 64).is_err());
        assert!(FieldGeometry::new([4096, 4096, 4096], 3, 8, 64).is_ok());
    }

    #[test]
    fn shard_key_follows_zarr_default_encoding() {
        let g = FieldGeometry::new([128, 128, 128], 1, 8, 64).unwrap();
        assert_eq!(g.shard_key(7, [1, 0, 1]), PathBuf::from("c/7/1/0/1/0"));
    }
}
