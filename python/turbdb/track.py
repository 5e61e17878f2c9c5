"""Lagrangian particle tracking through the stored time history (Perlman et al. §4): Heun's
RK2 as JHTDB's GetPosition, forward or backward in time, each velocity evaluation one call
into the engine for all particles. With a node engine a track is a job by construction: its
evaluations and the time steps each reads are known before it starts, so it is declared
(:mod:`turbdb.jobs`) and the scheduler runs its evaluations together with those of other
jobs that read the same steps."""

from __future__ import annotations

import itertools
import math
import time as _time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .arguments import METHOD_ALIASES, METHODS, axes_of, choice, finite_number, known_field, point_array
from .exceptions import (
    InvalidRequestError, LimitExceededError, OutOfDomainError, QueryCancelledError, TurbdbError,
)
from .jobs import MAX_JOB_QUERIES, declare
from .query import query_points, unless_cancelled
from .size_limit import check_result_bytes
from .step_versions import FieldView, StepVersions, read_consistently, steps_read
from .times import format_time, range_tolerance
from .written_steps import naming_the_step, stencil_times, step_named

if TYPE_CHECKING:
    from .dataset import Dataset
    from .info import DatasetInfo

INTEGRATORS = ("rk2", "euler")
#: Steps within this fraction of ``dt`` of ``end`` land on ``end`` instead of adding a
#: sliver of a step (``(end - start) / dt`` is rarely an exact integer in floating point).
LANDING_TOLERANCE = 1e-9
#: What an evaluation at the start positions is called in an out-of-domain error.
START = "a particle's start"
#: Most steps one trajectory may take: each is an engine call, and every step's positions
#: are kept.
MAX_STEPS = 2**31

Progress = Callable[[int, int], None]


