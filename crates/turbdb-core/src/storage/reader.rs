//! Reads atoms of one field: shard indexes (and the headers binding shards to their place)
//! are read once and cached, the atoms a caller asks for are read in storage order and
//! adjacent ones merged into a single read — or, uncompressed, taken in place from the
//! shard file mapped into memory when it was opened.

use std::collections::HashMap;
use std::fs::File;
use std::mem::MaybeUninit;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::storage::binding::{self, ShardHeader};
use crate::storage::geometry::{FieldGeometry, ShardPos};
use crate::storage::shard::{ChunkCodec, IndexLocation, ShardIndex};
use crate::storage::writer::field_name;

/// Reader of one field's shards.
#[derive(Debug)]
pub struct FieldReader {
    root: PathBuf,
    /// The field's name, which shard headers must carry.
    field: String,
    geometry: FieldGeometry,
    codec: ChunkCodec,
    location: IndexLocation,
    /// Whether a shard without a header is corrupt (fields created since headers exist).
    headers_required: bool,
    /// The id the field's metadata gives it, which shard headers must carry.
    field_id: Option<u64>,
    /// Whether `field_id` was given: a reader made without the field's metadata (a tool)
    /// takes whatever id the headers carry.
    field_id_known: bool,
    /// Bumped by [`Self::clear_cache`]: a shard opened before it (the old file) is not
    /// cached after it.
    generation: AtomicU64,
    /// The array directory's device and inode when opened: a dataset replaced in place
    /// (created again over the old one) has a new directory, and so a new identity.
    identity: (u64, u64),
    shards: Mutex<HashMap<(usize, ShardPos), Arc<OpenedShard>>>,
}

/// What the reader keeps of a shard file once it has been opened: its index and, when it
/// has one, the header binding it to its place.
#[derive(Debug)]
pub struct OpenedShard {
    /// The Zarr shard index.
    pub index: Arc<ShardIndex>,
    /// The binding header; `None` for a shard written before headers existed.
    pub header: Option<ShardHeader>,
    /// The file mapped into memory, where its atoms can be read in place
    /// ([`FieldReader::atoms_in_place`]); `None` for compressed atoms, past
    /// [`MAX_MAPPED_SHARDS`], or where mapping failed.
    map: Option<MappedFile>,
    /// The file's identity ([`file_identity`]): a rewrite renames a new file over the path,
    /// whose atoms must be read with its own index, not this one
    /// ([`FieldReader::shard_of_file`]).
    file_identity: FileIdentity,
}

/// Shard files mapped at once in this process, at most: the kernel allows a process about
/// 65 000 mappings in all (`vm.max_map_count`), and the allocator and libraries need theirs.
/// Past it, shards are read with `preadv`.
pub const MAX_MAPPED_SHARDS: usize = 16_384;

/// Shard files mapped now.
static MAPPED_SHARDS: AtomicUsize = AtomicUsize::new(0);

/// A shard file mapped read-only, counted against [`MAX_MAPPED_SHARDS`], and which of its
/// atoms (by index slot) have had their checksums found right.
#[derive(Debug)]
struct MappedFile {
    bytes: memmap2::Mmap,
    checked: CheckedAtoms,
}

/// Atoms of a mapped shard whose checksums were found right: the mapped file never changes
/// (see [`MappedFile::map`]), so an atom is checked once per mapping, not on every read. On
/// a warm step the checks were half of the read phase (`perf`: `crc32c`, about 20 ns of
/// the 40 a lag8 point spends reading, one thread of a 2-core Intel Xeon).
#[derive(Debug)]
struct CheckedAtoms(Box<[AtomicU64]>);

