"""What every endpoint needs: datasets by name (validated, opened once), tokens and rate
limits, bounded request bodies, admission by points in flight, and the thread pool that
runs the engine (whose calls release the GIL, so requests really run in parallel)."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import numpy as np
from starlette.requests import Request

from ..database import Database
from ..database_listing import in_brief, misnamed_error, same_name
from ..database import open as open_database
from ..dataset import Dataset
from ..exceptions import AccessDeniedError, FormatError, InvalidRequestError, LimitExceededError, QueryCancelledError, UnknownNameError
from ..info import is_plain_name
from ..step_versions import RewriteUnderWay, waits_refused
from ..arguments import as_points, finite_number, node_range
from ..times import format_time, range_tolerance
from ..track import step_count
from ..zarr_meta import ZARR_JSON
from .admission import SMALL_REQUEST_POINTS, Admission, BusyError, PointsLimiter
from .engine_waits import EngineWaits
from .known_parameters import check_members
from .metrics import Metrics
from .numerals import check_plain_numbers
from .tokens import JHTDB_TESTING_TOKEN, Limits, Tokens, client_key
from .transport import NPY, decode_npy

T = TypeVar("T")

# Bytes a request body may take per point: .npy float64 is 24; JSON text up to ~26 digits a
# coordinate with separators.
NPY_BYTES_PER_POINT, JSON_BYTES_PER_POINT, BODY_SLACK = 24, 96, 65536
# Per encoding of the points in a body: the most bytes a point may take (the byte limit), the
# bytes it is taken to hold when the body is admitted before it is read (.npy float64, as
# turbdb.connect sends, other dtypes resized once read; the fewest in JSON, "[0,0,0],", and
# in JHTDB's text, "0 0 0\n"), and the encoding's name in messages.
BODY_ENCODINGS = {"npy": (NPY_BYTES_PER_POINT, NPY_BYTES_PER_POINT, ".npy"),
                  "json": (JSON_BYTES_PER_POINT, 8, "JSON"), "text": (JSON_BYTES_PER_POINT, 6, "text")}
# Points a body of unknown length (chunked) is admitted as, until it is read.
UNKNOWN_LENGTH_POINTS = 1024
# Queries of at most this many points run on the event loop, not in the thread pool.
INLINE_POINTS = 128
# JSON bodies above this are parsed in the thread pool, not on the event loop.
INLINE_JSON_BYTES = 256 * 1024
# Particle tracking keeps every step's positions: at most this many (particle, step) rows
# (480 MB of float64 positions) per request.
MAX_TRACK_ROWS = 20_000_000
# ... and at most this many steps: each is one or two evaluations of every particle, so the
# time a request takes grows with them whatever its rows. One particle over 5·10⁶ steps
# (anonymous, within the rows) would have run for about 16 minutes (0.19 ms a step on a
# 2-core machine), alone, since its rows exceed the
# in-flight budget: every other request waited, then got 503s.
MAX_TRACK_STEPS = 100_000
# With a node engine, requests mostly wait for it to serve their batches: this many may
# wait at once (threads), so that the engine has concurrent queries to share reads among.
ENGINE_WAITERS = 128


def with_status(error: Exception, status: int) -> Exception:
    """Gives an error the HTTP status to answer it with (else its class decides)."""
    error.status = status  # type: ignore[attr-defined]
    return error


def _still_on_disk(dataset: Dataset) -> bool:
    """Whether the dataset's metadata is still where it was opened (one stat a request)."""
    return (dataset.path / ZARR_JSON).is_file()


