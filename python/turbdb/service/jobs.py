"""Jobs over HTTP (Wang et al. §IV-B; :mod:`turbdb.jobs`): ``POST /v1/jobs`` declares the
ordered queries a client is going to send, each a (dataset, field, time[, temporal]), and
answers the job's id; each of those queries then carries ``job=<id>``, in order; ``DELETE
/v1/jobs/{id}`` ends it; ``GET /v1/jobs`` lists the caller's open jobs. With a node engine
the JAWS scheduler gates the job's queries with those of other jobs that read the same
time steps, so one read serves them all.

A job is a scheduling hint: answers never depend on it. A server without a node engine
(``turbdb serve`` without ``--scheduler``) still accepts jobs, so that a client need not
know how the server runs, and answers ``"scheduled": false``: its queries run alone, as
they would without the job; so does one whose scheduler is not JAWS (only JAWS gates). A job belongs to the token that declared it (to the address,
for anonymous use): another token's ``job=`` gets 404, as an unknown id does. A job
unused for :data:`JOB_IDLE_SECONDS` is forgotten, and none outlives a restart: job numbers
start from the server's start time in milliseconds, so a number from before a restart is
never another job's.

A query with ``job=`` must be the plan's next query (the dataset, field and time steps
planned: the engine gates a job's queries by their place in the plan, so another query
would be gated as the planned one): anything else is a 400 naming the next planned query,
but for the query answered last sent again (a client whose answer was lost on the way),
which is answered again, ungated. A job ends when its last planned query has been
answered; until then only its queries still to be answered count against the limits. One token (one address, for anonymous use)
may hold :data:`MAX_OPEN_JOBS_PER_OWNER` open jobs and plan
:data:`MAX_PLANNED_PER_OWNER` queries in them at once (429 past either), the server
:data:`MAX_OPEN_JOBS` jobs and :data:`MAX_PLANNED` queries (503)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import json
import random
import re
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from fastapi import APIRouter, Request

from ..arguments import TEMPORAL_ALIASES, TEMPORALS, choice, finite_number
from ..exceptions import (
    EngineBusyError, FormatError, InvalidRequestError, LimitExceededError, TurbdbError, UnknownNameError,
)
from ..jobs import MAX_JOB_QUERIES, Job, declare, planned_query, steps_read
from .backend import Backend, require_json, with_status
from .tokens import Limits

if TYPE_CHECKING:
    from ..dataset import Dataset

#: A job unused (no query, no declaration) for this long is forgotten (the engine's own
#: idle timeout is the same).
JOB_IDLE_SECONDS = 600.0
#: Jobs open at once on one server.
MAX_OPEN_JOBS = 4096
#: Jobs open at once of one token (of one address, for anonymous use): a sixteenth of the
#: server's, so that one token cannot hold every place (4 096 one-query jobs of one token
#: left every other user a 503 for 600 s), and twice the connections one address may hold
#: (a client sending each job's queries one after another on a connection needs one open
#: job a connection).
MAX_OPEN_JOBS_PER_OWNER = 256
#: Queries planned by the open jobs of one token (of one address, for anonymous use) and
#: of the whole server, those not yet answered. The engine's thread aligns and gates each
#: new job with the open ones, so their planned queries are what a declaration costs it:
#: twenty jobs of 10 000 queries in step once kept it from every query for seconds.
MAX_PLANNED_PER_OWNER, MAX_PLANNED = 30_000, 100_000
#: Bytes a planned query may take in the body (JSON), and the slack of the rest.
BYTES_PER_PLANNED_QUERY, BODY_SLACK = 256, 4096

_PLAN_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "required": ["queries"], "properties": {"queries": {
        "type": "array", "minItems": 1, "maxItems": MAX_JOB_QUERIES, "items": {
            "type": "object", "required": ["dataset", "field", "time"], "properties": {
                "dataset": {"type": "string"}, "field": {"type": "string"}, "time": {"type": "number"},
                "temporal": {"type": "string", "enum": ["none", "pchip"]}}}}}},
    "example": {"queries": [{"dataset": "isotropic64", "field": "velocity", "time": t} for t in (0.0, 0.1, 0.2)]},
}}}}


class PlannedRead(NamedTuple):
    """What one query of a job reads: the dataset, the field and the time steps (the time
    and temporal method it was asked with, for messages)."""

    dataset: str
    field: str
    time: float
    temporal: str
    steps: tuple[int, ...]

    def reads_as(self, other: PlannedRead) -> bool:
        """Whether the engine would gate ``other`` as this one: the same steps of the same field."""
        return (self.dataset, self.field, self.steps) == (other.dataset, other.field, other.steps)

    def __str__(self) -> str:
        pchip = ", pchip" if self.temporal != "none" else ""
        return f"{self.field} of {self.dataset} at time {self.time:g}{pchip}"


def planned_read(dataset: Dataset, field: str, time: float, temporal: str) -> PlannedRead:
    """What a query of ``field`` of ``dataset`` at ``time`` reads; refused (4xx) as the
    query itself would be: an unknown field or temporal method, a time outside the stored
    range."""
    temporal = choice("temporal method", temporal, TEMPORALS, TEMPORAL_ALIASES)
    time = finite_number("time", time)
    return PlannedRead(dataset.name, field, time, temporal, tuple(steps_read(dataset, field, time, temporal)))


@dataclasses.dataclass
class DeclaredJob:
    owner: str
    job: Job
    plan: list[PlannedRead]
    last_used: float
    #: Its queries answered so far: the next one is ``plan[answered]``.
    answered: int = 0

    @property
    def left(self) -> int:
        return len(self.plan) - self.answered


#: 2020-01-01 UTC, in seconds since 1970: where job numbers start counting.
_NUMBERING_EPOCH = 1577836800


class JobRegistry:
    """The jobs declared over HTTP, by the number the server gave them, and the queries
    they plan, by owner: a job is admitted (:meth:`reserve`) before the engine is told of
    it, so that a refused one costs the engine nothing."""

    def __init__(self, idle_seconds: float = JOB_IDLE_SECONDS, max_jobs: int = MAX_OPEN_JOBS,
                 max_planned: int = MAX_PLANNED, max_planned_per_owner: int = MAX_PLANNED_PER_OWNER,
                 max_jobs_per_owner: int = MAX_OPEN_JOBS_PER_OWNER):
        self.idle_seconds = idle_seconds
        self.max_jobs = max_jobs
        self.max_planned = max_planned
        self.max_planned_per_owner = max_planned_per_owner
        self.max_jobs_per_owner = max_jobs_per_owner
        self._jobs: dict[int, DeclaredJob] = {}
        # Reserved and open, by owner: queries not yet answered, and jobs.
        self._planned: collections.Counter[str] = collections.Counter()
        self._owned: collections.Counter[str] = collections.Counter()
        self._reserved_jobs = 0
        # Jobs that ended with their last planned query (number → owner, queries, the last
        # query's read), the latest max_jobs: a query past a plan's end is told so, and a
        # DELETE after the end (``with db.job(...)`` sends one) is no error.
        self._finished: collections.OrderedDict[int, tuple[str, int, PlannedRead]] = collections.OrderedDict()
        # Numbered from the time the server started, in milliseconds since 2020, with 12
        # random bits below (two servers started in the same millisecond got the same
        # numbers): a number is then not another server process's, so a script's job=… from
        # before a restart is told apart from a new job, and said to be one (from 1, it was
        # taken as the new job 1). Below 2⁵³ until about 2089: exact in JavaScript too.
        started = int((time.time() - _NUMBERING_EPOCH) * 1000)
        self.first = (started << 12) | random.getrandbits(12)
        self._numbers = itertools.count(self.first)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._jobs)

    def reserve(self, owner: str, queries: int) -> None:
        """Admits a job of ``owner`` planning ``queries`` queries, to be declared and then
        :meth:`add`-ed (or :meth:`cancel`-led): 429 past the owner's jobs or planned
        queries, 503 past the server's."""
        gone: list[DeclaredJob] = []
        try:
            with self._lock:
                gone = self._expire()
                close = ("close those that are done with DELETE /v1/jobs/{id} (GET /v1/jobs lists them; a job also "
                         "ends when its last planned query is answered)")
                if self._owned[owner] >= self.max_jobs_per_owner:
                    soonest = self._soonest_expiry(owner)
                    raise LimitExceededError(
                        f"you hold {self._owned[owner]:,} open jobs, the most one token (one address, without a token) "
                        f"may hold, so that other users can declare theirs: {close}; a job unused for "
                        f"{self.idle_seconds:.0f} s is forgotten, the first of yours in {soonest:.0f} s. A job only "
                        "helps the scheduling: its queries may be sent without job= meanwhile",
                        retry_after=soonest)
                if self._planned[owner] + queries > self.max_planned_per_owner:
                    raise LimitExceededError(
                        f"your open jobs plan {self._planned[owner]:,} queries and this one {queries:,} (those not yet "
                        f"answered count); a token's open jobs may plan {self.max_planned_per_owner:,} at once: "
                        f"{close}, or declare this one when they have gone further", retry_after=5.0)
                if len(self._jobs) + self._reserved_jobs >= self.max_jobs:
                    soonest = self._soonest_expiry()
                    raise EngineBusyError(
                        f"this server holds {len(self._jobs):,} open jobs, its limit: a job's place frees when its "
                        "owner closes it (DELETE /v1/jobs/{id}), when its last planned query is answered, or after "
                        f"{self.idle_seconds:.0f} s unused (the next in {soonest:.0f} s); retry then, or send the "
                        "queries without job= (answered the same, only not gated with other jobs)",
                        retry_after=soonest)
                planned = sum(self._planned.values())
                if planned + queries > self.max_planned:
                    raise EngineBusyError(
                        f"the open jobs on this server plan {planned:,} queries, and it gates at most "
                        f"{self.max_planned:,} at once (those not yet answered count): retry as they are answered, "
                        "declare a shorter job, or send the queries without job= (answered the same, only not gated "
                        "with other jobs)", retry_after=5.0)
                self._planned[owner] += queries
                self._owned[owner] += 1
                self._reserved_jobs += 1
        finally:
            _close(gone)  # outside the lock, also when refused

    def cancel(self, owner: str, queries: int) -> None:
        """Gives back what :meth:`reserve` admitted, for a job that was not declared."""
        with self._lock:
            self._reserved_jobs -= 1
            self._release(owner, queries, jobs=1)

    def add(self, owner: str, job: Job, plan: list[PlannedRead]) -> int:
        """Registers the declared ``job`` (whose queries read ``plan``) that :meth:`reserve`
        admitted; returns its number."""
        with self._lock:
            self._reserved_jobs -= 1
            number = next(self._numbers)
            self._jobs[number] = DeclaredJob(owner, job, plan, time.monotonic())
            return number

    def engine_job(self, number: int | None, owner: str, asked: PlannedRead | None) -> int | None:
        """The engine's number of job ``number`` of ``owner`` (None: no job, no engine, or
        the query answered last sent again, which runs ungated), for a query that reads
        ``asked`` (None only without a job): 404 if there is no such job of theirs, 400 if
        ``asked`` is not the job's next planned query (or the plan has been answered)."""
        if number is None:
            return None
        assert asked is not None, "a query with job= says what it reads"
        gone: list[DeclaredJob] = []
        try:
            with self._lock:
                finished_by, _, last = self._finished.get(number, ("", 0, None))
                if finished_by == owner and last is not None and last.reads_as(asked):
                    return None  # its last query again: its answer was lost on the way
                found = self._find(number, owner)
                now = time.monotonic()
                if now - found.last_used > self.idle_seconds:  # gone, even if nobody declared a job since
                    gone.append(self._jobs.pop(number))
                    self._release(owner, found.left, jobs=1)
                    self._find(number, owner)  # its 404
                found.last_used = now
                expected = found.plan[found.answered]
                if expected.reads_as(asked):
                    return found.job.id
                if found.answered and found.plan[found.answered - 1].reads_as(asked):
                    return None  # the query answered last, sent again: answered again, ungated and not counted
                raise InvalidRequestError(
                    f"job {number}'s next planned query (query {found.answered + 1} of {len(found.plan)}) reads "
                    f"{expected} (steps {list(expected.steps)}); this one reads {asked} (steps {list(asked.steps)}). "
                    "A job's queries are gated by their place in its plan, so another query would be gated in that "
                    f"one's place: send {expected} next, or close the job (DELETE /v1/jobs/{number}) and send the "
                    "rest without job=")
        finally:
            _close(gone)

    def answered(self, number: int | None, owner: str, asked: PlannedRead | None) -> None:
        """A query of job ``number`` of ``owner`` that read ``asked`` has been answered: if
        it was the next planned one, it no longer counts, and the job ends (closed with the
        engine too) with its last planned query."""
        if number is None:
            return
        with self._lock:
            found = self._jobs.get(number)
            if found is None or found.owner != owner or not found.plan[found.answered].reads_as(asked):
                return  # closed meanwhile, or a query answered before sent again
            found.answered += 1
            self._release(owner, 1)
            if found.answered < len(found.plan):
                return
            del self._jobs[number]
            self._release(owner, 0, jobs=1)
            self._finished[number] = (owner, len(found.plan), found.plan[-1])
            while len(self._finished) > self.max_jobs:
                self._finished.popitem(last=False)
        found.job.close()

    def remove(self, number: int, owner: str) -> bool:
        """Closes job ``number`` of ``owner``; False if it had ended already, with its last
        planned query (404 if there is no such job of theirs)."""
        with self._lock:
            if self._finished.get(number, ("", 0, None))[0] == owner:
                return False
            found = self._find(number, owner)
            del self._jobs[number]
            self._release(owner, found.left, jobs=1)
        found.job.close()
        return True

    def owned(self, owner: str) -> list[tuple[int, int, int, float]]:
        """``owner``'s open jobs: (number, queries planned, answered, seconds unused), oldest first."""
        with self._lock:
            gone = self._expire()
            now = time.monotonic()
            jobs = [(n, len(j.plan), j.answered, now - j.last_used) for n, j in self._jobs.items() if j.owner == owner]
        _close(gone)
        return jobs

    def planned(self, owner: str) -> int:
        """Queries not yet answered of ``owner``'s open (and admitted) jobs."""
        with self._lock:
            gone = self._expire()
            planned = self._planned[owner]
        _close(gone)
        return planned

    def _release(self, owner: str, queries: int, jobs: int = 0) -> None:
        self._planned[owner] -= queries
        if self._planned[owner] <= 0:
            del self._planned[owner]
        self._owned[owner] -= jobs
        if self._owned[owner] <= 0:
            del self._owned[owner]

    def _soonest_expiry(self, owner: str | None = None) -> float:
        """Seconds until the first open job (of ``owner``, or of anyone) is forgotten if it
        stays unused (at least 1)."""
        used = [j.last_used for j in self._jobs.values() if owner is None or j.owner == owner]
        return max(1.0, min(used, default=time.monotonic()) + self.idle_seconds - time.monotonic())

    def _find(self, number: int, owner: str) -> DeclaredJob:
        found = self._jobs.get(number)
        if found is None or found.owner != owner:
            finished_by, queries, _ = self._finished.get(number, ("", 0, None))
            if finished_by == owner:
                raise InvalidRequestError(
                    f"job {number} has ended: its {queries:,} planned {'query was' if queries == 1 else 'queries were'}"
                    " answered, and this query is past its plan. Send it without job=, or declare a new job "
                    "(POST /v1/jobs)")
            if number < self.first:
                raise with_status(UnknownNameError(
                    f"no job {number} on this server: it numbers its jobs from {self.first}, when it started, so job "
                    f"{number} was declared before the server restarted (jobs do not outlive a restart) or never; "
                    "declare it again with POST /v1/jobs"), 404)
            raise with_status(UnknownNameError(
                f"no job {number} on this server for this token: it was never declared, was closed, or was unused for "
                f"{self.idle_seconds:.0f} s; declare it with POST /v1/jobs"), 404)
        return found

    def _expire(self) -> list[DeclaredJob]:
        """Forgets the jobs unused for ``idle_seconds``; returns them, to be closed with the
        engine outside the lock."""
        now = time.monotonic()
        gone = [self._jobs.pop(n) for n, j in list(self._jobs.items()) if now - j.last_used > self.idle_seconds]
        for job in gone:
            self._release(job.owner, job.left, jobs=1)
        return gone


