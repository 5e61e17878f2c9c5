"""Running work units on the workers, and surviving them: each worker gets at most
``credit`` units at a time and pulls its next one from the queue when one completes
(:mod:`~turbdb.cluster.queue`). A unit whose worker dies (its address leaves the
scheduler; a nanny brings the worker back under a new address), whose worker fails it
with a storage error, or which cannot be fetched, goes back to the front of the queue to
be done by another worker of its group. A unit running much longer than its peers gets a
backup copy on another worker of its group once the queue is empty; the first answer
wins (both are the same sums). Errors of the request itself are raised at once; a copy
that does not hold what was laid out (:class:`~turbdb.cluster.node.DamagedCopyError`: a
missing or stale file on one worker's disk) is a fault of that copy, and the unit fails
(503) only once every copy of it has failed so."""

from __future__ import annotations

import dataclasses
import queue as stdlib_queue
import statistics
import time
from collections.abc import Callable
from typing import Any

from distributed import TimeoutError as DaskTimeoutError

from ..exceptions import InvalidRequestError, ServiceError, UnknownNameError
from .membership import Membership
from .node import DamagedCopyError
from .queue import WorkQueue
from .routing import Unit

#: Units a worker holds at once: one running, one arriving (transfers overlap work).
CREDIT = 2
#: How long units wait for a worker of their group to come back (a nanny restart).
RESTART_GRACE = 30.0
#: How often a waiting dispatcher looks at which workers are alive.
POLL_SECONDS = 0.25
#: How often a busy dispatcher looks at which workers are alive.
LIVENESS_SECONDS = 1.0
#: A unit gets a backup when it has run this many times longer than expected …
BACKUP_FACTOR = 3.0
#: … and at least this long.
BACKUP_SECONDS = 0.5
#: How long fetching a finished unit's answer from a live worker may take before it counts as lost.
FETCH_SECONDS = 30.0
#: A run gives up when its units failed this many times each, on average.
MAX_FAILURES = 4
#: Errors of the request itself: every copy would fail the same way.
REQUEST_ERRORS = (InvalidRequestError, UnknownNameError)

Start = Callable[[Unit, str], tuple[Any, list[Any]]]


@dataclasses.dataclass
class _Flight:
    unit_id: int
    slot: str
    address: str
    started: float
    keep: list[Any]
    backup: bool = False


@dataclasses.dataclass
class Report:
    """What a run did: per worker slot the units, points and seconds it completed, and how
    many units were retried after a failure or backed up."""

    work: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    retried: int = 0
    failed: int = 0
    backups: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)

    def credit(self, slot: str, unit: Unit, seconds: float) -> None:
        w = self.work.setdefault(slot, {"units": 0, "points": 0, "seconds": 0.0})
        w["units"] += 1
        w["points"] += unit.cost
        w["seconds"] += seconds


