//! turbdb-core: the storage and query engine of turbdb, free of any Python.
//!
//! A field of a dataset is a Zarr v3 array `(nt, nz, ny, nx, ncomp)` of float32 whose
//! shards are partitions of `P³` voxels of one time step and whose inner chunks are atoms
//! of `A³` voxels stored in Morton order ([`geometry`], [`shard`]). [`writer`] writes a
//! time step crash-safely, [`reader`] reads atoms with cached indexes and merged reads,
//! [`verify`] checks every checksum.
//!
//! Queries ([`query`]) interpolate and differentiate at arbitrary points by separable
//! stencils ([`method`], [`stencil`], [`lagrange`], [`spline`], [`time`]): the [`plan`]
//! groups points by the cells their stencils touch ([`atomset`]), the [`stream`] executor
//! reads each atom once and adds its contribution to every point that needs it
//! ([`accumulate`], [`lanes`]); the [`direct`] baselines evaluate point by point.
//! Large scratch buffers are kept from query to query ([`buffers`]).

pub mod accumulate;
pub mod atomset;
pub mod buffers;
mod cell_finder;
mod colouring;
mod counting_sort;
pub mod cutout;
pub mod direct;
pub mod error;
pub mod geometry;
pub mod lagrange;
pub mod lanes;
pub mod method;
pub mod morton;
pub mod plan;
pub mod query;
pub mod reader;
pub mod shard;
pub mod spline;
pub mod stencil;
pub mod stream;
pub mod time;
pub mod verify;
pub mod writer;

pub use error::{Error, Result};
pub use geometry::FieldGeometry;
pub use method::{Method, Operator};
pub use query::{evaluate, QuerySpec, Strategy};
pub use reader::{AtomRequest, FieldReader};
pub use shard::{ChunkCodec, IndexLocation, ShardIndex};
pub use stencil::Axis;
pub use stream::{StreamStats, TimeLevel};
pub use time::Temporal;
pub use verify::{verify_field, Problem, VerifyReport};
pub use writer::write_step;
