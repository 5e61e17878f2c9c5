"""One time step of a generated flow, as the simulators hand it to ingest."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Snapshot"]


@dataclass
class Snapshot:
    """A stored time step.

    ``velocity`` is float32 (nz, ny, nx, 3) with components (u_x, u_y, u_z); ``pressure`` is
    float32 (nz, ny, nx), the static pressure over density. Array axes are (z, y, x), x
    fastest in memory. ``step`` is the index of the snapshot in the stored sequence and
    ``time`` its time (``step * dt`` exactly for a uniformly saved run). ``stats`` holds the
    generator's live diagnostics of that step (floats keyed by name).
    """

    time: float
    step: int
    velocity: np.ndarray
    pressure: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)
