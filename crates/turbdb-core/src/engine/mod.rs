//! Evaluation by partial sums (Kanov et al.): the [`plan`] groups a batch's points by the
//! cells their stencils touch ([`atomset`], [`cell_finder`], [`colouring`],
//! [`counting_sort`]); the [`stream`] executor reads each needed atom once and adds its
//! contribution to every point that needs it ([`accumulate`], [`lanes`]); the [`direct`]
//! baselines evaluate point by point; [`query`] runs a batch end to end. Large scratch
//! buffers are kept from query to query ([`buffers`]). For a cluster, [`partitions`]
//! restricts a batch to the partial sums of some partitions and [`reach`] tells which
//! partitions a point's stencil touches.

pub mod accumulate;
pub(crate) mod atomset;
pub(crate) mod buffers;
pub(crate) mod cell_finder;
pub(crate) mod colouring;
pub(crate) mod counting_sort;
pub mod direct;
pub(crate) mod lanes;
pub mod partitions;
pub mod plan;
pub mod query;
pub mod reach;
pub mod stream;
