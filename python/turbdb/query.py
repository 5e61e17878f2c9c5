"""Point queries of a local dataset: arguments checked by :mod:`turbdb.arguments`,
evaluation in the Rust engine (turbdb._core) with the GIL released."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .arguments import (
    METHODS, OPERATORS, SLOTS, STRATEGIES, TEMPORALS, as_points, axes_of, choice, finite_number, result_dtype,
    time_list,
)
from .exceptions import UnknownNameError

if TYPE_CHECKING:
    from .dataset import Dataset


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
) -> np.ndarray:
    """See :meth:`turbdb.Dataset.query`."""
    if np.ndim(time) != 0:  # a time series: one evaluation per time, stacked
        return np.stack([query(dataset, field, points, time=t, method=method, operator=operator, temporal=temporal,
                               dtype=dtype, strategy=strategy) for t in time_list(time)])
    info = dataset.metadata
    if field not in info.fields:
        raise UnknownNameError(f"dataset {dataset.name!r} has no field {field!r}; it has {', '.join(info.fields)}")
    method = choice("method", method, METHODS)
    operator = choice("operator", operator, OPERATORS)
    temporal = choice("temporal method", temporal, TEMPORALS)
    strategy = choice("strategy", strategy, STRATEGIES)
    dtype = result_dtype(dtype)
    time = finite_number("time", time)
    xyz = as_points(points)
    ncomp = info.fields[field].ncomp
    store = dataset.field_store(field)
    if dataset.engine is not None and strategy == "streaming":
        values, counters = dataset.engine.query(
            store, xyz, axes=axes_of(info), times=info.times, time=time, method=method, operator=operator,
            temporal=temporal,
        )
    else:
        values, counters = store.query(
            xyz, axes=axes_of(info), times=info.times, time=time, method=method, operator=operator,
            temporal=temporal, strategy=strategy,
        )
    dataset.last_query_stats = counters
    shape = (len(xyz), ncomp) if SLOTS[operator] == 1 else (len(xyz), ncomp, SLOTS[operator])
    return values.reshape(shape).astype(dtype, copy=False)

