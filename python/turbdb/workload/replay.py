"""Replaying a trace against a database from concurrent clients, as users would: each of
``clients`` threads takes the next job when it arrives (its arrival time divided by the
speed-up) and sends its queries one after another; all threads share the database's node
engine. A job of several queries is declared first (``db.job``: ``POST /v1/jobs`` on a
server), its time steps known ahead as a particle track's are, so that the JAWS scheduler
can gate it with the other jobs, and closed at its end. Reports throughput, response times
by query size and what the engine read."""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..exceptions import EngineBusyError, InvalidRequestError, ServiceError, TurbdbError
from .declared_jobs import CLOSE_SECONDS, DeclaredJobs
from .trace import Query, draw_points

SIZE_CLASSES = ("small", "medium", "large")


@dataclasses.dataclass(frozen=True)
class Answered:
    """One query as its client saw it: sent ``sent`` seconds after the start, answered
    ``seconds`` later, or failed with ``error``; ``correct`` is the check's verdict (None
    when the replay checks nothing); ``job`` and ``index``: which query of the trace it
    was (-1 where not known)."""

    sent: float
    seconds: float
    points: int
    size_class: str
    error: str | None = None
    correct: bool | None = None
    job: int = -1
    index: int = -1

    @property
    def done(self) -> float:
        """When the answer came, seconds after the start."""
        return self.sent + self.seconds

    @property
    def ok(self) -> bool:
        return self.error is None and self.correct is not False


@dataclasses.dataclass
class ReplayReport:
    """What a replay measured: every query sent (``log``), the wall time, and ``engine``,
    the change in the engine's counters (atoms and bytes read, cache hits and misses),
    empty without an engine; against a server, ``throttling``, how long the clients waited
    on its limits (:class:`turbdb.remote.Throttling`, summed over the clients; empty for a
    local database). Queries of a job after one that failed are not sent: ``traced`` is
    how many the trace holds, so that ``not_sent`` says how many were left out.
    ``unreachable``: the server could not be reached, and the replay stopped there."""

    log: list[Answered]
    seconds: float
    engine: dict[str, float]
    throttling: dict[str, Any] = dataclasses.field(default_factory=dict)
    traced: int | None = None
    unreachable: bool = False

    @property
    def not_sent(self) -> int:
        """Queries of the trace never sent (those of a job after one of its queries failed,
        and once the server could not be reached every one left, those still waiting on it
        included)."""
        return 0 if self.traced is None else self.traced - len(self.log)

    @property
    def queries(self) -> int:
        """Queries answered (correctly, where checked)."""
        return sum(a.ok for a in self.log)

    @property
    def points(self) -> int:
        return sum(a.points for a in self.log if a.ok)

    @property
    def failed(self) -> int:
        return len(self.log) - self.queries

    def failures(self, most: int = 5) -> dict[str, int]:
        """Why queries failed: the most common errors (a wrong answer is one), with how many
        queries each failed."""
        reasons = Counter(a.error or "wrong answer" for a in self.log if not a.ok)
        return dict(reasons.most_common(most))

    @property
    def response(self) -> dict[str, list[float]]:
        """Response times (s, from sending to the answer) of the answered queries by size class."""
        by_class: dict[str, list[float]] = defaultdict(list)
        for a in self.log:
            if a.ok:
                by_class[a.size_class].append(a.seconds)
        return dict(by_class)

    @property
    def queries_per_second(self) -> float:
        return self.queries / self.seconds if self.seconds > 0 else math.nan

    @property
    def points_per_second(self) -> float:
        return self.points / self.seconds if self.seconds > 0 else math.nan

    def percentile(self, size_class: str, q: float) -> float:
        values = self.response.get(size_class, [])
        return float(np.percentile(values, q)) if values else math.nan

    def completion(self) -> dict[str, Any]:
        """When the answers came: by when half, 90 % and all of the answered queries were
        in (seconds after the start), and the job that ended last — its queries answered,
        when its first was sent and when its last was answered. A closed-loop replay cannot
        end before its longest job's queries have gone one after another, so where the last
        job ends well after 90 % of the queries are in, that job's chain, not the
        database's capacity, set the replay's length (empty without answers)."""
        answered = [a for a in self.log if a.ok]
        if not answered:
            return {}
        done = np.sort([a.done for a in answered])
        by_job: dict[int, list[Answered]] = defaultdict(list)
        for a in answered:
            by_job[a.job].append(a)
        last_job, last = max(by_job.items(), key=lambda item: max(a.done for a in item[1]))
        by = {f"{q}%": float(done[max(math.ceil(q / 100 * len(done)) - 1, 0)]) for q in (50, 90, 100)}
        return {
            "answered_by": by,
            "last_job": {"job": last_job, "queries": len(last), "first_sent": min(a.sent for a in last),
                         "ended": max(a.done for a in last)},
        }

    def summary(self) -> dict[str, Any]:
        """The figures as plain numbers (for JSON)."""
        response = self.response
        return {
            "queries": self.queries, "points": self.points, "seconds": self.seconds, "failed": self.failed,
            "not_sent": self.not_sent, "traced": self.traced if self.traced is not None else len(self.log),
            "unreachable": self.unreachable,
            "failures": self.failures(),
            "queries_per_second": self.queries_per_second, "points_per_second": self.points_per_second,
            "response": {
                c: {"count": len(response[c]), "p50": self.percentile(c, 50),
                    "p95": self.percentile(c, 95), "p99": self.percentile(c, 99)}
                for c in SIZE_CLASSES if response.get(c)
            },
            "engine": self.engine,
            "completion": self.completion(),
            **({"throttling": self.throttling} if self.throttling else {}),
        }


