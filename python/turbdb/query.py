"""Point queries of a local dataset: arguments checked by :mod:`turbdb.arguments`,
evaluation in the Rust engine (turbdb._core) with the GIL released."""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _core, stoppable
from .arguments import (
    METHOD_ALIASES, METHODS, OPERATOR_ALIASES, OPERATORS, SLOTS, STRATEGIES, TEMPORAL_ALIASES, TEMPORALS,
    aligned, axes_of, choice, finite_number, is_series, known_field, point_array, result_dtype, time_list,
)
from .exceptions import QueryCancelledError, TurbdbError
from .jobs import job_number
from .size_limit import check_answer_bytes
from .written_steps import naming_the_step, stencil_times
from .step_versions import StepVersions, steps_read

if TYPE_CHECKING:
    from .dataset import Dataset

#: How often (seconds) a query given a ``cancel`` event looks at it while the engine works.
CANCEL_POLL = 0.05


def query(
    dataset: Dataset,
    field: str,
    points: Any,
    *,
    time: Any,
    method: str = "lag6",
    operator: str = "field",
    temporal: str = "none",
    dtype: Any = np.float32,
    strategy: str = "streaming",
    job: Any = None,
    cancel: threading.Event | None = None,
) -> np.ndarray:
    """See :meth:`turbdb.Dataset.query`."""
    if is_series(time):  # one evaluation per time, stacked; the whole answer checked first
        times = time_list(time)
        point_call(dataset, field, points, time=times[0], method=method, operator=operator, temporal=temporal,
                   dtype=dtype, strategy=strategy, job=job, series=len(times))
        return np.stack([query(dataset, field, points, time=t, method=method, operator=operator, temporal=temporal,
                               dtype=dtype, strategy=strategy, job=job, cancel=cancel) for t in time_list(time)])
    call = point_call(dataset, field, points, time=time, method=method, operator=operator, temporal=temporal,
                      dtype=dtype, strategy=strategy, job=job)
    return evaluate_call(dataset, call, cancel)


def evaluate_call(dataset: Dataset, call: PointCall, cancel: threading.Event | None = None,
                  stop: Any = None) -> np.ndarray:
    """The answer to a checked point query (:func:`point_call`): through the dataset's node
    engine or its store, as the call's strategy says; ``cancel`` as in :func:`query`.
    ``stop``: a ``_core.StopFlag`` that stops a streaming evaluation by the dataset's own
    store, between cells (the service sets it when the client goes away). Evaluated again
    while a rewrite of a step it reads overlapped it (:mod:`turbdb.step_versions`)."""
    call = call.settled(dataset)
    while True:
        try:
            return _evaluate(dataset, call, cancel, stop)
        except TurbdbError as error:  # any of them: DatasetReplacedError where the dataset was created again
            if not call.versions.spoiled(dataset, error):
                # Not bound to a name: a local holding the error would keep this frame (the
                # dataset, its engine) alive in a cycle through its traceback until a collection.
                if call.named(error) is error:
                    raise
                raise call.named(error) from None
        call = call.renewed(dataset)


def _evaluate(dataset: Dataset, call: PointCall, cancel: threading.Event | None, stop: Any) -> np.ndarray:
    if cancel is not None and cancel.is_set():
        raise QueryCancelledError("the query was cancelled before it started")
    points = len(call.points)
    if call.through_engine(dataset) and (cancel is not None or points >= stoppable.STOPPABLE_POINTS):
        # An idle engine serves a large query alone, inside `submit`: stoppable there too.
        pending = stoppable.run(lambda flag: call.submit(dataset.engine, stop=flag), points=points, cancel=cancel)
        values, counters = unless_cancelled(pending, cancel)
    elif call.through_engine(dataset):
        values, counters = dataset.engine.query(call.store, call.points, **call.options, **call.engine_options)
    else:
        # Stores that take the dtype round the float64 sums once, in parallel: the local engine as
        # it scatters the answer, a cluster's workers on whole answers (half the bytes back).
        cast = {"dtype": call.dtype} if getattr(call.store, "takes_dtype", False) else {}
        if not isinstance(call.store, _core.FieldStore):
            values, counters = call.store.query(call.points, **call.options, strategy=call.strategy, **cast)
        elif stop is not None:  # the service's own flag: its event loop watches the client
            values, counters = call.store.query(call.points, **call.options, strategy=call.strategy, stop=stop,
                                                **cast)
        else:
            values, counters = stoppable.run(
                lambda flag: call.store.query(call.points, **call.options, strategy=call.strategy, stop=flag, **cast),
                points=points, cancel=cancel)
    return call.answer(dataset, values, counters)


