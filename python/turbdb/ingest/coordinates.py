"""The coordinates a netCDF or Zarr input carries (``x``, ``y``, ``z``, ``time``, as turbdb's
own cutouts write them), which ingest does not take over: a note that says so and gives the
options that keep them, since a dataset made without them has the default spacing 2π/n,
origin 0 and times 0, 1, … — wrong for a sub-box of a finer grid."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from turbdb.times import format_time

__all__ = ["calendar_time", "coordinate_note"]

AXES = ("x", "y", "z")


def coordinate_note(where: str, coordinates: Mapping[str, np.ndarray]) -> str | None:
    """The note for the 1-D ``coordinates`` found in ``where`` (by name), or None when it
    holds no spatial or time coordinate."""
    found = {name: np.asarray(values, dtype=np.float64) for name, values in coordinates.items()
             if name in (*AXES, "time") and np.ndim(values) == 1 and len(values) > 0
             and np.asarray(values).dtype.kind in "iuf"}  # not text, not dates
    if not found:
        return None
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
    kept = f"; to keep them pass {' '.join(options)}" if options else ""
    unkept = ("; " + "; ".join(problems) + ": turbdb stores evenly spaced, increasing nodes and the steps in the "
              "order of the file, so that cannot be kept") if problems else ""
    return (f"{where} holds coordinates ({', '.join(found)}) that ingest does not read: a new dataset takes "
            f"the defaults of --spacing, --origin, --t0, --dt and --periodic{kept}, and --periodic with the axes "
            f"that are periodic (none for a box cut out of a larger grid){unkept}")


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


def calendar_time(attrs: Mapping[str, object]) -> bool:
    """Whether a variable holds CF calendar times (``units = "days since 2020-01-01"``),
    whose numbers are no turbdb times."""
    return " since " in str(attrs.get("units", ""))


def _uniform_step(values: np.ndarray) -> float | None:
    """The constant step of ``values``, or None if they are not evenly spaced."""
    if len(values) < 2:
        return None
    steps = np.diff(values)
    step = float(np.mean(steps))
    return step if step > 0 and np.allclose(steps, step, rtol=1e-6, atol=0) else None


def _number(value: float) -> str:
    return f"{float(value):.10g}"