def _close(jobs: list[DeclaredJob]) -> None:
    for declared in jobs:
        declared.job.close()


def owner_of(request: Request, limits: Limits, backend: Backend) -> str:
    """Who a job belongs to: the token, or the address for anonymous use."""
    if limits is backend.tokens.anonymous:
        return f"anonymous@{request.client.host if request.client else ''}"
    return f"token:{limits.name}"


_JOB_NUMBER = re.compile(r"[0-9]{1,19}")


def job_number(text: str) -> int:
    """A job's number as a request writes it: the digits ``POST /v1/jobs`` answered
    (FastAPI's ``int`` took ``job=5.0`` for job 5)."""
    if not _JOB_NUMBER.fullmatch(text):
        raise InvalidRequestError(f"job is the whole number POST /v1/jobs answered (digits only), not {text!r}")
    return int(text)


def job_parameter(request: Request) -> int | None:
    """The ``job=`` of a query (None without one), checked by :func:`job_number`."""
    text = request.query_params.get("job")
    return None if text is None else job_number(text)


def router(backend: Backend, registry: JobRegistry) -> APIRouter:
    routes = APIRouter(tags=["queries"])

    @routes.post("/v1/jobs", summary="declare a job: the queries a client will send, in order",
                 openapi_extra=_PLAN_BODY, responses={200: {"description": "the job's id, to send as job=<id> with "
                                                                           "each of its queries"}})
    async def declare_job(request: Request) -> dict[str, Any]:
        limits = backend.authorize(request)
        plan = await _plan(request)
        datasets = {}
        for name in dict.fromkeys(p[0] for p in plan):
            with _naming_planned_query(1 + [p[0] for p in plan].index(name)):
                datasets[name] = backend.dataset(name, limits)
                limits.check_dataset(name)
        engine = getattr(backend.database, "engine", None)

        def declared() -> tuple[Job, list[PlannedRead]]:  # in a worker thread: up to MAX_JOB_QUERIES look-ups
            reads = []
            for index, (name, field, t, temporal) in enumerate(plan, 1):
                with _naming_planned_query(index):
                    reads.append(planned_read(datasets[name], field, t, temporal))
            if engine is None:  # nothing to gate: the plan is only checked, as the engine checks it
                return Job(None, None, len(plan)), reads
            return declare(engine, [(datasets[r.dataset].field_store(r.field), list(r.steps)) for r in reads]), reads

        owner = owner_of(request, limits, backend)
        registry.reserve(owner, len(plan))
        try:
            job, reads = await backend.run(declared)
        except BaseException:
            registry.cancel(owner, len(plan))
            raise
        number = registry.add(owner, job, reads)
        scheduler = None if engine is None else engine.stats()["scheduler"]
        answer: dict[str, Any] = {"job": number, "queries": len(plan), "scheduled": scheduler == "jaws",
                                  "idle_timeout_seconds": registry.idle_seconds}
        if engine is None:
            answer["note"] = ("this server runs without a node engine: the job's queries run alone, as they would "
                              "without it")
        elif scheduler != "jaws":  # only JAWS aligns and gates jobs
            answer["note"] = (f"this server's scheduler, {scheduler}, does not gate jobs: the job's queries run as "
                              "they would without it")
        return answer

    @routes.get("/v1/jobs", summary="the caller's open jobs, to close those left behind")
    async def open_jobs(request: Request) -> dict[str, Any]:
        # A declaration whose answer was lost still holds its planned queries: this finds it.
        limits = backend.authorize(request)
        owner = owner_of(request, limits, backend)
        engine = getattr(backend.database, "engine", None)
        scheduled = engine is not None and engine.stats()["scheduler"] == "jaws"
        return {"jobs": [{"job": n, "queries": q, "answered": a, "scheduled": scheduled,
                          "unused_seconds": round(idle, 1)} for n, q, a, idle in registry.owned(owner)],
                "planned": registry.planned(owner), "max_planned": registry.max_planned_per_owner,
                "max_jobs": registry.max_jobs_per_owner, "idle_timeout_seconds": registry.idle_seconds}

    @routes.delete("/v1/jobs/{job}", summary="end a job: its queries still to come run ungated")
    async def close_job(job: int, request: Request) -> dict[str, Any]:
        limits = backend.authorize(request)
        number = job_number(request.path_params["job"])  # as written: FastAPI's int took 5.0 for 5
        if registry.remove(number, owner_of(request, limits, backend)):
            return {"job": number, "closed": True}
        return {"job": number, "closed": True, "note": "it had ended already, when its last planned query was answered"}

    return routes


