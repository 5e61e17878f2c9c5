"""Which time steps of each field are written, as the dataset's metadata records them: the
``steps_written`` attribute, ``{field: "0-99,101,103-110"}`` (ascending runs of time
indices, compact: a field written every other step of a thousand takes 2 KB), which every
write extends under the metadata lock once the step's shards are all in place.
``Dataset.info``, ``GET /v1/datasets/NAME`` and ``verify`` read it instead of
looking at every shard (about 5 µs each: seconds on large datasets), ``verify`` names a
recorded step whose shards are gone, and pchip's time stencil of a field stops at its last
recorded step. A field without an entry (written before the record existed) has its steps
counted from its shards, and is recorded at its next write."""

from __future__ import annotations

import bisect
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .exceptions import DamagedMetadataError, TurbdbError
from .times import format_time, range_tolerance

RECORD_KEY = "steps_written"

#: Ascending, disjoint runs ``(first, last)`` of time indices, both included.
Runs = tuple[tuple[int, int], ...]
#: One field's entry: runs ``first-last`` (or ``first`` alone) joined by commas.
_ENTRY = re.compile(r"(?:\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)?")

#: The engine's message for a step with no data (it counts steps from 0, by time index).
UNSTORED_STEP = re.compile(r"time step (\d+) is not stored(.*)", re.DOTALL)


def parse_runs(value: Any, field: str, where: str = "the dataset") -> Runs:
    """The runs a field's entry holds; anything else is a :class:`DamagedMetadataError`
    (a writer trusting it would record wrongly, and ``info`` would list steps never written)."""
    runs: list[tuple[int, int]] = []
    if isinstance(value, str) and _ENTRY.fullmatch(value):
        for item in filter(None, value.split(",")):
            first, _, last = item.partition("-")
            run = (int(first), int(last or first))
            if run[1] < run[0] or (runs and run[0] <= runs[-1][1]):
                break
            runs.append(run)
        else:
            return tuple(runs)
    raise DamagedMetadataError(f"{where}: the {RECORD_KEY!r} attribute of field {field!r} must list ascending, "
                               f"separate runs of time indices (\"0-9,12\"), not {value!r}; the metadata is damaged")


def recorded_runs(attrs: dict[str, Any], where: str = "the dataset") -> dict[str, Runs]:
    """Each recorded field's runs; fields written before the record existed are absent.
    ``where``: the dataset, as a damaged record's error names it."""
    entries = attrs.get(RECORD_KEY, {})
    if not isinstance(entries, dict):
        raise DamagedMetadataError(f"{where}: the {RECORD_KEY!r} attribute must map fields to runs of time indices, "
                                   f"not {entries!r}; the metadata is damaged")
    return {str(field): parse_runs(value, str(field), where) for field, value in entries.items()}


