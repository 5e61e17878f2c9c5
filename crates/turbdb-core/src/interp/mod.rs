//! Interpolation: every method, operator and temporal mode is a separable linear
//! combination of stored values. [`names`] lists the names a query accepts, [`method`]
//! parses them, [`stencil`] gives each point's 1-D weights per axis from the [`lagrange`]
//! and [`spline`] bases, [`time`] the weights of the stored steps.

pub mod lagrange;
pub mod method;
pub mod names;
pub mod spline;
pub mod stencil;
pub mod time;