class Dispatcher:
    """Runs units on live workers. ``start(unit, address)`` sends a unit to the worker at
    ``address`` and returns its future (a Dask future, or an actor call:
    :class:`~turbdb.cluster.server.Call`) and anything that must stay referenced while it
    runs; ``merge(unit, answer)`` takes a unit's answer (called once per unit)."""

    def __init__(self, membership: Membership, *, credit: int = CREDIT, grace: float = RESTART_GRACE):
        self.membership = membership
        self.credit = credit
        self.grace = grace

    def run(self, units: list[Unit], start: Start, merge: Callable[[Unit, Any], None], *,
            policy: str = "graduated") -> Report:
        flights: dict[Any, _Flight] = {}
        try:
            return self._run(units, start, merge, policy, flights)
        finally:
            self._cancel(flights)  # an error or an interrupt leaves nothing running

    def _run(self, units: list[Unit], start: Start, merge: Callable[[Unit, Any], None], policy: str,
             flights: dict[Any, _Flight]) -> Report:
        report = Report()
        pending = WorkQueue(units, policy)
        ids = {id(unit): unit for unit in units}
        done: set[int] = set()
        finished: stdlib_queue.SimpleQueue = stdlib_queue.SimpleQueue()
        rates: list[float] = []  # seconds per point of completed units
        stranded_since: float | None = None
        live = self.membership.live()
        checked = time.monotonic()
        while len(done) < len(units):
            if time.monotonic() - checked > LIVENESS_SECONDS:
                live, checked = self._drop_lost(flights, ids, pending, report), time.monotonic()
            # Give every live worker work up to its credit.
            busy = _count_by_slot(flights)
            for slot, address in live.items():
                while busy.get(slot, 0) < self.credit:
                    unit = pending.take(slot, live.keys())
                    if unit is None:
                        unit = self._backup_for(slot, flights, ids, done, rates)
                        if unit is None:
                            break
                        report.backups += 1
                    try:
                        future, keep = start(unit, address)
                    except Exception as e:  # the worker went away while we sent it work
                        report.failures.append(f"{slot}: {type(e).__name__}: {e}")
                        if not any(f.unit_id == id(unit) for f in flights.values()):
                            pending.put(unit, front=True)
                        live = self.membership.live(refresh=True)
                        break
                    flights[future] = _Flight(id(unit), slot, address, time.monotonic(), keep,
                                              backup=any(f.unit_id == id(unit) for f in flights.values()))
                    future.add_done_callback(finished.put)
                    busy[slot] = busy.get(slot, 0) + 1
            # Units no live worker holds wait for a restart, up to the grace period.
            stranded = pending.stranded(live.keys())
            if stranded and not flights:
                stranded_since = stranded_since or time.monotonic()
                if time.monotonic() - stranded_since > self.grace:
                    error = ServiceError(_no_copy_message(stranded, report))
                    error.status = 503  # type: ignore[attr-defined]  # what a web service answers
                    raise error
                time.sleep(POLL_SECONDS)
                live = self.membership.live(refresh=True)
                continue
            stranded_since = None
            try:
                future = finished.get(timeout=POLL_SECONDS)
            except stdlib_queue.Empty:
                live, checked = self._drop_lost(flights, ids, pending, report), time.monotonic()
                continue
            flight = flights.pop(future, None)
            if flight is None:
                continue  # a cancelled duplicate
            unit = ids[flight.unit_id]
            try:
                if future.status != "finished":
                    self._fetch(future, flight)  # raises the task's error
                    raise ServiceError(f"unit ended as {future.status}")
                answer = self._fetch(future, flight)
            except REQUEST_ERRORS:
                raise
            except Exception as e:
                report.failures.append(f"{flight.slot}: {type(e).__name__}: {e}")
                unit.avoid.add(flight.slot)
                report.failed += 1
                if isinstance(e, DamagedCopyError) and unit.avoid.issuperset(unit.holders):
                    error = ServiceError(f"no sound copy of the partitions a unit reads: every worker holding them "
                                         f"({', '.join(unit.holders)}) failed it. {'; '.join(report.failures[-3:])}")
                    error.status = 503  # type: ignore[attr-defined]  # unavailable until repaired or laid out again
                    raise error from None
                if flight.unit_id not in done and not any(f.unit_id == flight.unit_id for f in flights.values()):
                    if report.failed > MAX_FAILURES * len(units):
                        raise
                    report.retried += 1
                    pending.put(unit, front=True)
                live = self.membership.live(refresh=True)
                continue
            if flight.unit_id in done:
                continue
            done.add(flight.unit_id)
            seconds = time.monotonic() - flight.started
            rates.append(seconds / max(unit.cost, 1))
            report.credit(flight.slot, unit, seconds)
            merge(unit, answer)
            for other, f in list(flights.items()):  # a backup's twin is no longer needed
                if f.unit_id == flight.unit_id:
                    flights.pop(other)
                    other.cancel()
        return report

    def _fetch(self, future: Any, flight: _Flight) -> Any:
        """A finished unit's answer. It lives on the worker that computed it: if that worker
        dies before the answer is fetched, Dask would wait to recompute the unit there (it
        is bound to that worker), so give up as soon as the worker has left the cluster."""
        deadline = time.monotonic() + FETCH_SECONDS
        while True:
            try:
                return future.result(timeout=POLL_SECONDS)
            except DaskTimeoutError:
                pass
            except UnboundLocalError:
                # dask/distributed#8514: a fetch cancelled inside Future.result(timeout) loses
                # its outcome and says so with this error, under load; the answer is still
                # on the worker, so ask again as after a timeout.
                if future.status != "finished":
                    raise
            if flight.address not in self.membership.live(refresh=True).values():
                raise ServiceError(f"worker {flight.address} left the cluster before its answer was fetched")
            if time.monotonic() > deadline:
                raise ServiceError(f"the answer of a unit on {flight.address} could not be fetched in "
                                   f"{FETCH_SECONDS:.0f} s")

    def _backup_for(self, slot: str, flights: dict[Any, _Flight], ids: dict[int, Unit], done: set[int],
                    rates: list[float]) -> Unit | None:
        """A unit running late on another worker that ``slot`` could do as well."""
        if not rates:
            return None
        per_point = statistics.median(rates)
        now = time.monotonic()
        twins = {f.unit_id for f in flights.values() if f.backup}
        for f in flights.values():
            unit = ids[f.unit_id]
            if (f.slot != slot and not f.backup and f.unit_id not in done and f.unit_id not in twins
                    and slot in unit.holders
                    and now - f.started > max(BACKUP_SECONDS, BACKUP_FACTOR * per_point * unit.cost)):
                return unit
        return None

    def _drop_lost(self, flights: dict[Any, _Flight], ids: dict[int, Unit], pending: WorkQueue,
                   report: Report) -> dict[str, str]:
        """Requeues the units of workers that are gone (or came back under a new address)."""
        live = self.membership.live(refresh=True)
        addresses = set(live.values())
        silent = self.membership.silent()
        for future, f in list(flights.items()):
            if f.address not in addresses:
                flights.pop(future)
                future.cancel()
                gone = (f"has not been heard from for {silent[f.slot]:.0f} s" if f.slot in silent
                        else "left the cluster")
                report.failures.append(f"{f.slot}: worker {f.address} {gone}")
                if not any(g.unit_id == f.unit_id for g in flights.values()):
                    report.retried += 1
                    pending.put(ids[f.unit_id], front=True)
        return live

    @staticmethod
    def _cancel(flights: dict[Any, _Flight]) -> None:
        for future in flights:
            future.cancel()
        flights.clear()


def _count_by_slot(flights: dict[Any, _Flight]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in flights.values():
        counts[f.slot] = counts.get(f.slot, 0) + 1
    return counts


def _no_copy_message(stranded: list[Unit], report: Report) -> str:
    groups = sorted({", ".join(u.holders) for u in stranded})
    # A unit of whole points (partitions None) reads every partition its workers hold.
    partitions = sorted({p for u in stranded for p in (u.partitions or [])})
    shown = ", ".join(f"(t={t}, shard={s})" for t, s in partitions[:5])
    what = (f"{len(partitions)} partition{'s' * (len(partitions) != 1)} ({shown}{' …' if len(partitions) > 5 else ''})"
            if partitions else "the partitions this query reads")
    return (f"no live copy of {what}: every worker holding them ({'; '.join(groups)}) is down or has stopped "
            f"answering. Restart them or run `turbdb cluster repair`. "
            f"Failures: {'; '.join(report.failures[-3:]) or 'none'}")
