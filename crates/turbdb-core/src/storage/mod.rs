//! Storage: a field is a Zarr v3 array `(nt, nz, ny, nx, ncomp)` of float32 whose shards
//! are partitions of `P³` voxels of one time step and whose inner chunks are atoms of `A³`
//! voxels stored in Morton order ([`geometry`], [`shard`], [`morton`]). [`writer`] writes
//! a time step crash-safely, [`reader`] reads atoms with cached indexes and merged reads,
//! [`verify`] checks every checksum, [`cutout`] copies a box of nodes out; [`direct`] reads
//! atoms for the node engine, past the page cache when asked.

pub mod axis;
pub mod cutout;
pub mod direct;
pub mod geometry;
pub mod morton;
pub mod reader;
pub mod shard;
pub mod verify;
pub mod writer;
