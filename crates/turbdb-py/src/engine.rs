//! `Engine`: the node engine of one database, shared by every thread of the process that
//! queries through it (JAWS scheduling, the atom cache).

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use turbdb_core::{
    default_cache_bytes, EngineConfig, EngineStats, IoMode, Method, NodeEngine, Operator, Outcome,
    PointQuery, PolicyKind, SchedulerKind, Temporal, SIZE_CLASSES,
};

use crate::error::{to_py, without_gil};
use crate::field::{as_triples, axes_from, not_contiguous, AxisTuple, FieldStore};

/// A node engine.
#[pyclass(module = "turbdb._core", frozen)]
pub struct Engine {
    engine: NodeEngine,
}

#[pymethods]
impl Engine {
    /// `scheduler`: noshare, liferaft or jaws; `cache_bytes`: bytes of decoded atoms
    /// kept (None: a quarter of RAM, at most 4 GiB); `cache_policy`: lru, lruk, slru or
    /// urc; `io`: buffered, or direct (past the OS page cache).
    #[new]
    #[pyo3(signature = (*, scheduler="jaws", cache_bytes=None, cache_policy="urc", io="buffered"))]
    fn new(
        scheduler: &str,
        cache_bytes: Option<usize>,
        cache_policy: &str,
        io: &str,
    ) -> PyResult<Self> {
        let config = EngineConfig {
            scheduler: SchedulerKind::parse(scheduler).map_err(to_py)?,
            cache_bytes: cache_bytes.unwrap_or_else(default_cache_bytes),
            cache_policy: PolicyKind::parse(cache_policy).map_err(to_py)?,
            io: IoMode::parse(io).map_err(to_py)?,
            ..EngineConfig::default()
        };
        Ok(Self {
            engine: NodeEngine::new(config),
        })
    }

    /// Evaluates a point query on `store`'s field through the engine, as
    /// `FieldStore.query` does alone (same arguments and result), waiting with the GIL
    /// released while other queries share its reads.
    #[pyo3(signature = (store, points, *, axes, times, time, method, operator, temporal))]
    #[allow(clippy::too_many_arguments)]
    fn query<'py>(
        &self,
        py: Python<'py>,
        store: &FieldStore,
        points: PyReadonlyArray2<'py, f64>,
        axes: [AxisTuple; 3],
        times: PyReadonlyArray1<'py, f64>,
        time: f64,
        method: &str,
        operator: &str,
        temporal: &str,
    ) -> PyResult<(Bound<'py, PyArray1<f64>>, Bound<'py, PyDict>)> {
        if points.shape()[1] != 3 {
            return Err(to_py(turbdb_core::Error::InvalidArgument(
                "points must have shape (N, 3)".into(),
            )));
        }
        let method = Method::parse(method).map_err(to_py)?;
        let operator = Operator::parse(operator).map_err(to_py)?;
        let temporal = Temporal::parse(temporal).map_err(to_py)?;
        let flat = points.as_slice().map_err(|_| not_contiguous())?;
        let points3 = as_triples(flat);
        let times = times.as_slice().map_err(|_| not_contiguous())?;
        let reader = store.shared_reader();
        let query = PointQuery {
            points: points3,
            axes: axes_from(axes),
            times,
            time,
            method,
            operator,
            temporal,
            partitions: None,
            job: None,
        };
        let (values, stats) = without_gil(py, || {
            match self.engine.submit_points(&reader, &query, None)?.outcome() {
                Outcome::Done(values, stats) => Ok((values.into_sums(), stats)),
                Outcome::Failed(e) => Err(e),
                Outcome::Cancelled => Err(turbdb_core::Error::Busy {
                    message: "the node engine shut down before the query completed".into(),
                    retry_after: 1.0,
                }),
            }
        })?;
        let counters = PyDict::new(py);
        counters.set_item("atoms", stats.atoms)?;
        counters.set_item("cache_hits", stats.cache_hits)?;
        counters.set_item("atoms_read", stats.atoms_read)?;
        counters.set_item("batches", stats.batches)?;
        counters.set_item("contributions", stats.contributions)?;
        counters.set_item("response_seconds", stats.response_seconds)?;
        Ok((values.into_pyarray(py), counters))
    }

    /// What the engine has done and holds: a dict of counters, the cache's use and hit
    /// ratio, the current α and response-time histograms by query size.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.engine.stats())
    }
}

fn stats_dict<'py>(py: Python<'py>, s: &EngineStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("scheduler", s.scheduler)?;
    d.set_item("cache_policy", s.policy)?;
    d.set_item("io", s.io)?;
    d.set_item("batch_atoms", s.batch_atoms)?;
    d.set_item("cache_capacity", s.cache_capacity)?;
    d.set_item("cache_bytes", s.cache_bytes)?;
    d.set_item("cache_atoms", s.cache_atoms)?;
    d.set_item("cache_hits", s.cache_hits)?;
    d.set_item("cache_misses", s.cache_misses)?;
    d.set_item("cache_evictions", s.cache_evictions)?;
    d.set_item("hit_ratio", s.hit_ratio())?;
    d.set_item("submitted", s.submitted)?;
    d.set_item("completed", s.completed)?;
    d.set_item("failed", s.failed)?;
    d.set_item("cancelled", s.cancelled)?;
    d.set_item("pending", s.pending)?;
    d.set_item("held", s.held)?;
    d.set_item("queued_subqueries", s.queued_subqueries)?;
    d.set_item("queued_atoms", s.queued_atoms)?;
    d.set_item("pending_points", s.pending_points)?;
    d.set_item("atoms_read", s.atoms_read)?;
    d.set_item("read_requests", s.read_requests)?;
    d.set_item("bytes_read", s.bytes_read)?;
    d.set_item("batches", s.batches)?;
    d.set_item("batch_sizes", s.batch_sizes.counts.clone())?;
    d.set_item("contributions", s.contributions)?;
    d.set_item("alpha", s.alpha)?;
    d.set_item("busy_seconds", s.busy_seconds)?;
    d.set_item("served_from_cache", s.served_from_cache)?;
    d.set_item("jobs", s.jobs)?;
    d.set_item("gating_edges", s.gating_edges)?;
    let response = PyDict::new(py);
    for ((name, _), h) in SIZE_CLASSES.iter().zip(&s.response) {
        let class = PyDict::new(py);
        class.set_item("counts", h.counts.clone())?;
        class.set_item("count", h.count)?;
        class.set_item("sum_seconds", h.sum)?;
        response.set_item(*name, class)?;
    }
    d.set_item("response", response)?;
    Ok(d)
}