def completion_text(completion: dict[str, Any]) -> str:
    """A ``completion`` (:meth:`ReplayReport.completion`, or its copy in a summary) in
    words: when half, 90 % and all of the answers were in, and the job that ended last
    ('' without answers)."""
    if not completion:
        return ""
    by, last = completion["answered_by"], completion["last_job"]
    queries = f"{last['queries']} {'query' if last['queries'] == 1 else 'queries'}"
    return (f"answered: half by {by['50%']:.2f} s, 90 % by {by['90%']:.2f} s, all by {by['100%']:.2f} s; "
            f"the last job to end ({queries}, its first sent at {last['first_sent']:.2f} s) "
            f"ended at {last['ended']:.2f} s")


ENGINE_COUNTERS = ("atoms_read", "bytes_read", "read_requests", "cache_hits", "cache_misses", "batches",
                   "contributions")

#: ``check(query, points, values)``: whether an answer is right.
Check = Callable[[Query, np.ndarray, np.ndarray], bool]


#: How the clients are run: a thread each, or futures driven from the calling thread.
DRIVERS = ("threads", "futures")
#: The longest a trace's arrivals may stretch a replay (its last job's arrival over the
#: speed-up): a week. A speed-up of 1e-11 put them past what ``time.sleep`` takes, and
#: every client thread failed with an OverflowError.
MAX_ARRIVAL_SECONDS = 7 * 24 * 3600.0
#: Connections a turbdb server takes from one address (``MAX_CONNECTIONS_PER_CLIENT`` of
#: ``turbdb.service.connections``, which a test keeps equal): each client thread of a
#: replay against a server holds one while its query is under way, so more clients than
#: this were answered 503 by the server's connection guard.
SERVER_CONNECTIONS_PER_ADDRESS = 128
#: Seconds the replay still waits for its other clients once one has found the server
#: unreachable: theirs met the same refusals at about the same time.
UNREACHABLE_GRACE_SECONDS = 2.0

_log = logging.getLogger("turbdb.workload")


