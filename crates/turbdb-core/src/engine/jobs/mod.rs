//! Jobs: ordered sequences of queries whose data regions are known ahead (a server-side
//! particle track; a client's declared plan). Pairs of jobs are aligned ([`alignment`]) and
//! gated so that their overlapping queries run together ([`gating`]; each query's edges are
//! its [`partners`]).

pub mod alignment;
pub mod contraction;
pub mod gating;
pub mod partners;
