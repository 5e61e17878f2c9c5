"""Checking the arguments of queries, cutouts and tracking, in one place for the local
engine, the remote client and the service: names, numbers, points and node ranges."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .exceptions import InvalidRequestError, UnknownNameError

METHODS = ("none", "lag4", "lag6", "lag8", "fd4noint", "fd6noint", "fd8noint", "fd4lag4", "m1q4", "m2q8")
OPERATORS = ("field", "gradient", "hessian", "laplacian")
TEMPORALS = ("none", "pchip")
STRATEGIES = ("streaming", "sorted", "direct")
SCHEDULERS = ("noshare", "liferaft", "jaws")
CACHE_POLICIES = ("lru", "lruk", "slru", "urc")
IO_MODES = ("buffered", "direct")
SLOTS = {"field": 1, "gradient": 3, "hessian": 6, "laplacian": 1}


def choice(kind: str, value: Any, valid: tuple[str, ...]) -> str:
    """``value`` as one of the names ``valid`` (case-insensitive), or a clear error."""
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


def node_range(name: str, value: Any) -> tuple[int, int]:
    """A half-open ``(start, stop)`` pair of grid indices along axis ``name``."""
    try:
        start, stop = (int(v) for v in value)
    except (TypeError, ValueError):
        raise InvalidRequestError(f"{name} must be a (start, stop) pair of grid indices, not {value!r}") from None
    return start, stop


def time_list(time: Any) -> list[float]:
    """One time, or a sequence of times (a time series), as a list of finite floats."""
    if np.ndim(time) == 0:
        return [finite_number("time", time)]
    if np.ndim(time) != 1 or len(time) == 0:
        raise InvalidRequestError(f"time must be a number or a non-empty sequence of numbers, not {time!r}")
    return [finite_number("time", t) for t in time]
