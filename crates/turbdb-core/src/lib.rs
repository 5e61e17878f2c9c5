//! turbdb-core: the storage and query engine of turbdb, free of any Python.
//!
//! A field of a dataset is a Zarr v3 array `(nt, nz, ny, nx, ncomp)` of float32 whose
//! shards are partitions of `P³` voxels of one time step and whose inner chunks are atoms
//! of `A³` voxels stored in Morton order ([`geometry`], [`shard`]). [`writer`] writes a
//! time step crash-safely, [`reader`] reads atoms with cached indexes and merged reads,
//! [`verify`] checks every checksum.

pub mod error;
pub mod geometry;
pub mod morton;
pub mod reader;
pub mod shard;
pub mod verify;
pub mod writer;

pub use error::{Error, Result};
pub use geometry::FieldGeometry;
pub use reader::{AtomRequest, FieldReader};
pub use shard::{ChunkCodec, IndexLocation, ShardIndex};
pub use verify::{verify_field, Problem, VerifyReport};
pub use writer::write_step;
