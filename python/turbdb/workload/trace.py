"""A trace: jobs (an ordered sequence of queries) and the queries' arrival times, shaped
like the JHTDB log the JAWS paper describes — bursty arrivals; most jobs (about 88 %) on a
single time step, some over a few steps, a few per cent iterating over many steps
(particle tracking: 100 to 200 consecutive steps, or every step of a dataset with fewer
than 100); most queries small and spatially concentrated in regions of interest
that several users share, some large uniform batches. A query carries how to draw its
points (region, count, seed), not the points, so a trace stays small and replays exactly."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .. import arguments
from ..exceptions import FormatError, InvalidRequestError
from ..output_files import replacing

#: Shares of jobs by kind: one time step, a few consecutive steps, many steps (tracking).
SINGLE_STEP, FEW_STEPS = 0.88, 0.08
#: Consecutive steps a tracking job iterates over (every step of a dataset with fewer).
TRACK_STEPS = (100, 200)
#: Share of single-step queries that are large uniform batches, and their size range.
LARGE_SHARE, LARGE_POINTS = 0.04, (8_000, 40_000)
#: Small queries: log-normal point counts (median, sigma), at most this many.
SMALL_MEDIAN, SMALL_SIGMA, SMALL_MAX = 150, 1.2, 1_000
#: Spread (in grid spacings) of the points of a query around its region's centre.
SPREAD_NODES = (2.0, 12.0)
METHODS = (("lag4", "field"), ("lag6", "field"), ("lag8", "field"), ("lag6", "gradient"), ("fd4lag4", "laplacian"))


@dataclasses.dataclass(frozen=True)
class Query:
    """One query of a trace. ``arrival`` is seconds from the start (at speed-up 1); a job's
    later queries are sent when its previous one is answered. Points: ``count`` of them,
    drawn with ``seed`` around ``region`` (physical x, y, z) with standard deviation
    ``spread``, or uniform over the box when ``region`` is None."""

    arrival: float
    job: int
    index: int
    dataset: str
    field: str
    time: float
    method: str
    operator: str
    temporal: str
    count: int
    seed: int
    region: tuple[float, float, float] | None
    spread: float

    @property
    def size_class(self) -> str:
        return "small" if self.count <= 1_000 else "medium" if self.count <= 100_000 else "large"


def generate(
    info: Any,
    *,
    dataset: str,
    field: str = "velocity",
    jobs: int = 400,
    duration: float = 60.0,
    regions: int = 6,
    seed: int = 0,
) -> list[Query]:
    """A trace of ``jobs`` jobs arriving over ``duration`` seconds on the dataset whose
    metadata is ``info``: jobs come in bursts, pick one of ``regions`` shared regions of
    interest (or, one in five, a region of their own) and time steps with a skew towards
    a few popular ones."""
    rng = np.random.default_rng(seed)
    lo = np.asarray(info.origin, dtype=float)
    extent = np.asarray(info.spacing, dtype=float) * np.asarray(info.grid)
    spacing = float(min(info.spacing))
    # Only the written steps: a trace that asks for a time whose step is missing measures errors.
    written = info.fields[field].steps_present if field in info.fields else ()
    if not written:
        raise InvalidRequestError(f"dataset {dataset!r} has no written step of {field!r} to query; ingest or "
                                  "simulate some first")
    times = np.asarray(info.times, dtype=float)[list(written)]
    nt = len(times)
    hot = lo + rng.uniform(0.1, 0.9, (regions, 3)) * extent
    # Popular steps: Zipf-like weights over a random order of the steps.
    popularity = 1.0 / np.arange(1, nt + 1) ** 1.1
    step_weights = popularity[rng.permutation(nt)]
    step_weights /= step_weights.sum()
    arrivals = _bursty_arrivals(rng, jobs, duration)
    out: list[Query] = []
    for job, arrival in enumerate(arrivals):
        kind = rng.uniform()
        first = int(rng.choice(nt, p=step_weights))
        if kind < SINGLE_STEP or nt == 1:
            steps = [first] * int(rng.integers(1, 4))
        elif kind < SINGLE_STEP + FEW_STEPS:
            length = int(rng.integers(2, min(6, nt) + 1))
            start = min(first, nt - length)
            steps = list(range(start, start + length))
        elif nt < TRACK_STEPS[0]:
            steps = list(range(nt))
        else:
            length = int(rng.integers(TRACK_STEPS[0], min(nt, TRACK_STEPS[1]) + 1))
            start = int(rng.integers(0, nt - length + 1))
            steps = list(range(start, start + length))
        tracking = (len(steps) == nt and nt > 1) or len(steps) >= TRACK_STEPS[0]
        region = hot[rng.integers(regions)] if rng.uniform() < 0.8 else lo + rng.uniform(0, 1, 3) * extent
        spread = float(rng.uniform(*SPREAD_NODES)) * spacing
        method, operator = METHODS[int(rng.integers(len(METHODS)))]
        count = int(np.clip(rng.lognormal(np.log(SMALL_MEDIAN), SMALL_SIGMA), 1, SMALL_MAX))
        large = kind < SINGLE_STEP and rng.uniform() < LARGE_SHARE
        if large:
            count = int(rng.integers(*LARGE_POINTS))
        if tracking:
            method, operator = "lag6", "field"
        for index, step in enumerate(steps):
            out.append(Query(
                arrival=float(arrival), job=job, index=index, dataset=dataset, field=field,
                time=float(times[step]), method=method, operator=operator,
                temporal="none", count=count, seed=int(rng.integers(2**31)),
                region=None if large else tuple(float(v) for v in region), spread=spread,
            ))
    return out


def _bursty_arrivals(rng: np.random.Generator, jobs: int, duration: float) -> np.ndarray:
    """Job arrival times: bursts at Poisson times, each of a geometric number of jobs
    a fraction of a second apart."""
    times: list[float] = []
    while len(times) < jobs:
        start = rng.uniform(0, duration)
        size = int(rng.geometric(0.25))
        times.extend(start + np.cumsum(rng.exponential(0.05, size)))
    return np.sort(np.asarray(times[:jobs]))


def draw_points(query: Query, info: Any) -> np.ndarray:
    """The ``(count, 3)`` points of ``query``: the same every time it is drawn. Periodic
    axes wrap into the box; bounded ones are clamped inside it."""
    rng = np.random.default_rng(query.seed)
    lo = np.asarray(info.origin, dtype=float)
    extent = np.asarray(info.spacing, dtype=float) * (np.asarray(info.grid) - ~np.asarray(info.periodic, bool) * 1)
    if query.region is None:
        points = lo + rng.uniform(0, 1, (query.count, 3)) * extent
    else:
        points = np.asarray(query.region) + rng.normal(0, query.spread, (query.count, 3))
    periodic = np.asarray(info.periodic, bool)
    wrapped = lo + np.mod(points - lo, extent)
    clamped = np.clip(points, lo, lo + extent)
    return np.ascontiguousarray(np.where(periodic, wrapped, clamped))


def write_trace(path: str | os.PathLike[str], queries: Iterable[Query]) -> int:
    """Writes ``queries`` as JSON lines; returns how many. An earlier file at ``path`` is
    replaced once the new one is complete."""
    count = 0
    with replacing(path) as (temporary,), open(temporary, "w", encoding="utf-8") as out:
        for q in queries:
            out.write(json.dumps(dataclasses.asdict(q)) + "\n")
            count += 1
    return count


#: Points one query of a trace may draw (draw_points makes them all at once: 240 MB here).
MAX_TRACE_POINTS = 10_000_000
#: Whole numbers of a trace (job, index, seed: generate draws seeds below 2**31) are below this.
MAX_WHOLE = 2**63 - 1


def read_trace(path: str | os.PathLike[str]) -> list[Query]:
    """Reads a trace written by :func:`write_trace`, in arrival order. Every field of
    every line is checked (a bad one is a :class:`FormatError` naming the line and the
    field, before anything is drawn or sent), and a job's query index may appear once."""
    queries = []
    names = {f.name for f in dataclasses.fields(Query)}
    seen: dict[tuple[int, int], int] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or set(record) != names:
                keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise ValueError(f"expected the keys {sorted(names)}, not {keys}")
            query = _query(record)
            if (query.job, query.index) in seen:
                raise ValueError(f"job {query.job}'s query {query.index} is on line {seen[query.job, query.index]} "
                                 "already")
            seen[query.job, query.index] = number
            queries.append(query)
        except (ValueError, TypeError) as e:
            raise FormatError(f"{path}, line {number}: not a trace record ({e})") from None
    return sorted(queries, key=lambda q: (q.arrival, q.job, q.index))


