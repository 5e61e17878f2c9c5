//! The fields a node engine reads, numbered: the number is what its atom cache, its queues
//! and its jobs know a field by. A field made again over an old one gets a new number, never
//! one given before, so no query of it takes the old field's cached atoms; and the engine
//! lets go of the old field's reader, with the shard files it keeps mapped (each dataset
//! created again over itself kept every old reader and its deleted files' mappings).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::storage::reader::FieldReader;

/// What tells a field from another read from the same directory: the directory's (device,
/// inode), the field's id, and its grid, components, atom and partition. A dataset created
/// again over an old one is a new field (the old one's reader and cached atoms describe
/// other data, even another grid), whether in a new directory or in the old one (a copy
/// updated file by file, as rsync does, keeps the directories).
type Identity = ((u64, u64), Option<u64>, [usize; 6]);

/// A field the engine reads now.
struct Current {
    id: u32,
    identity: Identity,
    reader: Arc<FieldReader>,
}

/// The engine's fields: one current field per directory.
#[derive(Default)]
pub(crate) struct Fields {
    /// By the path of the field's first shard (which names its directory).
    by_path: FxHashMap<PathBuf, Current>,
    /// The numbers of the fields in `by_path`.
    current: FxHashSet<u32>,
    /// The number the next new field gets.
    next: u32,
}

/// A field's number and the reader its queries go through.
pub(crate) struct Numbered {
    pub id: u32,
    pub reader: Arc<FieldReader>,
    /// The number of the field this one replaced in its directory: its cached atoms are
    /// to be dropped (queries of it in flight keep their own reader and finish).
    pub replaced: Option<u32>,
}

impl Fields {
    /// The number of the field `reader` reads, given on first sight; a field of another
    /// identity in the same directory is forgotten.
    pub fn number(&mut self, reader: &Arc<FieldReader>) -> Numbered {
        let g = reader.geometry();
        let identity = (
            reader.identity(),
            reader.field_id(),
            [
                g.grid[0],
                g.grid[1],
                g.grid[2],
                g.ncomp,
                g.atom,
                g.partition,
            ],
        );
        let path = reader.shard_path(0, [0, 0, 0]);
        if let Some(known) = self.by_path.get(&path) {
            if known.identity == identity {
                return Numbered {
                    id: known.id,
                    reader: Arc::clone(&known.reader),
                    replaced: None,
                };
            }
        }
        let id = self.next;
        // Never reused while the engine lives (4·10⁹ fields made before one would be).
        self.next = self.next.wrapping_add(1);
        self.current.insert(id);
        let new = Current {
            id,
            identity,
            reader: Arc::clone(reader),
        };
        let replaced = self.by_path.insert(path, new).map(|old| {
            self.current.remove(&old.id);
            old.id
        });
        Numbered {
            id,
            reader: Arc::clone(reader),
            replaced,
        }
    }

    /// Forgets the fields read from directories under `dir` (a dataset deleted, or moved
    /// away: its directory is no longer where it was read). Returns their numbers, whose
    /// cached atoms are to be dropped; a field read there again later gets a new number.
    pub fn forget_under(&mut self, dir: &Path) -> Vec<u32> {
        let gone: Vec<PathBuf> = self
            .by_path
            .keys()
            .filter(|path| path.starts_with(dir))
            .cloned()
            .collect();
        let mut forgotten = Vec::with_capacity(gone.len());
        for path in gone {
            if let Some(old) = self.by_path.remove(&path) {
                self.current.remove(&old.id);
                forgotten.push(old.id);
            }
        }
        forgotten
    }

    /// Whether field `id` is still read (not replaced).
    pub fn is_current(&self, id: u32) -> bool {
        self.current.contains(&id)
    }

    /// How many fields are read now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_path.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::geometry::FieldGeometry;
    use crate::storage::shard::{ChunkCodec, IndexLocation};

    /// A reader of the field `made` in `dir` (its id: a directory made again may get
    /// its old inode).
    fn reader_of(dir: &std::path::Path, grid: usize, made: u64) -> Arc<FieldReader> {
        let geometry = FieldGeometry::new([grid, grid, grid], 1, 4, 8).unwrap();
        Arc::new(
            FieldReader::new(dir, geometry, ChunkCodec::TURBDB, IndexLocation::End)
                .with_field_id(Some(made)),
        )
    }

    #[test]
    fn the_fields_of_a_directory_gone_are_forgotten_and_numbered_anew() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for field in [a.join("u"), a.join("p"), b.join("u")] {
            std::fs::create_dir_all(field).unwrap();
        }
        let mut fields = Fields::default();
        let first = fields.number(&reader_of(&a.join("u"), 16, 1));
        let second = fields.number(&reader_of(&a.join("p"), 16, 2));
        let other = fields.number(&reader_of(&b.join("u"), 16, 3));
        let mut forgotten = fields.forget_under(&a);
        forgotten.sort();
        assert_eq!(forgotten, vec![first.id, second.id]);
        assert!(!fields.is_current(first.id) && !fields.is_current(second.id));
        assert!(fields.is_current(other.id));
        assert_eq!(fields.len(), 1);
        // A directory whose name begins as the gone one's is another directory.
        assert!(fields.forget_under(&dir.path().join("b2")).is_empty());
        let again = fields.number(&reader_of(&a.join("u"), 16, 1));
        assert!(again.id != first.id && again.id != second.id && again.replaced.is_none());
    }

    #[test]
    fn a_field_made_again_gets_a_new_number_and_the_old_reader_is_let_go() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let mut fields = Fields::default();
        let first = reader_of(&a, 16, 0);
        let other = fields.number(&reader_of(&b, 16, 0));
        let one = fields.number(&first);
        // Seen again (another reader of the same field): the same number and reader.
        let again = fields.number(&reader_of(&a, 16, 0));
        assert_eq!((again.id, again.replaced), (one.id, None));
        assert!(Arc::ptr_eq(&again.reader, &first));
        let old = Arc::downgrade(&first);
        let mut seen = vec![other.id, one.id];
        drop((first, one, again));
        for made in 1..=20 {
            // Made again in a new directory at the same path (overwrite=True).
            std::fs::remove_dir_all(&a).unwrap();
            std::fs::create_dir(&a).unwrap();
            let made = fields.number(&reader_of(&a, 16, made));
            assert!(made.replaced.is_some_and(|r| seen.contains(&r)));
            assert!(!seen.contains(&made.id), "a number given before");
            seen.push(made.id);
            assert_eq!(fields.len(), 2);
        }
        assert!(
            old.upgrade().is_none(),
            "the first reader of `a` is still held"
        );
        assert!(fields.is_current(other.id));
        assert!(!fields.is_current(seen[1]));
        // Another layout in the same directory is another field too.
        let regridded = fields.number(&reader_of(&a, 32, 20));
        assert_eq!(regridded.replaced, seen.last().copied());
        assert_eq!(fields.len(), 2);
    }
}
