//! `Engine`: the node engine of one database, shared by every thread of the process that
//! queries through it (JAWS scheduling, the atom cache).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use numpy::{
    IntoPyArray, PyArray1, PyArrayDyn, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use turbdb_core::{
    axis_nodes, cutout_shape, default_cache_bytes, Completions, CutoutQuery, EngineConfig,
    EngineStats, IoMode, JobId, Method, NodeEngine, Operator, Outcome, PointQuery, PolicyKind,
    QueryStats, SchedulerKind, Temporal, Ticket, BATCH_BOUNDS, RESPONSE_BOUNDS, SIZE_CLASSES,
};

use crate::error::{invalid, to_py, without_gil, Result};
use crate::field::{as_triples, axes_from, not_contiguous, AxisTuple, FieldStore};
use crate::limits::max_result_bytes;
use crate::stop::{flag_of, StopFlag};

/// A node engine. Weakly referenceable: `turbdb.open` keeps one per database and settings
/// in a process for as long as something uses it.
#[pyclass(module = "turbdb._core", frozen, weakref)]
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
    /// `job`: the declared job (`declare_job`) this query is the next query of. `narrow`:
    /// the answer will be rounded to float32, so a field's sums along z and y of the
    /// stored float32 values may run in float32 (as `FieldStore.query` does for a float32
    /// `dtype`).
    #[pyo3(signature = (store, points, *, axes, times, time, method, operator, temporal, job=None, narrow=false))]
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
        job: Option<JobId>,
        narrow: bool,
    ) -> Result<(Bound<'py, PyArray1<f64>>, Bound<'py, PyDict>)> {
        let mut query = point_query(&points, axes, &times, time, method, operator, temporal, job)?;
        query.narrow = narrow;
        let reader = store.shared_reader();
        let (values, stats) = without_gil(py, || {
            match self.engine.submit_points(&reader, &query, None)?.outcome() {
                Outcome::Done(values, stats) => Ok((values.into_sums(), stats)),
                Outcome::Failed(e) => Err(e),
                Outcome::Cancelled => Err(shut_down()),
            }
        })?;
        Ok((values.into_pyarray(py), counters(py, &stats)?))
    }

    /// Hands a point query to the engine (the arguments of `query`) and returns at once:
    /// a `PendingQuery` to wait on, take the answer of, or cancel (the service cancels the
    /// query of a client that went away). Errors in the arguments are raised here.
    /// `notify`: a `CompletionQueue` that gets the query's `id` when it ends (also when it
    /// ended before this returned: served at once from the cache).
    /// `stop`: a `StopFlag` that stops the evaluation of a query the engine serves alone,
    /// at once, before this returns (a queued one is stopped by `PendingQuery.cancel`).
    #[pyo3(signature = (store, points, *, axes, times, time, method, operator, temporal, job=None, narrow=false, notify=None, stop=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit<'py>(
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
        job: Option<JobId>,
        narrow: bool,
        notify: Option<PyRef<'py, CompletionQueue>>,
        stop: Option<PyRef<'py, StopFlag>>,
    ) -> Result<PendingQuery> {
        let mut query = point_query(&points, axes, &times, time, method, operator, temporal, job)?;
        query.narrow = narrow;
        query.stop = flag_of(stop);
        // Without the GIL: cutting a query of 10⁵ points takes about 20 ms, and a large
        // query that finds the engine idle is served here, alone.
        let reader = store.shared_reader();
        let notify = notify.map(|queue| Arc::clone(&queue.queue));
        let ticket = without_gil(py, || self.engine.submit_points(&reader, &query, notify))?;
        Ok(PendingQuery {
            ticket: RwLock::new(ticket),
            cancelled: AtomicBool::new(false),
            taken: AtomicBool::new(false),
        })
    }

    /// Reads the nodes `[start, stop)` with `stride` along each axis at time index `t`
    /// through the engine (its atoms come from, and go to, the shared cache): the float32
    /// array `(nz, ny, nx, ncomp)` that `FieldStore.cutout` reads alone.
    #[pyo3(signature = (store, t, axes, ranges, stride, *, job=None))]
    #[allow(clippy::too_many_arguments)]
    fn cutout<'py>(
        &self,
        py: Python<'py>,
        store: &FieldStore,
        t: usize,
        axes: [AxisTuple; 3],
        ranges: [(i64, i64); 3],
        stride: usize,
        job: Option<JobId>,
    ) -> Result<Bound<'py, PyArrayDyn<f32>>> {
        let reader = store.shared_reader();
        let axes = axes_from(axes);
        let nc = reader.geometry().ncomp;
        let shape = cutout_shape(&axes, ranges, stride, nc, max_result_bytes())?;
        let mut nodes: [Vec<usize>; 3] = Default::default();
        for (i, name) in ['x', 'y', 'z'].into_iter().enumerate() {
            nodes[i] = axis_nodes(&axes[i], ranges[i].0, ranges[i].1, stride, name)?;
        }
        let query = CutoutQuery { t, nodes, job };
        let values = without_gil(py, || {
            match self.engine.submit_cutout(&reader, &query, None)?.outcome() {
                Outcome::Done(values, _) => Ok(values.into_cutout()),
                Outcome::Failed(e) => Err(e),
                Outcome::Cancelled => Err(shut_down()),
            }
        })?;
        let array = numpy::ndarray::ArrayD::from_shape_vec(shape.to_vec(), values)?;
        Ok(array.into_pyarray(py))
    }

    /// Declares a job: the ordered queries it will send, each as `(store, time indices it
    /// reads)`. Returns the job's number, to give as `job=` with each of its queries in
    /// order; the JAWS scheduler holds a query of it briefly so that it runs together with
    /// the queries of other jobs that read the same time steps.
    fn declare_job(&self, plan: Vec<(Bound<'_, FieldStore>, Vec<usize>)>) -> JobId {
        let plan: Vec<_> = plan
            .iter()
            .map(|(store, steps)| (store.get().shared_reader(), steps.clone()))
            .collect();
        self.engine.declare_job(&plan)
    }

    /// Ends a job: its queries still to come run ungated, and those of other jobs stop
    /// waiting for it. Closing a job twice, or one that ended by itself, does nothing.
    fn close_job(&self, job: JobId) {
        self.engine.close_job(job);
    }

    /// Forgets the cached atoms and shard indexes of time step `t` of the field of `store`:
    /// the step was rewritten, and later queries must read the new one.
    fn invalidate(&self, store: &Bound<'_, FieldStore>, t: usize) {
        self.engine.invalidate(&store.get().shared_reader(), t);
    }

    /// Lets go of the fields read from directories under `path` (a dataset deleted or moved
    /// away): their cached atoms, and their readers with the shard files they map once
    /// their queries in flight are done. Returns how many fields were let go.
    fn forget_directory(&self, path: std::path::PathBuf) -> usize {
        self.engine.forget_directory(&path)
    }

    /// What the engine has done and holds: a dict of counters, the cache's use and hit
    /// ratio, the current α and response-time histograms by query size.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.engine.stats())
    }
}

