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
never another job's. The open jobs of one token may plan
:data:`MAX_PLANNED_PER_OWNER` queries at once (429 past it), those of the server
:data:`MAX_PLANNED` (503)."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import random
import threading
import time
from typing import Any

from fastapi import APIRouter, Request

from ..exceptions import (
    EngineBusyError, FormatError, InvalidRequestError, LimitExceededError, UnknownNameError,
)
from ..jobs import MAX_JOB_QUERIES, Job, declare, planned_query, steps_read
from .backend import Backend, require_json, with_status
from .tokens import Limits

#: A job unused (no query, no declaration) for this long is forgotten (the engine's own
#: idle timeout is the same).
JOB_IDLE_SECONDS = 600.0
#: Jobs open at once on one server.
MAX_OPEN_JOBS = 4096
#: Queries planned by the open jobs of one token (of one address, for anonymous use) and
#: of the whole server. The engine's thread aligns and gates each new job with the open
#: ones, so their planned queries are what a declaration costs it: twenty jobs of 10 000
#: queries in step once kept it from every query for seconds.
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


@dataclasses.dataclass
class DeclaredJob:
    owner: str
    job: Job
    last_used: float


#: 2020-01-01 UTC, in seconds since 1970: where job numbers start counting.
_NUMBERING_EPOCH = 1577836800


class JobRegistry:
    """The jobs declared over HTTP, by the number the server gave them, and the queries
    they plan, by owner: a job is admitted (:meth:`reserve`) before the engine is told of
    it, so that a refused one costs the engine nothing."""

    def __init__(self, idle_seconds: float = JOB_IDLE_SECONDS, max_jobs: int = MAX_OPEN_JOBS,
                 max_planned: int = MAX_PLANNED, max_planned_per_owner: int = MAX_PLANNED_PER_OWNER):
        self.idle_seconds = idle_seconds
        self.max_jobs = max_jobs
        self.max_planned = max_planned
        self.max_planned_per_owner = max_planned_per_owner
        self._jobs: dict[int, DeclaredJob] = {}
        self._planned: collections.Counter[str] = collections.Counter()  # reserved and open, by owner
        self._reserved_jobs = 0
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
        :meth:`add`-ed (or :meth:`cancel`-led): 429 past the owner's planned queries, 503
        past the server's jobs or planned queries."""
        gone: list[DeclaredJob] = []
        try:
            with self._lock:
                gone = self._expire()
                close = "close jobs that are done (DELETE /v1/jobs/{id})"
                if self._planned[owner] + queries > self.max_planned_per_owner:
                    raise LimitExceededError(
                        f"your open jobs plan {self._planned[owner]:,} queries and this one {queries:,}; a token's "
                        f"open jobs may plan {self.max_planned_per_owner:,} at once: {close}, or declare this one "
                        "when they end", retry_after=5.0)
                if len(self._jobs) + self._reserved_jobs >= self.max_jobs:
                    raise EngineBusyError(f"this server holds {len(self._jobs):,} open jobs, its limit: {close}, or "
                                          "retry shortly", retry_after=5.0)
                planned = sum(self._planned.values())
                if planned + queries > self.max_planned:
                    raise EngineBusyError(f"the open jobs on this server plan {planned:,} queries, and it gates at "
                                          f"most {self.max_planned:,} at once: {close}, or retry shortly",
                                          retry_after=5.0)
                self._planned[owner] += queries
                self._reserved_jobs += 1
        finally:
            _close(gone)  # outside the lock, also when refused

    def cancel(self, owner: str, queries: int) -> None:
        """Gives back what :meth:`reserve` admitted, for a job that was not declared."""
        with self._lock:
            self._reserved_jobs -= 1
            self._release(owner, queries)

    def add(self, owner: str, job: Job) -> int:
        """Registers the declared ``job`` that :meth:`reserve` admitted; returns its number."""
        with self._lock:
            self._reserved_jobs -= 1
            number = next(self._numbers)
            self._jobs[number] = DeclaredJob(owner, job, time.monotonic())
            return number

    def engine_job(self, number: int | None, owner: str) -> int | None:
        """The engine's number of job ``number`` of ``owner`` (None: no job, or no engine);
        404 if there is no such job of theirs."""
        if number is None:
            return None
        gone: list[DeclaredJob] = []
        try:
            with self._lock:
                found = self._find(number, owner)
                now = time.monotonic()
                if now - found.last_used > self.idle_seconds:  # gone, even if nobody declared a job since
                    gone.append(self._jobs.pop(number))
                    self._release(owner, found.job.queries)
                    self._find(number, owner)  # its 404
                found.last_used = now
                return found.job.id
        finally:
            _close(gone)

    def remove(self, number: int, owner: str) -> None:
        with self._lock:
            found = self._find(number, owner)
            del self._jobs[number]
            self._release(owner, found.job.queries)
        found.job.close()

    def owned(self, owner: str) -> list[tuple[int, int, float]]:
        """``owner``'s open jobs: (number, queries planned, seconds unused), oldest first."""
        with self._lock:
            gone = self._expire()
            now = time.monotonic()
            jobs = [(n, j.job.queries, now - j.last_used) for n, j in self._jobs.items() if j.owner == owner]
        _close(gone)
        return jobs

    def planned(self, owner: str) -> int:
        """Queries planned by ``owner``'s open (and admitted) jobs."""
        with self._lock:
            gone = self._expire()
            planned = self._planned[owner]
        _close(gone)
        return planned

    def _release(self, owner: str, queries: int) -> None:
        self._planned[owner] -= queries
        if self._planned[owner] <= 0:
            del self._planned[owner]

    def _find(self, number: int, owner: str) -> DeclaredJob:
        found = self._jobs.get(number)
        if found is None or found.owner != owner:
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
            self._release(job.owner, job.job.queries)
        return gone


