//! A time step written by the writer reads back exactly through the reader (into a buffer
//! or in place from the mapped shard), atoms sit in Morton order in every shard, and
//! corruption is reported by verify and by the reads.

use std::fs;

use turbdb_core::FieldGeometry;
use turbdb_core::{morton, verify_field, write_step};
use turbdb_core::{AtomRequest, FieldReader};
use turbdb_core::{ChunkCodec, IndexLocation};

fn field(nx: usize, ny: usize, nz: usize, nc: usize) -> Vec<f32> {
    (0..nx * ny * nz * nc)
        .map(|i| i as f32 * 0.5 - 7.0)
        .collect()
}

fn reader(root: &std::path::Path, g: &FieldGeometry) -> FieldReader {
    FieldReader::new(root, g.clone(), ChunkCodec::TURBDB, IndexLocation::End)
}

#[test]
fn every_voxel_of_a_partial_grid_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let (nx, ny, nz, nc) = (37, 20, 17, 3);
    let g = FieldGeometry::new([nx, ny, nz], nc, 4, 16).unwrap();
    let data = field(nx, ny, nz, nc);
    write_step(dir.path(), &g, None, 2, &data, false).unwrap();
    let r = reader(dir.path(), &g);
    let a = g.atom;
    let mut atom = vec![0f32; g.atom_values()];
    for shard in g.shard_positions() {
        for local in g.local_atom_order() {
            if !g.atom_in_grid(shard, local) {
                continue;
            }
            r.read_atoms(2, shard, &[AtomRequest { local, slot: 0 }], &mut atom)
                .unwrap();
            let origin: Vec<usize> = (0..3)
                .map(|i| shard[i] * g.partition + local[i] * a)
                .collect();
            for dz in 0..a {
                for dy in 0..a {
                    for dx in 0..a {
                        let (x, y, z) = (origin[0] + dx, origin[1] + dy, origin[2] + dz);
                        for c in 0..nc {
                            let got = atom[((dz * a + dy) * a + dx) * nc + c];
                            if x < nx && y < ny && z < nz {
                                assert_eq!(got, data[((z * ny + y) * nx + x) * nc + c]);
                            } else {
                                assert!(got.is_nan(), "padding must be the fill value");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn atoms_are_stored_in_morton_order_and_merged_reads_match_single_reads() {
    let dir = tempfile::tempdir().unwrap();
    let g = FieldGeometry::new([32, 32, 32], 1, 4, 32).unwrap();
    let data = field(32, 32, 32, 1);
    write_step(dir.path(), &g, None, 0, &data, false).unwrap();
    let r = reader(dir.path(), &g);
    let index = r.index(0, [0, 0, 0]).unwrap();
    let mut offsets: Vec<(u64, u64)> = g
        .local_atom_order()
        .iter()
        .map(|&l| {
            (
                morton::encode(l[0] as u32, l[1] as u32, l[2] as u32),
                index.range(g.index_slot(l)).unwrap().0,
            )
        })
        .collect();
    offsets.sort();
    assert!(
        offsets.windows(2).all(|w| w[0].1 < w[1].1),
        "offsets must increase with the Morton code"
    );

    let requests: Vec<AtomRequest> = g
        .local_atom_order()
        .into_iter()
        .enumerate()
        .map(|(slot, local)| AtomRequest { local, slot })
        .collect();
    let mut merged = vec![0f32; requests.len() * g.atom_values()];
    r.read_atoms(0, [0, 0, 0], &requests, &mut merged).unwrap();
    let mut single = vec![0f32; g.atom_values()];
    for q in &requests {
        r.read_atoms(
            0,
            [0, 0, 0],
            &[AtomRequest {
                local: q.local,
                slot: 0,
            }],
            &mut single,
        )
        .unwrap();
        assert_eq!(
            &merged[q.slot * g.atom_values()..(q.slot + 1) * g.atom_values()],
            &single[..]
        );
    }
}

#[test]
fn verify_names_the_shard_with_a_flipped_byte_and_the_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let g = FieldGeometry::new([16, 16, 16], 3, 4, 8).unwrap();
    let data = field(16, 16, 16, 3);
    for t in 0..2 {
        write_step(dir.path(), &g, None, t, &data, false).unwrap();
    }
    let clean = verify_field(&reader(dir.path(), &g), 3);
    assert!(clean.problems.is_empty());
    assert_eq!(clean.complete_steps, vec![0, 1]);

    let victim = dir.path().join(g.shard_key(1, [1, 0, 1]));
    let mut bytes = fs::read(&victim).unwrap();
    bytes[1000] ^= 0x01;
    fs::write(&victim, bytes).unwrap();
    fs::remove_file(dir.path().join(g.shard_key(0, [0, 1, 0]))).unwrap();

    let report = verify_field(&reader(dir.path(), &g), 3);
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(report
        .problems
        .iter()
        .any(|p| p.path == victim && p.message.contains("checksum")));
    assert!(report
        .problems
        .iter()
        .any(|p| p.message.contains("missing")));
    assert!(report.complete_steps.is_empty());
}

#[test]
fn non_finite_values_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let g = FieldGeometry::new([8, 8, 8], 1, 4, 8).unwrap();
    let mut data = field(8, 8, 8, 1);
    data[3 * 64 + 2 * 8 + 5] = f32::NAN;
    let err = write_step(dir.path(), &g, None, 0, &data, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("z=3, y=2, x=5"), "{err}");
    assert!(!dir.path().join("c").exists());
    let big = vec![1e300f64; 512];
    assert!(write_step(dir.path(), &g, None, 0, &big, false).is_err());
}

#[test]
fn a_missing_step_is_reported_as_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let g = FieldGeometry::new([8, 8, 8], 1, 4, 8).unwrap();
    let err = reader(dir.path(), &g).index(5, [0, 0, 0]).unwrap_err();
    assert!(matches!(err, turbdb_core::Error::Missing(_)), "{err}");
}

/// Atoms handed by `atoms_in_place`: (slot, values).
type Handed = Vec<(usize, Vec<f32>)>;

/// The atoms `atoms_in_place` hands over, or `None` where it reads nothing in place.
fn in_place(
    r: &FieldReader,
    t: usize,
    requests: &[AtomRequest],
) -> turbdb_core::Result<Option<Handed>> {
    let mut got = Vec::new();
    let done = r.atoms_in_place(t, [0, 0, 0], requests, &mut |slot, bytes| {
        let values = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()));
        got.push((slot, values.collect()));
    })?;
    Ok(done.then_some(got))
}

/// Flips a bit of the byte at `at` in the file, in place (as a failing disk would), behind
/// any mapping of it.
fn flip_a_bit_in_place(path: &std::path::Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x10;
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
        .unwrap();
}

#[test]
fn atoms_read_in_place_from_the_mapped_shard_equal_atoms_read_into_a_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let (nx, ny, nz, nc) = (30, 32, 27, 3);
    let g = FieldGeometry::new([nx, ny, nz], nc, 4, 32).unwrap();
    write_step(dir.path(), &g, None, 1, &field(nx, ny, nz, nc), false).unwrap();
    let r = reader(dir.path(), &g);
    // Every other atom, so that the shard's atoms are not all adjacent; some past the grid.
    let requests: Vec<AtomRequest> = g
        .local_atom_order()
        .into_iter()
        .step_by(2)
        .enumerate()
        .map(|(slot, local)| AtomRequest { local, slot })
        .collect();
    let mut buffer = vec![0f32; requests.len() * g.atom_values()];
    r.read_atoms(1, [0, 0, 0], &requests, &mut buffer).unwrap();
    let got = in_place(&r, 1, &requests)
        .unwrap()
        .expect("an uncompressed shard is mapped");
    assert_eq!(got.len(), requests.len());
    for (slot, values) in got {
        let expected = &buffer[slot * g.atom_values()..(slot + 1) * g.atom_values()];
        let same = values
            .iter()
            .zip(expected)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "atom in slot {slot} differs");
    }
}

