"""A cutout in the layout JHTDB's getCutout returns: an ``xarray.Dataset`` with one variable
per time step, ``<var>_<time index:04d>``, dims ``(zcoor, ycoor, xcoor, values)``, and the
node coordinates ``xcoor``, ``ycoor``, ``zcoor`` computed exactly as givernylocal computes
them (so its ``cutout_values`` and ``contour_plot`` select by them). Ranges are JHTDB's:
1-based and inclusive in space, stored-step numbers 1…n in time."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..exceptions import InvalidRequestError, TurbdbError
from .metadata import DECIMALS


def check_request(axes_ranges: Any, strides: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``xyzt_axes_ranges`` (4 × [first, last]) and ``xyzt_strides`` (4 positive integers) as
    givernylocal checks them: space ranges (3, 2), time range (2,), strides (4,)."""
    ranges = np.asarray(axes_ranges)
    steps = np.asarray(strides)
    if ranges.shape != (4, 2) or not np.issubdtype(ranges.dtype, np.integer):
        raise InvalidRequestError("xyzt_axes_ranges must be 4 integer [first, last] pairs (x, y, z, t), e.g. "
                                  "np.array([[1, 64], [1, 64], [1, 1], [1, 1]])")
    if steps.shape != (4,) or not np.issubdtype(steps.dtype, np.integer) or (steps < 1).any():
        raise InvalidRequestError("xyzt_strides must be 4 positive integers (x, y, z, t), e.g. np.array([1, 1, 1, 1])")
    for axis, (first, last) in zip("xyzt", ranges):
        if first > last:
            raise InvalidRequestError(f"the {axis} range [{first}, {last}] is not [minimum, maximum]")
    return ranges[:3], ranges[3], steps


def coordinates(first: int, last: int, stride: int, spacing: float, origin: float) -> np.ndarray:
    """givernylocal's node coordinates of the 1-based range [first, last]: float32 indices
    times the spacing, rounded to 7 decimals, plus the offset (float32, as it computes)."""
    values = np.around(np.arange(first - 1, last, stride, dtype=np.float32) * float(spacing), DECIMALS)
    values += np.float64(origin)
    return values.astype(np.float64)


#: The message for a step with no data, which counts steps from 0: the engine's ("time step
#: N is not stored") or a cutout's ("time index N (t = …) of FIELD is not stored").
UNSTORED_STEP = re.compile(r"(?:time step|time index) (\d+)(?: \(t = [^)]*\))?(?: of \S+)? is not stored(.*)",
                           re.DOTALL)


def giverny_cutout(dataset: Any, var: str, space: np.ndarray, time_range: np.ndarray, strides: np.ndarray,
                   filter_width: int = 1) -> Any:
    """The cutout of ``var`` from a turbdb dataset (local or remote) in JHTDB's layout.
    ``space``: 1-based inclusive [first, last] per axis (wrapping on periodic axes);
    ``time_range``: stored steps [ts, te] numbered from 1, every ``strides[3]``-th."""
    import xarray

    info = dataset.metadata
    steps = list(range(int(time_range[0]), int(time_range[1]) + 1, int(strides[3])))
    if time_range[0] < 1 or time_range[1] > info.nt:
        raise InvalidRequestError(f"the time range [{time_range[0]}, {time_range[1]}] is outside the stored steps "
                                  f"1 … {info.nt} of {info.name!r}")
    # Refused here in the caller's 1-based, inclusive numbers (the engine's own messages
    # count from 0, half-open).
    for axis, (first, last), n, periodic in zip("xyz", space, info.grid, info.periodic):
        if not periodic and (first < 1 or last > n):
            raise InvalidRequestError(f"the {axis} range [{first}, {last}] is outside the non-periodic {axis} axis, "
                                      f"whose nodes are 1 … {n}")
    times = [float(info.times[k - 1]) for k in steps]
    try:
        cut = dataset.cutout(var, time=times, x=(int(space[0, 0]) - 1, int(space[0, 1])),
                             y=(int(space[1, 0]) - 1, int(space[1, 1])), z=(int(space[2, 0]) - 1, int(space[2, 1])),
                             stride=tuple(int(s) for s in strides[:3]), filter_width=filter_width)
    except TurbdbError as e:
        unstored = UNSTORED_STEP.match(str(e))
        if unstored is None:
            raise
        step = int(unstored.group(1)) + 1
        raise type(e)(f"time step {step} of {var!r} (ts … te number the stored steps 1 … {info.nt}) is not stored"
                      f"{unstored.group(2)}") from None
    data_vars = {f"{var}_{k:04d}": (("zcoor", "ycoor", "xcoor", "values"), cut.values[i]) for i, k in enumerate(steps)}
    coords = {f"{axis}coor": coordinates(int(first), int(last), int(s), d, o)
              for axis, (first, last), s, d, o in zip("xyz", space, strides[:3], info.spacing, info.origin)}
    coords = {name: coords[name] for name in ("zcoor", "ycoor", "xcoor")}
    return xarray.Dataset(data_vars, coords=coords)


def attributes(title: str, space: np.ndarray, time_range: np.ndarray, strides: np.ndarray,
               filter_width: int) -> dict[str, Any]:
    """The attributes givernylocal's getCutout gives its answer."""
    return {"dataset": title, "t_start": time_range[0], "t_end": time_range[1], "t_step": strides[3],
            "x_start": space[0][0], "y_start": space[1][0], "z_start": space[2][0],
            "x_end": space[0][1], "y_end": space[1][1], "z_end": space[2][1],
            "x_step": strides[0], "y_step": strides[1], "z_step": strides[2], "filterWidth": filter_width}
