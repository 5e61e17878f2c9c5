"""The coordinates an input carries (``x``, ``y``, ``z``, ``time``, as turbdb's own cutouts
write them in netCDF, Zarr or HDF5), which ingest does not take over: a note that says so and
gives the options that keep them, since a dataset made without them has the default spacing
2π/n, origin 0 and times 0, 1, … — wrong for a sub-box of a finer grid."""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from turbdb.times import format_time

__all__ = ["coordinate_note"]

# Seconds in each unit of a CF time ("milliseconds since 2000-01-01", as xarray writes
# datetime64 times); months and years vary with the calendar, so are not converted.
_SECONDS = {
    **dict.fromkeys(("nanoseconds", "nanosecond", "nsec", "nsecs", "ns"), 1e-9),
    **dict.fromkeys(("microseconds", "microsecond", "usec", "usecs", "us"), 1e-6),
    **dict.fromkeys(("milliseconds", "millisecond", "msec", "msecs", "ms"), 1e-3),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), 1.0),
    **dict.fromkeys(("minutes", "minute", "mins", "min"), 60.0),
    **dict.fromkeys(("hours", "hour", "hrs", "hr", "h"), 3600.0),
    **dict.fromkeys(("days", "day", "d"), 86400.0),
    **dict.fromkeys(("weeks", "week"), 604800.0),
}

AXES = ("x", "y", "z")


def coordinate_note(where: str, coordinates: Mapping[str, np.ndarray], *, time_units: object = None) -> str | None:
    """The note for the 1-D ``coordinates`` found in ``where`` (by name), or None when it
    holds no spatial or time coordinate; ``time_units`` is the ``units`` attribute of the time
    coordinate, whose CF calendar times ("seconds since 2000-01-01") are given in seconds."""
    found = {name: np.asarray(values, dtype=np.float64) for name, values in coordinates.items()
             if name in (*AXES, "time") and np.ndim(values) == 1 and len(values) > 0
             and np.asarray(values).dtype.kind in "iuf"}  # not text, not dates
    if not found:
        return None
    counted = ""
    if "time" in found and (calendar := _calendar(time_units)):
        unit, since = calendar
        factor = _SECONDS.get(unit.lower())
        if factor == 1:
            counted = f" (the file's seconds since {since})"
        elif factor is not None:
            found["time"] = found["time"] * factor
            counted = f" (seconds since {since}, converted from the file's {unit})"
        else:
            counted = f" (times in {unit} since {since}, as the file counts them)"
    options = []
    # What cannot be kept, said plainly: the options above would hide it.
    problems = [f"{name} {problem}" for name, values in found.items()
                if (problem := _irregular(values, "times" if name == "time" else "nodes"))]
    if all(a in found for a in AXES):
        steps = [_uniform_step(found[a]) for a in AXES]
        if all(s is not None for s in steps):  # evenly spaced and increasing
            options.append("--spacing " + ",".join(_number(s) for s in steps))  # type: ignore[arg-type]
            options.append("--origin " + ",".join(_number(found[a][0]) for a in AXES))
    if "time" in found and not _irregular(found["time"], "times"):
        options.append(f"--t0 {format_time(float(found['time'][0]))}")
        step = _uniform_step(found["time"]) if len(found["time"]) > 1 else None
        if step is not None:
            options.append(f"--dt {format_time(step)}")
        options[-1] += counted
    kept = f"; to keep them pass {' '.join(options)}" if options else ""
    unkept = ("; " + "; ".join(problems) + ": turbdb stores evenly spaced, increasing nodes and the steps in the "
              "order of the file, so that cannot be kept") if problems else ""
    return (f"{where} holds coordinates ({', '.join(found)}) that ingest does not read: a new dataset takes "
            f"the defaults of --spacing, --origin, --t0, --dt and --periodic{kept}, and --periodic with the axes "
            f"that are periodic (none for a box cut out of a larger grid){unkept}")


def _calendar(units: object) -> tuple[str, str] | None:
    """(unit, reference) of CF calendar time units ("days since 2020-01-01"), else None."""
    if isinstance(units, bytes):
        units = units.decode("utf-8", "replace")
    match = re.fullmatch(r"\s*([A-Za-z_]+)\s+since\s+(.+?)\s*", units) if isinstance(units, str) else None
    return (match[1], match[2]) if match else None


def _irregular(values: np.ndarray, what: str) -> str | None:
    """Why ``values`` are no uniform increasing coordinate, or None."""
    if len(values) < 2:
        return None
    steps = np.diff(values)
    if np.all(steps < 0):
        return (f"decreases (the data would be stored mirrored against the file's {what}: flip it along that axis "
                "first)" if what == "nodes" else "decreases (the steps would be stored in the file's order)")
    if np.any(steps <= 0):
        return f"is not in increasing order (its {what} would be stored in the file's order)"
    if _uniform_step(values) is None:
        return f"is not evenly spaced (stretched {what})"
    return None


def _uniform_step(values: np.ndarray) -> float | None:
    """The constant step of ``values``, or None if they are not evenly spaced."""
    if len(values) < 2:
        return None
    steps = np.diff(values)
    step = float(np.mean(steps))
    return step if step > 0 and np.allclose(steps, step, rtol=1e-6, atol=0) else None


def _number(value: float) -> str:
    return f"{float(value):.10g}"
