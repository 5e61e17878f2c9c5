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
from .exceptions import InvalidRequestError, UnknownNameError, UnknownOptionError

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


def scalar_of(value: Any) -> Any:
    """A 0-d array-like (numpy's, or an xarray DataArray such as ``cut.time[0]``) as the
    scalar it holds; anything else as it is."""
    if not hasattr(value, "__array__") or isinstance(value, np.generic):
        return value
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, NotImplementedError):
        return value  # not an array after all (an xarray Dataset refuses np.asarray): the caller's check names it
    return array[()] if array.ndim == 0 else value


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to one short line for a message: an xarray object's runs to many."""
    text = repr(value)
    first = text.split("\n", 1)[0]
    return text if first == text and len(text) <= limit else first[:limit].rstrip() + " …"


def finite_number(name: str, value: Any) -> float:
    """``value`` as a float, or a clear error if it is not a finite real number (bools,
    strings, complex numbers and ``None`` are refused)."""
    value = scalar_of(value)  # np.array(0.5), as arithmetic on arrays leaves it, or a DataArray's cut.time[0]
    try:
        number = float(value) if _is_real(value) else math.nan
    except OverflowError:  # an int beyond float's range
        number = math.nan
    if not math.isfinite(number):
        raise InvalidRequestError(f"{name} must be a finite number, not {shown(value)}")
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


def field_name(field: Any) -> str:
    """A field's name as given, or a clear error if it is not a string: one field per call."""
    if not isinstance(field, str):
        raise InvalidRequestError(f"field must be the name of one field (a str), not {shown(field)}; "
                                  "ask for each field in a call of its own")
    return field


def known_field(dataset: str, fields: Any, field: Any) -> str:
    """``field`` if it is one of ``fields`` (those of dataset ``dataset``), else a clear
    error naming those it has."""
    if field_name(field) not in fields:
        raise UnknownNameError(f"dataset {dataset!r} has no field {field!r}; it has {', '.join(fields)}")
    return field


def _refuse_points(what: str) -> InvalidRequestError:
    return InvalidRequestError(f"points must be real numbers, not {what}: an array of shape (N, 3) of x, y, z")


def _unreadable_points(error: Exception) -> InvalidRequestError:
    return InvalidRequestError(f"points must be an array of shape (N, 3) of x, y, z; these could not be read as one "
                               f"({type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''})")


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


def _column_labels(points: Any) -> list[Any] | None:
    """The labels of a DataFrame's columns, or of a 2-d DataArray's last dimension when it
    has a coordinate; None for unlabelled points."""
    if hasattr(points, "columns") and hasattr(points, "iloc"):
        return list(points.columns)
    dims = getattr(points, "dims", None)
    if isinstance(dims, tuple) and len(dims) == 2 and hasattr(points, "isel") and dims[-1] in points.coords:
        return list(points.coords[dims[-1]].values)
    return None


def _columns_text(labels: list[Any]) -> str:
    return ", ".join(map(str, labels[:8])) + (f", … ({len(labels)} in all)" if len(labels) > 8 else "")


def _xyz_columns(points: Any) -> Any:
    """The x, y, z columns of labelled points, in that order, by name: a DataFrame's
    ``df[["z", "y", "x"]]`` read by position had x and z swapped. Labels that name none of
    x, y, z (a plain frame's 0, 1, 2, read_csv's "0", "1", "2", x1, x2, x3, lon, lat,
    depth) are taken by position, as before; some of them but not each once is refused."""
    labels = _column_labels(points)
    if labels is None:
        return points
    names = [label.lower() if isinstance(label, str) else label for label in labels]
    if all(names.count(axis) == 1 for axis in "xyz"):
        where = [names.index(axis) for axis in "xyz"]
        return points.iloc[:, where] if hasattr(points, "iloc") else points.isel({points.dims[-1]: where})
    if not any(axis in names for axis in "xyz"):
        return points
    raise InvalidRequestError(f"points has columns {_columns_text(labels)}, which do not name x, y, z once each: "
                              "name the coordinate columns x, y, z (they are taken by name, other columns left "
                              "out), or pass an array of shape (N, 3)")


def _frame_array(frame: Any) -> np.ndarray:
    """A DataFrame's values in the dtype of its columns: pandas gives nullable float32
    (``Float32``) columns as objects, which lost that the points are float32."""
    try:
        common = np.result_type(*(np.dtype(getattr(d, "numpy_dtype", d)) for d in frame.dtypes))
    except TypeError:  # a categorical or other non-numpy column: refused by the element check
        return np.asarray(frame)
    return frame.to_numpy(dtype=common, na_value=np.nan) if common.kind == "f" else np.asarray(frame)