class Backend:
    """The state the endpoints of one app share."""

    def __init__(self, db_path: str | os.PathLike[str], tokens: Tokens, metrics: Metrics, *,
                 workers: int, max_points_in_flight: int, cutout_chunk_bytes: int, queue_timeout: float,
                 engine: dict[str, Any] | None = None, cluster: Any = None):
        # Raises if the directory is missing; with engine options, one node engine serves
        # every request's point queries; with a cluster, its workers serve them.
        self.database = (Database(db_path, **(engine or {})) if cluster is None
                         else open_database(db_path, cluster=cluster))
        self.path = self.database.path  # the database's, also when db_path is one of its datasets
        self.tokens = tokens
        self.metrics = metrics
        #: Set when the server begins to shut down: tracks under way stop at their next
        #: evaluation and answer 503, instead of running into the shutdown's time limit.
        self.stopping = threading.Event()
        self.workers = workers
        self.cutout_chunk_bytes = cutout_chunk_bytes
        self.limiter = PointsLimiter(max_points_in_flight, queue_timeout, on_change=self._in_flight_changed)
        metrics.in_flight_limit.set(max_points_in_flight)
        self._datasets: dict[str, Dataset] = {}
        self._engine: anyio.CapacityLimiter | None = None
        self._long: anyio.CapacityLimiter | None = None  # made with ``_engine``, lazily (no loop yet)
        self._clustered = cluster is not None
        # A local node engine's point queries are awaited on the event loop.
        engine = getattr(self.database, "engine", None) if cluster is None else None
        self.waits = EngineWaits(engine) if engine is not None else None

    def _in_flight_changed(self, used: int, peak: int) -> None:
        self.metrics.in_flight.set(used)
        self.metrics.in_flight_peak.set(peak)

    # -- datasets ---------------------------------------------------------------------------

    def names(self) -> list[str]:
        return self.database.datasets

    def known_token(self, given: str | None) -> Limits | None:
        """The limits of ``given`` when it is one of the file's tokens; None for no token,
        JHTDB's testing token or an unknown one (refused where it reads data). Not counted
        against the rate."""
        if not given or given == JHTDB_TESTING_TOKEN or given not in self.tokens:
            return None
        return self.tokens.identify(given)

    def visible_names(self, request: Request, token: str | None = None) -> list[str] | None:
        """The datasets a listing shows its caller: those its token (``token``, else the
        Bearer header) may read, or anonymous use may; None without a token where anonymous
        use is off."""
        limits = self.known_token(token or self.bearer(request))
        if limits is None:
            if not self.tokens.anonymous_allowed:
                return None
            limits = self.tokens.anonymous
        return [name for name in self.names() if limits.allows(name)]

    def dataset(self, name: str, limits: Limits | None = None) -> Dataset:
        """Dataset ``name`` for one request: a shallow copy of the one opened at first use
        (it shares the opened field stores and cached metadata, but keeps its own
        ``last_query_stats``). Names are checked against the pattern of dataset names
        before any path is built, so ``../x`` never reaches the file system; then only the
        named directory is looked at (checking the name against the database's listing
        read every dataset's metadata: a first listing of N datasets made N² reads)."""
        if limits is not None and not limits.allows(name):
            # The same 404 as an absent name: a 403 here told a token which hidden names exist.
            raise self._no_such_dataset(name, limits)
        if not is_plain_name(name):
            raise self._no_such_dataset(name, limits)
        if not self._clustered:
            # The database keeps each dataset opened once, and lets go of one deleted or
            # replaced (its mappings with it: kept here too, a deleted one stayed mapped).
            try:
                return self.database[name]
            except UnknownNameError:  # absent, gone, or being replaced: a 404, not a 400
                raise self._no_such_dataset(name, limits) from None
        # A cluster's look-up lists the database: its datasets are kept here.
        opened = self._datasets.get(name)
        if opened is not None and not _still_on_disk(opened):
            # Deleted or renamed under the server: a 404 like any unknown name (its reads
            # failed as a 500), and a dataset made again under the name is opened afresh.
            self._datasets.pop(name, None)
            opened = None
        if opened is None:
            try:
                opened = self._datasets.setdefault(name, self.database[name])
            except UnknownNameError:  # listed, then gone (being replaced): a 404 too, not a 400
                raise self._no_such_dataset(name, limits) from None
        return copy.copy(opened)

    def _no_such_dataset(self, name: str, limits: Limits | None) -> Exception:
        """The 404 of a name absent or hidden from the caller, listing only the names the
        caller may read (the first few, and how many): it must not tell the others apart.
        A directory holding a dataset under a name that is no dataset name is not served,
        and the 404 says so (to a caller who may read that name)."""
        listing = self.database.listing()
        allowed = (lambda n: True) if limits is None else limits.allows
        misnamed = [n for n in listing.misnamed if isinstance(name, str) and same_name(name, n) and allowed(n)]
        if misnamed:
            return with_status(misnamed_error(misnamed[0]), 404)
        available = in_brief([n for n in listing.names if allowed(n)], "GET /v1/datasets lists them")
        whose = "" if limits is None else f" that {limits.name_phrase} may read"
        return with_status(UnknownNameError(f"no dataset {name!r} on this server{whose}; available: {available}"), 404)

    def close(self) -> None:
        """Lets go of the cluster, if there is one."""
        close = getattr(self.database, "close", None)
        if close is not None:
            close()

    # -- tokens -----------------------------------------------------------------------------

    def authorize(self, request: Request, token: str | None = None) -> Limits:
        """The caller's limits (from ``token``, else the request's Bearer token) after
        counting this request against its rate. Anonymous callers are rated per address,
        so one busy anonymous client does not use up everyone's requests."""
        client = client_key(request.client.host if request.client else "")
        try:
            limits = self.tokens.identify(token if token is not None else self.bearer(request))
        except AccessDeniedError as refused:
            if refused.status == 401:  # guesses at a secret are rated per address too
                self.tokens.take_failure(client)
            raise
        self.tokens.take(limits, key=f"{limits.name}@{client}" if limits is self.tokens.anonymous else None)
        return limits

    @staticmethod
    def bearer(request: Request) -> str | None:
        header = request.headers.get("authorization")
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        return value.strip() if scheme.lower() == "bearer" else header.strip()

    # -- bodies -----------------------------------------------------------------------------

    async def body(self, request: Request, limits: Limits, bytes_per_point: int, encoding: str) -> bytes:
        """The request body, refused (413) as soon as it is known to hold more points than
        ``limits`` allow: more than ``max_points`` points of ``bytes_per_point`` bytes each
        (at most) in ``encoding``. The message counts points, not bytes."""
        max_bytes = limits.max_points * bytes_per_point + BODY_SLACK
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise self._too_many_points(limits, int(declared), bytes_per_point, encoding)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise self._too_many_points(limits, size, bytes_per_point, encoding)
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def _too_many_points(limits: Limits, size: int, bytes_per_point: int, encoding: str) -> LimitExceededError:
        at_least = (size - BODY_SLACK) // bytes_per_point
        return LimitExceededError(
            f"this request sends more than {at_least:,} points ({size:,} bytes of {encoding}); {limits.name_phrase} "
            f"may send at most {limits.max_points:,} points per request: split them into batches of at most "
            f"{limits.max_points:,} (turbdb.connect does this by itself; GET /v1/limits tells the limits)")

    @contextlib.asynccontextmanager
    async def admitted(self, request: Request, limits: Limits, text: bool = False) -> AsyncIterator[Admission]:
        """Admission against the points-in-flight budget of a request whose points are in
        its body (``text``: JHTDB's lines, else .npy or JSON), before the body is read: on
        the points its ``Content-Length`` may hold (at most the token's limit), to be
        resized once they are read (:meth:`Admission.resize`), or given the points times
        the times each is evaluated (a track's steps, a series' times) in their turn
        (:meth:`Admission.hold`): admitted on that product before its body, one stalled
        track of 1 000 declared bytes held the whole budget. Read first,
        the bodies of requests waiting their turn were memory outside the budget: 16
        waiting 10⁶-point queries took 700 MB. A client waits with its body unsent (TCP
        holds it back); one that waits too long gets 503, its body read and dropped first
        (answered while still sending, a client sees a broken connection, not the 503).
        What the headers alone refuse (the type, a length beyond the token's limit) is
        answered at once, without waiting its turn. A body of unknown length (chunked) is
        admitted as a small one and resized once read (its bytes are capped as it is read)."""
        kind = "text" if text else "npy" if media_type(request) == NPY else "json"
        if kind == "json":
            require_json(request, f"JSON {{\"points\": [[x, y, z], …]}}, or an .npy file with Content-Type: {NPY}")
        declared = request.headers.get("content-length")
        length = int(declared) if declared is not None and declared.isdigit() else None
        most_bytes, admitted_bytes, encoding = BODY_ENCODINGS[kind]
        if length is not None and length > limits.max_points * most_bytes + BODY_SLACK:
            raise self._too_many_points(limits, length, most_bytes, encoding)
        most = UNKNOWN_LENGTH_POINTS if length is None else length // admitted_bytes
        admission = self.limiter.admission(min(most, limits.max_points))
        try:
            await admission.acquire()
        except BusyError:
            await self._drop_body(request, limits)
            raise
        try:
            yield admission
        finally:
            admission.release()

    async def _drop_body(self, request: Request, limits: Limits) -> None:
        """Reads what the body holds, up to what the token may send, keeping none of it."""
        left = limits.max_points * JSON_BYTES_PER_POINT + BODY_SLACK
        with contextlib.suppress(Exception):
            async for chunk in request.stream():
                left -= len(chunk)
                if left < 0:
                    break

    async def points(self, request: Request, limits: Limits) -> np.ndarray:
        """The points of a request, as ``.npy`` (``Content-Type: application/x-npy``) or JSON
        ``{"points": [[x, y, z], …]}``, within the token's point limit."""
        if media_type(request) == NPY:
            body = await self.body(request, limits, NPY_BYTES_PER_POINT, ".npy")
            points = as_points(decode_npy(body))
            limits.check_points(len(points))
            return points
        require_json(request, f"JSON {{\"points\": [[x, y, z], …]}}, or an .npy file with Content-Type: {NPY}")
        body = await self.body(request, limits, JSON_BYTES_PER_POINT, "JSON")
        # Counted before parsing: a compact body ("[0,0,0],") holds ~12x the point limit within
        # the byte limit, and parsing it whole would take ~18 bytes of memory per body byte.
        # Every point opens one bracket, and the list of points one more.
        limits.check_points(max(body.count(b"[") - 1, 0))
        if len(body) > INLINE_JSON_BYTES:
            points = await anyio.to_thread.run_sync(parse_json_points, body)
        else:
            points = parse_json_points(body)
        limits.check_points(len(points))
        return points

    # -- running the engine -----------------------------------------------------------------

    async def run_track(self, fn: Callable[[], T]) -> T:
        """:meth:`run` for a track given :meth:`track_disconnection`, as long work: one that
        stopped because the server is shutting down answers 503, to be sent again once it is
        back."""
        try:
            return await self.run(fn, long=True)
        except QueryCancelledError:
            if self.stopping.is_set():
                raise BusyError("the server is shutting down, and this track was stopped; send it again once the "
                                "server is back", retry_after=10.0) from None
            raise

    async def run(self, fn: Callable[..., T], *args: Any, points: int | None = None, long: bool = False) -> T:
        """Runs a blocking engine call in the pool of ``workers`` threads, or right here
        when it is a query of at most ``INLINE_POINTS`` points: a millisecond at most, less
        than the hop to a thread and back costs in latency. With a node engine every call
        goes to a thread (a query may wait for a batch) and up to ``ENGINE_WAITERS`` wait
        at once; on a cluster too, since a query waits for its workers (a stopped worker
        kept a 100-point query, and the whole event loop with it, waiting). A query here
        that would wait for a rewrite of a step it reads goes to a thread instead.

        ``long`` work (a track; a call of more than ``SMALL_REQUEST_POINTS`` points) holds
        one of ``workers - 1`` threads as well (at least one): eight anonymous tracks held
        every thread, and a 4×4×4 cutout waited 8.3 s for one. Short work always finds a
        thread, one more than long work may take where there is a single worker."""
        shared = self.database.engine is not None
        if points is not None and points <= INLINE_POINTS and not shared and not self._clustered:
            with contextlib.suppress(RewriteUnderWay), waits_refused():  # it would wait: in a thread, below
                return fn(*args)
        if self._engine is None:
            self._long = anyio.CapacityLimiter(long_work_threads(self.workers))
            threads = max(self.workers, self._long.total_tokens + 1)
            self._engine = anyio.CapacityLimiter(max(threads, ENGINE_WAITERS) if shared else threads)
        if not (long or (points is not None and points > SMALL_REQUEST_POINTS)):
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._engine)
        async with self._long:
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._engine)

    def track_disconnection(self, request: Request) -> Disconnection:
        """What a track looks at between its evaluations to learn that its client went
        away, with or without a node engine (a track without one stops at its next step)."""
        return Disconnection(request, self.stopping)

    def disconnection(self, request: Request) -> Disconnection | None:
        """What a query given ``cancel=`` looks at to learn that its client went away
        (then the node engine drops its pending work); None without a node engine, where
        a query runs alone to its end."""
        if getattr(self.database, "engine", None) is None:
            return None
        return Disconnection(request)

    def record_reads(self, dataset: Dataset, field: str) -> None:
        stats = dataset.last_query_stats
        atoms = stats.get("atoms_read", 0)
        if atoms:
            info = dataset.metadata
            self.metrics.atoms_read.inc(atoms)
            self.metrics.bytes_read.inc(atoms * info.atom**3 * info.fields[field].ncomp * 4)


