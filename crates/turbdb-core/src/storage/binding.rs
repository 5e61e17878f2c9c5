//! The header that binds a shard file to its place: the field, time step and partition it
//! was written for, and the checksum the writer stored with the atom of each slot.
//!
//! It sits in the leading bytes of the shard, which Zarr readers never look at (the shard
//! index at the end addresses every chunk by offset), so zarr-python and xarray still open
//! the arrays. The atom checksums themselves are Zarr's crc32c of the atom's bytes and
//! cannot depend on the place; the header ties them to it: the reader checks the header
//! once per shard, when it loads the index, and compares each atom's trailing checksum
//! with the one recorded for its slot. A swapped or copied atom, or a shard copied over
//! another, is then a [`Error::Corrupt`] naming the shard instead of wrong values.
//!
//! Layout (little-endian), `FIXED_LEN` bytes then the variable part:
//!
//! | bytes | content |
//! |---|---|
//! | 0–7 | magic `TURBDBSH` |
//! | 8–11 | header version (1) |
//! | 12–15 | header length in bytes, this table's rows all included |
//! | 16–23 | time index |
//! | 24–35 | partition position `sx, sy, sz` (u32 each) |
//! | 36–39 | slots: atoms in the shard index |
//! | 40–41 | length of the field name in bytes (at most 255) |
//! | 42… | the field name (UTF-8) |
//! | then | one u32 per slot, in the index's C order: the crc32c stored after that atom (0 if absent) |
//! | last 4 | crc32c of every header byte before it |

use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::geometry::ShardPos;

/// The first bytes of a shard that carries a header.
pub const MAGIC: [u8; 8] = *b"TURBDBSH";

/// The header layout this code writes and reads.
pub const VERSION: u32 = 1;

/// Bytes before the field name.
pub const FIXED_LEN: usize = 42;

/// Longest field name a header holds.
pub const MAX_NAME: usize = 255;

/// Where a shard belongs and what each of its slots holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHeader {
    /// The field (the array directory's name).
    pub field: String,
    /// Time index of the step.
    pub time_index: u64,
    /// Position of the partition in the shard grid, `[sx, sy, sz]`.
    pub shard: [u32; 3],
    /// Per slot of the shard index, the crc32c stored with its atom (0 when absent).
    pub atom_crcs: Vec<u32>,
}

impl ShardHeader {
    /// The encoded length of a header for `field` with `slots` slots.
    pub fn encoded_len(field: &str, slots: usize) -> usize {
        FIXED_LEN + field.len() + 4 * slots + 4
    }

    /// The longest header of a shard with `slots` slots (the longest field name).
    pub fn longest(slots: usize) -> usize {
        FIXED_LEN + MAX_NAME + 4 * slots + 4
    }

    /// The header's bytes, its own checksum last.
    pub fn encode(&self) -> Vec<u8> {
        let len = Self::encoded_len(&self.field, self.atom_crcs.len());
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&self.time_index.to_le_bytes());
        for s in self.shard {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(&(self.atom_crcs.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.field.len() as u16).to_le_bytes());
        out.extend_from_slice(self.field.as_bytes());
        for crc in &self.atom_crcs {
            out.extend_from_slice(&crc.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), len);
        out
    }

