//! Evaluation by partial sums (Kanov et al.): the [`plan`] groups a batch's points by the
//! cells their stencils touch ([`atomset`], [`cell_finder`], [`colouring`],
//! [`counting_sort`]); the [`stream`] executor reads each needed atom once and adds its
//! contribution to every point that needs it ([`accumulate`], on the SIMD path the CPU
//! has: [`simd`]); the [`direct`] baselines evaluate point by point; [`query`] runs a batch
//! end to end. Large scratch buffers are kept from query to query ([`buffers`]).

pub mod accumulate;
pub(crate) mod atomset;
pub(crate) mod buffers;
pub(crate) mod cell_finder;
pub(crate) mod colouring;
pub(crate) mod counting_sort;
pub mod direct;
pub mod plan;
pub mod query;
pub mod simd;
pub mod stream;