def point_array(points: Any) -> np.ndarray:
    """Points as an ``(N, 3)`` array of real numbers in the dtype they came in (float32
    stays float32), or a clear error. Array-likes are taken as the array they hold; a
    pandas DataFrame or an xarray DataArray whose columns are named x, y, z, by name."""
    if np.ma.isMaskedArray(points) and np.ma.getmaskarray(points).any():
        raise InvalidRequestError("points has masked values: drop those rows or fill them first (points.filled(…))")
    labelled = _xyz_columns(points)
    try:
        if hasattr(labelled, "iloc") and hasattr(labelled, "dtypes"):
            points = _frame_array(labelled)
        elif isinstance(labelled, memoryview) or (
                not isinstance(labelled, np.ndarray) and hasattr(labelled, "__array__")):
            points = np.asarray(labelled)  # iterated, a DataFrame gave its column names
    except (TypeError, ValueError, OverflowError, NotImplementedError) as e:
        raise _unreadable_points(e) from None  # not an array after all: an xarray Dataset refuses np.asarray
    if not isinstance(points, np.ndarray):
        if isinstance(points, (str, bytes)):
            raise _refuse_points("a string")
        _check_element_types(points)
    try:
        array = np.asarray(points)
    except (TypeError, ValueError, OverflowError) as e:  # a ragged list
        raise _unreadable_points(e) from None
    if array.dtype.kind == "O":
        _check_element_types(array.reshape(-1, 1) if array.ndim else array.reshape(1, 1))
    elif array.dtype.kind not in "iuf":
        raise _refuse_points(f"{array.dtype} values")
    if array.shape == (0,):  # [] : no points, as np.empty((0, 3))
        array = array.reshape(0, 3)
    if array.ndim != 2 or array.shape[1] != 3:
        raise InvalidRequestError(f"points must have shape (N, 3), not {array.shape}{_shape_hint(labelled, array)}")
    if array.dtype.kind == "O":
        try:
            array = array.astype(np.float64)
        except (TypeError, ValueError, OverflowError):
            raise _refuse_points("numbers of these types") from None
    return array


def _shape_hint(points: Any, array: np.ndarray) -> str:
    """What to do about points of the wrong shape."""
    if array.shape == (3,):
        return " (for one point use [[x, y, z]])"
    if array.ndim == 2 and array.shape[0] == 3:
        transpose = "points.T" if hasattr(points, "T") else "np.transpose(points)"
        return f": it looks like [xs, ys, zs]; pass the transpose ({transpose})"
    labels = _column_labels(points)
    if labels is not None and array.ndim == 2:
        return f": its columns are {_columns_text(labels)}; select the x, y, z ones, or name them x, y, z"
    return ""


def as_points(points: Any) -> np.ndarray:
    """Points as a C-contiguous, aligned float64 ``(N, 3)`` array (the engine takes no
    unaligned one: Dask and pickle hand them over so), or a clear error (see :func:`point_array`)."""
    return aligned(np.ascontiguousarray(point_array(points), dtype=np.float64))


def aligned(array: np.ndarray) -> np.ndarray:
    """``array``, copied if it is not aligned (a third of a microsecond where
    ``np.require(…, "CA")`` took one, on every query)."""
    return array if array.flags.aligned else array.copy()


def _integer(name: str, value: Any, what: str) -> int:
    """An integer (not a bool, a float or a string) of at most ±2⁶²."""
    value = scalar_of(value)  # a DataArray's cut.x_index[0]
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise InvalidRequestError(f"{name} must be {what}, not {shown(value)}")
    if abs(int(value)) > MAX_INDEX:
        raise InvalidRequestError(f"{name} = {value} is beyond any grid (at most ±2**62)")
    return int(value)


def node_range(name: str, value: Any) -> tuple[int, int]:
    """A half-open ``(start, stop)`` pair of integer grid indices along axis ``name``."""
    if isinstance(value, (str, bytes)):
        raise InvalidRequestError(f"{name} must be a (start, stop) pair of grid indices, not {shown(value)}")
    try:
        start, stop = value
    except (TypeError, ValueError):
        raise InvalidRequestError(f"{name} must be a (start, stop) pair of grid indices, not {shown(value)}") from None
    what = "an integer grid index"
    return _integer(f"{name} start", start, what), _integer(f"{name} stop", stop, what)


def stride_of(value: Any) -> int:
    """A cutout stride: a positive integer."""
    stride = _integer("stride", value, "a positive integer")
    if stride < 1:
        raise InvalidRequestError(f"stride must be a positive integer, not {shown(value)}")
    return stride


def is_series(time: Any) -> bool:
    """Whether ``time`` is several times rather than one (what is neither is refused as one)."""
    try:
        return np.ndim(scalar_of(time)) != 0
    except (TypeError, ValueError):  # an xarray Dataset, a ragged list: not a number either
        return False


def time_list(time: Any) -> list[float]:
    """One time, or a sequence of times (a time series, such as a cutout's ``cut.time``),
    as a list of finite floats."""
    time = scalar_of(time)
    if not is_series(time):
        return [finite_number("time", time)]
    if not isinstance(time, np.ndarray) and hasattr(time, "__array__"):  # iterated, a DataArray gives DataArrays
        time = np.asarray(time)
    if np.ndim(time) != 1 or len(time) == 0:
        raise InvalidRequestError(f"time must be a number or a non-empty sequence of numbers, not {shown(time)}")
    return [finite_number("time", t) for t in time]
