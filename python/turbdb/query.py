"""Point queries and cutouts of a local dataset: argument checking in Python, evaluation in
the Rust engine (turbdb._core) with the GIL released."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .exceptions import InvalidRequestError, UnknownNameError

if TYPE_CHECKING:
    import xarray

    from .dataset import Dataset

METHODS = ("none", "lag4", "lag6", "lag8", "fd4noint", "fd6noint", "fd8noint", "fd4lag4", "m1q4", "m2q8")
OPERATORS = ("field", "gradient", "hessian", "laplacian")
TEMPORALS = ("none", "pchip")
STRATEGIES = ("streaming", "sorted", "direct")
SLOTS = {"field": 1, "gradient": 3, "hessian": 6, "laplacian": 1}


def _choice(kind: str, value: Any, valid: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.lower() not in valid:
        raise UnknownNameError(f"unknown {kind} {value!r}; valid {kind}s: {', '.join(valid)}")
    return value.lower()


def axes_of(info: Any) -> tuple[tuple[int, float, float, bool], ...]:
    """The grid axes as the engine takes them: (n, origin, spacing, periodic) for x, y, z."""
    return tuple(zip(info.grid, info.origin, info.spacing, info.periodic))


def finite_number(name: str, value: Any) -> float:
    """``value`` as a float, or a clear error if it is not a finite real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value):
        raise InvalidRequestError(f"{name} must be a finite number, not {value!r}")
    return float(value)


def result_dtype(dtype: Any) -> np.dtype:
    """The dtype of a query's answer: float32 or float64, or a clear error."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise InvalidRequestError(f"dtype must be float32 or float64, not {dtype!r}") from None
    if dtype not in (np.float32, np.float64):
        raise InvalidRequestError(f"dtype must be float32 or float64, not {dtype}")
    return dtype


def as_points(points: Any) -> np.ndarray:
    """Points as a C-contiguous float64 ``(N, 3)`` array, or a clear error."""
    try:
        array = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidRequestError("points must be numbers: an array of shape (N, 3) of x, y, z") from None
    if array.ndim != 2 or array.shape[1] != 3:
        hint = " (for one point use [[x, y, z]])" if array.shape == (3,) else ""
        raise InvalidRequestError(f"points must have shape (N, 3), not {array.shape}{hint}")
    return np.ascontiguousarray(array)


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
    method = _choice("method", method, METHODS)
    operator = _choice("operator", operator, OPERATORS)
    temporal = _choice("temporal method", temporal, TEMPORALS)
    strategy = _choice("strategy", strategy, STRATEGIES)
    dtype = result_dtype(dtype)
    time = finite_number("time", time)
    xyz = as_points(points)
    ncomp = info.fields[field].ncomp
    values, counters = dataset.field_store(field).query(
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
        start, stop = (0, n) if value is None else _range(name, value)
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


def _range(name: str, value: Any) -> tuple[int, int]:
    try:
        start, stop = (int(v) for v in value)
    except (TypeError, ValueError):
        raise InvalidRequestError(f"{name} must be a (start, stop) pair of grid indices, not {value!r}") from None
    return start, stop
