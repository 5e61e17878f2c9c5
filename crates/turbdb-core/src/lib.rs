//! turbdb-core: the storage and query engine of turbdb, free of any Python.
//!
//! Three wings, each a module:
//!
//! - [`storage`]: Zarr v3 shards of Morton-ordered atoms — layout, writing, reading,
//!   verifying, cutouts.
//! - [`interp`]: the interpolation methods, operators and temporal modes as separable
//!   stencil weights.
//! - [`engine`]: batch evaluation by partial sums — the plan, the streaming executor and
//!   its kernel, and the direct baselines — and the node engine that serves many queries
//!   at once (JAWS scheduling, the atom cache).
//!
//! The items most callers need are re-exported here.

pub mod engine;
pub mod error;
pub mod interp;
pub mod memory;
pub mod routing;
pub mod storage;

pub use engine::cache::PolicyKind;
pub use engine::core_clock::measured_clock_hz;
pub use engine::jobs::gating::JobId;
pub use engine::node::{default_cache_bytes, CutoutQuery, EngineConfig, NodeEngine, PointQuery};
pub use engine::partitions::Partitions;
pub use engine::plan::{BlockValues, Plan};
pub use engine::query::{
    evaluate, evaluate_within, evaluate_within_f32, evaluate_within_f64, run, QuerySpec, Strategy,
    STRATEGY_NAMES,
};
pub use engine::reach::stencil_reach;
pub use engine::scheduler::SchedulerKind;
pub use engine::simd::KernelPath;
pub use engine::stream::{
    block_values, execute, execute_within, AnswerValue, Order, StreamStats, TimeLevel,
};
pub use engine::telemetry::{EngineStats, Histogram, BATCH_BOUNDS, RESPONSE_BOUNDS, SIZE_CLASSES};
pub use engine::ticket::{Completions, Outcome, QueryStats, Ticket, Values};
pub use error::{Error, Result};
pub use interp::method::{Method, Operator};
pub use interp::names::{
    METHOD_ALIASES, METHOD_NAMES, OPERATOR_ALIASES, OPERATOR_NAMES, TEMPORAL_ALIASES,
    TEMPORAL_NAMES,
};
pub use interp::time::{time_weights, Temporal};
pub use storage::axis::Axis;
pub use storage::binding::ShardHeader;
pub use storage::cutout::{axis_nodes, cutout_shape, human_bytes, read_cutout};
pub use storage::direct::IoMode;
pub use storage::geometry::FieldGeometry;
pub use storage::morton;
pub use storage::reader::{AtomRequest, AtomSource, FieldReader, OpenedShard};
pub use storage::shard::{ChunkCodec, IndexLocation, ShardIndex};
pub use storage::verify::{verify_field, Problem, VerifyReport};
pub use storage::writer::{write_step, Sample};
