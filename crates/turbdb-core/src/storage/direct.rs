//! Reading atoms for the node engine, past the operating system's page cache when asked
//! (`IoMode::Direct`): `O_DIRECT` reads into aligned buffers, or — where the file system
//! refuses `O_DIRECT` (tmpfs) — ordinary reads followed by `posix_fadvise(DONTNEED)`, so
//! that the engine's own atom cache is the only cache, as in a database server.
//!
//! Atoms of one shard are read in storage order; atoms close on disk are read together,
//! gaps included, because one read of a few tens of kilobytes costs about what a read of a
//! single atom does (measured here: 8 KiB random direct reads run at 13 000/s, 64 KiB ones
//! at 3 000/s).

use std::fs::{File, OpenOptions};
use std::mem::MaybeUninit;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::geometry::ShardPos;
use crate::storage::reader::FieldReader;

/// How the engine reads shard files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// Through the page cache (the operating system caches too).
    Buffered,
    /// Past the page cache: `O_DIRECT`, or reads dropped from it afterwards.
    Direct,
}

impl IoMode {
    /// Parses `buffered` or `direct`.
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "buffered" => Ok(IoMode::Buffered),
            "direct" => Ok(IoMode::Direct),
            _ => Err(Error::UnknownName(format!(
                "unknown io mode {name:?}; valid: buffered, direct"
            ))),
        }
    }

    /// The name [`IoMode::parse`] takes.
    pub fn name(&self) -> &'static str {
        match self {
            IoMode::Buffered => "buffered",
            IoMode::Direct => "direct",
        }
    }
}

/// Alignment of the read buffers' addresses, and of direct reads' offsets and lengths where
/// the file system does not say what it needs (the largest logical block size in use).
const ALIGN: usize = 4096;

/// Atoms whose stored bytes are at most this far apart are read in one request.
pub const MERGE_GAP: u64 = 64 << 10;

/// What a batch read did.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadCounts {
    /// Read requests issued.
    pub requests: u64,
    /// Bytes transferred from the file (gaps and alignment included).
    pub bytes: u64,
}

/// Reads the atoms `locals` of shard `shard` at time `t` and hands each to `put(i, result)`
/// (`i` its position in `locals`) as decoded float32 values followed by `spare` zeros (room
/// a consumer needs past the values, such as the kernel's padding), each atom decoded
/// straight into its own shared buffer; a failure of one atom (a bad checksum) is reported
/// for that atom only, a failure of the shard (missing, unreadable index) for every atom.
/// Atoms that are not stored read as NaN.
#[allow(clippy::too_many_arguments)]
pub fn read_atoms(
    reader: &FieldReader,
    t: usize,
    shard: ShardPos,
    locals: &[[usize; 3]],
    spare: usize,
    mode: IoMode,
    counts: &mut ReadCounts,
    mut put: impl FnMut(usize, Result<Arc<[f32]>>),
) {
    let geometry = reader.geometry();
    let n = geometry.atom_values();
    // The file first, then its own index and header (checked against this place: field,
    // step, partition): a rewrite renamed over the path since the index was cached must
    // not be read with the old index.
    let path = reader.shard_path(t, shard);
    let opened = ShardFile::open(&path, t, mode).and_then(|file| {
        let opened = reader.shard_of_file(t, shard, &file.file, &path)?;
        Ok((file, opened))
    });
    let (file, opened) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            for i in 0..locals.len() {
                put(i, Err(e.duplicate()));
            }
            return;
        }
    };
    // (offset, length, position in `locals`, index slot) of each stored atom.
    let mut stored: Vec<(u64, u64, usize, usize)> = Vec::with_capacity(locals.len());
    for (i, &local) in locals.iter().enumerate() {
        let slot = geometry.index_slot(local);
        match opened.index.range(slot) {
            Some((offset, nbytes)) => stored.push((offset, nbytes, i, slot)),
            None => {
                // SAFETY: the fill writes all `n` values.
                let nan = unsafe {
                    atom_buffer(n, spare, |values| {
                        values.fill(MaybeUninit::new(f32::NAN));
                        Ok(())
                    })
                };
                put(i, nan)
            }
        }
    }
    if stored.is_empty() {
        return;
    }
    stored.sort_unstable_by_key(|&(offset, ..)| offset);
    let mut buffer = READ_BUFFER.take();
    let mut start = 0;
    while start < stored.len() {
        let mut end = start + 1;
        while end < stored.len()
            && stored[end].0 <= stored[end - 1].0 + stored[end - 1].1 + MERGE_GAP
        {
            end += 1;
        }
        let first = stored[start].0;
        let last = stored[end - 1].0 + stored[end - 1].1;
        match file.read(first, last, &mut buffer, counts) {
            Ok(bytes) => {
                for &(offset, nbytes, i, slot) in &stored[start..end] {
                    let at = (offset - first) as usize;
                    let atom = &bytes[at..at + nbytes as usize];
                    // A swapped or copied atom is refused, as on the buffered path.
                    let decoded = reader
                        .check_atom_place(&opened, slot, atom, &path)
                        .and_then(|()| {
                            // SAFETY: a decode that succeeds writes every value.
                            unsafe {
                                atom_buffer(n, spare, |values| {
                                    reader.decode_atom_into(atom, &path, values)
                                })
                            }
                        });
                    put(i, decoded);
                }
            }
            Err(e) => {
                for &(_, _, i, _) in &stored[start..end] {
                    put(i, Err(e.duplicate()));
                }
            }
        }
        start = end;
    }
    if buffer.capacity <= KEPT_BUFFER {
        READ_BUFFER.set(buffer);
    }
}