def replay(
    database: Any,
    trace: Sequence[Query],
    *,
    speedup: float = math.inf,
    clients: int = 8,
    progress: Callable[[int, int], None] | None = None,
    check: Check | None = None,
    driver: str = "threads",
) -> ReplayReport:
    """Replays ``trace`` against ``database`` (a :class:`turbdb.Database`, best opened with a
    node engine, or a cluster) from ``clients`` clients at ``speedup`` times the trace's
    pace (``math.inf``: every job is ready at once, the saturating case). ``progress`` is
    called with (queries done, total) as queries complete; ``check``, if given, judges
    every answer (a wrong one counts as failed). ``driver``: ``threads`` runs each client
    in a thread that waits for its answers; ``futures`` runs them all from the calling
    thread with ``Dataset.submit`` (at most ``clients`` jobs under way, each job's next
    query sent when the previous one's future is done), so that, through a node engine in
    this process, the clients' threads take no CPU from it, as remote clients would not.

    Each query's points are drawn just before it is sent (the same points every time: they
    are seeded), so that a trace's memory is that of the queries under way. Once one query
    has found a server unreachable nothing more is sent, and the report comes within
    :data:`UNREACHABLE_GRACE_SECONDS` (queries still waiting on it count as not sent).
    Interrupted (Ctrl-C), the replay closes the jobs it declared and left open, within
    :data:`~turbdb.workload.declared_jobs.CLOSE_SECONDS`, before the interrupt goes on."""
    if not (speedup > 0):
        raise InvalidRequestError(f"speedup must be positive, not {speedup!r}")
    if clients < 1:
        raise InvalidRequestError(f"clients must be at least 1, not {clients!r}")
    if driver not in DRIVERS:
        raise ValueError(f"driver must be one of {', '.join(DRIVERS)}, not {driver!r}")
    for problem in (speedup_problem(trace, speedup),
                    clients_problem(clients, driver, against_server=_throttling(database) is not None)):
        if problem is not None:
            raise InvalidRequestError(problem)
    waits_before = _throttling(database)  # the setup's requests are the replay's too
    by_job: dict[int, list[Query]] = defaultdict(list)
    for q in trace:
        by_job[q.job].append(q)
    jobs = sorted((sorted(qs, key=lambda q: q.index) for qs in by_job.values()), key=lambda qs: qs[0].arrival)
    datasets = {name: database[name] for name in {q.dataset for q in trace}}
    # info scans the dataset's shard tree: once per dataset, not once per query.
    infos = {name: ds.info for name, ds in datasets.items()}
    before = _counters(database)
    lock = threading.Lock()
    next_job = iter(jobs)
    log: list[Answered] = []
    declared_jobs = DeclaredJobs(database)
    # The clock starts once every client thread is up: starting 1 024 threads took 74 ms on
    # an idle 2-core Intel Xeon and longer beside running clients, their time, not the
    # database's (jaws at saturation, AVX2 path, 2 threads, load 2.0–2.4: 1 131 against
    # 1 039 q/s, medians of 3 alternating runs).
    go = threading.Event()
    # Set when the server could not be reached at all (after the client's retries): nothing
    # more is sent (the jobs left are counted as not sent), its jobs are not closed, and the
    # report does not wait for the clients still retrying: each waited out its own retries
    # against a server that had gone, then as long again to close its job, and the report
    # came 206 s after the server died.
    unreachable = threading.Event()
    # Set when the replay is interrupted (Ctrl-C in the waiting thread) or a client failed
    # unexpectedly: the clients send nothing more, and a query that fails because the caller
    # then closed the connection ends its client quietly (each printed a traceback, and
    # another from closing its job).
    stopping = threading.Event()
    # Set with either: clients waiting for a job's arrival, or for a busy engine, wake up.
    halt = threading.Event()
    crashed: list[BaseException] = []
    reported = [False]  # answers that come after the report was taken are not logged

    def client() -> None:
        try:
            send_jobs()
        except Exception as e:  # a bug: raised in the calling thread once the others stopped
            if not stopping.is_set():
                with lock:
                    crashed.append(e)
                stopping.set()
                halt.set()

    def send_jobs() -> None:
        go.wait()
        while not halt.is_set():
            with lock:
                job = next(next_job, None)
            if job is None:
                return
            if math.isfinite(speedup):
                delay = origin + job[0].arrival / speedup - time.perf_counter()
                if delay > 0 and halt.wait(delay):
                    return
            run_job(job)

    def run_job(job: list[Query]) -> None:
        declared = declared_jobs.declare(job)
        try:
            for q in job:
                if halt.is_set():
                    break
                points = draw_points(q, infos[q.dataset])
                sent = time.perf_counter()
                values, error = _ask(datasets[q.dataset], q, points, declared, halt)
                if _unreachable(error):
                    unreachable.set()
                    halt.set()
                if not record(q, points, sent, values, error).ok:
                    break
        finally:
            if declared is not None:
                (declared_jobs.forget if unreachable.is_set() else declared_jobs.close)(declared)

    def record(q: Query, points: np.ndarray, sent: float, values: np.ndarray | None, error: str | None) -> Answered:
        """Logs the answer to ``q`` (sent at ``sent``), checked if there is a check."""
        took = time.perf_counter() - sent
        correct = None if check is None or values is None else bool(check(q, points, values))
        answered = Answered(sent - origin, took, len(points), q.size_class, error, correct, q.job, q.index)
        with lock:
            if not reported[0]:
                log.append(answered)
                if progress is not None:
                    progress(len(log), len(trace))
        return answered

    try:
        if driver == "futures":
            origin = time.perf_counter()
            _drive_futures(jobs, datasets, infos, speedup, clients, origin, record, declared_jobs, unreachable)
        else:
            # Daemons: a client still waiting on a server that went away must not hold up the exit.
            threads = [threading.Thread(target=client, name=f"replay-client-{i}", daemon=True)
                       for i in range(clients)]
            try:
                for t in threads:
                    t.start()
            finally:  # a thread that cannot start must not leave the others waiting forever
                origin = time.perf_counter()
                go.set()
            _wait_for(threads, unreachable)
    except BaseException:
        stopping.set()
        halt.set()
        if not unreachable.is_set():
            left = declared_jobs.close_all()
            if left:
                _log.warning("turbdb: %d of the jobs this replay declared could not be closed within %g s; the server "
                             "forgets a job unused for its idle timeout (600 s by default), and db.open_jobs() "
                             "(GET /v1/jobs) lists those still open", left, CLOSE_SECONDS)
        raise
    seconds = time.perf_counter() - origin
    with lock:
        reported[0] = True
        answers = list(log)
    if crashed:
        raise crashed[0]
    # A server that went away is not asked again: each request waited out the client's retries.
    after = {} if unreachable.is_set() else _counters(database)
    engine = {k: after[k] - before[k] for k in after if k in before}
    if engine:
        lookups = engine["cache_hits"] + engine["cache_misses"]
        engine["hit_ratio"] = engine["cache_hits"] / lookups if lookups else 0.0
    waits = _throttling(database)
    throttling = {} if waits is None else dataclasses.asdict(waits - waits_before)
    return ReplayReport(log=answers, seconds=seconds, engine=engine, throttling=throttling, traced=len(trace),
                        unreachable=unreachable.is_set())