def _query(record: dict[str, Any]) -> Query:
    """The query of one line's ``record`` (its keys checked), each field checked: a
    ``ValueError`` names the first that is wrong."""
    region = record["region"]
    if region is not None:
        coordinates = [_finite(v) for v in region] if isinstance(region, list) and len(region) == 3 else [None]
        if None in coordinates:
            raise ValueError(f"region must be null or [x, y, z], three finite numbers, not {region!r}")
        region = tuple(coordinates)
    return Query(
        arrival=_number("arrival", record["arrival"], least=0.0),
        job=_whole("job", record["job"], 0),
        index=_whole("index", record["index"], 0),
        dataset=_text("dataset", record["dataset"]),
        field=_text("field", record["field"]),
        time=_number("time", record["time"]),
        method=_known("method", record["method"], arguments.METHODS, arguments.METHOD_ALIASES),
        operator=_known("operator", record["operator"], arguments.OPERATORS, arguments.OPERATOR_ALIASES),
        temporal=_known("temporal", record["temporal"], arguments.TEMPORALS, arguments.TEMPORAL_ALIASES),
        count=_whole("count", record["count"], 1, MAX_TRACE_POINTS, "a whole number of points"),
        seed=_whole("seed", record["seed"], 0),
        region=region,
        spread=_number("spread", record["spread"], least=0.0),
    )


def _finite(value: Any) -> float | None:
    """``value`` as a float if it is a finite JSON number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value) if not isinstance(value, int) or abs(value) < 2**1023 else math.inf
    return number if math.isfinite(number) else None


def _number(name: str, value: Any, least: float = -math.inf) -> float:
    number = _finite(value)
    if number is None or number < least:
        bound = f" from {least:g}" if least > -math.inf else ""
        raise ValueError(f"{name} must be a finite number{bound}, not {value!r}")
    return number


def _whole(name: str, value: Any, least: int, most: int = MAX_WHOLE, what: str = "a whole number") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        bound = f" to {most:,}" if most < MAX_WHOLE else ""
        raise ValueError(f"{name} must be {what} from {least:,}{bound}, not {value!r}")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a name (a string), not {value!r}")
    return value


def _known(name: str, value: Any, valid: tuple[str, ...], aliases: dict[str, str]) -> str:
    if not isinstance(value, str) or (value.lower() not in valid and value.lower() not in aliases):
        raise ValueError(f"{name} must be one of {', '.join(valid)}, not {value!r}")
    return value