    /// The header length announced by the first bytes of a shard (at least [`FIXED_LEN`]
    /// of them), or `None` when the shard carries no header: written before shard headers
    /// existed, or by another Zarr tool.
    pub fn announced_len(head: &[u8]) -> Option<usize> {
        if head.len() < FIXED_LEN || head[..8] != MAGIC {
            return None;
        }
        Some(u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) as usize)
    }

    /// Parses and checks a whole header (`bytes` of exactly its announced length) of a
    /// shard whose index has `slots` entries.
    pub fn decode(bytes: &[u8], slots: usize, path: &Path) -> Result<Self> {
        let corrupt = |m: String| Err(Error::corrupt(path, m));
        if bytes.len() < FIXED_LEN + 4 || bytes[..8] != MAGIC {
            return corrupt("shard header is truncated".into());
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        if crc32c::crc32c(body) != stored {
            return corrupt("shard header checksum mismatch".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return corrupt(format!(
                "shard header version {version} is not supported (this turbdb reads {VERSION}); \
                 upgrade turbdb"
            ));
        }
        let time_index = u64::from_le_bytes(body[16..24].try_into().expect("8 bytes"));
        let shard = [u32_at(24), u32_at(28), u32_at(32)];
        let count = u32_at(36) as usize;
        let name_len = u16::from_le_bytes(body[40..42].try_into().expect("2 bytes")) as usize;
        if count != slots || bytes.len() != FIXED_LEN + name_len + 4 * slots + 4 {
            return corrupt(format!(
                "shard header lists {count} slots and a {name_len}-byte name in {} bytes; the \
                 shard index has {slots} slots",
                bytes.len()
            ));
        }
        let Ok(field) = std::str::from_utf8(&body[FIXED_LEN..FIXED_LEN + name_len]) else {
            return corrupt("shard header names its field in invalid UTF-8".into());
        };
        let atom_crcs = body[FIXED_LEN + name_len..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        Ok(Self {
            field: field.to_string(),
            time_index,
            shard,
            atom_crcs,
        })
    }

    /// Fails unless the header was written for this field, time step and partition.
    pub fn check_place(&self, field: &str, t: usize, shard: ShardPos, path: &Path) -> Result<()> {
        let here = shard.map(|s| s as u32);
        if self.field == field && self.time_index == t as u64 && self.shard == here {
            return Ok(());
        }
        Err(Error::corrupt(
            path,
            format!(
                "shard was written for field {:?}, time step {}, partition {:?} but lies at \
                 field {field:?}, time step {t}, partition {here:?} (a copied or moved shard)",
                self.field, self.time_index, self.shard
            ),
        ))
    }

    /// Fails unless `stored_crc`, the checksum stored after the atom read from `slot`, is
    /// the one the writer recorded for that slot.
    pub fn check_atom(&self, slot: usize, stored_crc: u32, path: &Path) -> Result<()> {
        if self.atom_crcs.get(slot) == Some(&stored_crc) {
            return Ok(());
        }
        let origin = self
            .atom_crcs
            .iter()
            .position(|&c| c == stored_crc)
            .map_or(String::new(), |s| format!("; it is the atom of slot {s}"));
        Err(Error::corrupt(
            path,
            format!(
                "the atom in slot {slot} is not the one written there (its checksum \
                 {stored_crc:08x} differs from the recorded one{origin}): a swapped or copied atom"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> ShardHeader {
        ShardHeader {
            field: "velocity".into(),
            time_index: 4,
            shard: [1, 0, 2],
            atom_crcs: vec![7, 0, 9, 11],
        }
    }

    #[test]
    fn round_trips_and_refuses_a_flipped_bit() {
        let path = Path::new("s");
        let mut bytes = header().encode();
        assert_eq!(ShardHeader::announced_len(&bytes), Some(bytes.len()));
        assert_eq!(ShardHeader::decode(&bytes, 4, path).unwrap(), header());
        bytes[20] ^= 1;
        let err = ShardHeader::decode(&bytes, 4, path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("header checksum"), "{err}");
        assert_eq!(ShardHeader::announced_len(&[0u8; 64]), None);
    }

    #[test]
    fn names_a_shard_out_of_place_and_a_swapped_atom() {
        let path = Path::new("s");
        let h = header();
        assert!(h.check_place("velocity", 4, [1, 0, 2], path).is_ok());
        let err = h
            .check_place("velocity", 3, [1, 0, 2], path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("time step 4") && err.contains("copied or moved"),
            "{err}"
        );
        assert!(h.check_place("pressure", 4, [1, 0, 2], path).is_err());
        assert!(h.check_atom(2, 9, path).is_ok());
        let err = h.check_atom(0, 9, path).unwrap_err().to_string();
        assert!(
            err.contains("slot 0") && err.contains("atom of slot 2"),
            "{err}"
        );
    }
}