@dataclasses.dataclass(frozen=True)
class PointCall:
    """A point query at one time, checked: the field's store, the points, the options
    every evaluation takes (``options``) and those of the node engine (``engine_options``),
    and the answer's shape and dtype."""

    store: Any
    points: np.ndarray
    options: dict[str, Any]
    engine_options: dict[str, Any]
    strategy: str
    shape: tuple[int, ...]
    dtype: np.dtype
    #: The rewrite counts of the steps it reads, noted before it runs.
    versions: StepVersions

    def through_engine(self, dataset: Dataset) -> bool:
        """Whether the dataset's node engine evaluates it (the streaming strategy does)."""
        return dataset.engine is not None and self.strategy == "streaming"

    def submit(self, engine: Any, **extra: Any) -> Any:
        """Hands it to ``engine``: a ``PendingQuery`` (``extra``: ``notify=``)."""
        return engine.submit(self.store, self.points, **self.options, **self.engine_options, **extra)

    def named(self, error: BaseException) -> BaseException:
        """``error`` as turbdb's other messages say it: a step not stored named by its time
        index, its time and the field (the engine names the index alone)."""
        if not isinstance(error, TurbdbError):
            return error
        return naming_the_step(error, self.options["times"], self.versions.field)

    def answer(self, dataset: Dataset, values: np.ndarray, counters: dict[str, Any]) -> np.ndarray:
        """The answer from what the evaluation returned; its counters become the
        dataset's ``last_query_stats``. :class:`StepRewrittenError` where a rewrite of a
        step it read overlapped the evaluation: the values may mix two versions (the
        callers evaluate it again, :meth:`renewed`)."""
        self.versions.check(dataset)
        dataset.last_query_stats = counters
        dataset.last_read_versions = self.versions
        return values.reshape(self.shape).astype(self.dtype, copy=False)

    def settled(self, dataset: Dataset) -> PointCall:
        """This call, or once no rewrite of a step it reads is under way, one noting the
        steps' versions then (blocking: sleeps meanwhile)."""
        if self.versions.rewriter() is None:
            return self
        return dataclasses.replace(self, versions=self.versions.settled(dataset))

    def renewed(self, dataset: Dataset) -> PointCall:
        """This call to evaluate again, after a rewrite overlapped it: the caches caught up,
        waiting for a rewrite still under way; :class:`DatasetBusyError` after
        :data:`~turbdb.step_versions.BUSY_SECONDS` of this."""
        return self.again(self.versions.renewed(dataset).settled(dataset))

    def again(self, versions: StepVersions) -> PointCall:
        """This call to evaluate again, noting ``versions``: ungated, since a job's plan
        counts its queries and this one was counted (answers do not depend on it)."""
        return dataclasses.replace(self, versions=versions, engine_options={**self.engine_options, "job": None})


