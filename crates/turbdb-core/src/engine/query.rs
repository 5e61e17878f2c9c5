//! A batch query end to end: plan, then evaluate by the chosen strategy at the stored time
//! steps the temporal interpolation needs.

use std::time::Instant;

use crate::engine::direct::execute_direct;
use crate::engine::partitions::Partitions;
use crate::engine::plan::Plan;
use crate::engine::stream::{
    block_values, execute, execute_within, AnswerValue, Order, PhaseTimes, StreamStats, TimeLevel,
};
use crate::error::{Error, Result};
use crate::interp::method::{Method, Operator};
use crate::interp::time::{time_weights, Temporal};
use crate::storage::axis::Axis;
use crate::storage::reader::AtomSource;
use crate::storage::reader::FieldReader;

/// How the atoms reach the points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Each atom read once, contributions streamed into partial sums (the default).
    Streaming,
    /// Each point gathers its stencil, in arrival order.
    Direct,
    /// Each point gathers its stencil, points in Morton order.
    Sorted,
}

/// Every strategy name a query accepts.
pub const STRATEGY_NAMES: &[&str] = &["streaming", "sorted", "direct"];

impl Strategy {
    /// Parses `streaming`, `direct` or `sorted`.
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "streaming" => Ok(Strategy::Streaming),
            "direct" => Ok(Strategy::Direct),
            "sorted" => Ok(Strategy::Sorted),
            _ => Err(Error::UnknownName(format!(
                "unknown strategy {name:?}; valid strategies: {}",
                STRATEGY_NAMES.join(", ")
            ))),
        }
    }
}

/// Everything a query asks for.
#[derive(Debug, Clone)]
pub struct QuerySpec {
    /// Interpolation method.
    pub method: Method,
    /// Operator.
    pub operator: Operator,
    /// Time interpolation.
    pub temporal: Temporal,
    /// Physical time.
    pub time: f64,
    /// Evaluation strategy.
    pub strategy: Strategy,
}

/// Evaluates `spec` at `points` on the field read by `reader` whose stored times are
/// `times`. Returns `N × ncomp × slots` float64 values, point-major.
pub fn evaluate(
    reader: &FieldReader,
    axes: [Axis; 3],
    times: &[f64],
    points: &[[f64; 3]],
    spec: &QuerySpec,
    stats: &StreamStats,
) -> Result<Vec<f64>> {
    evaluate_within(reader, axes, times, points, spec, None, stats)
}

/// [`evaluate_within`] with float32 answers, compiled in this crate: another crate that
/// called the generic would compile the whole kernel again (release builds do not share
/// generic code between crates).
pub fn evaluate_within_f32(
    reader: &FieldReader,
    axes: [Axis; 3],
    times: &[f64],
    points: &[[f64; 3]],
    spec: &QuerySpec,
    within: Option<&Partitions>,
    stats: &StreamStats,
) -> Result<Vec<f32>> {
    evaluate_within(reader, axes, times, points, spec, within, stats)
}

/// [`evaluate_within`] with float64 answers, compiled in this crate (see
/// [`evaluate_within_f32`]).
pub fn evaluate_within_f64(
    reader: &FieldReader,
    axes: [Axis; 3],
    times: &[f64],
    points: &[[f64; 3]],
    spec: &QuerySpec,
    within: Option<&Partitions>,
    stats: &StreamStats,
) -> Result<Vec<f64>> {
    evaluate_within(reader, axes, times, points, spec, within, stats)
}

/// Like [`evaluate`], adding only the atoms of the partitions `within` (all when `None`):
/// the partial sums a node of a cluster contributes (needs the streaming strategy), as
/// answers of type `T` (float32 or float64; the sums are float64 either way).
pub fn evaluate_within<T: AnswerValue>(
    reader: &FieldReader,
    axes: [Axis; 3],
    times: &[f64],
    points: &[[f64; 3]],
    spec: &QuerySpec,
    within: Option<&Partitions>,
    stats: &StreamStats,
) -> Result<Vec<T>> {
    if within.is_some() && spec.strategy != Strategy::Streaming {
        return Err(Error::InvalidArgument(
            "partial sums of some partitions need the streaming strategy".into(),
        ));
    }
    let levels: Vec<TimeLevel> = time_weights(times, spec.time, spec.temporal)?
        .into_iter()
        .map(|(t, weight)| TimeLevel { t, weight })
        .collect();
    let planning = Instant::now();
    let plan = Plan::new(
        points,
        spec.method,
        spec.operator,
        axes,
        reader.geometry().clone(),
        block_values(&levels, spec.operator, T::FLOAT32),
    )?;
    PhaseTimes::add(&stats.phases.plan, planning.elapsed());
    match (within, spec.strategy) {
        (Some(_), _) | (None, Strategy::Streaming) => {
            execute_within(&plan, reader, &levels, within, Order::Storage, stats)
        }
        // The baselines, for comparison only: cast afterwards.
        (None, strategy) => Ok(run(&plan, reader, &levels, strategy, stats)?
            .into_iter()
            .map(T::from_sum)
            .collect()),
    }
}

/// Runs a prepared plan with a strategy.
pub fn run(
    plan: &Plan,
    source: &dyn AtomSource,
    levels: &[TimeLevel],
    strategy: Strategy,
    stats: &StreamStats,
) -> Result<Vec<f64>> {
    match strategy {
        Strategy::Streaming => execute(plan, source, levels, Order::Storage, stats),
        Strategy::Direct => execute_direct(plan, source, levels, false, stats),
        Strategy::Sorted => execute_direct(plan, source, levels, true, stats),
    }
}