async def _plan(request: Request) -> list[tuple[str, str, float, str]]:
    """The planned queries of a ``POST /v1/jobs`` body, refused (413) once it is known to
    plan more than :data:`MAX_JOB_QUERIES`."""
    require_json(request, "JSON {\"queries\": [{\"dataset\": …, \"field\": …, \"time\": …}, …]}")
    limit = MAX_JOB_QUERIES * BYTES_PER_PLANNED_QUERY + BODY_SLACK
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise LimitExceededError(f"a job's plan may take {limit:,} bytes and plan {MAX_JOB_QUERIES:,} queries; "
                                     "declare several jobs, one after the other")
        chunks.append(chunk)
    try:
        document = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise FormatError(f"the body is not valid JSON ({e}); send {{\"queries\": [{{\"dataset\": …, \"field\": …, "
                          f"\"time\": …}}, …]}}") from None
    queries = document.get("queries") if isinstance(document, dict) else None
    if not isinstance(queries, list):
        raise FormatError("the JSON body must be an object with a \"queries\" list: "
                          "{\"queries\": [{\"dataset\": …, \"field\": …, \"time\": …}, …]}")
    if not queries:
        raise InvalidRequestError("a job plans at least one query")
    if len(queries) > MAX_JOB_QUERIES:
        raise LimitExceededError(f"a job may plan at most {MAX_JOB_QUERIES:,} queries, not {len(queries):,}: "
                                 "declare several jobs, one after the other")
    plan = []
    for index, entry in enumerate(queries, 1):
        with _naming_planned_query(index):
            plan.append(planned_query(entry))
    return plan


@contextlib.contextmanager
def _naming_planned_query(index: int) -> Iterator[None]:
    """Errors raised in the block name planned query ``index`` (of up to 10 000), keeping
    their class and status: an unknown dataset is a 404 and an unknown field a 400, as
    for a query."""
    try:
        yield
    except TurbdbError as e:
        e.args = (f"planned query {index}: {e}", *e.args[1:])
        raise
