"""Jobs (Wang et al. §IV-B): an ordered sequence of queries whose time steps are known
ahead — a particle track, a sweep over a time series. Declared to the node engine, a job
lets the JAWS scheduler gate its queries with those of other jobs that read the same time
steps, so that one read of the shared atoms serves them all. ``db.job(plan)`` declares one;
each of its queries then goes with ``job=``, in the planned order. A job is a scheduling
hint only: answers do not depend on it, and without a node engine it changes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .arguments import TEMPORAL_ALIASES, TEMPORALS, choice, finite_number, known_field
from .exceptions import InvalidRequestError, LimitExceededError
from .written_steps import stencil_times

if TYPE_CHECKING:
    from .dataset import Dataset

#: Most queries one job may plan. The engine gates the first 1 024 of them with other jobs
#: (aligning longer plans would stall it); the rest run ungated.
MAX_JOB_QUERIES = 10_000


class Job:
    """A declared job: pass it as ``job=`` to each of its queries, in the planned order, and
    close it at the end (a ``with`` block does). ``id`` is the engine's number of the job,
    None where there is no node engine (then the job groups nothing)."""

    def __init__(self, engine: Any, number: int | None, queries: int):
        self._engine = engine
        self.id = number
        self.queries = queries
        self.closed = False

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<turbdb.Job {self.id} of {self.queries} queries, {state}>"

    def close(self) -> None:
        """Ends the job: its queries still to come run ungated, and other jobs stop waiting
        for it. Closing twice does nothing."""
        if not self.closed and self.id is not None:
            self._engine.close_job(self.id)
        self.closed = True

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def declare(engine: Any, regions: list[tuple[Any, list[int]]]) -> Job:
    """Declares the job whose queries read ``regions`` (per query: the field's store and
    the time indices it reads) to ``engine`` (None: no engine, an inert job)."""
    if len(regions) > MAX_JOB_QUERIES:
        raise LimitExceededError(f"a job may plan at most {MAX_JOB_QUERIES:,} queries, not {len(regions):,}: "
                                 "declare several jobs, one after the other")
    if engine is None:
        return Job(None, None, len(regions))
    return Job(engine, engine.declare_job(regions), len(regions))


def planned_query(entry: Any) -> tuple[str, str, float, str]:
    """One planned query as ``(dataset, field, time, temporal)``, from a tuple
    ``(dataset, field, time[, temporal])`` or a mapping with those keys."""
    if isinstance(entry, Mapping):
        unknown = set(entry) - {"dataset", "field", "time", "temporal"}
        if unknown or not {"dataset", "field", "time"} <= set(entry):
            raise InvalidRequestError(f"a planned query has the keys dataset, field, time and optionally temporal; "
                                      f"not {sorted(entry)}")
        values = (entry["dataset"], entry["field"], entry["time"], entry.get("temporal", "none"))
    elif isinstance(entry, (tuple, list)) and len(entry) in (3, 4):
        values = (*entry, "none") if len(entry) == 3 else tuple(entry)
    else:
        raise InvalidRequestError(f"a planned query is (dataset, field, time[, temporal]), not {entry!r}")
    dataset, field, time, temporal = values
    if not isinstance(dataset, str) or not isinstance(field, str):
        raise InvalidRequestError(f"a planned query names its dataset and field as strings, not {entry!r}")
    return dataset, field, finite_number("time", time), choice("temporal method", temporal, TEMPORALS, TEMPORAL_ALIASES)


def steps_read(dataset: Dataset, field: str, time: float, temporal: str = "none") -> list[int]:
    """The time indices a query of ``field`` at ``time`` reads (one, or pchip's four, of
    the steps the field has: :func:`~turbdb.written_steps.stencil_times`)."""
    info = dataset.metadata
    known_field(dataset.name, info.fields, field)
    times = stencil_times(info.times, info.fields[field].recorded, time, temporal)
    return [i for i, _ in dataset.field_store(field).time_levels(times, time, temporal)]


def job_number(job: Any) -> int | None:
    """The engine's number of ``job`` (a :class:`Job`, a number, or None)."""
    if job is None or isinstance(job, Job):
        return None if job is None else job.id
    if isinstance(job, int) and not isinstance(job, bool) and 0 <= job < 2**64:
        return job
    raise InvalidRequestError(f"job must be a turbdb.Job (from db.job(...)) or its number, not {job!r}")


def plan_of(dataset_named: Callable[[str], Dataset], plan: Iterable[Any]) -> list[tuple[Any, list[int]]]:
    """The regions of a plan of ``(dataset, field, time[, temporal])``, its datasets
    opened by ``dataset_named``."""
    regions = []
    datasets: dict[str, Dataset] = {}
    for count, entry in enumerate(plan, 1):
        if count > MAX_JOB_QUERIES:
            raise LimitExceededError(f"a job may plan at most {MAX_JOB_QUERIES:,} queries: declare several jobs, "
                                     "one after the other")
        name, field, time, temporal = planned_query(entry)
        if name not in datasets:
            datasets[name] = dataset_named(name)
        dataset = datasets[name]
        regions.append((dataset.field_store(field), steps_read(dataset, field, time, temporal)))
    if not regions:
        raise InvalidRequestError("a job plans at least one query")
    return regions
