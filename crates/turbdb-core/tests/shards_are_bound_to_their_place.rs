//! Every shard carries a header naming its field, time step and partition and the checksum
//! of the atom in each slot: a swapped atom, or a shard copied over another step or field,
//! is refused by the reader and named by verify, while shards written before headers
//! existed still read (and verify counts them as unbound).

use std::fs;
use std::path::Path;

use turbdb_core::{verify_field, write_step, Error, ShardHeader, ShardIndex};
use turbdb_core::{AtomRequest, ChunkCodec, FieldGeometry, FieldReader, IndexLocation};

fn geometry() -> FieldGeometry {
    FieldGeometry::new([16, 16, 16], 3, 4, 8).unwrap()
}

fn step(t: usize) -> Vec<f32> {
    (0..16 * 16 * 16 * 3)
        .map(|i| (i + 7919 * t) as f32)
        .collect()
}

fn reader(root: &Path) -> FieldReader {
    FieldReader::new(root, geometry(), ChunkCodec::TURBDB, IndexLocation::End)
}

fn written(root: &Path, steps: usize) {
    for t in 0..steps {
        write_step(root, &geometry(), None, t, &step(t), false).unwrap();
    }
}

fn read_all(reader: &FieldReader, t: usize, shard: [usize; 3]) -> Result<Vec<f32>, Error> {
    let g = geometry();
    let requests: Vec<AtomRequest> = g
        .local_atom_order()
        .into_iter()
        .enumerate()
        .map(|(slot, local)| AtomRequest { local, slot })
        .collect();
    let mut out = vec![0f32; requests.len() * g.atom_values()];
    reader.read_atoms(t, shard, &requests, &mut out)?;
    Ok(out)
}

fn header_len(bytes: &[u8]) -> usize {
    ShardHeader::announced_len(bytes).expect("a header")
}

/// The same shard as the writer made it before headers existed: atoms from offset 0.
fn without_header(bytes: &[u8]) -> Vec<u8> {
    let g = geometry();
    let skip = header_len(bytes);
    let index_at = bytes.len() - g.index_bytes();
    let mut index =
        ShardIndex::decode(&bytes[index_at..], g.chunks_per_shard(), Path::new("x")).unwrap();
    for entry in index.entries.iter_mut().filter(|e| e.0 != u64::MAX) {
        entry.0 -= skip as u64;
    }
    let mut out = bytes[skip..index_at].to_vec();
    out.extend_from_slice(&index.encode());
    out
}

#[test]
fn two_swapped_atoms_are_refused_and_named_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("velocity");
    written(&root, 1);
    let g = geometry();
    let path = root.join(g.shard_key(0, [1, 0, 1]));
    let mut bytes = fs::read(&path).unwrap();
    let (first, size) = (header_len(&bytes), g.stored_atom_bytes());
    let (a, b) = (first..first + size, first + 3 * size..first + 4 * size);
    let atom_a = bytes[a.clone()].to_vec();
    bytes.copy_within(b.clone(), a.start);
    bytes[b].copy_from_slice(&atom_a);
    fs::write(&path, &bytes).unwrap();

    let err = read_all(&reader(&root), 0, [1, 0, 1]).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("swapped or copied atom"), "{err}");
    let report = verify_field(&reader(&root), 1);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].path, path);
    assert!(report.complete_steps.is_empty());
}

/// Rewrites entry `slot` of the shard's index as `(offset, nbytes)`, with the index's
/// checksum made right again: an index written wrong, not one damaged on disk.
fn index_entry_rewritten(path: &Path, slot: usize, entry: (u64, u64)) {
    let g = geometry();
    let mut bytes = fs::read(path).unwrap();
    let index_at = bytes.len() - g.index_bytes();
    let mut index =
        ShardIndex::decode(&bytes[index_at..], g.chunks_per_shard(), Path::new("x")).unwrap();
    index.entries[slot] = entry;
    bytes.truncate(index_at);
    bytes.extend_from_slice(&index.encode());
    fs::write(path, &bytes).unwrap();
}

#[test]
fn an_index_entry_past_the_file_or_marking_a_written_atom_absent_is_refused() {
    // A range of 2⁶² bytes was read into a buffer of that size (the process aborted); an
    // atom marked absent read as NaN and verify passed the shard.
    let g = geometry();
    for (case, entry) in [("past", (0, 1u64 << 62)), ("absent", (u64::MAX, u64::MAX))] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("velocity");
        written(&root, 1);
        let path = root.join(g.shard_key(0, [1, 0, 1]));
        let first = header_len(&fs::read(&path).unwrap()) as u64;
        let entry = if case == "past" {
            (first, entry.1)
        } else {
            entry
        };
        index_entry_rewritten(&path, 0, entry);
        let err = read_all(&reader(&root), 0, [1, 0, 1]).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{case}: {err}");
        let wanted = if case == "past" {
            "outside the file's atoms"
        } else {
            "as not stored"
        };
        assert!(err.to_string().contains(wanted), "{case}: {err}");
        let report = verify_field(&reader(&root), 1);
        assert_eq!(report.problems.len(), 1, "{case}: {:?}", report.problems);
        assert!(report.complete_steps.is_empty(), "{case}");
    }
}

