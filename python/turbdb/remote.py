"""A database on a turbdb server, used like a local one: ``turbdb.connect(url, token)``
gives the interface of ``turbdb.open(path)`` (``datasets``, ``db[name].info``, ``query``,
``cutout``, ``track``) over HTTP with ``.npy`` bodies, retrying connection failures with
backoff and raising the server's errors as the exceptions the local API raises. Work of any
size is split into requests within the token's limits and sent concurrently under its rate
limit (:mod:`turbdb.remote_batches`)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import random
import re
import threading
import time as _time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import httpx
import numpy as np

from . import __version__
from . import exceptions as exc
from . import remote_batches as batches
from . import submission
from .arguments import finite_number, result_dtype, time_list
from .cutout import (
    as_filter_width, as_strides, box_ranges, check_filter_width, check_ranges, cutout_array, output_shape,
)
from .info import DatasetInfo, is_plain_name
from .http_clients import ClientStripes
from .jobs import job_number, planned_query
from .query import query_points
from .service.tokens import unsendable
from .service.transport import NPY, encode_npy, load_npy_bytes
from .size_limit import check_result_bytes
from .track import step_count

# Transport failures after which the same request is sent again: the server was not
# reached, or dropped the connection (a restart, a stale keep-alive). Every request the
# client makes is a read, so repeating one is safe. Read timeouts are not retried: the
# server is working, just slowly.
_RETRIED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
            httpx.WriteError, httpx.PoolTimeout)
# Waiting for a busy (503) or rate-limited (429) server: at most this long per retry, and
# at most this many retries of one request.
_MAX_RETRY_AFTER = 60.0
_BUSY_RETRIES = 8
# The client paces its requests this fraction below the server's rate and burst: it copies
# the server's token bucket but not its clock.
PACING_MARGIN = 0.02


def connect(url: str, token: str | None = None, *, timeout: float = 300.0, retries: int = 4,
            backoff: float = 0.25, transport: httpx.BaseTransport | None = None,
            concurrency: int = batches.CONCURRENCY, progress: bool | None = None) -> RemoteDatabase:
    """The database served at ``url`` (``turbdb serve``). ``token`` defaults to the
    environment variable ``TURBDB_TOKEN``; without one the server's anonymous limits apply.
    Queries, cutouts and tracks larger than the token's limits are split into batches sent
    ``concurrency`` at a time under the token's rate limit, with a progress bar
    (``progress``: None shows one on a terminal when there are several batches).
    Connection failures are retried ``retries`` times, waiting ``backoff``·2ᵏ seconds; a
    429 or 503 is retried after the ``Retry-After`` the server asks for."""
    return RemoteDatabase(url, token, timeout=timeout, retries=retries, backoff=backoff, transport=transport,
                          concurrency=concurrency, progress=progress)


class RemoteDatabase(Mapping[str, "RemoteDataset"]):
    """The datasets of a turbdb server, by name (the same interface as :class:`turbdb.Database`)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 300.0, retries: int = 4,
                 backoff: float = 0.25, transport: httpx.BaseTransport | None = None,
                 concurrency: int = batches.CONCURRENCY, progress: bool | None = None):
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise exc.InvalidRequestError(f"{url!r} is not an http:// or https:// address of a turbdb server")
        if "?" in url or "#" in url:
            raise exc.InvalidRequestError(f"{url!r} carries a query or a fragment; give the server's address only, "
                                          "e.g. http://127.0.0.1:8000")
        if token is not None and not isinstance(token, str):
            raise exc.InvalidRequestError(f"a token is a string, not {type(token).__name__}")
        self.url = url.rstrip("/")
        from_environment = token is None
        token = token if token is not None else os.environ.get("TURBDB_TOKEN")
        headers = {"User-Agent": f"turbdb/{__version__}"}
        if token:
            problem = unsendable(token)
            if problem:
                where = "the token in $TURBDB_TOKEN" if from_environment else "the token"
                raise exc.InvalidRequestError(f"{where} cannot be sent to {self.url}: {problem}")
            headers["Authorization"] = f"Bearer {token}"
        # A connection for every thread that asks at once, kept alive until it expires: with
        # a bounded pool, requests queue for a connection, and httpcore 1.0.9 can close one it
        # has given to a queued request, which then hangs until its read timeout
        # (encode/httpcore#1110: one 64-thread replay in about eight waited 300 s).
        pool = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        # One TLS context for every thread's client: making one loads the CA bundle, about
        # 40 ms of CPU, which 128 new clients paid over again.
        tls = httpx.create_ssl_context()

        def make_client() -> httpx.Client:
            return httpx.Client(base_url=self.url, headers=headers, transport=transport, limits=pool,
                                verify=tls, timeout=httpx.Timeout(timeout, connect=10.0))

        # Clients striped over the threads (turbdb.http_clients); a transport given (a test's, an
        # app's) is one object, so its threads share one client.
        shared = make_client() if transport is not None else None
        self._clients = ClientStripes(make_client if shared is None else lambda: shared)
        self.retries = retries
        self.backoff = backoff
        self.concurrency = concurrency
        self.progress = progress
        self._limits: batches.ServerLimits | None = None
        self._pacer: batches.Pacer | None = None
        self._waits = Throttling()
        self._waits_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<turbdb.RemoteDatabase {self.url!r}>"

    def close(self) -> None:
        self._clients.close()

    def __enter__(self) -> RemoteDatabase:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    @property
    def datasets(self) -> list[str]:
        """Names of the datasets this token may read, sorted."""
        return sorted(d["name"] for d in self.request("GET", "/v1/datasets").json()["datasets"])

    def __getitem__(self, name: str) -> RemoteDataset:
        if not is_plain_name(name):
            raise exc.UnknownNameError(f"no dataset {name!r} at {self.url}: dataset names are a letter followed by "
                                       "letters, digits, '_', '-' or '.'")
        return RemoteDataset(self, name, self.request("GET", f"/v1/datasets/{_quote(name)}").json())

    def __iter__(self) -> Iterator[str]:
        return iter(self.datasets)

    def __len__(self) -> int:
        return len(self.datasets)

    @property
    def limits(self) -> batches.ServerLimits:
        """The token's limits as the server states them (``GET /v1/limits``, asked once)."""
        if self._limits is None:
            try:
                self._limits = batches.ServerLimits.from_document(self.request("GET", "/v1/limits").json())
            except exc.InvalidRequestError as e:  # a server older than /v1/limits answers 404
                if "no such endpoint" not in str(e):
                    raise
                self._limits = batches.ServerLimits.unknown()
            self._pacer = batches.Pacer(self._limits.requests_per_minute, self._limits.burst, margin=PACING_MARGIN)
        return self._limits

    def job(self, plan: Iterable[Any]) -> RemoteJob:
        """Declares a job on the server (``POST /v1/jobs``): the queries it will send, in
        order, each ``(dataset, field, time[, temporal])``. Give the returned job as
        ``job=`` to each of those queries, in that order, and close it at the end (``with
        db.job(plan) as job:`` does). See :meth:`turbdb.Database.job`."""
        queries = []
        for entry in plan:
            name, field, t, temporal = planned_query(entry)
            queries.append({"dataset": name, "field": field, "time": t, "temporal": temporal})
        answer = self.request("POST", "/v1/jobs", json={"queries": queries}).json()
        return RemoteJob(self, answer["job"], answer["queries"], answer["scheduled"])

    def engine_stats(self) -> dict[str, Any]:
        """What the server's node engine has done and holds (``GET /v1/engine``): the same
        figures :meth:`turbdb.Database.engine_stats` gives locally. Raises
        :class:`InvalidRequestError` if the server runs without a node engine."""
        state = self.request("GET", "/v1/engine").json()
        if not state.pop("enabled", False):
            raise exc.InvalidRequestError(f"the server at {self.url} runs without a node engine (start it with "
                                          "turbdb serve --scheduler jaws, or any other engine option)")
        return state

    def run_batches(self, tasks: list, sizes: list[int], unit: str, description: str,
                    progress: bool | None = None) -> list:
        """Runs one request per task, ``concurrency`` at a time (each paced by :meth:`request`)."""
        return batches.run(tasks, concurrency=self.concurrency, progress=self.progress if progress is None else progress,
                           sizes=sizes, unit=unit, description=description)

    def throttling(self) -> Throttling:
        """How long this client has waited on the server's limits so far, from every
        thread: requests held back to stay under the token's rate limit, and answers of
        429 (rate limited) or 503 (busy) retried after their ``Retry-After``."""
        with self._waits_lock:
            return dataclasses.replace(self._waits)

    def _waited(self, **amounts: float) -> None:
        """Adds to the waits' counts and seconds (from any thread)."""
        with self._waits_lock:
            for name, value in amounts.items():
                setattr(self._waits, name, getattr(self._waits, name) + value)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Sends a request, retrying transport failures and busy answers (429, 503: after
        the ``Retry-After`` they ask for); raises the server's error as its turbdb exception."""
        failures = busy = 0
        reached = True  # a request that never reached the server took nothing of its rate
        while True:
            if path != "/v1/limits" and reached:  # asking for the limits is free; everything else is paced
                self.limits  # noqa: B018 - asks for them once, and makes the pacer
                paced = self._pacer.wait()  # type: ignore[union-attr]
                if paced > 0:
                    self._waited(paced=1, paced_seconds=paced)
            try:
                response = self._clients.get().request(method, path, **kwargs)
            except _RETRIED as e:
                if failures == self.retries:
                    raise exc.ServiceError(f"cannot reach the turbdb server at {self.url} ({type(e).__name__}: {e}) "
                                           f"after {self.retries + 1} attempts; is `turbdb serve` running?") from None
                _time.sleep(self.backoff * 2**failures * (0.5 + random.random()))
                failures += 1
                # A connection refused or timed out took nothing; one that broke may have counted.
                reached = isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError))
                continue
            except httpx.TimeoutException as e:
                raise exc.ServiceError(f"the turbdb server at {self.url} did not answer in time ({e}); "
                                       "send smaller batches or pass a larger timeout to turbdb.connect") from None
            reached = True
            if response.status_code in (429, 503) and busy < _BUSY_RETRIES:
                wait = _retry_after(response)
                if wait is not None and wait <= _MAX_RETRY_AFTER:
                    _time.sleep(wait)
                    busy += 1
                    if response.status_code == 429:
                        self._waited(rate_limited=1, rate_limited_seconds=wait)
                    else:
                        self._waited(busy=1, busy_seconds=wait)
                    continue
            if response.status_code >= 400:
                raise _error(response)
            return response