thread_local! {
    /// Each thread's read buffer, kept between calls: made anew for every call, it was
    /// cleared and faulted in page by page, and a direct read pinned fresh pages each time.
    static READ_BUFFER: std::cell::Cell<AlignedBuffer> = std::cell::Cell::new(AlignedBuffer::default());
}

/// Largest read buffer a thread keeps between calls.
const KEPT_BUFFER: usize = 16 << 20;

/// A shared buffer of `n` values written by `fill`, then `spare` zeros: made in place, where
/// building a `Vec` and converting it would allocate, clear and copy each atom twice more.
/// The values are written once (by `fill`), not cleared first.
///
/// # Safety
/// `fill` must write every one of the `n` values it is given when it returns `Ok`.
unsafe fn atom_buffer(
    n: usize,
    spare: usize,
    fill: impl FnOnce(&mut [MaybeUninit<f32>]) -> Result<()>,
) -> Result<Arc<[f32]>> {
    let mut buffer: Arc<[MaybeUninit<f32>]> = Arc::new_uninit_slice(n + spare);
    let slots = Arc::get_mut(&mut buffer).expect("a buffer just made has one owner");
    let (values, padding) = slots.split_at_mut(n);
    padding.fill(MaybeUninit::new(0.0));
    fill(values)?;
    // SAFETY: `fill` wrote the first `n` values (the caller's promise) and the rest were
    // written just above.
    Ok(unsafe { buffer.assume_init() })
}

/// An open shard file and how to read it.
struct ShardFile<'a> {
    file: File,
    path: &'a Path,
    /// What reads' offsets and lengths are rounded to: the file system's alignment for
    /// `O_DIRECT`, 1 for a file opened without it.
    align: u64,
    /// Drop what was read from the page cache (direct mode where `O_DIRECT` is refused).
    drop_pages: bool,
}

