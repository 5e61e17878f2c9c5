//! The Zarr v3 `sharding_indexed` shard index: one `(offset, nbytes)` pair of little-endian
//! u64 per inner chunk in C order of the chunk grid, followed by its crc32c.

use std::path::Path;

use crate::error::{Error, Result};

/// Offset and length marking an inner chunk that is not stored.
pub const EMPTY: u64 = u64::MAX;

/// Where the index sits in the shard file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexLocation {
    /// After the chunks (our default and Zarr's).
    End,
    /// Before the chunks.
    Start,
}

/// How inner chunks (atoms) are encoded after the `bytes` codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkCodec {
    /// Zstandard compression of the float32 bytes.
    pub zstd: bool,
    /// A crc32c of the (compressed) bytes appended to each atom. turbdb writes it so that
    /// a flipped byte anywhere in a shard is detected, not only in its index.
    pub crc32c: bool,
}

impl ChunkCodec {
    /// What turbdb writes: raw float32 followed by its crc32c.
    pub const TURBDB: ChunkCodec = ChunkCodec {
        zstd: false,
        crc32c: true,
    };
}

/// The decoded index of one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    /// `(offset, nbytes)` per inner chunk, C order over the chunk grid.
    pub entries: Vec<(u64, u64)>,
}

impl ShardIndex {
    /// An index with every chunk absent.
    pub fn empty(chunks: usize) -> Self {
        Self {
            entries: vec![(EMPTY, EMPTY); chunks],
        }
    }

    /// Serialises the index with its crc32c, as written at the end of a shard.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * 16 + 4);
        for &(offset, nbytes) in &self.entries {
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&nbytes.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and checks an encoded index of `chunks` entries read from `path`.
    pub fn decode(bytes: &[u8], chunks: usize, path: &Path) -> Result<Self> {
        let body_len = chunks * 16;
        if bytes.len() != body_len + 4 {
            return Err(Error::corrupt(
                path,
                format!(
                    "shard index has {} bytes, expected {}",
                    bytes.len(),
                    body_len + 4
                ),
            ));
        }
        let (body, crc) = bytes.split_at(body_len);
        let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(body);
        if stored != computed {
            return Err(Error::corrupt(
                path,
                format!(
                    "shard index checksum mismatch (stored {stored:08x}, computed {computed:08x})"
                ),
            ));
        }
        let entries = body
            .chunks_exact(16)
            .map(|e| {
                let offset = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
                let nbytes = u64::from_le_bytes(e[8..].try_into().expect("8 bytes"));
                (offset, nbytes)
            })
            .collect();
        Ok(Self { entries })
    }

    /// The byte range of chunk `slot`, or `None` when it is not stored.
    pub fn range(&self, slot: usize) -> Option<(u64, u64)> {
        match self.entries[slot] {
            (EMPTY, EMPTY) => None,
            entry => Some(entry),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_round_trips_and_detects_a_flipped_bit() {
        let mut index = ShardIndex::empty(8);
        index.entries[3] = (0, 2048);
        let mut bytes = index.encode();
        let path = Path::new("x");
        assert_eq!(ShardIndex::decode(&bytes, 8, path).unwrap(), index);
        assert_eq!(index.range(3), Some((0, 2048)));
        assert_eq!(index.range(0), None);
        bytes[50] ^= 0x10;
        let err = ShardIndex::decode(&bytes, 8, path).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
    }
}
