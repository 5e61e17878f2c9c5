//! Writes one time step of a field as Zarr v3 shards: a header binding the shard to its
//! place, atoms in Morton order, index at the end, every shard written aside and renamed
//! into place so a crash never leaves half a file.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::storage::binding::{ShardHeader, MAX_NAME};
use crate::storage::geometry::{FieldGeometry, ShardPos};
use crate::storage::shard::ShardIndex;

#[cfg(target_endian = "big")]
compile_error!("turbdb stores little-endian float32 and assumes a little-endian host");

/// A value type a caller may hand in; stored as float32.
pub trait Sample: Copy + Send + Sync {
    /// The stored float32 value.
    fn to_f32(self) -> f32;
    /// Neither NaN nor infinite.
    fn finite(self) -> bool;
}

impl Sample for f32 {
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn finite(self) -> bool {
        self.is_finite()
    }
}

impl Sample for f64 {
    #[inline]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline]
    fn finite(self) -> bool {
        // Finite float64 values beyond float32's range would be stored as infinities; those
        // that round to float32's largest (3.4028235e38, as it prints) are kept, as numpy
        // rounds them.
        (self as f32).is_finite()
    }
}

/// Prefix of the temporary files a write leaves only if it is killed.
pub const TEMP_PREFIX: &str = ".turbdb-tmp-";

/// Writes time step `t` of a field rooted at `root` (the Zarr array directory, named after
/// the field) whose metadata gives it `field_id` (`None`: a field made before ids existed).
/// `data` is C-ordered `(nz, ny, nx, ncomp)`. Returns the bytes written.
pub fn write_step<T: Sample>(
    root: &Path,
    geometry: &FieldGeometry,
    field_id: Option<u64>,
    t: usize,
    data: &[T],
    sync: bool,
) -> Result<u64> {
    let field = field_name(root)?;
    let [nx, ny, nz] = geometry.grid;
    let expected = nx * ny * nz * geometry.ncomp;
    if data.len() != expected {
        return Err(Error::InvalidArgument(format!(
            "time step has {} values, the field needs {expected} (nz={nz}, ny={ny}, nx={nx}, ncomp={})",
            data.len(),
            geometry.ncomp
        )));
    }
    // Refuse non-finite data before any shard is touched, so a bad step loses nothing.
    if data
        .par_chunks(1 << 16)
        .any(|c| !c.iter().all(|v| v.finite()))
    {
        let first = data
            .iter()
            .position(|v| !v.finite())
            .expect("a non-finite value");
        let nc = geometry.ncomp;
        let (c, voxel) = (first % nc, first / nc);
        let (x, y, z) = (voxel % nx, voxel / nx % ny, voxel / (nx * ny));
        return Err(Error::InvalidArgument(format!(
            "time step {t} holds a NaN or infinite value (or one beyond float32's range) at \
             z={z}, y={y}, x={x}, component {c}; nothing was written"
        )));
    }
    let written = AtomicU64::new(0);
    geometry
        .shard_positions()
        .par_iter()
        .try_for_each(|&shard| {
            let bytes = encode_shard(geometry, &field, field_id, t, shard, data);
            let path = root.join(geometry.shard_key(t, shard));
            atomic_write(&path, &bytes, sync)?;
            written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            Ok::<(), Error>(())
        })?;
    Ok(written.load(Ordering::Relaxed))
}

/// The field a shard belongs to: the name of its array directory.
pub fn field_name(root: &Path) -> Result<String> {
    let name = root.file_name().map(|n| n.to_string_lossy().into_owned());
    match name {
        Some(name) if name.len() <= MAX_NAME => Ok(name),
        _ => Err(Error::InvalidArgument(format!(
            "{} does not end in a field name of at most {MAX_NAME} bytes",
            root.display()
        ))),
    }
}

/// Builds the bytes of one shard: the header binding it to `(field, t, shard)`, present
/// atoms in Morton order, then the index.
fn encode_shard<T: Sample>(
    geometry: &FieldGeometry,
    field: &str,
    field_id: Option<u64>,
    t: usize,
    shard: ShardPos,
    data: &[T],
) -> Vec<u8> {
    let order = geometry.local_atom_order();
    let present: Vec<[usize; 3]> = order
        .into_iter()
        .filter(|&l| geometry.atom_in_grid(shard, l))
        .collect();
    let mut atom = vec![f32::NAN; geometry.atom_values()];
    let mut index = ShardIndex::empty(geometry.chunks_per_shard());
    let stored_bytes = geometry.stored_atom_bytes();
    let chunks = geometry.chunks_per_shard();
    let header_len = ShardHeader::encoded_len(field, field_id.is_some(), chunks);
    let mut atom_crcs = vec![0u32; chunks];
    let mut bytes =
        Vec::with_capacity(header_len + present.len() * stored_bytes + geometry.index_bytes());
    bytes.resize(header_len, 0); // filled in once every atom's checksum is known
    for &local in &present {
        let origin = [0, 1, 2].map(|a| shard[a] * geometry.partition + local[a] * geometry.atom);
        atom.fill(f32::NAN);
        copy_atom(geometry, origin, data, &mut atom);
        let start = bytes.len();
        bytes.extend_from_slice(as_bytes(&atom));
        let crc = crc32c::crc32c(&bytes[start..]);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let slot = geometry.index_slot(local);
        index.entries[slot] = (start as u64, stored_bytes as u64);
        atom_crcs[slot] = crc;
    }
    bytes.extend_from_slice(&index.encode());
    let header = ShardHeader {
        field: field.to_string(),
        field_id,
        time_index: t as u64,
        shard: shard.map(|s| s as u32),
        atom_crcs,
    };
    bytes[..header_len].copy_from_slice(&header.encode());
    bytes
}

/// Copies the atom whose first voxel is `origin` into `out` (C order `(z, y, x, c)`),
/// leaving the NaN padding where the atom hangs over the grid's edge.
fn copy_atom<T: Sample>(geometry: &FieldGeometry, origin: [usize; 3], data: &[T], out: &mut [f32]) {
    let a = geometry.atom;
    let nc = geometry.ncomp;
    let [nx, ny, nz] = geometry.grid;
    let width = (nx - origin[0]).min(a) * nc;
    for dz in 0..a.min(nz - origin[2]) {
        for dy in 0..a.min(ny - origin[1]) {
            let src = (((origin[2] + dz) * ny + origin[1] + dy) * nx + origin[0]) * nc;
            let dst = (dz * a + dy) * a * nc;
            for (o, &v) in out[dst..dst + width]
                .iter_mut()
                .zip(&data[src..src + width])
            {
                *o = v.to_f32();
            }
        }
    }
}

/// The bytes of float32 values; on a little-endian host these are the stored bytes.
fn as_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: any initialised f32 is 4 initialised bytes; u8 has alignment 1.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it into place. A failed
/// write (a full or read-only disk) removes its temporary file: only a killed writer
/// leaves one behind.
pub fn atomic_write(path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let dir = path.parent().expect("shard paths have a parent");
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let name = path
        .file_name()
        .expect("shard paths have a name")
        .to_string_lossy();
    let tmp: PathBuf = dir.join(format!("{TEMP_PREFIX}{name}-{}", std::process::id()));
    let written = write_file(&tmp, bytes, sync)
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| Error::io(path, e)));
    if written.is_err() {
        let _ = fs::remove_file(&tmp); // the error being reported matters more than this one
    }
    written
}

fn write_file(path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let mut file = fs::File::create(path).map_err(|e| Error::io(path, e))?;
    file.write_all(bytes).map_err(|e| Error::io(path, e))?;
    if sync {
        file.sync_all().map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}