/// A point query handed to the engine by `Engine.submit`. Dropping it before its answer
/// was taken cancels the query.
#[pyclass(module = "turbdb._core", frozen)]
pub struct PendingQuery {
    /// Read-locked to wait and cancel (from several threads at once), write-locked to take
    /// the outcome.
    ticket: RwLock<Ticket>,
    cancelled: AtomicBool,
    taken: AtomicBool,
}

/// The ids of queries that ended, for a caller that awaits many at once (an event loop):
/// one thread waits here for all of them, where `PendingQuery.wait` takes a thread each.
#[pyclass(module = "turbdb._core", frozen)]
pub struct CompletionQueue {
    queue: Arc<Completions>,
}

#[pymethods]
impl CompletionQueue {
    #[new]
    fn new() -> Self {
        Self {
            queue: Completions::new(),
        }
    }

    /// Waits up to `timeout` seconds, with the GIL released, for queries given this queue
    /// (`Engine.submit(notify=…)`) to end: their ids (an empty list if none ended in
    /// time), or None once the queue is closed and empty.
    fn wait(&self, py: Python<'_>, timeout: f64) -> Result<Option<Vec<u64>>> {
        if !(timeout.is_finite() && timeout >= 0.0) {
            return Err(invalid(format!(
                "timeout must be a finite number of seconds ≥ 0, not {timeout}"
            )));
        }
        let timeout = Duration::from_secs_f64(timeout);
        Ok(py.detach(|| self.queue.wait(timeout)))
    }

    /// Closes the queue: a waiter gets None once it has taken the ids left.
    fn close(&self) {
        self.queue.close();
    }
}

#[pymethods]
impl PendingQuery {
    /// The query's number in the engine: what a `CompletionQueue` reports when it ends.
    #[getter]
    fn id(&self) -> u64 {
        self.ticket.read().expect("ticket").id()
    }