impl<'a> ShardFile<'a> {
    fn open(path: &'a Path, t: usize, mode: IoMode) -> Result<Self> {
        let missing = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Missing(format!(
                "time step {t} is not stored: {} does not exist",
                path.display()
            )),
            _ => Error::io(path, e),
        };
        if mode == IoMode::Direct {
            match OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
            {
                Ok(file) => {
                    let align = direct_alignment(&file);
                    return Ok(Self {
                        file,
                        path,
                        align,
                        drop_pages: false,
                    });
                }
                // tmpfs and some others refuse O_DIRECT: read normally, then drop the pages.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(missing(e)),
            }
        }
        let file = File::open(path).map_err(missing)?;
        Ok(Self {
            file,
            path,
            align: 1,
            drop_pages: mode == IoMode::Direct,
        })
    }

    /// The bytes `[first, last)` of the file, read in one request.
    fn read<'b>(
        &self,
        first: u64,
        last: u64,
        buffer: &'b mut AlignedBuffer,
        counts: &mut ReadCounts,
    ) -> Result<&'b [u8]> {
        let (start, end) = (
            first / self.align * self.align,
            last.div_ceil(self.align) * self.align,
        );
        let len = (end - start) as usize;
        let bytes = buffer.get(len);
        let mut done = 0;
        while done < len {
            // A direct read past the end of the file returns short; the part we need is in.
            match self.file.read_at(&mut bytes[done..], start + done as u64) {
                Ok(0) => break,
                Ok(k) => done += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(self.path, e)),
            }
        }
        counts.requests += 1;
        counts.bytes += done as u64;
        let skip = (first - start) as usize;
        let need = (last - first) as usize;
        if done < skip + need {
            return Err(Error::corrupt(
                self.path,
                format!(
                    "shard ends at byte {}, its index points to {last}",
                    start + done as u64
                ),
            ));
        }
        if self.drop_pages {
            // SAFETY: plain advice on an open descriptor; it cannot affect memory safety.
            unsafe {
                libc::posix_fadvise(
                    self.file.as_raw_fd(),
                    start as libc::off_t,
                    len as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
        }
        Ok(&bytes[skip..skip + need])
    }
}

/// The alignment `file`'s direct reads need of their offsets and lengths, as its file
/// system reports it (`statx`, Linux 6.1 and later): on ext4 over a disk of 512-byte
/// sectors, 512, so a lone atom of 6 148 bytes takes about 6.7 KB on average over where
/// it starts, against 10.2 KB at 4 KiB (arithmetic; in the workload replay, whose reads
/// mostly span several atoms and the gaps between them, about 3 % fewer bytes an atom:
/// docs/benchmarks.md). [`ALIGN`] where the system does not say, or asks for more than the
/// buffers have.
fn direct_alignment(file: &File) -> u64 {
    // SAFETY: `statx` fills the struct it is given (all integers: zeroes are valid) and
    // reads the empty C string; the descriptor is open for the call.
    let mut stat: libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stat,
        )
    };
    let (offset, memory) = (
        stat.stx_dio_offset_align as usize,
        stat.stx_dio_mem_align as usize,
    );
    let reported = rc == 0 && stat.stx_mask & libc::STATX_DIOALIGN != 0;
    if reported && offset.is_power_of_two() && offset <= ALIGN && memory <= ALIGN {
        offset as u64
    } else {
        ALIGN as u64
    }
}

/// A growable byte buffer aligned for direct reads.
#[derive(Default)]
struct AlignedBuffer {
    ptr: Option<std::ptr::NonNull<u8>>,
    capacity: usize,
}