def entry_of(runs: Runs) -> str:
    """``((0, 2), (5, 5))`` as stored: ``"0-2,5"``."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def runs_of(steps: Iterable[int]) -> Runs:
    """``0 1 2 5`` as ``((0, 2), (5, 5))``."""
    runs: list[list[int]] = []
    for t in sorted(set(steps)):
        if runs and t == runs[-1][1] + 1:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    return tuple((a, b) for a, b in runs)


def steps_of(runs: Runs, below: int | None = None) -> Iterator[int]:
    """The steps of ``runs`` (those ``below`` a count of times, when given)."""
    for first, last in runs:
        yield from range(first, last + 1 if below is None else min(last + 1, below))


def holds(runs: Runs, t: int) -> bool:
    """Whether step ``t`` lies in ``runs``."""
    k = bisect.bisect_right(runs, (t, math.inf)) - 1
    return k >= 0 and runs[k][0] <= t <= runs[k][1]


def with_step(runs: Runs, t: int) -> Runs:
    """``runs`` with step ``t`` added, joined to its neighbours (in the time of a look-up,
    not of the steps: a dataset of 10⁵ steps writes each at the same cost)."""
    if holds(runs, t):
        return runs
    out = list(runs)
    k = bisect.bisect_right(runs, (t, math.inf))  # the runs before t
    after_previous = k > 0 and out[k - 1][1] == t - 1
    before_next = k < len(out) and out[k][0] == t + 1
    if after_previous and before_next:
        out[k - 1:k + 1] = [(out[k - 1][0], out[k][1])]
    elif after_previous:
        out[k - 1] = (out[k - 1][0], t)
    elif before_next:
        out[k] = (t, out[k][1])
    else:
        out.insert(k, (t, t))
    return tuple(out)


def record_step(attrs: dict[str, Any], field: str, t: int, counted: Callable[[], Iterable[int]]) -> bool:
    """Adds step ``t`` of ``field`` to the record in ``attrs`` (under the metadata lock, after
    its shards are in place); a field not recorded yet starts from the steps ``counted()``
    finds on disk. Returns whether the record changed."""
    entries = attrs.setdefault(RECORD_KEY, {})
    known = field in entries
    runs = parse_runs(entries[field], field) if known else runs_of(counted())
    if known and holds(runs, t):
        return False
    entries[field] = entry_of(with_step(runs, t))
    return True


def forget_field(attrs: dict[str, Any], field: str) -> None:
    """Drops the record of a field removed (a field made again under its name starts anew)."""
    entries = attrs.get(RECORD_KEY)
    if isinstance(entries, dict):
        entries.pop(field, None)


def cut_at(attrs: dict[str, Any], nt: int) -> None:
    """Drops recorded steps at time index ``nt`` and after (the stored times were cut there):
    times appended again later are not written yet."""
    for field, runs in recorded_runs(attrs).items():
        attrs[RECORD_KEY][field] = entry_of(tuple((a, min(b, nt - 1)) for a, b in runs if a < nt))


def steps_on_disk(runs: Runs, field_dir: Path, nt: int) -> tuple[int, ...]:
    """The recorded steps below ``nt`` whose directory is there: one listing of the field's
    steps instead of a look at every shard. A step deleted (a run stopped and cleaned up
    by hand) is not listed; one that lost only some shards is, and ``verify`` names it."""
    try:
        with os.scandir(field_dir / "c") as entries:
            there = {int(e.name) for e in entries if e.name.isdigit() and e.is_dir()}
    except FileNotFoundError:
        return ()
    return tuple(sorted(t for t in there if t < nt and holds(runs, t)))


def stencil_times(times: np.ndarray, runs: Runs | None, time: float, temporal: str) -> np.ndarray:
    """The stored times a query of a field at ``time`` interpolates over (``temporal`` as
    checked: ``none`` or ``pchip``): all of them, except that pchip at or before the field's
    last recorded step takes the times up to it only, so that the field's last interval
    takes the one-sided slope it takes at the end of the data instead of reading the next
    step, which the field does not have (once another field's later step was appended,
    pchip over that interval failed). The indices stay those of the stored times; earlier
    intervals get the same stencil either way."""
    if temporal != "pchip" or not runs:
        return times
    last = runs[-1][1]
    if last + 1 >= len(times):
        return times
    head = times[:last + 1]
    if time > head[-1] + range_tolerance(head):
        return times  # past the field's last step: the engine names the step it lacks
    return head


def step_named(times: Any, t: int) -> str:
    """A time step as messages name it: its time index (from 0, as ``time_index`` and
    ``Dataset.write`` count) and its time."""
    return f"time index {t} (t = {format_time(times[t])})" if 0 <= t < len(times) else f"time index {t}"


def naming_the_step(error: TurbdbError, times: Any, field: str) -> TurbdbError:
    """The engine's "time step N is not stored" (N a time index) as turbdb's other messages
    name a step: "time index N (t = …) of FIELD is not stored"; other errors unchanged."""
    unstored = UNSTORED_STEP.match(str(error))
    if unstored is None:
        return error
    named = type(error)(f"{step_named(times, int(unstored.group(1)))} of {field} is not stored{unstored.group(2)}")
    for key, value in vars(error).items():  # the service's status, where set
        setattr(named, key, value)
    return named
