"""Stored times: uniform time grids computed in decimal, so that step 90 of a run saved
every 0.12 is stored as 10.8 and not 10.799999999999999, and the one way times are printed."""

from __future__ import annotations

from decimal import Decimal

import numpy as np

__all__ = ["time_grid", "format_time", "range_tolerance", "nearest_stored_index"]


def time_grid(t0: float, dt: float, count: int, first: int = 0) -> np.ndarray:
    """Times ``t0 + i·dt`` for ``i = first … first + count − 1``, each the float nearest the
    exact decimal value of the shortest representations of ``t0`` and ``dt``."""
    start, step = Decimal(repr(float(t0))), Decimal(repr(float(dt)))
    return np.array([float(start + i * step) for i in range(first, first + count)], dtype=np.float64)


def format_time(t: float) -> str:
    """A time as people write it: ``10.8``, ``0``, ``1.5e-05`` (15 significant digits at
    most, so float noise of an old dataset's ``10.799999999999999`` does not show)."""
    return f"{float(t):.15g}"


def range_tolerance(times) -> float:
    """How far past the first or last stored time a query time is taken as that time: the
    engine's rule (``range_tolerance`` in interp/time.rs), 1e-9 of the times' size, or one
    float32 step of the end (a stored time read back as float32) but at most a thousandth
    of the step at that end."""
    times = np.asarray(times, dtype=np.float64)
    first, last = float(times[0]), float(times[-1])
    scale = max(abs(last - first), abs(first), abs(last))
    end_step = min(times[1] - first, last - times[-2]) if len(times) > 1 else np.inf
    float32 = float(np.finfo(np.float32).eps) * max(abs(first), abs(last))
    return max(1e-9 * scale, min(float32, 1e-3 * float(end_step)))


def nearest_stored_index(times: np.ndarray | list[float], t: float) -> int:
    """The stored step a query at ``t`` without temporal interpolation reads: the nearest,
    the later one on a tie, by the engine's own arithmetic (``time_weights`` in
    crates/turbdb-core/src/interp/time.rs), so that a label names the step read."""
    times = np.asarray(times, dtype=np.float64)
    n = max(int(np.searchsorted(times, t, side="right")) - 1, 0)
    if n + 1 < len(times) and (times[n + 1] - t) <= (t - times[n]):
        return n + 1
    return n