def _close(jobs: list[DeclaredJob]) -> None:
    for declared in jobs:
        declared.job.close()


def owner_of(request: Request, limits: Limits, backend: Backend) -> str:
    """Who a job belongs to: the token, or the address for anonymous use."""
    if limits is backend.tokens.anonymous:
        return f"anonymous@{request.client.host if request.client else ''}"
    return f"token:{limits.name}"


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
            datasets[name] = backend.dataset(name, limits)
            limits.check_dataset(name)
        engine = getattr(backend.database, "engine", None)

        def declared() -> Job:  # in a worker thread: up to MAX_JOB_QUERIES look-ups of time steps
            if engine is None:  # nothing to gate: the plan is only checked, as the engine checks it
                for name, field, t, temporal in plan:
                    steps_read(datasets[name], field, t, temporal)
                return Job(None, None, len(plan))
            return declare(engine, [(datasets[name].field_store(field), steps_read(datasets[name], field, t, temporal))
                                    for name, field, t, temporal in plan])

        owner = owner_of(request, limits, backend)
        registry.reserve(owner, len(plan))
        try:
            job = await backend.run(declared)
        except BaseException:
            registry.cancel(owner, len(plan))
            raise
        number = registry.add(owner, job)
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
        return {"jobs": [{"job": n, "queries": q, "scheduled": scheduled, "unused_seconds": round(idle, 1)}
                         for n, q, idle in registry.owned(owner)],
                "planned": registry.planned(owner), "max_planned": registry.max_planned_per_owner,
                "idle_timeout_seconds": registry.idle_seconds}

    @routes.delete("/v1/jobs/{job}", summary="end a job: its queries still to come run ungated")
    async def close_job(job: int, request: Request) -> dict[str, Any]:
        limits = backend.authorize(request)
        registry.remove(job, owner_of(request, limits, backend))
        return {"job": job, "closed": True}

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
    return [planned_query(q) for q in queries]
