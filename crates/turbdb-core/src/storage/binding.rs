//! The header that binds a shard file to its place: the field (its name and, since version
//! 2, the random id its dataset gave it), time step and partition it was written for, and
//! the checksum the writer stored with the atom of each slot.
//!
//! It sits in the leading bytes of the shard, which Zarr readers never look at (the shard
//! index at the end addresses every chunk by offset), so zarr-python and xarray still open
//! the arrays. The atom checksums themselves are Zarr's crc32c of the atom's bytes and
//! cannot depend on the place; the header ties them to it: the reader checks the header
//! once per shard, when it loads the index, and compares each atom's trailing checksum
//! with the one recorded for its slot. A swapped or copied atom, or a shard copied over
//! another, is then a [`Error::Corrupt`] naming the shard instead of wrong values. The
//! field id tells apart two datasets of the same grid and field names: without it a shard
//! copied from one into the other at the same place read back as its own.
//!
//! Layout (little-endian), the fixed part then the variable part:
//!
//! | bytes | content |
//! |---|---|
//! | 0–7 | magic `TURBDBSH` |
//! | 8–11 | header version (1 or 2) |
//! | 12–15 | header length in bytes, this table's rows all included |
//! | 16–23 | time index |
//! | 24–35 | partition position `sx, sy, sz` (u32 each) |
//! | 36–39 | slots: atoms in the shard index |
//! | 40–47 | version 2 only: the field id |
//! | then 2 | length of the field name in bytes (at most 255) |
//! | then | the field name (UTF-8) |
//! | then | one u32 per slot, in the index's C order: the crc32c stored after that atom (0 if absent) |
//! | last 4 | crc32c of every header byte before it |
//!
//! Fields made before field ids existed have none and keep writing version 1, which older
//! turbdb versions read.

use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::geometry::ShardPos;

/// The first bytes of a shard that carries a header.
pub const MAGIC: [u8; 8] = *b"TURBDBSH";

/// The newest header layout, which this code writes for fields with an id (it reads 1 too).
pub const VERSION: u32 = 2;

/// The fewest bytes before the field name (version 1); a reader reads these first.
pub const FIXED_LEN: usize = 42;

/// Bytes before the field name in a header with a field id (version 2).
const FIXED_LEN_WITH_ID: usize = 50;

/// Longest field name a header holds.
pub const MAX_NAME: usize = 255;

/// Where a shard belongs and what each of its slots holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHeader {
    /// The field (the array directory's name).
    pub field: String,
    /// The field's id, `None` for a field made before ids existed (a version 1 header).
    pub field_id: Option<u64>,
    /// Time index of the step.
    pub time_index: u64,
    /// Position of the partition in the shard grid, `[sx, sy, sz]`.
    pub shard: [u32; 3],
    /// Per slot of the shard index, the crc32c stored with its atom (0 when absent).
    pub atom_crcs: Vec<u32>,
}

impl ShardHeader {
    /// The encoded length of a header for `field` (with an id or not) with `slots` slots.
    pub fn encoded_len(field: &str, with_id: bool, slots: usize) -> usize {
        let fixed = if with_id {
            FIXED_LEN_WITH_ID
        } else {
            FIXED_LEN
        };
        fixed + field.len() + 4 * slots + 4
    }

    /// This header's encoded length.
    pub fn len(&self) -> usize {
        Self::encoded_len(&self.field, self.field_id.is_some(), self.atom_crcs.len())
    }

    /// The longest header of a shard with `slots` slots (the longest field name).
    pub fn longest(slots: usize) -> usize {
        Self::encoded_len(&"f".repeat(MAX_NAME), true, slots)
    }