class Disconnection:
    """Whether the client of a request has gone, asked from a worker thread of the event
    loop (``threading.Event``'s ``is_set``, which a query polls while the engine works and
    a track before each evaluation). The event loop is asked at most every
    ``CHECK_SECONDS``: a track of one particle evaluates every 0.1–0.2 ms, and a hop to the
    loop costs about as much."""

    CHECK_SECONDS = 0.1

    def __init__(self, request: Request, stopping: threading.Event | None = None):
        self.request = request
        self.stopping = stopping
        self.gone = False
        self._asked = -math.inf

    def is_set(self) -> bool:
        if self.stopping is not None and self.stopping.is_set():
            return True
        if not self.gone and time.monotonic() - self._asked >= self.CHECK_SECONDS:
            self._asked = time.monotonic()
            self.gone = anyio.from_thread.run(self.request.is_disconnected)
        return self.gone


def long_work_threads(workers: int) -> int:
    """Threads long work (tracks, series, large queries) may hold at once: all but one of
    the ``workers``, so that a short request never waits behind them for a thread."""
    return max(1, workers - 1)


def media_type(request: Request) -> str:
    """The request body's media type, lower case, without parameters ("" when none)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def require_json(request: Request, what: str) -> None:
    """Refuses (415) a JSON body sent as any other type. A browser sends a cross-origin POST
    of text/plain, a form or no type without asking the server first (a CORS "simple"
    request): read as JSON, any web page could have made its visitors' browsers run queries
    or declare jobs against their addresses' anonymous quota."""
    kind = media_type(request)
    if kind != "application/json":
        raise with_status(InvalidRequestError(
            f"a body of type {kind or 'none'!r} is not read: send {what}; JSON needs Content-Type: application/json "
            "(curl: -H 'Content-Type: application/json')"), 415)