impl CheckedAtoms {
    fn new(slots: usize) -> Self {
        Self((0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    fn contains(&self, slot: usize) -> bool {
        self.0
            .get(slot / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (slot % 64)) != 0)
    }

    fn insert(&self, slot: usize) {
        if let Some(w) = self.0.get(slot / 64) {
            w.fetch_or(1 << (slot % 64), Ordering::Relaxed);
        }
    }
}

impl MappedFile {
    fn map(file: &File, slots: usize) -> Option<Self> {
        if MAPPED_SHARDS.fetch_add(1, Ordering::Relaxed) >= MAX_MAPPED_SHARDS {
            MAPPED_SHARDS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        // SAFETY: turbdb never changes a shard file in place: it writes a new file beside
        // it and renames it over (`writer.rs`), which leaves this mapping on the old file,
        // as the reader's cached index is (both are dropped by `clear_cache`). Only another
        // program truncating the file in place while an atom is copied out of it could
        // fault the process (SIGBUS).
        match unsafe { memmap2::Mmap::map(file) } {
            Ok(bytes) => Some(Self {
                bytes,
                checked: CheckedAtoms::new(slots),
            }),
            Err(_) => {
                MAPPED_SHARDS.fetch_sub(1, Ordering::Relaxed);
                None
            }
        }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        MAPPED_SHARDS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An atom to read: its local position in the shard and where its values go.
#[derive(Debug, Clone, Copy)]
pub struct AtomRequest {
    /// Local atom position `[ax, ay, az]` inside the shard.
    pub local: [usize; 3],
    /// Index of the destination buffer slot (in units of one atom).
    pub slot: usize,
}

impl FieldReader {
    /// A reader of the Zarr array directory `root` laid out as `geometry`.
    pub fn new(
        root: impl Into<PathBuf>,
        geometry: FieldGeometry,
        codec: ChunkCodec,
        location: IndexLocation,
    ) -> Self {
        let root = root.into();
        Self {
            field: field_name(&root).unwrap_or_default(),
            identity: directory_identity(&root),
            root,
            geometry,
            codec,
            location,
            headers_required: false,
            field_id: None,
            field_id_known: false,
            generation: AtomicU64::new(0),
            shards: Mutex::default(),
        }
    }

    /// The array directory's (device, inode) when the reader was made ((0, 0) where it
    /// could not be read): two readers of one directory share it, a directory made again
    /// in its place does not.
    pub fn identity(&self) -> (u64, u64) {
        self.identity
    }

    /// Makes a shard without a binding header an error (for fields whose metadata says
    /// every shard has one); by default such shards read as unbound.
    pub fn require_headers(mut self, required: bool) -> Self {
        self.headers_required = required;
        self
    }

    /// Whether a shard without a header is an error.
    pub fn headers_required(&self) -> bool {
        self.headers_required
    }

    /// The id the field's metadata gives it: every shard's header must carry the same
    /// (`None`, a field made before ids existed: headers without one).
    pub fn with_field_id(mut self, id: Option<u64>) -> Self {
        self.field_id = id;
        self.field_id_known = true;
        self
    }

    /// The field's id the shard headers must carry.
    pub fn field_id(&self) -> Option<u64> {
        self.field_id
    }

    /// The layout this reader was opened with.
    pub fn geometry(&self) -> &FieldGeometry {
        &self.geometry
    }

    /// The path of a shard file.
    pub fn shard_path(&self, t: usize, shard: ShardPos) -> PathBuf {
        self.root.join(self.geometry.shard_key(t, shard))
    }

    /// The index of a shard, from the cache or read (and checked) from disk.
    pub fn index(&self, t: usize, shard: ShardPos) -> Result<Arc<ShardIndex>> {
        Ok(Arc::clone(&self.shard(t, shard)?.index))
    }

    /// The index and header of a shard, from the cache or read and checked from disk: the
    /// index checksum, and that the header was written for this place.
    pub fn shard(&self, t: usize, shard: ShardPos) -> Result<Arc<OpenedShard>> {
        let generation = {
            let shards = self.shards.lock().expect("shard cache");
            if let Some(opened) = shards.get(&(t, shard)) {
                return Ok(Arc::clone(opened));
            }
            self.generation.load(Ordering::Acquire)
        };
        let path = self.shard_path(t, shard);
        let file = open_shard(&path, t)?;
        self.opened_from(t, shard, &file, &path, generation)
    }

    /// The index and header of the shard file `file`, just opened at the shard's path
    /// `path`: the cached ones where they were read from this same file, else read from it.
    /// Atoms read from an open file must be read with that file's own index: a rewrite of
    /// the step (renamed over the path) since the index was cached gave answers mixing two
    /// versions, or a false "swapped or copied atom", until the rewrite was announced.
    pub fn shard_of_file(
        &self,
        t: usize,
        shard: ShardPos,
        file: &File,
        path: &Path,
    ) -> Result<Arc<OpenedShard>> {
        let identity = file_identity(file, path)?;
        let generation = {
            let shards = self.shards.lock().expect("shard cache");
            if let Some(opened) = shards.get(&(t, shard)) {
                if opened.file_identity == identity {
                    return Ok(Arc::clone(opened));
                }
            }
            self.generation.load(Ordering::Acquire)
        };
        // The index is read through a file of its own: `file` may be open for direct I/O,
        // which takes aligned reads only. Renamed over again in between, it is not the same.
        let own = open_shard(path, t)?;
        if file_identity(&own, path)? != identity {
            return Err(Error::io(
                path,
                std::io::Error::other(
                    "the shard was replaced while it was being opened (a rewrite under way); \
                     ask again",
                ),
            ));
        }
        self.opened_from(t, shard, &own, path, generation)
    }

    /// Reads and checks the index and header of `file` (the shard at `path`), maps it where
    /// it can be read in place, and caches it unless a rewrite was announced since
    /// `generation` was read.
    fn opened_from(
        &self,
        t: usize,
        shard: ShardPos,
        file: &File,
        path: &Path,
        generation: u64,
    ) -> Result<Arc<OpenedShard>> {
        let index = self.read_index(file, path)?;
        let header = self.read_header(file, path)?;
        match &header {
            Some(h) => {
                let id = if self.field_id_known {
                    self.field_id
                } else {
                    h.field_id
                };
                h.check_place(&self.field, id, t, shard, path)?
            }
            None if self.headers_required => {
                return Err(Error::corrupt(
                    path,
                    "shard has no header binding it to its place, though every shard of this \
                     field was written with one",
                ))
            }
            None => {}
        }
        self.check_index(&index, header.as_ref(), file, path)?;
        let file_identity = file_identity(file, path)?;
        let opened = Arc::new(OpenedShard {
            index: Arc::new(index),
            header,
            map: (!self.codec.zstd)
                .then(|| MappedFile::map(file, self.geometry.atoms_per_side().pow(3)))
                .flatten(),
            file_identity,
        });
        let mut shards = self.shards.lock().expect("shard cache");
        // Opened before a rewrite was announced: used for this read, not kept.
        if self.generation.load(Ordering::Acquire) == generation {
            shards.insert((t, shard), Arc::clone(&opened));
        }
        Ok(opened)
    }

    /// Fails unless every stored atom of `index` lies within the file, between its header
    /// and its index, and every atom the header records as written is stored: an index
    /// whose checksum is right can still have been written wrong, and a range past the file
    /// would be read into a buffer of its announced size (2⁶² bytes aborted the process),
    /// an atom marked absent would read as NaN.
    fn check_index(
        &self,
        index: &ShardIndex,
        header: Option<&ShardHeader>,
        file: &File,
        path: &Path,
    ) -> Result<()> {
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let index_bytes = self.geometry.index_bytes() as u64;
        let (first, end) = match self.location {
            IndexLocation::End => (header.map_or(0, |h| h.len() as u64), len - index_bytes),
            IndexLocation::Start => (index_bytes, len),
        };
        for slot in 0..index.entries.len() {
            match index.range(slot) {
                Some((offset, nbytes)) => {
                    let inside = offset
                        .checked_add(nbytes)
                        .is_some_and(|e| offset >= first && e <= end);
                    if !inside {
                        return Err(Error::corrupt(
                            path,
                            format!(
                                "the shard index puts atom {slot} at bytes {offset}..+{nbytes}, \
                                 outside the file's atoms ({first}..{end})"
                            ),
                        ));
                    }
                }
                None => {
                    if let Some(crc) = header
                        .and_then(|h| h.atom_crcs.get(slot))
                        .filter(|&&c| c != 0)
                    {
                        return Err(Error::corrupt(
                            path,
                            format!(
                                "the shard index marks atom {slot} as not stored, but the shard's \
                                 header records it written (checksum {crc:08x}): a damaged index"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Forgets cached indexes (after a shard was rewritten).
    pub fn clear_cache(&self) {
        let mut shards = self.shards.lock().expect("shard cache");
        self.generation.fetch_add(1, Ordering::AcqRel);
        shards.clear();
    }

    /// The shard's binding header, `None` when it has none. Only the layout turbdb writes
    /// (index at the end) can carry one.
    fn read_header(&self, file: &File, path: &Path) -> Result<Option<ShardHeader>> {
        if self.location != IndexLocation::End {
            return Ok(None);
        }
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut head = [0u8; binding::FIXED_LEN];
        if len < head.len() as u64 {
            return Ok(None);
        }
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io(path, e))?;
        let Some(announced) = ShardHeader::announced_len(&head) else {
            return Ok(None);
        };
        let slots = self.geometry.chunks_per_shard();
        let longest = ShardHeader::longest(slots);
        if announced > longest || announced as u64 > len {
            return Err(Error::corrupt(
                path,
                format!(
                    "shard header announces {announced} bytes; a header of this field's shards \
                     has at most {longest}"
                ),
            ));
        }
        let mut bytes = vec![0u8; announced];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|e| Error::io(path, e))?;
        ShardHeader::decode(&bytes, slots, path).map(Some)
    }

    fn read_index(&self, file: &File, path: &Path) -> Result<ShardIndex> {
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let size = self.geometry.index_bytes() as u64;
        if len < size {
            return Err(Error::corrupt(
                path,
                format!("shard is {len} bytes, shorter than its index ({size})"),
            ));
        }
        let offset = match self.location {
            IndexLocation::End => len - size,
            IndexLocation::Start => 0,
        };
        let mut bytes = vec![0u8; size as usize];
        file.read_exact_at(&mut bytes, offset)
            .map_err(|e| Error::io(path, e))?;
        ShardIndex::decode(&bytes, self.geometry.chunks_per_shard(), path)
    }

    /// Reads the requested atoms of one shard into `out` (`slot`·atom_values onwards),
    /// in storage order, merging atoms that lie next to each other on disk into one read.
    /// Atoms that are not stored read as NaN.
    pub fn read_atoms(
        &self,
        t: usize,
        shard: ShardPos,
        atoms: &[AtomRequest],
        out: &mut [f32],
    ) -> Result<()> {
        let path = self.shard_path(t, shard);
        let file = open_shard(&path, t)?;
        let opened = self.shard_of_file(t, shard, &file, &path)?;
        let n = self.geometry.atom_values();
        // (offset, nbytes, destination slot, index slot)
        let mut stored: Vec<(u64, u64, usize, usize)> = Vec::with_capacity(atoms.len());
        for request in atoms {
            let index_slot = self.geometry.index_slot(request.local);
            match opened.index.range(index_slot) {
                Some((offset, nbytes)) => stored.push((offset, nbytes, request.slot, index_slot)),
                None => out[request.slot * n..(request.slot + 1) * n].fill(f32::NAN),
            }
        }
        stored.sort_unstable_by_key(|&(offset, _, _, _)| offset);
        let mut buffer = Vec::new();
        let mut start = 0;
        while start < stored.len() {
            let mut end = start + 1;
            while end < stored.len() && stored[end].0 == stored[end - 1].0 + stored[end - 1].1 {
                end += 1;
            }
            if self.read_in_place(&file, &opened, &stored[start..end], out, &path)? {
                start = end;
                continue;
            }
            let first = stored[start].0;
            let total = (stored[end - 1].0 + stored[end - 1].1 - first) as usize;
            buffer.resize(total, 0);
            file.read_exact_at(&mut buffer, first)
                .map_err(|e| Error::io(&path, e))?;
            for &(offset, nbytes, slot, index_slot) in &stored[start..end] {
                let at = (offset - first) as usize;
                let bytes = &buffer[at..at + nbytes as usize];
                self.check_atom_place(&opened, index_slot, bytes, &path)?;
                self.decode_atom(bytes, &path, &mut out[slot * n..(slot + 1) * n])?;
            }
            start = end;
        }
        Ok(())
    }

    /// Hands `put` each requested atom of shard `shard` at time `t` (its slot, and its
    /// values as stored: little-endian float32 bytes, not aligned), read in place from the
    /// mapped shard file and checked as [`Self::read_atoms`] checks them: no read into a
    /// buffer (the kernel's copy out of the page cache was half of a warm query's read
    /// time). Returns `false`, having handed nothing, where the shard's atoms cannot be
    /// read in place (compressed, not mapped, not of the stored size); the caller then
    /// reads them with [`Self::read_atoms`].
    pub fn atoms_in_place(
        &self,
        t: usize,
        shard: ShardPos,
        atoms: &[AtomRequest],
        put: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool> {
        let opened = self.shard(t, shard)?;
        let Some(map) = &opened.map else {
            return Ok(false);
        };
        let n = self.geometry.atom_values();
        let trailer = if self.codec.crc32c { 4 } else { 0 };
        let mut places = Vec::with_capacity(atoms.len());
        for request in atoms {
            let slot = self.geometry.index_slot(request.local);
            let range = opened.index.range(slot);
            if let Some((offset, nbytes)) = range {
                let fits = offset
                    .checked_add(nbytes)
                    .is_some_and(|end| end <= map.bytes.len() as u64);
                if nbytes != (n * 4 + trailer) as u64 || !fits {
                    return Ok(false);
                }
            }
            places.push((request.slot, slot, range));
        }
        // The shard's path (formatted and allocated) only for an atom checked here, once
        // per mapping: a warm step's calls need none.
        let mut path = None;
        let mut missing = Vec::new();
        for (slot, index_slot, range) in places {
            let Some((offset, nbytes)) = range else {
                if missing.is_empty() {
                    missing = f32::NAN.to_le_bytes().repeat(n);
                }
                put(slot, &missing);
                continue;
            };
            let bytes = &map.bytes[offset as usize..(offset + nbytes) as usize];
            if map.checked.contains(index_slot) {
                put(slot, &bytes[..n * 4]);
                continue;
            }
            let path = path.get_or_insert_with(|| self.shard_path(t, shard));
            self.check_atom_place(&opened, index_slot, bytes, path)?;
            put(slot, self.checked_body(bytes, path)?);
            map.checked.insert(index_slot);
        }
        Ok(true)
    }

    /// Reads a run of adjacent uncompressed atoms `(offset, nbytes, destination slot, index
    /// slot)` with one `preadv` straight into their slots of `out`, their checksums beside,
    /// and checks them: no staging buffer to clear and copy out of (with the grouped reads
    /// and inline row copies of `stream.rs`, a third less read time on a warm step).
    /// Returns `false`, having read nothing it keeps, where this
    /// does not apply (compressed atoms, an atom of the wrong size, a short read): the
    /// staged path then reads the run and reports what is wrong with it.
    #[cfg(target_os = "linux")]
    fn read_in_place(
        &self,
        file: &File,
        opened: &OpenedShard,
        run: &[(u64, u64, usize, usize)],
        out: &mut [f32],
        path: &Path,
    ) -> Result<bool> {
        use std::os::fd::AsRawFd;
        /// Linux's limit on the pieces of one vectored read (`UIO_MAXIOV`).
        const MAX_PIECES: usize = 1024;
        let n = self.geometry.atom_values();
        let trailer = if self.codec.crc32c { 4 } else { 0 };
        let atom_bytes = n * 4;
        if self.codec.zstd || run.iter().any(|r| r.1 != (atom_bytes + trailer) as u64) {
            return Ok(false);
        }
        let per_call = MAX_PIECES / 2;
        let mut crcs = vec![[0u8; 4]; run.len().min(per_call)];
        for group in run.chunks(per_call) {
            let mut pieces = Vec::with_capacity(2 * group.len());
            for (&(_, _, slot, _), crc) in group.iter().zip(crcs.iter_mut()) {
                let values = &mut out[slot * n..(slot + 1) * n];
                pieces.push(libc::iovec {
                    iov_base: values.as_mut_ptr().cast(),
                    iov_len: atom_bytes,
                });
                if trailer > 0 {
                    pieces.push(libc::iovec {
                        iov_base: crc.as_mut_ptr().cast(),
                        iov_len: trailer,
                    });
                }
            }
            let total = group.len() * (atom_bytes + trailer);
            let offset = libc::off_t::try_from(group[0].0).map_err(|_| {
                Error::corrupt(path, format!("atom offset {} is too large", group[0].0))
            })?;
            // SAFETY: every piece points into `out` (bounds checked by the slicing above)
            // or into `crcs`, both alive and not otherwise borrowed during the call.
            let got = unsafe {
                libc::preadv(
                    file.as_raw_fd(),
                    pieces.as_ptr(),
                    pieces.len() as libc::c_int,
                    offset,
                )
            };
            if got < 0 {
                return Err(Error::io(path, std::io::Error::last_os_error()));
            }
            if got as usize != total {
                return Ok(false);
            }
            for (&(_, _, slot, index_slot), crc) in group.iter().zip(&crcs) {
                let values = &mut out[slot * n..(slot + 1) * n];
                if trailer > 0 {
                    let stored = u32::from_le_bytes(*crc);
                    if let Some(header) = &opened.header {
                        header.check_atom(index_slot, stored, path)?;
                    }
                    // SAFETY: the bytes of `values`, which is initialised f32s.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), atom_bytes)
                    };
                    check_checksum(bytes, stored, path)?;
                }
                // Stored little-endian.
                if cfg!(target_endian = "big") {
                    for v in values.iter_mut() {
                        *v = f32::from_bits(u32::from_le(v.to_bits()));
                    }
                }
            }
        }
        Ok(true)
    }

    /// Elsewhere every run is staged.
    #[cfg(not(target_os = "linux"))]
    fn read_in_place(
        &self,
        _: &File,
        _: &OpenedShard,
        _: &[(u64, u64, usize, usize)],
        _: &mut [f32],
        _: &Path,
    ) -> Result<bool> {
        Ok(false)
    }

    /// Fails unless the atom read from index slot `slot` is the one its shard's header
    /// recorded there (a shard without a header binds nothing).
    pub fn check_atom_place(
        &self,
        opened: &OpenedShard,
        slot: usize,
        bytes: &[u8],
        path: &Path,
    ) -> Result<()> {
        let Some(header) = &opened.header else {
            return Ok(());
        };
        if !self.codec.crc32c || bytes.len() < 4 {
            return Ok(()); // nothing to compare; decode_atom reports a short atom
        }
        let stored = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().expect("4 bytes"));
        header.check_atom(slot, stored, path)
    }

    /// The stored atom `bytes` without its checksum, once the checksum is found right
    /// (where the codec has one).
    fn checked_body<'a>(&self, bytes: &'a [u8], path: &Path) -> Result<&'a [u8]> {
        if !self.codec.crc32c {
            return Ok(bytes);
        }
        let Some(split) = bytes.len().checked_sub(4) else {
            return Err(Error::corrupt(path, "atom is shorter than its checksum"));
        };
        let (body, crc) = bytes.split_at(split);
        check_checksum(
            body,
            u32::from_le_bytes(crc.try_into().expect("4 bytes")),
            path,
        )?;
        Ok(body)
    }

    /// Decodes one stored atom into `out`.
    pub fn decode_atom(&self, bytes: &[u8], path: &Path, out: &mut [f32]) -> Result<()> {
        // SAFETY: `decode_atom_into` writes only initialised values, so `out` stays
        // initialised whatever it does.
        let out = unsafe { &mut *(out as *mut [f32] as *mut [MaybeUninit<f32>]) };
        self.decode_atom_into(bytes, path, out)
    }

    /// Decodes one stored atom into `out`, which need not be initialised: on success every
    /// value of `out` is written (a buffer made for the atom is filled once, not cleared
    /// first).
    pub fn decode_atom_into(
        &self,
        bytes: &[u8],
        path: &Path,
        out: &mut [MaybeUninit<f32>],
    ) -> Result<()> {
        let expected = out.len() * 4;
        let bytes = self.checked_body(bytes, path)?;
        let raw;
        let bytes = if self.codec.zstd {
            raw = zstd::bulk::decompress(bytes, expected)
                .map_err(|e| Error::corrupt(path, format!("atom does not decompress: {e}")))?;
            &raw[..]
        } else {
            bytes
        };
        if bytes.len() != expected {
            return Err(Error::corrupt(
                path,
                format!("atom has {} bytes, expected {expected}", bytes.len()),
            ));
        }
        copy_le_f32(bytes, out);
        Ok(())
    }
}

/// Writes the little-endian float32 values `bytes` into `out`, all of it.
pub(crate) fn le_f32_into(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: `copy_le_f32` writes only initialised values, so `out` stays initialised.
    let out = unsafe { &mut *(out as *mut [f32] as *mut [MaybeUninit<f32>]) };
    copy_le_f32(bytes, out);
}

/// Writes the little-endian float32 values `bytes` into `out`, all of it.
fn copy_le_f32(bytes: &[u8], out: &mut [MaybeUninit<f32>]) {
    assert_eq!(bytes.len(), out.len() * 4, "one value per 4 bytes");
    // Stored little-endian: on a little-endian CPU the bytes are the values, and one copy
    // runs at memory speed (converting value by value took a fifth of a reader's time).
    #[cfg(target_endian = "little")]
    // SAFETY: `out` holds exactly `bytes.len()` bytes (asserted above), a shared and a
    // mutable borrow cannot overlap, and any four bytes are a valid f32.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast::<u8>(), bytes.len());
    }
    #[cfg(target_endian = "big")]
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        o.write(f32::from_le_bytes(b.try_into().expect("4 bytes")));
    }
}

/// Where atoms come from: the store, a cache, or a test double.
pub trait AtomSource: Sync {
    /// Reads the requested atoms of shard `shard` at time `t` into `out` (atom slots).
    fn read_atoms(
        &self,
        t: usize,
        shard: ShardPos,
        atoms: &[AtomRequest],
        out: &mut [f32],
    ) -> Result<()>;

    /// Hands `put` the requested atoms (slot, values) read in place, where the source can
    /// do so without a copy; returns `false`, having handed nothing, where it cannot.
    fn atoms_in_place(
        &self,
        _t: usize,
        _shard: ShardPos,
        _atoms: &[AtomRequest],
        _put: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool> {
        Ok(false)
    }
}

impl AtomSource for FieldReader {
    fn read_atoms(
        &self,
        t: usize,
        shard: ShardPos,
        atoms: &[AtomRequest],
        out: &mut [f32],
    ) -> Result<()> {
        FieldReader::read_atoms(self, t, shard, atoms, out)
    }

    fn atoms_in_place(
        &self,
        t: usize,
        shard: ShardPos,
        atoms: &[AtomRequest],
        put: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool> {
        FieldReader::atoms_in_place(self, t, shard, atoms, put)
    }
}

/// What tells one file at a path from the next: device and inode, and the size and the
/// modification time, since a file system reuses the inode of a file deleted (the shard
/// before the last rewrite) for the next one it makes.
fn file_identity(file: &File, path: &Path) -> Result<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    Ok([
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime() as u64,
        meta.mtime_nsec() as u64,
    ])
}

/// See [`file_identity`].
type FileIdentity = [u64; 5];

fn open_shard(path: &Path, t: usize) -> Result<File> {
    File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Missing(format!(
            "time step {t} is not stored: {} does not exist",
            path.display()
        )),
        _ => Error::io(path, e),
    })
}

/// Fails if `body`'s CRC-32C is not `stored`, the checksum written after it.
fn check_checksum(body: &[u8], stored: u32, path: &Path) -> Result<()> {
    if crc32c::crc32c(body) != stored {
        return Err(Error::corrupt(path, "atom checksum mismatch"));
    }
    Ok(())
}

/// The (device, inode) of a directory, or (0, 0).
fn directory_identity(root: &std::path::Path) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(root).map_or((0, 0), |m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = root;
        (0, 0)
    }
}