@dataclasses.dataclass
class Throttling:
    """Waits on a server's limits (:meth:`RemoteDatabase.throttling`): requests the client
    held back under the token's rate limit (``paced``), answers of 429 retried
    (``rate_limited``) and of 503, the engine's queue full (``busy``), each with the
    seconds waited."""

    paced: int = 0
    paced_seconds: float = 0.0
    rate_limited: int = 0
    rate_limited_seconds: float = 0.0
    busy: int = 0
    busy_seconds: float = 0.0

    def __sub__(self, other: Throttling) -> Throttling:
        return Throttling(**{f.name: getattr(self, f.name) - getattr(other, f.name)
                             for f in dataclasses.fields(self)})


class RemoteJob:
    """A job declared on a server (:meth:`RemoteDatabase.job`); ``scheduled`` says whether
    the server has a node engine to gate it with (else its queries run alone)."""

    def __init__(self, database: RemoteDatabase, number: int, queries: int, scheduled: bool):
        self.database = database
        self.id = number
        self.queries = queries
        self.scheduled = scheduled
        self.closed = False

    def __repr__(self) -> str:
        return f"<turbdb.RemoteJob {self.id} of {self.queries} queries at {self.database.url}>"

    def close(self) -> None:
        """Ends the job on the server (``DELETE /v1/jobs/{id}``); closing twice does nothing."""
        if not self.closed:
            self.closed = True
            self.database.request("DELETE", f"/v1/jobs/{self.id}")

    def __enter__(self) -> RemoteJob:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class RemoteDataset:
    """One dataset on a turbdb server (the same interface as :class:`turbdb.Dataset`)."""

    def __init__(self, database: RemoteDatabase, name: str, document: dict[str, Any]):
        self.database = database
        self.name = name
        self._path = f"/v1/datasets/{_quote(name)}"
        self._metadata = _info(document)

    def __repr__(self) -> str:
        nx, ny, nz = self._metadata.grid
        return (f"<turbdb.RemoteDataset {self.name!r} at {self.database.url} {nx}x{ny}x{nz}, "
                f"{self._metadata.nt} times, fields {list(self._metadata.fields)}>")

    @property
    def info(self) -> DatasetInfo:
        """All metadata, including the steps written, asked of the server afresh."""
        self._metadata = _info(self.database.request("GET", self._path).json())
        return self._metadata

    @property
    def metadata(self) -> DatasetInfo:
        """The metadata as last fetched (no request)."""
        return self._metadata

    def submit(self, field: str, points: Any, **options: Any) -> Future:
        """:meth:`query` without waiting, as :meth:`turbdb.Dataset.submit`: a
        :class:`concurrent.futures.Future` of the answer at once; queries submitted
        together are in flight together, so the server's node engine shares their reads."""
        return submission.submit(self.query, field, points, **options)

    def query(self, field: str, points: Any, *, time: Any, method: str = "lag6", operator: str = "field",
              temporal: str = "none", dtype: Any = np.float32, strategy: str = "streaming",
              job: RemoteJob | int | None = None, cancel: Any = None) -> np.ndarray:
        """See :meth:`turbdb.Dataset.query`; evaluated on the server, in batches within the
        token's point limit. ``job``: the job (:meth:`RemoteDatabase.job`) this query is the
        next query of — one per time; when a query is split into several requests, the
        first of each time goes as the job's query and the rest run ungated beside it.
        ``cancel``: a ``threading.Event`` looked at before each request; once it is set the
        requests not yet sent are dropped and :class:`QueryCancelledError` is raised."""
        job_id = job.id if isinstance(job, RemoteJob) else job_number(job)
        _check_cancel(cancel, "query")
        xyz = query_points(points, self.metadata)  # float32 points on a wall put on it, as locally
        dtype = result_dtype(dtype)
        times = time_list(time)
        base = {"field": field}
        # Only what differs from the server's defaults: every parameter costs on both sides.
        for key, value, default in (("method", method, "lag6"), ("operator", operator, "field"),
                                    ("temporal", temporal, "none"), ("dtype", dtype.name, "float32"),
                                    ("strategy", strategy, "streaming")):
            if value != default:
                base[key] = value
        pieces = batches.spans(len(xyz), self.database.limits.batch_points)

        def ask(t: float, start: int, stop: int) -> Any:
            params = {**base, "time": repr(t)}
            if job_id is not None and start == 0:
                params["job"] = job_id
            def send() -> np.ndarray:
                _check_cancel(cancel, "query")
                with _numbered_from(start):
                    return load_npy_bytes(self.database.request(
                        "POST", f"{self._path}/query", params=params, content=encode_npy(xyz[start:stop]),
                        headers={"Content-Type": NPY, "Accept": NPY}).content)
            return send

        tasks = [ask(t, a, b) for t in times for a, b in pieces]
        answers = self.database.run_batches(tasks, [b - a for _ in times for a, b in pieces], "points",
                                            f"{self.name} {operator} of {field}")
        per_time = [np.concatenate(answers[k * len(pieces):(k + 1) * len(pieces)]) for k in range(len(times))]
        return per_time[0] if np.ndim(time) == 0 else np.stack(per_time)

    def cutout(self, field: str, *, time: Any, x: Any = None, y: Any = None, z: Any = None, stride: Any = 1,
               filter_width: int = 1) -> Any:
        """See :meth:`turbdb.Dataset.cutout`; read on the server in boxes within the token's
        point limit, sent as ``.npy``."""
        strides = as_strides(stride)
        width = as_filter_width(filter_width)
        times = time_list(time)
        info = self._metadata
        ranges = box_ranges(info, x, y, z)
        # Checked here, as the local call checks them, since the boxes sent are the nodes
        # kept: y=(17, 21) with stride 2 on a bounded axis of 20 nodes is sent as (17, 20).
        check_ranges(info, ranges)
        shape = output_shape(ranges, strides)
        if field in info.fields:  # else the server names the fields
            check_result_bytes(len(times) * math.prod(shape) * info.fields[field].ncomp * 4,
                               f"a cutout of {' x '.join(map(str, shape[::-1]))} nodes",
                               "ask for a smaller box, a larger stride, or split the box into several cutouts")
        check_filter_width(info, width)  # as the local call (the server checks the memory of each piece)
        # One output node reads width³ nodes, fewer along a bounded axis (the box is cut at
        # its walls), and the server counts them against the token's limit: no split can help.
        per_node = math.prod(width if periodic else min(width, n) for n, periodic in zip(info.grid, info.periodic))
        most = self.database.limits.max_points
        if per_node > most:
            raise exc.LimitExceededError(
                f"a box filter {width} nodes wide reads {per_node:,} nodes for each node of the cutout, more than "
                f"the {most:,} this token may read in one request; ask for a narrower filter (at most "
                f"{_cube_root_below(most)} wide) or use a token with a larger limit")
        # A filtered piece is sized by the nodes it reads, as the server counts them; a plain
        # one by the nodes it returns, in batches of at most batch_points.
        extents = tuple(None if periodic else n for n, periodic in zip(info.grid, info.periodic))[::-1]
        pieces = list(batches.boxes(shape, most if width > 1 else self.database.limits.batch_points,
                                    strides[::-1], width, extents))

        def ask(t: float, box: Any) -> Any:
            params = {"field": field, "time": repr(t), "stride": ",".join(map(str, strides)), "format": "npy"}
            if width > 1:
                params["filter_width"] = width
            for axis, (k0, k1), (start, stop), s in zip("xyz", box[::-1], ranges, strides):
                params[axis] = f"{start + k0 * s},{start + (k1 - 1) * s + 1}" if k1 > k0 else f"{start},{stop}"

            def send() -> tuple[np.ndarray, int]:
                response = self.database.request("POST", f"{self._path}/cutout", params=params, headers={"Accept": NPY})
                return load_npy_bytes(response.content), int(response.headers["x-turbdb-time-index"])
            return send

        tasks = [ask(t, box) for t in times for box in pieces]
        sizes = [(z1 - z0) * (y1 - y0) * (x1 - x0) for _ in times for (z0, z1), (y0, y1), (x0, x1) in pieces]
        answers = self.database.run_batches(tasks, sizes, "nodes", f"{self.name} cutout of {field}")
        data, t_indices = None, []
        for k in range(len(times)):
            for i, box in enumerate(pieces):
                values, t_index = answers[k * len(pieces) + i]
                if data is None:
                    data = np.empty((len(times),) + shape + (values.shape[-1],), dtype=values.dtype)
                (z0, z1), (y0, y1), (x0, x1) = box
                data[k, z0:z1, y0:y1, x0:x1] = values
            t_indices.append(t_index)
        if field not in info.fields or max(t_indices) >= info.nt:
            info = self.info  # the dataset grew since it was opened
        many = np.ndim(time) != 0
        return cutout_array(self.name, info, field, data if many else data[0], ranges, strides,
                            t_indices if many else t_indices[0], width)

    def track(self, points: Any, *, start: float, end: float, dt: float, method: str = "lag6",
              field: str = "velocity", integrator: str = "rk2", return_velocity: bool = False,
              progress: Any = None, cancel: Any = None) -> Any:
        """See :meth:`turbdb.Dataset.track`; integrated on the server, the particles split
        into batches within the token's limits (points per request, and positions kept:
        particles × (steps + 1)). ``progress``: True or False for a bar, or a callback
        ``(steps_done, n_steps)``, called as batches of particles finish with the share of the
        work done counted in steps. ``cancel``: a ``threading.Event`` looked at before each
        request; once set, the requests not yet sent are dropped (:class:`QueryCancelledError`)."""
        _check_cancel(cancel, "track")
        xyz = query_points(points, self.metadata)  # float32 points on a wall put on it, as locally
        params = {"start": _time_param("start", start), "end": _time_param("end", end), "dt": _time_param("dt", dt),
                  "method": method, "field": field, "integrator": integrator,
                  "return_velocity": "true" if return_velocity else "false"}
        limits = self.database.limits
        steps = step_count(start, end, dt)  # counted, not listed: a tiny dt must not allocate
        if steps > limits.max_track_steps:
            raise exc.LimitExceededError(f"tracking over {steps:,} steps; one request to this server may take "
                                     f"{limits.max_track_steps:,}: use a larger dt, or split the time span into "
                                     "several tracks (each starting where the last ended)")
        per_request = min(limits.batch_points, max(1, limits.max_track_rows // (steps + 1)))

        done, done_lock = [0], threading.Lock()

        def ask(a: int, b: int) -> Any:
            def send() -> Any:
                _check_cancel(cancel, "track")
                with _numbered_from(a):
                    response = self.database.request("POST", f"{self._path}/track", params=params,
                                                     content=encode_npy(xyz[a:b]),
                                                     headers={"Content-Type": NPY, "Accept": NPY})
                if callable(progress):
                    with done_lock:
                        done[0] += b - a
                        progress(steps * done[0] // max(1, len(xyz)), steps)
                if not return_velocity:
                    return load_npy_bytes(response.content)
                with np.load(io.BytesIO(response.content), allow_pickle=False) as arrays:
                    return arrays["positions"], arrays["velocities"]
            return send

        pieces = batches.spans(len(xyz), per_request)
        answers = self.database.run_batches([ask(a, b) for a, b in pieces], [b - a for a, b in pieces], "particles",
                                            f"{self.name} tracking",
                                            progress=False if callable(progress) else progress)
        if not return_velocity:
            return np.concatenate(answers, axis=1)
        return (np.concatenate([p for p, _ in answers], axis=1), np.concatenate([u for _, u in answers], axis=1))


def _check_cancel(cancel: Any, what: str) -> None:
    if cancel is not None and cancel.is_set():
        raise exc.QueryCancelledError(f"the {what} was cancelled; the requests not yet sent were dropped")


_NUMBERED = re.compile(r"\b(point|particle) (\d+)\b")


@contextlib.contextmanager
def _numbered_from(first: int) -> Iterator[None]:
    """Errors of a request that carried points ``first ..`` name the point by its number in
    the caller's array, not in the request's batch ("point 404" of the batch from 4 096 is
    point 4 500)."""
    try:
        yield
    except exc.TurbdbError as e:
        message = str(e)
        if first == 0 or not isinstance(e, (exc.InvalidRequestError, exc.OutOfDomainError)) \
                or not _NUMBERED.search(message):
            raise
        renumbered = _NUMBERED.sub(lambda m: f"{m.group(1)} {int(m.group(2)) + first}", message, count=1)
        raise type(e)(renumbered) from None


def _cube_root_below(n: int) -> int:
    """The largest w with w³ ≤ n."""
    w = round(n ** (1 / 3))
    while w**3 > n:
        w -= 1
    while (w + 1) ** 3 <= n:
        w += 1
    return w


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _info(document: dict[str, Any]) -> DatasetInfo:
    steps = {f: tuple(s) for f, s in document.get("steps_present", {}).items()}
    return DatasetInfo.from_attrs(document, steps)


def _time_param(name: str, value: Any) -> str:
    return repr(finite_number(name, value))


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


_CLASSES = {name: getattr(exc, name) for name in exc.__all__}


def _error(response: httpx.Response) -> exc.TurbdbError:
    """The turbdb exception a server's error answer names, with its message."""
    try:
        body = response.json()
        description, name = body["description"], body.get("error", "")
        if isinstance(description, list):
            description = "\n".join(map(str, description))
    except (ValueError, KeyError, TypeError):
        return exc.ServiceError(f"HTTP {response.status_code} from {response.request.url}: {response.text[:300]}")
    cls = _CLASSES.get(name)
    if cls is exc.AccessDeniedError:
        return exc.AccessDeniedError(description, status=response.status_code)
    if cls is exc.LimitExceededError:
        return exc.LimitExceededError(description, retry_after=_retry_after(response))
    if cls is None or cls is exc.TurbdbError:
        return exc.ServiceError(f"HTTP {response.status_code}: {description}")
    return cls(description)