#[test]
fn a_shard_copied_over_another_step_or_field_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let velocity = dir.path().join("velocity");
    let magnetic = dir.path().join("magneticfield");
    written(&velocity, 2);
    written(&magnetic, 1);
    let g = geometry();
    let shard = [0, 1, 1];
    fs::copy(
        velocity.join(g.shard_key(1, shard)),
        velocity.join(g.shard_key(0, shard)),
    )
    .unwrap();
    fs::copy(
        velocity.join(g.shard_key(1, shard)),
        magnetic.join(g.shard_key(0, shard)),
    )
    .unwrap();

    let err = read_all(&reader(&velocity), 0, shard)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("time step 1") && err.contains("copied or moved shard"),
        "{err}"
    );
    let err = read_all(&reader(&magnetic), 0, shard)
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"velocity\""), "{err}");
    let report = verify_field(&reader(&velocity), 2);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.complete_steps, vec![1]);
    assert!(read_all(&reader(&velocity), 1, shard).is_ok());
}

#[test]
fn a_shard_of_another_dataset_is_refused_where_the_field_id_is_known() {
    let dir = tempfile::tempdir().unwrap();
    let (ours, theirs) = (dir.path().join("a/velocity"), dir.path().join("b/velocity"));
    write_step(&ours, &geometry(), Some(1), 0, &step(0), false).unwrap();
    write_step(&theirs, &geometry(), Some(2), 0, &step(0), false).unwrap();
    let shard = [1, 0, 0];
    let key = geometry().shard_key(0, shard);
    fs::copy(theirs.join(&key), ours.join(&key)).unwrap();
    let known = |id| reader(&ours).with_field_id(id);
    let err = read_all(&known(Some(1)), 0, shard).unwrap_err().to_string();
    assert!(err.contains("copied from another dataset"), "{err}");
    assert!(read_all(&known(Some(1)), 0, [0, 0, 0]).is_ok());
    assert!(read_all(&known(None), 0, [0, 0, 0]).is_err());
    // A tool that opens a field without its metadata takes the ids the headers carry.
    assert_eq!(
        read_all(&reader(&ours), 0, shard).unwrap(),
        read_all(&reader(&theirs), 0, shard).unwrap()
    );
    assert_eq!(verify_field(&known(Some(1)), 1).problems.len(), 1);
}

#[test]
fn shards_written_before_headers_still_read_and_verify_counts_them_unbound() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("velocity");
    written(&root, 1);
    let g = geometry();
    let expected = read_all(&reader(&root), 0, [1, 1, 0]).unwrap();
    let path = root.join(g.shard_key(0, [1, 1, 0]));
    fs::write(&path, without_header(&fs::read(&path).unwrap())).unwrap();

    assert_eq!(read_all(&reader(&root), 0, [1, 1, 0]).unwrap(), expected);
    let report = verify_field(&reader(&root), 1);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((report.shards, report.unbound_shards), (8, 1));

    // A field whose metadata says every shard is bound refuses one without a header.
    let strict = reader(&root).require_headers(true);
    let err = read_all(&strict, 0, [1, 1, 0]).unwrap_err().to_string();
    assert!(err.contains("no header"), "{err}");
    assert_eq!(verify_field(&strict, 1).problems.len(), 1);
}

#[test]
fn a_shard_rewritten_since_its_index_was_read_is_read_with_its_own_index() {
    // A rewrite renames new shard files over the old ones; a reader that had read the old
    // index read the new file's atoms with it: values of two versions, or "a swapped or
    // copied atom" where the old header's checksums caught it.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("velocity");
    written(&root, 1);
    let g = geometry();
    let shard = [1, 1, 0];
    let reader = reader(&root);
    let before = read_all(&reader, 0, shard).unwrap();
    let elsewhere = dir.path().join("rewrite").join("velocity");
    write_step(&elsewhere, &g, None, 0, &step(5), false).unwrap();
    fs::rename(
        elsewhere.join(g.shard_key(0, shard)),
        root.join(g.shard_key(0, shard)),
    )
    .unwrap();
    let after = read_all(&reader, 0, shard).expect("the new file read with its own index");
    assert_ne!(after, before);
    assert_eq!(after, read_all(&self::reader(&root), 0, shard).unwrap());
}
