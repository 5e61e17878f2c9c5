//! Evaluation by partial sums (Kanov et al.): the [`plan`] groups a batch's points by the
//! cell they lie in ([`cell_finder`], [`counting_sort`]) with the atoms of the cell and
//! its halo their stencils touch ([`atomset`]); the [`stream`] executor reads those atoms
//! into one block per cell and sums every point of the cell from it ([`weights`] and [`accumulate`], on the SIMD
//! path the CPU has: [`simd`]); the [`direct`] baselines evaluate point by point; [`query`] runs a batch
//! end to end. Large scratch buffers are kept from query to query ([`buffers`]).
//!
//! Many queries at once (Wang et al.): the [`node`] engine cuts each query into
//! sub-queries per atom ([`subquery`]) of the [`fields`] it numbers, keeps them in
//! [`workload`] queues ranked by the workload-throughput [`metric`], lets the
//! [`scheduler`] choose batches (with the age bias adapted by [`alpha`] and ordered
//! [`jobs`] gated together), reads through the
//! [`cache`] with the [`io_pool`], serves each [`batch`] with the same kernel (its workers named by [`kernel_pool`]; a sparse field's stencils read where they lie in their atoms: [`atom_rows`]), and hands
//! results back through a [`ticket`]; [`telemetry`] says what it did. A query whose atoms
//! are all cached skips the queues: it is served at once from the [`cached_source`]; one
//! asked again with the same points is not cut again ([`recent_cuts`]).
//!
//! For a cluster, [`partitions`] restricts a batch to the partial sums of some partitions
//! and [`reach`] tells which partitions a point's stencil touches.

pub mod accumulate;
pub mod alpha;
pub(crate) mod atom_rows;
pub(crate) mod atomset;
pub mod batch;
pub(crate) mod buffers;
pub mod cache;
pub(crate) mod cache_sets;
pub(crate) mod cached_source;
pub(crate) mod cell_finder;
pub mod core_clock;
pub(crate) mod counting_sort;
pub mod direct;
pub(crate) mod fast_paths;
pub(crate) mod fields;
pub(crate) mod gather;
pub(crate) mod home_block;
pub(crate) mod home_four;
pub(crate) mod home_groups;
pub mod io_pool;
pub mod jobs;
pub mod kernel_pool;
pub mod metric;
pub(crate) mod needed_atoms;
pub mod node;
pub mod partitions;
pub mod plan;
pub mod query;
pub mod reach;
pub(crate) mod recent_cuts;
pub mod scheduler;
pub(crate) mod short_copy;
pub mod simd;
pub mod stream;
pub mod subquery;
pub mod telemetry;
pub mod ticket;
pub(crate) mod weights;
pub(crate) mod whole_stencil;
pub mod workload;
