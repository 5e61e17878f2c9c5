"""Point queries of a local dataset: arguments checked by :mod:`turbdb.arguments`,
evaluation in the Rust engine (turbdb._core) with the GIL released."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from .arguments import (
    METHOD_ALIASES, METHODS, OPERATOR_ALIASES, OPERATORS, SLOTS, STRATEGIES, TEMPORAL_ALIASES, TEMPORALS, as_points,
    axes_of, choice, finite_number, result_dtype, time_list,
)
from .exceptions import QueryCancelledError, UnknownNameError
from .jobs import job_number

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
    if np.ndim(time) != 0:  # a time series: one evaluation per time, stacked
        return np.stack([query(dataset, field, points, time=t, method=method, operator=operator, temporal=temporal,
                               dtype=dtype, strategy=strategy, job=job, cancel=cancel) for t in time_list(time)])
    job = job_number(job)
    if cancel is not None and cancel.is_set():
        raise QueryCancelledError("the query was cancelled before it started")
    info = dataset.metadata
    if field not in info.fields:
        raise UnknownNameError(f"dataset {dataset.name!r} has no field {field!r}; it has {', '.join(info.fields)}")
    method = choice("method", method, METHODS, METHOD_ALIASES)
    operator = choice("operator", operator, OPERATORS, OPERATOR_ALIASES)
    temporal = choice("temporal method", temporal, TEMPORALS, TEMPORAL_ALIASES)
    strategy = choice("strategy", strategy, STRATEGIES)
    dtype = result_dtype(dtype)
    time = finite_number("time", time)
    xyz = as_points(points)
    ncomp = info.fields[field].ncomp
    store = dataset.field_store(field)
    # A float32 answer lets the engine sum a field's stored float32 rows in float32, as the
    # streaming executor does (about 2e-7 of the largest value: float32's own rounding).
    narrow = np.dtype(dtype) == np.float32
    if dataset.engine is not None and strategy == "streaming" and cancel is not None:
        pending = dataset.engine.submit(
            store, xyz, axes=axes_of(info), times=info.times, time=time, method=method, operator=operator,
            temporal=temporal, job=job, narrow=narrow,
        )
        values, counters = unless_cancelled(pending, cancel)
    elif dataset.engine is not None and strategy == "streaming":
        values, counters = dataset.engine.query(
            store, xyz, axes=axes_of(info), times=info.times, time=time, method=method, operator=operator,
            temporal=temporal, job=job, narrow=narrow,
        )
    else:
        # Stores that take the dtype round the float64 sums once, in parallel: the local engine as
        # it scatters the answer, a cluster's workers on whole answers (half the bytes back).
        cast = {"dtype": dtype} if getattr(store, "takes_dtype", False) else {}
        values, counters = store.query(
            xyz, axes=axes_of(info), times=info.times, time=time, method=method, operator=operator,
            temporal=temporal, strategy=strategy, **cast,
        )
    dataset.last_query_stats = counters
    shape = (len(xyz), ncomp) if SLOTS[operator] == 1 else (len(xyz), ncomp, SLOTS[operator])
    return values.reshape(shape).astype(dtype, copy=False)


def unless_cancelled(pending: Any, cancel: threading.Event) -> tuple[np.ndarray, dict[str, Any]]:
    """The answer of a query handed to the engine, or QueryCancelledError as soon as
    ``cancel`` is set (the engine then drops the query's pending sub-queries)."""
    while not pending.wait(CANCEL_POLL):
        if cancel.is_set():
            pending.cancel()
            raise QueryCancelledError("the query was cancelled; the engine dropped its pending work")
    return pending.result()