def track(
    dataset: Dataset,
    points: Any,
    *,
    start: float,
    end: float,
    dt: float,
    method: str = "lag6",
    field: str = "velocity",
    integrator: str = "rk2",
    return_velocity: bool = False,
    progress: bool | Progress | None = None,
    cancel: Any = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """See :meth:`turbdb.Dataset.track`."""
    known_field(dataset.name, dataset.metadata.fields, field)
    given = point_array(points)  # read once, before the look below: a dataset may be created again meanwhile
    # The axes, times and store of one dataset, for the whole track: a dataset created again
    # while it runs ends it (DatasetReplacedError), as its paths would mix the two datasets.
    view = dataset.field_view(field)
    info = view.info
    ncomp = info.fields[field].ncomp
    if ncomp != 3:
        raise InvalidRequestError(f"particles are advected by a vector field of 3 components; {field!r} has {ncomp}")
    method = choice("method", method, METHODS, METHOD_ALIASES)
    integrator = choice("integrator", integrator, INTEGRATORS)
    x0 = query_points(given, info)
    bad = np.flatnonzero(~np.isfinite(x0).all(axis=1))
    if bad.size:
        raise InvalidRequestError(f"particle {bad[0]} is not finite: {x0[bad[0]].tolist()}")
    # Counted before anything is allocated: positions (and velocities) of every step are kept.
    rows = (step_count(start, end, dt) + 1) * len(x0)
    check_result_bytes(rows * 24 * (2 if return_velocity else 1), f"{rows:,} particle positions",
                       "track fewer particles per call, or split the time span into several calls")
    times = step_times(start, end, dt)
    _check_stored(dataset, field, view, times)

    n_steps = len(times) - 1
    positions = np.empty((n_steps + 1, len(x0), 3))
    positions[0] = x0
    velocities = np.empty((n_steps + 1, len(x0), 3)) if return_velocity else None
    report = _progress(progress, n_steps)
    evaluate = _Evaluator(dataset, field, view, method, evaluation_times(times, integrator, return_velocity), cancel)
    try:
        x = positions[0]
        for k in range(n_steps):
            t, t_next = times[k], times[k + 1]
            h = t_next - t
            u0 = evaluate(x, t, moved=START if k == 0 else "a particle")
            if velocities is not None:
                velocities[k] = u0
            if integrator == "rk2":
                # Heun: predictor x* = x + h u(x, t); corrector averages u at both ends.
                u1 = evaluate(x + h * u0, t_next, moved="the rk2 predictor x + dt·u(x) of a particle")
                u0 += u1
                u0 *= 0.5 * h
            else:
                u0 *= h
            np.add(x, u0, out=positions[k + 1])
            x = positions[k + 1]
            report(k + 1)
        if velocities is not None:
            velocities[-1] = evaluate(x, times[-1], moved=START if n_steps == 0 else "a particle")
    finally:
        report(None)
        evaluate.job.close()
    dataset.last_query_stats = evaluate.stats
    return (positions, velocities) if velocities is not None else positions


def evaluation_times(times: np.ndarray, integrator: str, return_velocity: bool) -> Iterator[float]:
    """The times of the velocity evaluations of a track over ``times``, in the order they
    are made: per step its start (and, with rk2, its end for the corrector), then the last
    time once more when velocities are returned."""
    for k in range(len(times) - 1):
        yield float(times[k])
        if integrator == "rk2":
            yield float(times[k + 1])
    if return_velocity:
        yield float(times[-1])


def step_count(start: float, end: float, dt: float) -> int:
    """The number of steps from ``start`` to ``end`` (as :func:`step_times` takes them),
    counted without listing them: callers check it against their limits first. More than
    :data:`MAX_STEPS` is a LimitExceededError."""
    start, end, dt, full = _full_steps(start, end, dt)
    return full + int(abs(end - start) - full * dt > LANDING_TOLERANCE * dt)


def step_times(start: float, end: float, dt: float) -> np.ndarray:
    """The times of a trajectory: ``start``, then steps of ``dt`` towards ``end`` (backward
    when ``end < start``), the last one shortened to land exactly on ``end``."""
    start, end, dt, full = _full_steps(start, end, dt)
    direction = 1.0 if end >= start else -1.0
    times = start + direction * dt * np.arange(full + 1)
    if abs(end - start) - full * dt > LANDING_TOLERANCE * dt:
        times = np.append(times, end)
    times[-1] = end
    return times


def _full_steps(start: Any, end: Any, dt: Any) -> tuple[float, float, float, int]:
    """The checked start, end and dt, and the number of whole steps of ``dt`` between them."""
    start, end, dt = (finite_number(name, v) for name, v in (("start", start), ("end", end), ("dt", dt)))
    if not dt > 0:
        raise InvalidRequestError(
            f"dt must be positive, not {dt!r}; the direction comes from start and end (end < start tracks backward)"
        )
    span = abs(end - start)
    ratio = span / dt
    if not ratio <= MAX_STEPS:  # also catches an infinite ratio
        raise LimitExceededError(
            f"tracking from {start:g} to {end:g} in steps of {dt:g} takes {ratio:.3g} steps; at most {MAX_STEPS:,} "
            "are taken in one call: use a larger dt or a shorter span"
        )
    full = math.floor(ratio)
    if span - (full + 1) * dt > -LANDING_TOLERANCE * dt:  # span/dt rounded down one too far
        full += 1
    return start, end, dt, full


def wrap(positions: np.ndarray, info: DatasetInfo) -> tuple[np.ndarray, np.ndarray]:
    """Splits continuous (unwrapped) positions, as :func:`track` returns them, into the
    position inside the periodic box and the number of periods crossed on each axis
    (0 on non-periodic axes): ``position = inside + crossings * L``."""
    p = np.asarray(positions, dtype=np.float64)
    origin = np.asarray(info.origin)
    length = np.asarray(info.spacing) * np.asarray(info.grid)
    periodic = np.asarray(info.periodic)
    crossings = np.where(periodic, np.floor_divide(p - origin, length), 0.0)
    inside = np.where(periodic, origin + np.mod(p - origin, length), p)
    return inside, crossings.astype(np.int64)


class _Evaluator:
    """One engine call per evaluation: the velocity at every particle at one time. The
    arguments were checked once up front, so this calls the store (or the node engine)
    directly. With a node engine the evaluations at ``planned`` times are declared as a
    job (its first :data:`~turbdb.jobs.MAX_JOB_QUERIES`; later ones run ungated); the
    caller closes ``job`` at the end. Every evaluation reads through the store of ``view``:
    one during which the dataset was created again raises
    :class:`~turbdb.step_versions.DatasetReplacedError` (the old store read the new
    dataset's shards as its own: "a shard copied from another dataset")."""

    def __init__(self, dataset: Dataset, field: str, view: FieldView, method: str, planned: Iterable[float],
                 cancel: Any = None):
        info = view.info
        self.dataset = dataset
        self.field = field
        self.store = view.store
        self.made = view.made
        self.engine = dataset.engine
        self.cancel = cancel
        self.axes = axes_of(info)
        self.times = np.ascontiguousarray(info.times, dtype=np.float64)
        self.recorded = info.fields[field].recorded
        self.method = method
        self.stats = {"queries": 0, "points": 0, "atoms_read": 0, "read_calls": 0, "contributions": 0,
                      "engine_seconds": 0.0}
        regions = []
        if self.engine is not None:
            levels: dict[float, list[int]] = {}
            for t in itertools.islice(planned, MAX_JOB_QUERIES):
                if t not in levels:
                    levels[t] = [i for i, _ in self.store.time_levels(self.stencil(t), t, "pchip")]
                regions.append((self.store, levels[t]))
        self.job = declare(self.engine, regions)

    def __call__(self, x: np.ndarray, t: float, moved: str = "a particle") -> np.ndarray:
        began = _time.perf_counter()
        if self.cancel is not None and self.cancel.is_set():
            raise QueryCancelledError(f"the track was cancelled at time {format_time(t)}")
        # Each evaluation sees one version of each step it reads (a rewrite under way is
        # waited for); evaluations apart may see a step before and after a rewrite.
        versions = StepVersions.of(self.dataset, self.field, steps_read(self.stencil(t), t, "pchip"), self.made)
        try:
            values, counters = read_consistently(self.dataset, versions, lambda again: self._evaluate(x, t, again))
        except OutOfDomainError as e:  # the engine names the first particle outside; add when
            if moved == START:
                raise OutOfDomainError(f"a particle starts outside the domain, at time {format_time(t)} ({e})") from None
            # The predictor crosses first whenever the particle itself heads into the wall,
            # so "a smaller dt keeps it in" was false advice for a particle that gets there.
            hint = "" if moved == "a particle" else (
                "; the particle itself may stay inside, or it reaches the wall at about that time: if a smaller "
                "dt stops at about the same time, it does (tracks end at walls)")
            raise OutOfDomainError(f"{moved} left the domain at time {format_time(t)} ({e}){hint}") from None
        except TurbdbError as e:  # a step missing some of its shards: named as queries name it
            if naming_the_step(e, self.times, self.field) is e:
                raise
            raise naming_the_step(e, self.times, self.field) from None
        stats = self.stats
        stats["engine_seconds"] += _time.perf_counter() - began
        stats["queries"] += 1
        stats["points"] += len(x)
        for key, value in counters.items():
            stats[key] = value if isinstance(value, str) else stats.get(key, 0) + value
        return values.reshape(len(x), 3)

    def stencil(self, t: float) -> np.ndarray:
        """The stored times pchip at ``t`` interpolates over: up to the field's last written
        step at or before it (:func:`~turbdb.written_steps.stencil_times`)."""
        return stencil_times(self.times, self.recorded, float(t), "pchip")

    def _evaluate(self, x: np.ndarray, t: float, again: bool) -> tuple[np.ndarray, dict[str, Any]]:
        """The engine's (or the store's) values and counters at ``x``, ``t``; made ``again``
        after a rewrite overlapped it, ungated (the job counted it already)."""
        job = None if again else self.job.id
        if self.engine is not None and self.cancel is not None:
            pending = self.engine.submit(
                self.store, x, axes=self.axes, times=self.stencil(t), time=float(t), method=self.method,
                operator="field", temporal="pchip", job=job,
            )
            return unless_cancelled(pending, self.cancel)
        if self.engine is not None:
            return self.engine.query(
                self.store, x, axes=self.axes, times=self.stencil(t), time=float(t), method=self.method,
                operator="field", temporal="pchip", job=job,
            )
        return self.store.query(
            x, axes=self.axes, times=self.stencil(t), time=float(t), method=self.method, operator="field",
            temporal="pchip", strategy="streaming",
        )


def _check_stored(dataset: Dataset, field: str, view: FieldView, times: np.ndarray) -> None:
    """Refuses a time span outside the stored times, or one whose pchip stencil needs a
    step that is not written yet, before any work is done."""
    info = view.info
    stored = info.times
    if len(stored) == 0:
        raise InvalidRequestError(f"dataset {dataset.name!r} has no stored times")
    first, last = float(stored[0]), float(stored[-1])
    tolerance = range_tolerance(stored)
    for name, t in (("start", times[0]), ("end", times[-1])):
        if not first - tolerance <= t <= last + tolerance:
            raise InvalidRequestError(
                f"{name} = {format_time(t)} is outside the stored times [{format_time(first)}, {format_time(last)}] of dataset {dataset.name!r}"
            )
    # Exactly the steps the engine will read: the pchip levels of every step time (the
    # predictor is evaluated at step times too).
    store = view.store
    recorded = info.fields[field].recorded
    needed = sorted({i for t in np.unique(times)
                     for i, _ in store.time_levels(stencil_times(stored, recorded, float(t), "pchip"), float(t), "pchip")})
    # A step's directory, not dataset.info: that counted every shard of every step (160 ms
    # a track on 128³ in 8³ partitions, seconds on big datasets). A step missing only some
    # shards is named by the engine when it reads them.
    steps = dataset.path / field / "c"
    missing = [i for i in needed if not (steps / str(i)).is_dir()]
    if missing:
        raise InvalidRequestError(
            f"tracking from {format_time(times[0])} to {format_time(times[-1])} needs time indices {needed[0]}-{needed[-1]} "
            f"of {field}; {', '.join(step_named(stored, i) for i in missing[:5])}"
            f"{' …' if len(missing) > 5 else ''} {'are' if len(missing) > 1 else 'is'} not stored"
        )


def _progress(progress: bool | Progress | None, total: int) -> Callable[[int | None], None]:
    """``progress``: None/False for nothing, True for a tqdm bar, or ``callback(done, total)``
    called after every step. The returned function takes the steps done, None at the end.
    A bar asked for is drawn wherever stderr goes (a notebook, a log), as the remote
    client's, and ``tqdm.auto`` makes it a widget in Jupyter; only ``$TQDM_DISABLE`` hides it."""
    if not progress:
        return lambda done: None
    if callable(progress):
        return lambda done: None if done is None else progress(done, total)
    from tqdm.auto import tqdm

    from .progress_bars import bar_disabled

    bar = tqdm(total=total, unit="step", dynamic_ncols=True, desc="track", disable=bool(bar_disabled()))

    def update(done: int | None) -> None:
        if done is None:
            bar.close()
        else:
            bar.update(done - bar.n)

    return update