def speedup_problem(trace: Sequence[Query], speedup: float) -> str | None:
    """What is wrong with replaying ``trace`` at ``speedup`` (None if nothing): its
    arrivals may stretch a replay to :data:`MAX_ARRIVAL_SECONDS`."""
    last = max((q.arrival for q in trace), default=0.0)
    if not math.isfinite(speedup) or last / speedup <= MAX_ARRIVAL_SECONDS:
        return None
    return (f"at a speedup of {speedup:g} the trace's last job would arrive {last / speedup:.3g} s after the start, "
            f"past the {MAX_ARRIVAL_SECONDS / 86400:.0f} days a replay may take: give a speedup of at least "
            f"{last / MAX_ARRIVAL_SECONDS:.3g}")


def clients_problem(clients: int, driver: str, against_server: bool) -> str | None:
    """What is wrong with ``clients`` clients of ``driver`` (None if nothing): against a
    server, a thread each may hold one of :data:`SERVER_CONNECTIONS_PER_ADDRESS`
    connections."""
    if driver != "threads" or not against_server or clients <= SERVER_CONNECTIONS_PER_ADDRESS:
        return None
    return (f"{clients} clients: a turbdb server takes at most {SERVER_CONNECTIONS_PER_ADDRESS} connections from one "
            "address, and each client holds one while its query is under way, so the rest would be answered 503; "
            f"replay with {SERVER_CONNECTIONS_PER_ADDRESS} clients or fewer (more from several machines), or with the "
            "futures driver (at most 64 queries under way)")


def _wait_for(threads: list[threading.Thread], unreachable: threading.Event) -> None:
    """Waits for the client ``threads`` to end, or, once the server has been found
    unreachable, for at most :data:`UNREACHABLE_GRACE_SECONDS` more."""
    given_up_at: float | None = None
    for t in threads:
        while t.is_alive():  # in slices: a Ctrl-C that lands just as a wait begins is
            t.join(0.5)      # otherwise seen only when that thread ends
            if unreachable.is_set():
                given_up_at = given_up_at or time.monotonic() + UNREACHABLE_GRACE_SECONDS
                if time.monotonic() >= given_up_at:
                    return