    /// The header's bytes, its own checksum last: version 2 for a field with an id, else 1.
    pub fn encode(&self) -> Vec<u8> {
        let len = self.len();
        let version: u32 = if self.field_id.is_some() { 2 } else { 1 };
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&self.time_index.to_le_bytes());
        for s in self.shard {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(&(self.atom_crcs.len() as u32).to_le_bytes());
        if let Some(id) = self.field_id {
            out.extend_from_slice(&id.to_le_bytes());
        }
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
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        let fixed = match version {
            1 => FIXED_LEN,
            2 if body.len() >= FIXED_LEN_WITH_ID => FIXED_LEN_WITH_ID,
            2 => return corrupt("shard header is truncated".into()),
            _ => {
                return corrupt(format!(
                    "shard header version {version} is not supported (this turbdb reads 1 to \
                     {VERSION}); upgrade turbdb"
                ))
            }
        };
        let field_id = (version == 2).then(|| u64_at(40));
        let time_index = u64_at(16);
        let shard = [u32_at(24), u32_at(28), u32_at(32)];
        let count = u32_at(36) as usize;
        let name_len =
            u16::from_le_bytes(body[fixed - 2..fixed].try_into().expect("2 bytes")) as usize;
        if count != slots || bytes.len() != fixed + name_len + 4 * slots + 4 {
            return corrupt(format!(
                "shard header lists {count} slots and a {name_len}-byte name in {} bytes; the \
                 shard index has {slots} slots",
                bytes.len()
            ));
        }
        let Ok(field) = std::str::from_utf8(&body[fixed..fixed + name_len]) else {
            return corrupt("shard header names its field in invalid UTF-8".into());
        };
        let atom_crcs = body[fixed + name_len..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        Ok(Self {
            field: field.to_string(),
            field_id,
            time_index,
            shard,
            atom_crcs,
        })
    }

    /// Fails unless the header was written for this field (name and id), time step and
    /// partition.
    pub fn check_place(
        &self,
        field: &str,
        field_id: Option<u64>,
        t: usize,
        shard: ShardPos,
        path: &Path,
    ) -> Result<()> {
        let here = shard.map(|s| s as u32);
        if self.field == field && self.time_index == t as u64 && self.shard == here {
            if self.field_id == field_id {
                return Ok(());
            }
            let id = |id: Option<u64>| id.map_or("no id".to_string(), |i| format!("id {i:016x}"));
            // A shard of no id in a field of one: also what a turbdb older than field ids
            // (before format version 2, which refuses such datasets) wrote into it.
            let cause = if self.field_id.is_none() {
                "a shard copied from another dataset, or written by a turbdb older than field ids"
            } else {
                "a shard copied from another dataset"
            };
            return Err(Error::corrupt(
                path,
                format!(
                    "shard was written for a field {field:?} of {} but this field has {} ({cause})",
                    id(self.field_id),
                    id(field_id)
                ),
            ));
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
            field_id: Some(0x0123_4567_89ab_cdef),
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
    fn a_field_without_an_id_keeps_the_first_layout() {
        let path = Path::new("s");
        let old = ShardHeader {
            field_id: None,
            ..header()
        };
        let bytes = old.encode();
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 1);
        assert_eq!(bytes.len(), FIXED_LEN + "velocity".len() + 4 * 4 + 4);
        assert_eq!(&bytes[42..50], b"velocity");
        assert_eq!(ShardHeader::decode(&bytes, 4, path).unwrap(), old);
        assert_eq!(header().encode().len(), header().len());
        assert_eq!(header().len(), bytes.len() + 8);
    }

    #[test]
    fn names_a_shard_of_another_dataset() {
        let path = Path::new("s");
        let h = header();
        let id = h.field_id;
        assert!(h.check_place("velocity", id, 4, [1, 0, 2], path).is_ok());
        for other in [Some(7), None] {
            let err = h
                .check_place("velocity", other, 4, [1, 0, 2], path)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("another dataset") && err.contains("0123456789abcdef"),
                "{err}"
            );
        }
        let old = ShardHeader {
            field_id: None,
            ..header()
        };
        assert!(old
            .check_place("velocity", None, 4, [1, 0, 2], path)
            .is_ok());
        assert!(old.check_place("velocity", id, 4, [1, 0, 2], path).is_err());
    }

    #[test]
    fn names_a_shard_out_of_place_and_a_swapped_atom() {
        let path = Path::new("s");
        let h = header();
        let id = h.field_id;
        assert!(h.check_place("velocity", id, 4, [1, 0, 2], path).is_ok());
        let err = h
            .check_place("velocity", id, 3, [1, 0, 2], path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("time step 4") && err.contains("copied or moved"),
            "{err}"
        );
        assert!(h.check_place("pressure", id, 4, [1, 0, 2], path).is_err());
        assert!(h.check_atom(2, 9, path).is_ok());
        let err = h.check_atom(0, 9, path).unwrap_err().to_string();
        assert!(
            err.contains("slot 0") && err.contains("atom of slot 2"),
            "{err}"
        );
    }
}