impl AlignedBuffer {
    /// At least `len` bytes (contents unspecified).
    fn get(&mut self, len: usize) -> &mut [u8] {
        if len > self.capacity {
            self.release();
            let capacity = len.next_multiple_of(ALIGN).max(ALIGN);
            let layout = std::alloc::Layout::from_size_align(capacity, ALIGN).expect("layout");
            // SAFETY: the layout has a non-zero size.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            let Some(ptr) = std::ptr::NonNull::new(ptr) else {
                std::alloc::handle_alloc_error(layout)
            };
            self.ptr = Some(ptr);
            self.capacity = capacity;
        }
        match self.ptr {
            // SAFETY: `capacity ≥ len` bytes were allocated (and initialised) at `ptr`, and
            // the returned borrow ties them to `self`.
            Some(ptr) => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) },
            None => &mut [],
        }
    }

    fn release(&mut self) {
        if let Some(ptr) = self.ptr.take() {
            let layout = std::alloc::Layout::from_size_align(self.capacity, ALIGN).expect("layout");
            // SAFETY: allocated in `get` with this very layout.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
        self.capacity = 0;
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::geometry::FieldGeometry;
    use crate::storage::shard::{ChunkCodec, IndexLocation};
    use crate::storage::writer::write_step;

    fn field() -> (tempfile::TempDir, FieldReader, Vec<f32>) {
        let dir = tempfile::tempdir().unwrap();
        let geometry = FieldGeometry::new([16, 16, 16], 2, 4, 16).unwrap();
        let data: Vec<f32> = (0..16 * 16 * 16 * 2).map(|i| i as f32).collect();
        write_step(dir.path(), &geometry, None, 0, &data, false).unwrap();
        let reader = FieldReader::new(dir.path(), geometry, ChunkCodec::TURBDB, IndexLocation::End);
        (dir, reader, data)
    }

    fn read_all(reader: &FieldReader, locals: &[[usize; 3]], mode: IoMode) -> Vec<Vec<f32>> {
        let mut out = vec![Vec::new(); locals.len()];
        let counts = read_direct(reader, 0, locals, 0, mode, |i, r| {
            out[i] = r.unwrap().to_vec()
        });
        assert!(counts.requests >= 1);
        out
    }

    /// [`read_atoms`] of step `t`'s atoms `locals` in shard (0, 0, 0); its counts.
    fn read_direct(
        reader: &FieldReader,
        t: usize,
        locals: &[[usize; 3]],
        spare: usize,
        mode: IoMode,
        put: impl FnMut(usize, Result<Arc<[f32]>>),
    ) -> ReadCounts {
        let mut counts = ReadCounts::default();
        read_atoms(reader, t, [0, 0, 0], locals, spare, mode, &mut counts, put);
        counts
    }

    #[test]
    fn direct_reads_round_only_to_the_alignment_they_are_given() {
        let (_dir, reader, _data) = field();
        let path = reader.shard_path(0, [0, 0, 0]);
        let whole = std::fs::read(&path).unwrap();
        let mut file = ShardFile::open(&path, 0, IoMode::Direct).unwrap();
        // The file system's own (1 where it refused O_DIRECT and the file reads normally).
        let reported = file.align;
        assert!(
            reported.is_power_of_two() && reported <= ALIGN as u64,
            "{reported}"
        );
        let mut buffer = AlignedBuffer::default();
        let len = whole.len() as u64;
        for align in [reported, 512, ALIGN as u64] {
            if reported > align {
                continue; // finer than the file system allows
            }
            file.align = align;
            for (first, last) in [(1, 100), (700, 5000), (4095, 4097), (511, 513), (0, len)] {
                let mut counts = ReadCounts::default();
                let got = file.read(first, last, &mut buffer, &mut counts).unwrap();
                assert_eq!(
                    got,
                    &whole[first as usize..last as usize],
                    "{align} {first}..{last}"
                );
                assert_eq!(counts.requests, 1);
                // Rounded out to `align` at both ends, and no further.
                let start = first / align * align;
                let end = (last.div_ceil(align) * align).min(len);
                assert_eq!(counts.bytes, end - start, "{align} {first}..{last}");
            }
        }
    }

    #[test]
    fn direct_and_buffered_reads_give_the_stored_atoms() {
        let (_dir, reader, data) = field();
        let locals = [[3, 3, 3], [0, 0, 0], [1, 0, 0], [2, 1, 3]];
        for mode in [IoMode::Direct, IoMode::Buffered] {
            let atoms = read_all(&reader, &locals, mode);
            for (atom, local) in atoms.iter().zip(locals) {
                // The first value of an atom is node (4·lx, 4·ly, 4·lz), component 0.
                let [x, y, z] = local.map(|v| v * 4);
                assert_eq!(
                    atom[0],
                    data[((z * 16 + y) * 16 + x) * 2],
                    "{mode:?} {local:?}"
                );
                assert_eq!(atom.len(), 4 * 4 * 4 * 2);
            }
        }
    }

    /// Every value of the atom at `local`, as stored (x fastest, components innermost).
    fn expected_atom(data: &[f32], local: [usize; 3]) -> Vec<f32> {
        let mut out = Vec::new();
        for z in 0..4 {
            for y in 0..4 {
                for x in 0..4 {
                    let [gx, gy, gz] = [local[0] * 4 + x, local[1] * 4 + y, local[2] * 4 + z];
                    let node = (gz * 16 + gy) * 16 + gx;
                    out.extend_from_slice(&data[node * 2..node * 2 + 2]);
                }
            }
        }
        out
    }

    #[test]
    fn reads_of_any_size_one_after_another_give_every_value() {
        // A thread keeps its read buffer: a long read, short ones and a long one again
        // must each see only their own bytes.
        let (_dir, reader, data) = field();
        let all: Vec<[usize; 3]> = (0..64).map(|i| [i % 4, i / 4 % 4, i / 16]).collect();
        for mode in [IoMode::Direct, IoMode::Buffered] {
            for locals in [&all[..], &all[5..6], &all[40..42], &all[..], &all[63..]] {
                let atoms = read_all(&reader, locals, mode);
                for (atom, &local) in atoms.iter().zip(locals) {
                    assert_eq!(atom, &expected_atom(&data, local), "{mode:?} {local:?}");
                }
            }
        }
    }

    #[test]
    fn each_atom_is_followed_by_the_spare_zeros_asked_for() {
        let (_dir, reader, _) = field();
        let locals = [[1, 2, 3], [0, 0, 0]];
        let plain = read_all(&reader, &locals, IoMode::Direct);
        let mut seen = 0;
        read_direct(&reader, 0, &locals, 5, IoMode::Direct, |i, r| {
            let atom = r.unwrap();
            let n = plain[i].len();
            assert_eq!(atom.len(), n + 5);
            assert_eq!(&atom[..n], &plain[i][..]);
            assert!(atom[n..].iter().all(|&v| v == 0.0));
            seen += 1;
        });
        assert_eq!(seen, 2);
    }

    #[test]
    fn a_flipped_byte_fails_only_its_atom() {
        let (dir, reader, _) = field();
        let path = dir.path().join("c/0/0/0/0/0");
        let mut bytes = std::fs::read(&path).unwrap();
        // Past the header that binds the shard to its place: inside the first stored atom.
        let header = crate::storage::binding::ShardHeader::announced_len(&bytes).unwrap();
        bytes[header + 10] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let locals = [[0, 0, 0], [1, 0, 0]];
        let mut results = Vec::new();
        read_direct(&reader, 0, &locals, 0, IoMode::Direct, |i, r| {
            results.push((i, r.is_ok()))
        });
        results.sort();
        assert_eq!(results, vec![(0, false), (1, true)]);
    }

    #[test]
    fn a_swapped_atom_is_refused_in_both_io_modes() {
        let (dir, reader, _) = field();
        let path = dir.path().join("c/0/0/0/0/0");
        let mut bytes = std::fs::read(&path).unwrap();
        let first = crate::storage::binding::ShardHeader::announced_len(&bytes).unwrap();
        let size = reader.geometry().stored_atom_bytes();
        let atom_a = bytes[first..first + size].to_vec();
        bytes.copy_within(first + size..first + 2 * size, first);
        bytes[first + size..first + 2 * size].copy_from_slice(&atom_a);
        std::fs::write(&path, bytes).unwrap();
        let fresh = FieldReader::new(
            dir.path(),
            reader.geometry().clone(),
            ChunkCodec::TURBDB,
            IndexLocation::End,
        );
        for mode in [IoMode::Direct, IoMode::Buffered] {
            let mut errors = Vec::new();
            let mut counts = ReadCounts::default();
            let all: Vec<[usize; 3]> = reader.geometry().local_atom_order();
            read_atoms(&fresh, 0, [0, 0, 0], &all, 0, mode, &mut counts, |_, r| {
                if let Err(e) = r {
                    errors.push(e.to_string());
                }
            });
            assert_eq!(errors.len(), 2, "{mode:?}: {errors:?}");
            assert!(
                errors.iter().all(|e| e.contains("swapped or copied atom")),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn a_missing_step_is_reported_for_every_atom() {
        let (_dir, reader, _) = field();
        let mut errors = 0;
        read_direct(
            &reader,
            5,
            &[[0, 0, 0], [1, 1, 1]],
            0,
            IoMode::Direct,
            |_, r| {
                assert!(matches!(r, Err(Error::Missing(_))));
                errors += 1;
            },
        );
        assert_eq!(errors, 2);
    }
}
