"""Point queries and cutouts of a local dataset: arguments checked by :mod:`turbdb.arguments`,
evaluation in the Rust engine (turbdb._core) with the GIL released."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .arguments import (
    METHODS, OPERATORS, SLOTS, STRATEGIES, TEMPORALS, as_points, axes_of, choice, finite_number, node_range,
    result_dtype,
)
from .exceptions import InvalidRequestError, UnknownNameError

if TYPE_CHECKING:
    import xarray

    from .dataset import Dataset


def query(
    dataset: Dataset,
    field: str,
    points: Any,
    *,
    time: float,
    method: str = "lag6",
    operator: str = "field",
    temporal: str = "none",
    dtype: Any = np.float32,
    strategy: str = "streaming",
) -> np.ndarray:
    """See :meth:`turbdb.Dataset.query`."""
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


def cutout(
    dataset: Dataset,
    field: str,
    *,
    time: float,
    x: tuple[int, int] | None = None,
    y: tuple[int, int] | None = None,
    z: tuple[int, int] | None = None,
    stride: int = 1,
) -> xarray.DataArray:
    """See :meth:`turbdb.Dataset.cutout`."""
    info = dataset.metadata
    if field not in info.fields:
        raise UnknownNameError(f"dataset {dataset.name!r} has no field {field!r}; it has {', '.join(info.fields)}")
    if not isinstance(stride, (int, np.integer)) or stride < 1:
        raise InvalidRequestError(f"stride must be a positive integer, not {stride!r}")
    ranges = []
    for name, value, n in zip("xyz", (x, y, z), info.grid):
        start, stop = (0, n) if value is None else node_range(name, value)
        ranges.append((start, stop))
    (t_index, _), = dataset.field_store(field).time_levels(info.times, float(time), "none")
    data = dataset.field_store(field).cutout(t_index, axes_of(info), tuple(ranges), int(stride))
    return cutout_array(dataset.name, info, field, data, ranges, int(stride), int(t_index))


def cutout_array(dataset_name: str, info: Any, field: str, data: np.ndarray, ranges: Any, stride: int,
                 t_index: int) -> xarray.DataArray:
    """The cutout ``data`` ``(nz, ny, nx, ncomp)`` of nodes ``ranges`` (x, y, z) as the
    DataArray :meth:`turbdb.Dataset.cutout` returns (also built by the remote client)."""
    import xarray

    coords = {}
    for (start, stop), name, o, d, n, periodic in zip(ranges, "xyz", info.origin, info.spacing, info.grid, info.periodic):
        index = np.arange(start, stop, stride)
        coords[name] = (name, o + d * index)
        coords[f"{name}_index"] = (name, np.mod(index, n) if periodic else index)
    components = info.fields[field].components
    coords["component"] = ("component", components)
    return xarray.DataArray(
        data,
        dims=("z", "y", "x", "component"),
        coords=coords,
        name=field,
        attrs={"dataset": dataset_name, "time": float(info.times[t_index]), "time_index": int(t_index),
               "stride": int(stride)},
    )
