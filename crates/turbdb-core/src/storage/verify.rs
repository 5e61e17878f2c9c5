//! Checks every stored shard of a field: the index checksum, the header binding the shard
//! to its place, every chunk range inside the file, that every atom decodes and is the one
//! written in its slot. Reports problems instead of stopping at the first.

use std::fs;
use std::io::Read;
use std::path::PathBuf;

use crate::error::Error;
use crate::storage::geometry::FieldGeometry;
use crate::storage::reader::FieldReader;

/// One problem found by [`verify_field`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The shard file concerned.
    pub path: PathBuf,
    /// Time step of the shard.
    pub time_index: usize,
    /// What is wrong.
    pub message: String,
}

/// What [`verify_field`] found.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// Shards checked.
    pub shards: usize,
    /// Atoms decoded.
    pub atoms: usize,
    /// Time steps all of whose shards exist.
    pub complete_steps: Vec<usize>,
    /// Shards without a header binding them to their place (written before headers
    /// existed, or by another Zarr tool): their atoms are checked, their place is not.
    pub unbound_shards: usize,
    /// Everything that is wrong.
    pub problems: Vec<Problem>,
}

/// Verifies time steps `0..nt` of the field read by `reader`. A step with no shard at all
/// is "not written" and not a problem; a step with some but not all shards is.
pub fn verify_field(reader: &FieldReader, nt: usize) -> VerifyReport {
    let geometry: &FieldGeometry = reader.geometry();
    let shards = geometry.shard_positions();
    let mut report = VerifyReport::default();
    let mut out = vec![0f32; geometry.atom_values()];
    for t in 0..nt {
        let exists: Vec<bool> = shards
            .iter()
            .map(|&s| reader.shard_path(t, s).is_file())
            .collect();
        let present = exists.iter().filter(|&&e| e).count();
        if present == 0 {
            continue;
        }
        let mut ok = present == shards.len();
        for (&shard, &exist) in shards.iter().zip(&exists) {
            let path = reader.shard_path(t, shard);
            if !exist {
                let message =
                    "shard is missing (the time step was only partly written)".to_string();
                report.problems.push(Problem {
                    path,
                    time_index: t,
                    message,
                });
                continue;
            }
            report.shards += 1;
            match check_shard(reader, t, shard, &mut out) {
                Ok((atoms, bound)) => {
                    report.atoms += atoms;
                    report.unbound_shards += usize::from(!bound);
                }
                Err(e) => {
                    ok = false;
                    let message = match e {
                        Error::Corrupt { message, .. } => message,
                        other => other.to_string(),
                    };
                    report.problems.push(Problem {
                        path,
                        time_index: t,
                        message,
                    });
                }
            }
        }
        if ok {
            report.complete_steps.push(t);
        }
    }
    report
}

/// Checks one shard; returns the atoms it holds and whether it carries a binding header.
fn check_shard(
    reader: &FieldReader,
    t: usize,
    shard: [usize; 3],
    out: &mut [f32],
) -> Result<(usize, bool), Error> {
    let path = reader.shard_path(t, shard);
    // The bytes and the index of one file: a rewrite may rename another over the path.
    let mut file = fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io(&path, e))?;
    let opened = reader.shard_of_file(t, shard, &file, &path)?;
    let header_len = opened.header.as_ref().map_or(0, |h| h.len() as u64);
    let mut atoms = 0;
    for slot in 0..opened.index.entries.len() {
        let Some((offset, nbytes)) = opened.index.range(slot) else {
            continue;
        };
        let end = offset
            .checked_add(nbytes)
            .filter(|&e| e <= bytes.len() as u64 && offset >= header_len);
        let Some(end) = end else {
            return Err(Error::corrupt(
                &path,
                format!("chunk {slot} lies outside the file's chunks ({offset}+{nbytes})"),
            ));
        };
        let atom = &bytes[offset as usize..end as usize];
        reader.decode_atom(atom, &path, out)?;
        reader.check_atom_place(&opened, slot, atom, &path)?;
        atoms += 1;
    }
    Ok((atoms, opened.header.is_some()))
}