def _drive_futures(jobs: list[list[Query]], datasets: dict[str, Any], infos: dict[str, Any], speedup: float,
                   clients: int, origin: float, record: Callable[..., Answered], declared_jobs: DeclaredJobs,
                   unreachable: threading.Event) -> None:
    """The clients as futures, all driven from this thread: a job starts at its arrival
    (while fewer than ``clients`` are under way), and each of its queries is submitted when
    the previous one's answer is in; the futures' callbacks only hand the answers back."""
    answers: queue.SimpleQueue = queue.SimpleQueue()
    upcoming = deque(jobs)
    under_way = 0
    given_up_at = math.inf  # once the server is unreachable: when the report stops waiting

    def ask(job: list[Query], i: int, declared: Any) -> None:
        q = job[i]
        points = draw_points(q, infos[q.dataset])
        sent = time.perf_counter()
        future = datasets[q.dataset].submit(q.field, points, time=q.time, method=q.method,
                                            operator=q.operator, temporal=q.temporal, job=declared)
        future.add_done_callback(lambda f: answers.put((job, i, declared, points, sent, f)))

    while upcoming or under_way:
        wait = None
        while upcoming and under_way < clients:
            wait = origin + upcoming[0][0].arrival / speedup - time.perf_counter() if math.isfinite(speedup) else 0
            if wait > 0:
                break
            job = upcoming.popleft()
            under_way += 1
            ask(job, 0, declared_jobs.declare(job))
            wait = None
        if unreachable.is_set():
            left = given_up_at - time.monotonic()
            if left <= 0:
                return
            wait = left if wait is None else min(wait, left)
        try:
            job, i, declared, points, sent, future = answers.get(timeout=wait)
        except queue.Empty:  # the next job's arrival has come, or the wait for an unreachable server is over
            continue
        q = job[i]
        values, error = None, None
        try:
            values = future.result()
        except TurbdbError as e:
            error = f"{type(e).__name__}: {e}"
        if _unreachable(error) and not unreachable.is_set():
            unreachable.set()
            upcoming.clear()  # the jobs not started are not sent, as the threads' clients do
            given_up_at = time.monotonic() + UNREACHABLE_GRACE_SECONDS
        if record(q, points, sent, values, error).ok and i + 1 < len(job) and not unreachable.is_set():
            ask(job, i + 1, declared)
        else:
            if declared is not None:
                (declared_jobs.forget if unreachable.is_set() else declared_jobs.close)(declared)
            under_way -= 1


def _unreachable(error: str | None) -> bool:
    """Whether a query failed because the server could not be reached at all (after the
    client's retries)."""
    return error is not None and error.startswith(f"{ServiceError.__name__}: cannot reach")


def _ask(dataset: Any, q: Query, points: np.ndarray, job: Any,
         halt: threading.Event) -> tuple[np.ndarray | None, str | None]:
    """Sends one query, waiting and retrying while the engine is full (until ``halt``): its
    values, or the error that failed it."""
    while True:
        try:
            return dataset.query(q.field, points, time=q.time, method=q.method, operator=q.operator,
                                 temporal=q.temporal, job=job), None
        except EngineBusyError as e:
            if halt.wait(e.retry_after or 0.1):
                return None, f"{type(e).__name__}: {e}"
        except TurbdbError as e:
            return None, f"{type(e).__name__}: {e}"


def _throttling(database: Any) -> Any:
    """A server client's waits on the server's limits so far (None for a local database)."""
    waits = getattr(database, "throttling", None)
    return None if waits is None else waits()


def _counters(database: Any) -> dict[str, float]:
    """The node engine's counters (a local one, or a server's through ``GET /v1/engine``);
    nothing where the database has no engine."""
    stats_of = getattr(database, "engine_stats", None)
    if stats_of is None:
        return {}
    try:
        stats = stats_of()
    except TurbdbError:  # no node engine, or a server gone: the report still comes
        return {}
    return {k: float(stats[k]) for k in ENGINE_COUNTERS}