#[test]
fn an_atom_corrupted_on_disk_is_refused_in_place_naming_its_shard_and_its_neighbours_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let g = FieldGeometry::new([16, 16, 16], 3, 4, 16).unwrap();
    write_step(dir.path(), &g, None, 0, &field(16, 16, 16, 3), false).unwrap();
    let r = reader(dir.path(), &g);
    let first = g.local_atom_order()[0];
    let second = g.local_atom_order()[1];
    let (offset, _) = r
        .index(0, [0, 0, 0])
        .unwrap()
        .range(g.index_slot(first))
        .unwrap();
    // The reader has mapped the shard (its index was read): flip a value of its first atom
    // in the file, in place, as a failing disk would.
    let path = dir.path().join(g.shard_key(0, [0, 0, 0]));
    flip_a_bit_in_place(&path, offset as usize + 100);
    let error = in_place(
        &r,
        0,
        &[AtomRequest {
            local: first,
            slot: 0,
        }],
    )
    .unwrap_err();
    assert!(
        matches!(error, turbdb_core::Error::Corrupt { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("checksum"), "{error}");
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
    // A refused atom is not remembered as checked: refused again.
    let again = in_place(
        &r,
        0,
        &[AtomRequest {
            local: first,
            slot: 0,
        }],
    );
    assert!(
        matches!(again, Err(turbdb_core::Error::Corrupt { .. })),
        "{again:?}"
    );
    let neighbour = in_place(
        &r,
        0,
        &[AtomRequest {
            local: second,
            slot: 0,
        }],
    )
    .unwrap();
    assert_eq!(neighbour.expect("mapped").len(), 1);
}

#[test]
fn an_atom_is_checked_once_per_mapping_and_again_once_the_cache_is_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let g = FieldGeometry::new([16, 16, 16], 3, 4, 16).unwrap();
    let values = field(16, 16, 16, 3);
    write_step(dir.path(), &g, None, 0, &values, false).unwrap();
    let r = reader(dir.path(), &g);
    let first = g.local_atom_order()[0];
    let request = [AtomRequest {
        local: first,
        slot: 0,
    }];
    let read = in_place(&r, 0, &request).unwrap().expect("mapped");
    // Changed in place behind the mapping (turbdb never does: it writes aside and renames),
    // the atom checked once is handed as the file now holds it, unchecked ...
    let (offset, _) = r
        .index(0, [0, 0, 0])
        .unwrap()
        .range(g.index_slot(first))
        .unwrap();
    let path = dir.path().join(g.shard_key(0, [0, 0, 0]));
    flip_a_bit_in_place(&path, offset as usize + 100);
    let unchecked = in_place(&r, 0, &request).unwrap().expect("mapped");
    assert_ne!(unchecked[0].1, read[0].1);
    // ... until the reader's cache (index and mapping) is cleared: then checked again.
    r.clear_cache();
    let error = in_place(&r, 0, &request).unwrap_err();
    assert!(
        matches!(error, turbdb_core::Error::Corrupt { .. }),
        "{error:?}"
    );
}