def point_call(dataset: Dataset, field: str, points: Any, *, time: Any, method: str = "lag6",
               operator: str = "field", temporal: str = "none", dtype: Any = np.float32,
               strategy: str = "streaming", job: Any = None, series: int = 1) -> PointCall:
    """Checks a point query at one time (see :meth:`turbdb.Dataset.query`); ``series``: the
    number of times of the series it is the first of, whose whole answer is sized."""
    job = job_number(job)
    known_field(dataset.name, dataset.metadata.fields, field)
    method = choice("method", method, METHODS, METHOD_ALIASES)
    operator = choice("operator", operator, OPERATORS, OPERATOR_ALIASES)
    temporal = choice("temporal method", temporal, TEMPORALS, TEMPORAL_ALIASES)
    strategy = choice("strategy", strategy, STRATEGIES)
    dtype = result_dtype(dtype)
    time = finite_number("time", time)
    given = point_array(points)  # read once, before the look below: a dataset may be created again meanwhile
    # The axes, times and store of one dataset: the metadata taken first and the store of a
    # dataset created again since answered wrong values, or made the engine panic.
    view = dataset.field_view(field)
    info = view.info
    xyz = query_points(given, info)
    ncomp = info.fields[field].ncomp
    # pchip over the steps the field has: its last interval as at the end of the data.
    times = stencil_times(info.times, info.fields[field].recorded, time, temporal)
    # A float32 answer lets the engine sum a field's stored float32 rows in float32, as the
    # streaming executor does (about 2e-7 of the largest value: float32's own rounding).
    narrow = np.dtype(dtype) == np.float32
    shape = (len(xyz), ncomp) if SLOTS[operator] == 1 else (len(xyz), ncomp, SLOTS[operator])
    # Before the store's own check (a node engine has none), in words that say how to raise the limit.
    check_answer_bytes(len(xyz), ncomp * SLOTS[operator], dtype, series, summed_in_float64=True)
    return PointCall(
        store=view.store, points=xyz,
        options={"axes": axes_of(info), "times": times, "time": time, "method": method, "operator": operator,
                 "temporal": temporal},
        engine_options={"job": job, "narrow": narrow}, strategy=strategy, shape=shape, dtype=np.dtype(dtype),
        # Noted after the store caught up (field_store): the engine has dropped what they replaced.
        versions=StepVersions.of(dataset, field, steps_read(times, time, temporal), view.made))


def query_points(points: Any, info: Any) -> np.ndarray:
    """:func:`as_points`, and float32 points within one float32 step past a bounded axis's
    wall put on it: a float32 coordinate is typically 1e-8 from the float64 wall it stands
    for (y = 0.35 is 0.3499999940…), past the engine's tolerance, so a point on the wall
    was refused. The same for queries, tracks, and a remote client's points."""
    given = point_array(points)
    # Aligned too: an unaligned array (as Dask and pickle hand them over) is contiguous for
    # numpy but not a slice for the engine ("arrays must be C-contiguous").
    xyz = aligned(np.ascontiguousarray(given, dtype=np.float64))
    # Any float32 counts, big-endian ('>f4', as np.fromfile and h5py give) included.
    if not (given.dtype.kind == "f" and given.dtype.itemsize == 4):  # float64 keeps the engine's own tolerance
        return xyz
    for axis, (n, origin, spacing, periodic) in enumerate(zip(info.grid, info.origin, info.spacing, info.periodic)):
        if periodic:
            continue
        for wall, side in ((origin, -1.0), (origin + (n - 1) * spacing, 1.0)):
            step = float(np.spacing(np.float32(abs(wall))))  # at a wall at 0: float32's smallest
            beyond = side * (xyz[:, axis] - wall)
            xyz[(beyond > 0) & (beyond <= step), axis] = wall
    return xyz


def unless_cancelled(pending: Any, cancel: threading.Event | None) -> tuple[np.ndarray, dict[str, Any]]:
    """The answer of a query handed to the engine, or QueryCancelledError as soon as
    ``cancel`` is set, or Ctrl-C's KeyboardInterrupt (the engine then drops the query's
    pending sub-queries)."""
    try:
        while not pending.wait(CANCEL_POLL):
            if cancel is not None and cancel.is_set():
                pending.cancel()
                raise QueryCancelledError("the query was cancelled; the engine dropped its pending work")
    except BaseException:  # Ctrl-C, or a timeout a signal handler raised: the engine drops it
        pending.cancel()
        raise
    return pending.result()