def parse_json_points(body: bytes) -> np.ndarray:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: [[[[… nested too deep
        raise FormatError(f"the body is not valid JSON ({e}); send {{\"points\": [[x, y, z], …]}}") from None
    if not isinstance(document, Mapping) or "points" not in document:
        raise FormatError("the JSON body must be an object with a \"points\" member: {\"points\": [[x, y, z], …]}")
    check_members(document, ("points",), "{\"points\": [[x, y, z], …]}")  # {"points": …, "time": 0.01} ignored the time
    return as_points(document["points"])


def track_steps(dataset: Dataset, start: float, end: float, dt: float,
                names: tuple[str, str, str] = ("start", "end", "dt")) -> int:
    """The steps of a track from ``start`` to ``end``, counted, not listed, after checking
    that both ends are stored times (a span from -2e16 to 5e231 was refused for its steps,
    not for lying outside the data) and against this server's :data:`MAX_TRACK_STEPS` (the
    message named the library's 2**31 instead). ``names``: the parameters, as the request
    spells them."""
    for name, value in zip(names, (start, end, dt)):
        finite_number(name, value)
    stored = dataset.metadata.times
    if len(stored):
        first, last = float(stored[0]), float(stored[-1])
        tolerance = range_tolerance(stored)
        for name, t in zip(names, (start, end)):
            if not first - tolerance <= t <= last + tolerance:
                raise InvalidRequestError(f"{name} = {format_time(t)} is outside the stored times "
                                          f"[{format_time(first)}, {format_time(last)}] of dataset {dataset.name!r}")
    if dt > 0 and not abs(end - start) / dt <= MAX_TRACK_STEPS + 1:  # also an infinite ratio
        raise LimitExceededError(
            f"tracking from {start:g} to {end:g} in steps of {names[2]}={dt:g} takes {abs(end - start) / dt:.3g} "
            f"steps; one request may take {MAX_TRACK_STEPS:,}: use a larger {names[2]}, or split the time span into "
            "several requests (each starting where the last ended)")
    return step_count(start, end, dt)


def check_track_size(particles: int, steps: int) -> None:
    if steps > MAX_TRACK_STEPS:
        raise LimitExceededError(
            f"tracking over {steps:,} steps; one request may take {MAX_TRACK_STEPS:,}: use a larger dt, or split "
            "the time span into several requests (each starting where the last ended)")
    if particles * (steps + 1) > MAX_TRACK_ROWS:
        raise LimitExceededError(
            f"tracking {particles:,} particles over {steps:,} steps keeps {particles * (steps + 1):,} positions; "
            f"one request may keep {MAX_TRACK_ROWS:,}: split the particles or the time span into several requests")


def track_evaluations(steps: int, integrator: str, return_velocity: bool = False) -> int:
    """The velocity evaluations of each particle of a track (:func:`turbdb.track.evaluation_times`):
    one a step, two with rk2 (predictor and corrector), one more for the last velocities."""
    return steps * (2 if integrator.lower() == "rk2" else 1) + int(return_velocity)


def parse_range(name: str, value: str | None) -> tuple[int, int] | None:
    """A half-open node range given as ``start,stop`` (or ``start:stop``); ``None`` is the
    whole axis."""
    if value is None:
        return None
    check_plain_numbers(name, value)  # int() read x=٣,٤ as 3,4
    try:
        start, stop = (int(v) for v in value.replace(":", ",").split(","))
    except ValueError:
        raise InvalidRequestError(f"parameter {name!r} must be start,stop grid indices, e.g. 0,32; not {value!r}") from None
    return node_range(name, (start, stop))  # refuses indices beyond any grid (2**64 would overflow)