    /// Waits up to `timeout` seconds (None: until the query ends) with the GIL released;
    /// whether it has ended.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> Result<bool> {
        let timeout = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => {
                return Err(invalid(format!(
                    "timeout must be a finite number of seconds ≥ 0, not {t}"
                )))
            }
        };
        Ok(py.detach(|| self.ticket.read().expect("ticket").wait(timeout)))
    }

    /// Cancels the query: its sub-queries still pending in the engine are dropped.
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
        self.ticket.read().expect("ticket").cancel();
    }

    /// Whether the query has ended (answered, failed or cancelled).
    #[getter]
    fn done(&self) -> bool {
        self.ticket.read().expect("ticket").is_done()
    }

    /// Waits for the query and returns what `Engine.query` returns: its values and counters.
    fn result<'py>(
        &self,
        py: Python<'py>,
    ) -> Result<(Bound<'py, PyArray1<f64>>, Bound<'py, PyDict>)> {
        py.detach(|| self.ticket.read().expect("ticket").wait(None));
        if self.taken.swap(true, Ordering::Relaxed) {
            return Err(invalid("the answer of this query was taken already"));
        }
        let outcome = self.ticket.write().expect("ticket").take();
        match outcome {
            Some(Outcome::Done(values, stats)) => {
                Ok((values.into_sums().into_pyarray(py), counters(py, &stats)?))
            }
            Some(Outcome::Failed(e)) => Err(e.into()),
            Some(Outcome::Cancelled) if !self.cancelled.load(Ordering::Relaxed) => {
                Err(shut_down().into())
            }
            Some(Outcome::Cancelled) | None => {
                Err(invalid("the query was cancelled: it has no answer"))
            }
        }
    }
}

/// The point query that `Engine.query` and `Engine.submit` are given, checked.
#[allow(clippy::too_many_arguments)]
fn point_query<'a>(
    points: &'a PyReadonlyArray2<'_, f64>,
    axes: [AxisTuple; 3],
    times: &'a PyReadonlyArray1<'_, f64>,
    time: f64,
    method: &str,
    operator: &str,
    temporal: &str,
    job: Option<JobId>,
) -> Result<PointQuery<'a>> {
    if points.shape()[1] != 3 {
        return Err(invalid("points must have shape (N, 3)"));
    }
    Ok(PointQuery {
        points: as_triples(points.as_slice().map_err(|_| not_contiguous())?),
        axes: axes_from(axes),
        times: times.as_slice().map_err(|_| not_contiguous())?,
        time,
        method: Method::parse(method)?,
        operator: Operator::parse(operator)?,
        temporal: Temporal::parse(temporal)?,
        partitions: None,
        job,
        narrow: false,
        stop: None,
    })
}

/// A query's counters, as `Engine.query` gives them.
fn counters<'py>(py: Python<'py>, stats: &QueryStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("atoms", stats.atoms)?;
    d.set_item("cache_hits", stats.cache_hits)?;
    d.set_item("atoms_read", stats.atoms_read)?;
    d.set_item("batches", stats.batches)?;
    d.set_item("contributions", stats.contributions)?;
    d.set_item("gated_seconds", stats.gated_seconds)?;
    d.set_item("response_seconds", stats.response_seconds)?;
    Ok(d)
}

/// What a waiter sees of a query the engine dropped without being asked to: it shut down.
fn shut_down() -> turbdb_core::Error {
    turbdb_core::Error::Busy {
        message: "the node engine shut down before the query completed".into(),
        retry_after: 1.0,
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
    d.set_item("batch_atoms_sum", s.batch_sizes.sum)?;
    // Upper bounds of the histograms' buckets (the last bucket, past them, is unbounded).
    d.set_item("batch_size_bounds", BATCH_BOUNDS.to_vec())?;
    d.set_item("response_bounds_seconds", RESPONSE_BOUNDS.to_vec())?;
    d.set_item("contributions", s.contributions)?;
    d.set_item("block_points", s.block_points)?;
    d.set_item("block_points_shared", s.block_points_shared)?;
    d.set_item("alpha", s.alpha)?;
    d.set_item("busy_seconds", s.busy_seconds)?;
    d.set_item("read_wait_seconds", s.read_wait_seconds)?;
    d.set_item("schedule_seconds", s.schedule_seconds)?;
    d.set_item("idle_seconds", s.idle_seconds)?;
    d.set_item("served_from_cache", s.served_from_cache)?;
    d.set_item("served_alone", s.served_alone)?;
    d.set_item("cuts_reused", s.cuts_reused)?;
    d.set_item("jobs", s.jobs)?;
    d.set_item("gating_edges", s.gating_edges)?;
    let gating = PyDict::new(py);
    gating.set_item("edges", s.gating.edges)?;
    gating.set_item("refused", s.gating.refused)?;
    gating.set_item("timeouts", s.gating.timeouts)?;
    gating.set_item("idle_releases", s.gating.idle_releases)?;
    gating.set_item("co_scheduled", s.gating.co_scheduled)?;
    d.set_item("gating", gating)?;
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
