"""Checking the arguments of queries, cutouts and tracking, in one place for the local
engine, the remote client and the service: names, numbers, points and node ranges.

Strict on purpose: a bool, a complex number or a numeric string is refused rather than
converted, and a grid index must be an integer (``x=(0.5, 3.7)`` is an error, not a
truncation). The names of methods, operators, temporal methods and strategies, and their
aliases, come from the engine (``turbdb._core``), so Python and Rust accept the same ones.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from . import _core
from .exceptions import InvalidRequestError, UnknownOptionError

METHODS: tuple[str, ...] = tuple(_core.METHODS)
METHOD_ALIASES: dict[str, str] = dict(_core.METHOD_ALIASES)
OPERATORS: tuple[str, ...] = tuple(_core.OPERATORS)
OPERATOR_ALIASES: dict[str, str] = dict(_core.OPERATOR_ALIASES)
TEMPORALS: tuple[str, ...] = tuple(_core.TEMPORALS)
TEMPORAL_ALIASES: dict[str, str] = dict(_core.TEMPORAL_ALIASES)
STRATEGIES: tuple[str, ...] = tuple(_core.STRATEGIES)
SCHEDULERS = ("noshare", "liferaft", "jaws")
CACHE_POLICIES = ("lru", "lruk", "slru", "urc")
IO_MODES = ("buffered", "direct")
#: Values per component each operator gives (gradient 3, Hessian 6).
SLOTS: dict[str, int] = dict(_core.OPERATOR_SLOTS)

#: Largest grid index or stride accepted: the engine counts nodes in 64-bit integers.
MAX_INDEX = 2**62
_NUMBER_TYPES = (int, float, np.integer, np.floating)


def choice(kind: str, value: Any, valid: tuple[str, ...], aliases: dict[str, str] | None = None) -> str:
    """The canonical name ``value`` stands for (case-insensitive, aliases included), or
    :class:`UnknownOptionError` listing the valid names."""
    if isinstance(value, str):
        key = value.lower()
        if key in valid:
            return key
        if aliases and key in aliases:
            return aliases[key]
    kinds = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
    raise UnknownOptionError(f"unknown {kind} {value!r}; valid {kinds}: {', '.join(valid)}")


def axes_of(info: Any) -> tuple[tuple[int, float, float, bool], ...]:
    """The grid axes as the engine takes them: (n, origin, spacing, periodic) for x, y, z."""
    return tuple(zip(info.grid, info.origin, info.spacing, info.periodic))


def _is_real(value: Any) -> bool:
    return isinstance(value, _NUMBER_TYPES) and not isinstance(value, (bool, np.bool_))


def finite_number(name: str, value: Any) -> float:
    """``value`` as a float, or a clear error if it is not a finite real number (bools,
    strings, complex numbers and ``None`` are refused)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:  # np.array(0.5), as arithmetic on arrays leaves it
        value = value[()]
    try:
        number = float(value) if _is_real(value) else math.nan
    except OverflowError:  # an int beyond float's range
        number = math.nan
    if not math.isfinite(number):
        raise InvalidRequestError(f"{name} must be a finite number, not {value!r}")
    return number


def result_dtype(dtype: Any) -> np.dtype:
    """The dtype of a query's answer: float32 or float64, or a clear error."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise InvalidRequestError(f"dtype must be float32 or float64, not {dtype!r}") from None
    if dtype not in (np.float32, np.float64):
        raise InvalidRequestError(f"dtype must be float32 or float64, not {dtype}")
    return dtype


def _refuse_points(what: str) -> InvalidRequestError:
    return InvalidRequestError(f"points must be real numbers, not {what}: an array of shape (N, 3) of x, y, z")


def _check_element_types(values: Any) -> None:
    """Refuses bools, strings, complex numbers and other non-numbers among the elements of
    a nested sequence of rows (one C-level pass: no per-point Python code)."""
    try:
        types = set(map(type, itertools.chain.from_iterable(values)))
    except TypeError:  # not a sequence of rows: the shape check says what is wrong
        return
    for kind in types:
        if not issubclass(kind, _NUMBER_TYPES) or issubclass(kind, (bool, np.bool_)):
            raise _refuse_points(kind.__name__)


def as_points(points: Any) -> np.ndarray:
    """Points as a C-contiguous float64 ``(N, 3)`` array, or a clear error. Array-likes
    (a pandas DataFrame of x, y, z columns, an xarray DataArray) are taken as the array
    they hold; iterated, a DataFrame gave its column names."""
    if np.ma.isMaskedArray(points) and np.ma.getmaskarray(points).any():
        raise InvalidRequestError("points has masked values: drop those rows or fill them first (points.filled(…))")
    if not isinstance(points, np.ndarray) and hasattr(points, "__array__"):
        points = np.asarray(points)
    if not isinstance(points, np.ndarray):
        if isinstance(points, (str, bytes)):
            raise _refuse_points("a string")
        _check_element_types(points)
    try:
        array = np.asarray(points)
    except (TypeError, ValueError, OverflowError):
        raise InvalidRequestError("points must be numbers: an array of shape (N, 3) of x, y, z") from None
    if array.dtype.kind == "O":
        _check_element_types(array.reshape(-1, 1) if array.ndim else array.reshape(1, 1))
    elif array.dtype.kind not in "iuf":
        raise _refuse_points(f"{array.dtype} values")
    if array.ndim != 2 or array.shape[1] != 3:
        hint = " (for one point use [[x, y, z]])" if array.shape == (3,) else ""
        raise InvalidRequestError(f"points must have shape (N, 3), not {array.shape}{hint}")
    try:
        return np.ascontiguousarray(array, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise InvalidRequestError("points must be numbers: an array of shape (N, 3) of x, y, z") from None


def _integer(name: str, value: Any, what: str) -> int:
    """An integer (not a bool, a float or a string) of at most ±2⁶²."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise InvalidRequestError(f"{name} must be {what}, not {value!r}")
    if abs(int(value)) > MAX_INDEX:
        raise InvalidRequestError(f"{name} = {value} is beyond any grid (at most ±2**62)")
    return int(value)


def node_range(name: str, value: Any) -> tuple[int, int]:
    """A half-open ``(start, stop)`` pair of integer grid indices along axis ``name``."""
    if isinstance(value, (str, bytes)):
        raise InvalidRequestError(f"{name} must be a (start, stop) pair of grid indices, not {value!r}")
    try:
        start, stop = value
    except (TypeError, ValueError):
        raise InvalidRequestError(f"{name} must be a (start, stop) pair of grid indices, not {value!r}") from None
    what = "an integer grid index"
    return _integer(f"{name} start", start, what), _integer(f"{name} stop", stop, what)


def stride_of(value: Any) -> int:
    """A cutout stride: a positive integer."""
    stride = _integer("stride", value, "a positive integer")
    if stride < 1:
        raise InvalidRequestError(f"stride must be a positive integer, not {value!r}")
    return stride


def time_list(time: Any) -> list[float]:
    """One time, or a sequence of times (a time series), as a list of finite floats."""
    if np.ndim(time) == 0:
        return [finite_number("time", time)]
    if np.ndim(time) != 1 or len(time) == 0:
        raise InvalidRequestError(f"time must be a number or a non-empty sequence of numbers, not {time!r}")
    return [finite_number("time", t) for t in time]
