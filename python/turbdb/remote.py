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
import logging
import math
import numbers
import os
import random
import re
import ssl
import threading
import time
import urllib.parse
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import httpx
import numpy as np

from . import __version__
from . import exceptions as exc
from . import remote_batches as batches
from . import submission
from .arguments import (
    METHOD_ALIASES, METHODS, OPERATOR_ALIASES, OPERATORS, SLOTS, STRATEGIES, TEMPORAL_ALIASES, TEMPORALS, choice,
    field_name, finite_number, result_dtype, time_list,
)
from .busy_causes import busy_cause
from .cutout import (
    as_filter_width, as_strides, box_ranges, check_filter_width, check_ranges, cutout_array, output_shape,
)
from .info import DatasetInfo, is_plain_name
from .http_clients import ClientStripes, send_within
from .jobs import job_number, planned_query
from .query import query_points
from .service.tokens import unsendable
from .service.transport import NPY, encode_npy, load_npy_bytes
from .size_limit import check_answer_bytes, check_result_bytes
from .step_versions import VERSIONS_HEADER
from .track import INTEGRATORS, step_count

# Transport failures after which the request certainly did not reach the server (refused,
# no route, no connection free in time): sending it again is safe for any request.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Failures after the request may have reached the server: the connection broke (a restart,
# a stale keep-alive) before the whole answer came. Sent again only when that is harmless
# (_repeatable): a job's declaration sent twice is two jobs. Read timeouts are not retried:
# the server is working, just slowly.
_BROKEN = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
# Answers of a gateway in front of the server (nginx while turbdb restarts): retried for
# requests that are safe to repeat, like a broken connection. A 504 (the query outlasted the
# gateway's timeout) was sent seven times, each computed again.
_GATEWAY = (502, 503)  # not 504: the gateway waited for the server, which would be as slow again
# Waiting for a busy (503) or rate-limited (429) server: at most this long per retry, and
# at most this many retries of one request.
_MAX_RETRY_AFTER = 60.0
_BUSY_RETRIES = 8
# By default failures are retried 6 times, waiting about 0.25, 0.5, … 8 s: 16 s in all, past
# a server's restart (1–6.5 s measured; 3.75 s of retries gave up before it was back).
DEFAULT_RETRIES, DEFAULT_BACKOFF = 6, 0.25
# ... and a refused connection (nothing was sent) for at least this long: a server that waits
# for one slow client stops up to 31 s after its signal (its graceful 30 s, then 1 s for the
# requests it cut; service/server.py) and starts in 1.6–7.5 s (measured on 2 busy cores, the
# slowest cold). 16 s of retries gave up on it.
DEFAULT_RESTART_SECONDS = 45.0

_log = logging.getLogger("turbdb.remote")


def _restart_seconds_from_environment() -> float:
    """``$TURBDB_RESTART_SECONDS`` if set (a script that probes for a server may want 0),
    else the default."""
    given = os.environ.get("TURBDB_RESTART_SECONDS")
    if given is None or not given.strip():
        return DEFAULT_RESTART_SECONDS
    try:
        return float(given)
    except ValueError:
        raise exc.InvalidRequestError(f"$TURBDB_RESTART_SECONDS is {given!r}, not a number of seconds") from None


def _refused(failure: Exception) -> bool:
    """Whether a connection failed because the host refused it (ECONNREFUSED)."""
    seen: BaseException | None = failure
    for _ in range(8):  # the chain httpx builds is a few links long
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or "Connection refused" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
# The backoff stops doubling at 2**5 of it (8 s by default): a server coming back is found soon.
_MOST_DOUBLINGS = 5
# The client paces its requests this fraction below the server's rate and burst: it copies
# the server's token bucket but not its clock.
PACING_MARGIN = 0.02
# What turbdb answers with; anything else comes from something in its place.
_TURBDB_TYPES = ("application/json", NPY, "application/x-npz", "application/x-netcdf")
# Paths of the server's own pages: a base address ending in one is not the server's.
_SERVER_PAGE = re.compile(r"/(v1(/(datasets|limits|engine|jobs)(/.*)?)?|docs|redoc|openapi\.json|healthz|metrics"
                          r"|turbulence-svc(/.*)?)/?$")  # a proxy's prefix such as /api/v1/turbdb is no page


def connect(url: str, token: str | None = None, *, timeout: float = 300.0, retries: int = DEFAULT_RETRIES,
            backoff: float = DEFAULT_BACKOFF, transport: httpx.BaseTransport | None = None,
            concurrency: int = batches.CONCURRENCY, progress: bool | None = None,
            restart_seconds: float | None = None) -> RemoteDatabase:
    """The database served at ``url`` (``turbdb serve``; ``http://host:port``, or with the
    path a proxy serves it under). ``token`` defaults to the environment variable
    ``TURBDB_TOKEN``; without one the server's anonymous limits apply.
    Queries, cutouts and tracks larger than the token's limits are split into batches sent
    ``concurrency`` at a time under the token's rate limit, with a progress bar
    (``progress``: None shows one on a terminal when there are several batches).
    ``timeout``: seconds each request may take, its whole answer included (a server that
    sends slowly counts too). Connection failures are retried ``retries`` times, waiting
    about ``backoff``·2ᵏ seconds (by default about 16 s in all; the waits stop doubling at
    8 s), and a refused connection (nothing was sent) until ``restart_seconds`` have passed
    too (by default 45 s, or ``$TURBDB_RESTART_SECONDS``: longer than a server's graceful
    shutdown and start; said once, on the ``turbdb.remote`` logger; with ``retries=0``
    nothing is retried; an address whose name does not resolve is not waited for); a request that may already have reached the server is
    sent again only if repeating it is harmless (not a job's declaration). A 429 or 503 is
    retried after the ``Retry-After`` the server asks for."""
    return RemoteDatabase(url, token, timeout=timeout, retries=retries, backoff=backoff, transport=transport,
                          concurrency=concurrency, progress=progress, restart_seconds=restart_seconds)


class RemoteDatabase(Mapping[str, "RemoteDataset"]):
    """The datasets of a turbdb server, by name (the same interface as :class:`turbdb.Database`)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 300.0, retries: int = DEFAULT_RETRIES,
                 backoff: float = DEFAULT_BACKOFF, transport: httpx.BaseTransport | None = None,
                 concurrency: int = batches.CONCURRENCY, progress: bool | None = None,
                 restart_seconds: float | None = None):
        self.url = server_address(url)
        if token is not None and not isinstance(token, str):
            raise exc.InvalidRequestError(f"a token is a string, not {type(token).__name__}")
        # Checked here: retries=None or 2.5 retried forever, a negative timeout failed later as a bare ValueError.
        self.timeout = _seconds("timeout", timeout, zero_allowed=False)
        self.retries = _whole_number("retries", retries, least=0)
        self.backoff = _seconds("backoff", backoff, zero_allowed=True)
        if restart_seconds is None:
            restart_seconds = _restart_seconds_from_environment()
        self.restart_seconds = _seconds("restart_seconds", restart_seconds, zero_allowed=True)
        self._told_restarting = False
        self.concurrency = _whole_number("concurrency", concurrency, least=1)
        if progress is not None and not isinstance(progress, bool):
            raise exc.InvalidRequestError(f"progress is True, False or None, not {progress!r}")
        from_environment = token is None
        token = token if token is not None else os.environ.get("TURBDB_TOKEN")
        # What a pickled copy connects again with (a spawn-based multiprocessing Pool).
        self._token, self._transport = token, transport
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
                                verify=tls, timeout=httpx.Timeout(self.timeout, connect=min(10.0, self.timeout)))

        # Clients striped over the threads (turbdb.http_clients); a transport given (a test's, an
        # app's) is one object, so its threads share one client.
        shared = make_client() if transport is not None else None
        self._clients = ClientStripes(make_client if shared is None else lambda: shared)
        self.progress = progress
        self._limits: batches.ServerLimits | None = None
        self._pacer: batches.Pacer | None = None
        self._waits = Throttling()
        self._waits_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<turbdb.RemoteDatabase {self.url!r}>"

    def __copy__(self) -> Any:
        clone = object.__new__(type(self))  # shares the connections; only pickling connects anew
        clone.__dict__.update(self.__dict__)
        return clone

    def __reduce__(self) -> tuple[Any, ...]:
        # Connected again where it is unpickled (its token travels in the pickle); its
        # connections and limits do not.
        if self._transport is not None:
            raise TypeError("a turbdb.connect(...) given transport= cannot be pickled: the transport is the "
                            "caller's object; connect in each process instead")
        return _remote_database, (self.url, self._token, {
            "timeout": self.timeout, "retries": self.retries, "backoff": self.backoff,
            "concurrency": self.concurrency, "progress": self.progress, "restart_seconds": self.restart_seconds})

    def close(self) -> None:
        self._clients.close()

    def __enter__(self) -> RemoteDatabase:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    @property
    def datasets(self) -> list[str]:
        """Names of the datasets this token may read, sorted."""
        return sorted(d["name"] for d in self.document("GET", "/v1/datasets")["datasets"])

    def __getitem__(self, name: str) -> RemoteDataset:
        if not is_plain_name(name):
            raise exc.UnknownNameError(f"no dataset {name!r} at {self.url}: dataset names are a letter followed by "
                                       "letters, digits, '_', '-' or '.'")
        # Without the steps written, which the server finds by looking at every shard file
        # (seconds on a large dataset); `info` asks for them.
        return RemoteDataset(self, name, self.document("GET", f"/v1/datasets/{_quote(name)}", params={"steps": "false"}))

    def __iter__(self) -> Iterator[str]:
        return iter(self.datasets)

    def __len__(self) -> int:
        return len(self.datasets)

    @property
    def limits(self) -> batches.ServerLimits:
        """The token's limits as the server states them (``GET /v1/limits``, asked once)."""
        if self._limits is None:
            try:
                document = self.document("GET", "/v1/limits")
            except exc.InvalidRequestError as e:  # a server older than /v1/limits answers 404
                if not str(e).startswith("no such endpoint '/v1/limits'"):
                    raise
                self._limits = batches.ServerLimits.unknown()
            else:
                if document.get("allowed") is False:  # no token, where the server needs one
                    raise exc.AccessDeniedError(document.get("description") or "this server needs a token", status=401)
                self._limits = batches.ServerLimits.from_document(document)
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
        answer = self.document("POST", "/v1/jobs", json={"queries": queries})
        return RemoteJob(self, answer["job"], answer["queries"], answer["scheduled"])

    def open_jobs(self) -> list[RemoteJob]:
        """This token's jobs still open on the server (``GET /v1/jobs``), to close those
        left behind (a declaration whose answer was lost, a program that stopped): their
        planned queries count against the token's until they are closed or unused for 600 s."""
        answer = self.document("GET", "/v1/jobs")
        return [RemoteJob(self, j["job"], j["queries"], j["scheduled"]) for j in answer["jobs"]]

    def engine_stats(self) -> dict[str, Any]:
        """What the server's node engine has done and holds (``GET /v1/engine``): the same
        figures :meth:`turbdb.Database.engine_stats` gives locally. Raises
        :class:`InvalidRequestError` if the server runs without a node engine."""
        state = self.document("GET", "/v1/engine")
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
            return dataclasses.replace(self._waits, busy_causes=dict(self._waits.busy_causes))

    def _waited(self, cause: str | None = None, **amounts: float) -> None:
        """Adds to the waits' counts and seconds (from any thread), and a 503's ``cause``."""
        with self._waits_lock:
            for name, value in amounts.items():
                setattr(self._waits, name, getattr(self._waits, name) + value)
            if cause is not None:
                self._waits.busy_causes[cause] = self._waits.busy_causes.get(cause, 0) + 1

    def document(self, method: str, path: str, **kwargs: Any) -> Any:
        """:meth:`request`'s answer read as JSON."""
        response = self.request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError as e:  # cut short or changed on the way: not the caller's doing
            raise exc.ServiceError(f"the answer of {_address(response)} is not the JSON it says it is ({e}); it was "
                                   "cut short or changed on the way: send the request again") from None

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Sends a request and reads its whole answer within the timeout. Retries a request
        that never reached the server; one whose connection broke after it was sent, or that
        a gateway answered 502/503, only if repeating it is harmless (:func:`_repeatable`);
        429 and 503 after the ``Retry-After`` they ask for. Raises the server's error as its
        turbdb exception, and :class:`ServiceError` for an answer that is not turbdb's."""
        repeatable = _repeatable(method, path)
        failures = busy = 0
        reached = True  # a request that never reached the server took nothing of its rate
        refused_since: float | None = None  # the first refusal: the server may be restarting
        paced_path = path != "/v1/limits"  # asking for the limits is free; everything else is paced
        rate_limited = False  # the pacer's next wait is a 429's, counted as such
        while True:
            if paced_path and reached:
                self.limits  # noqa: B018 - asks for them once, and makes the pacer
                paced = self._pacer.wait()  # type: ignore[union-attr]
                if paced > 0 and not rate_limited:
                    self._waited(paced=1, paced_seconds=paced)
                rate_limited = False
            try:
                batches.check_stopped()  # the call this belongs to ended while it waited
                response = send_within(self._clients.get(), method, path, self.timeout, **kwargs)
            except _NOT_SENT as e:
                tls = _tls_failure(e, self.url)
                if tls is not None:  # a wrong scheme or certificate: the same again each time
                    raise exc.ServiceError(tls) from None
                failure, reached = e, False
                refused_since = time.monotonic() if refused_since is None else refused_since
                self._say_retrying(e)
            except _BROKEN as e:
                if not repeatable:
                    raise exc.ServiceError(self._broken_after_sending(method, path, e)) from None
                failure, reached = e, True
            except httpx.TimeoutException as e:
                raise exc.ServiceError(f"the turbdb server at {self.url} did not answer within {self.timeout:g} s "
                                       f"({type(e).__name__}: {e}); send smaller batches or pass a larger timeout to "
                                       "turbdb.connect") from None
            else:
                reached = True
                status, wait = response.status_code, _retry_after(response)
                if status in (429, 503) and wait is not None:  # the server's own refusal: nothing was done
                    if busy < _BUSY_RETRIES and wait <= _MAX_RETRY_AFTER:
                        # A 429 empties the pacer's copy of the bucket, which then spaces this
                        # request and the others (at the loop's top) at the server's rate.
                        rate_limited = (status == 429 and paced_path and self._pacer is not None
                                        and self._pacer.refused(wait))
                        if not rate_limited:
                            batches.pause(wait)
                        busy += 1
                        if status == 429:
                            self._waited(rate_limited=1, rate_limited_seconds=wait)
                        else:
                            self._waited(busy=1, busy_seconds=wait, cause=busy_cause(_json_or_none(response)))
                        continue
                elif status in _GATEWAY and repeatable and failures < self.retries:
                    batches.pause(wait if wait is not None and wait <= _MAX_RETRY_AFTER else self._backoff(failures))
                    failures += 1
                    continue
                return self._checked(response)
            if failures >= self.retries and not self._restarting(failure, refused_since):
                raise exc.ServiceError(self._unreachable(failure, failures + 1, refused_since)) from None
            batches.pause(self._backoff(failures))
            failures += 1

    def _backoff(self, failures: int) -> float:
        """The wait before retry ``failures + 1``: exponential up to 2**5 times ``backoff``,
        with jitter so that threads that failed together do not come back together."""
        return self.backoff * 2**min(failures, _MOST_DOUBLINGS) * (0.5 + random.random())

    def _restarting(self, failure: Exception, refused_since: float | None) -> bool:
        """Whether a refused connection is tried again past ``retries``: for ``restart_seconds``
        after the first refusal, the time a server takes to stop and start again. Only a
        refusal (a host that answers, with nothing on the port): a name that does not
        resolve, or a host that does not answer, is no restart to wait out."""
        return (_refused(failure) and refused_since is not None and self.retries > 0
                and time.monotonic() - refused_since < self.restart_seconds)

    def _say_retrying(self, failure: Exception) -> None:
        """Says once that a connection failed and is being tried again: a silent wait of
        15–45 s looked like a hang."""
        if self._told_restarting or self.retries == 0:
            return
        self._told_restarting = True
        wait = max(self.restart_seconds, 16.0) if _refused(failure) else 16.0
        _log.warning("turbdb: cannot connect to the server at %s (%s); trying again for up to about %.0f s%s "
                     "(Ctrl-C stops; retries= and restart_seconds=, or $TURBDB_RESTART_SECONDS, set the wait)",
                     self.url, failure, wait, ", as it may be restarting" if _refused(failure) else "")

    def _unreachable(self, failure: Exception, tries: int, refused_since: float | None) -> str:
        attempts = f"after {tries} attempt{'s' if tries != 1 else ''}"
        if refused_since is not None:
            attempts += f" over {time.monotonic() - refused_since:.0f} s"
        if isinstance(failure, _NOT_SENT):  # "cannot reach" starts it: turbdb.workload.replay stops on it
            return (f"cannot reach the turbdb server at {self.url}: could not connect ({type(failure).__name__}: "
                    f"{failure}) {attempts}; is `turbdb serve` running there?")
        return (f"cannot get an answer from the turbdb server at {self.url}: the connection broke after the request "
                f"was sent ({type(failure).__name__}: {failure}) {attempts}; the server, or a proxy in front of it, is "
                "restarting or failing: its log says more")

    def _broken_after_sending(self, method: str, path: str, failure: Exception) -> str:
        """What to say of a request that is not repeated because it may have been carried out."""
        what = (f"{method} {path} was sent to the turbdb server at {self.url}, and the connection broke before its "
                f"answer came ({type(failure).__name__}: {failure}); it was not sent again, since ")
        if method == "POST" and path == "/v1/jobs":
            return what + ("the job may have been declared. Its planned queries count against your open jobs until "
                           "it is closed or unused for 600 s: db.open_jobs() lists them (GET /v1/jobs) and .close() "
                           "closes one (DELETE /v1/jobs/{id})")
        if method == "DELETE" and path.startswith("/v1/jobs/"):
            return what + "the job may have been closed: db.open_jobs() lists those still open"
        return what + "the server may have carried it out"

    def _checked(self, response: httpx.Response) -> httpx.Response:
        """The answer if it is a turbdb answer of success; else the error it stands for."""
        status = response.status_code
        if status >= 400:
            raise _error(response)
        if 300 <= status < 400:
            location = response.headers.get("location", "")
            moved = _moved_server(location, response.request.url.path)
            raise exc.ServiceError(
                f"{_address(response)} answered {status} {response.reason_phrase}, a redirect to "
                f"{location or 'nowhere'}: turbdb does not redirect, so something in front of it does; "
                + (f"connect to {moved} instead" if moved else "check the address"))
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in _TURBDB_TYPES:
            raise exc.ServiceError(
                f"the answer from {_address(response)} is not from a turbdb server (HTTP {status}, Content-Type "
                f"{kind or 'none'}: {response.text[:80]!r}); a proxy or a network's login page (captive portal) may be "
                "answering in its place: check the address, or log in to the network first")
        return response


@dataclasses.dataclass
class Throttling:
    """Waits on a server's limits (:meth:`RemoteDatabase.throttling`): requests the client
    held back under the token's rate limit (``paced``), answers of 429 retried
    (``rate_limited``) and of 503, the server busy (``busy``), each with the seconds
    waited; ``busy_causes`` counts the 503s by what their answers said was full
    (:data:`turbdb.busy_causes.BUSY_CAUSES`: the engine's queue, the connections of one
    address, …)."""

    paced: int = 0
    paced_seconds: float = 0.0
    rate_limited: int = 0
    rate_limited_seconds: float = 0.0
    busy: int = 0
    busy_seconds: float = 0.0
    busy_causes: dict[str, int] = dataclasses.field(default_factory=dict)

    def __sub__(self, other: Throttling) -> Throttling:
        causes = {k: n - other.busy_causes.get(k, 0) for k, n in self.busy_causes.items()}
        return Throttling(**{f.name: getattr(self, f.name) - getattr(other, f.name)
                             for f in dataclasses.fields(self) if f.name != "busy_causes"},
                          busy_causes={k: n for k, n in causes.items() if n})


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

    def __copy__(self) -> Any:
        clone = object.__new__(type(self))  # shares the connections; only pickling connects anew
        clone.__dict__.update(self.__dict__)
        return clone

    def __reduce__(self) -> tuple[Any, ...]:
        return _remote_dataset, (self.database, self.name)

    def __repr__(self) -> str:
        nx, ny, nz = self._metadata.grid
        return (f"<turbdb.RemoteDataset {self.name!r} at {self.database.url} {nx}x{ny}x{nz}, "
                f"{self._metadata.nt} times, fields {list(self._metadata.fields)}>")

    @property
    def info(self) -> DatasetInfo:
        """All metadata, including the steps written, asked of the server afresh."""
        self._metadata = _info(self.database.document("GET", self._path))
        return self._metadata

    @property
    def metadata(self) -> DatasetInfo:
        """The metadata as last fetched (no request)."""
        return self._metadata

    def submit(self, field: str, points: Any, **options: Any) -> Future:
        """:meth:`query` without waiting, as :meth:`turbdb.Dataset.submit`: a
        :class:`concurrent.futures.Future` of the answer at once; queries submitted
        together are in flight together, so the server's node engine shares their reads."""
        if (wrong := submission.options_error(self.query, options)) is not None:
            return submission.failed(wrong)
        return submission.submit(self.query, field, points, **options)

    def query(self, field: str, points: Any, *, time: Any, method: str = "lag6", operator: str = "field",
              temporal: str = "none", dtype: Any = np.float32, strategy: str = "streaming",
              job: RemoteJob | int | None = None, cancel: Any = None) -> np.ndarray:
        """See :meth:`turbdb.Dataset.query`; evaluated on the server, in batches within the
        token's point limit: a time series of few points goes in one request, or a few (points
        × times within the limit), many points time by time. ``job``: the job
        (:meth:`RemoteDatabase.job`) this query is the next query of — one per time, sent one
        request per time, each once the one before is answered (the server takes only the
        plan's next query); when a time's points are split into several requests, the first
        goes as the job's query and the rest run ungated beside it. ``cancel``: a
        ``threading.Event`` looked at before each request; once it is set the requests not yet
        sent are dropped and :class:`QueryCancelledError` is raised."""
        job_id = job.id if isinstance(job, RemoteJob) else job_number(job)
        _check_cancel(cancel, "query")
        # Checked as locally: a list would go as repeated parameters, of which the server takes
        # one, and None as an empty string.
        base = {"field": field_name(field)}
        method = choice("method", method, METHODS, METHOD_ALIASES)
        operator = choice("operator", operator, OPERATORS, OPERATOR_ALIASES)
        temporal = choice("temporal method", temporal, TEMPORALS, TEMPORAL_ALIASES)
        strategy = choice("strategy", strategy, STRATEGIES)
        xyz = query_points(points, self.metadata)  # float32 points on a wall put on it, as locally
        dtype = result_dtype(dtype)
        times = [repr(t) for t in time_list(time)]
        # Only what differs from the server's defaults: every parameter costs on both sides.
        for key, value, default in (("method", method, "lag6"), ("operator", operator, "field"),
                                    ("temporal", temporal, "none"), ("dtype", dtype.name, "float32"),
                                    ("strategy", strategy, "streaming")):
            if value != default:
                base[key] = value
        if base["field"] in self.metadata.fields:  # else the server names the fields
            # Checked before anything is sent, as locally: the answer is put together here.
            check_answer_bytes(len(xyz), self.metadata.fields[base["field"]].ncomp * SLOTS[operator], dtype, len(times))
        limits = self.database.limits
        # A job plans one query per time, each gated at its turn in the server's engine, so its
        # queries go time by time (the server refuses several times with job=); so does a
        # series to a server older than several times per request.
        if job_id is None and limits.time_series_queries:
            pieces = batches.series_pieces(len(xyz), times, limits.batch_points)
        else:
            pieces = [(k, k + 1, a, b) for k in range(len(times))
                      for a, b in batches.spans(len(xyz), limits.batch_points)]

        def ask(t0: int, t1: int, start: int, stop: int, again: bool = False) -> Any:
            params = {**base, "time": ",".join(times[t0:t1])}
            if job_id is not None and start == 0 and not again:  # asked again: the job had this query
                params["job"] = job_id
            def send() -> tuple[np.ndarray, str | None]:
                _check_cancel(cancel, "query")
                with _numbered_from(start):
                    response = self.database.request(
                        "POST", f"{self._path}/query", params=params, content=encode_npy(xyz[start:stop]),
                        headers={"Content-Type": NPY, "Accept": NPY})
                    values = _array(response)
                # One time is answered (N, …).
                return values if t1 - t0 > 1 else values[np.newaxis], response.headers.get(VERSIONS_HEADER)
            return send

        # A job's queries go one after another, each once the one before is answered: the server
        # takes only the plan's next query (sent together, they arrived in any order: a 400).
        rounds = [[p for p in pieces if p[0] == k] for k in range(len(times))] if job_id is not None else [pieces]
        what = f"{self.name} {operator} of {field}"
        sizes = {piece: (piece[1] - piece[0]) * (piece[3] - piece[2]) for piece in pieces}
        answers = [answer for group in rounds for answer in self.database.run_batches(
            [ask(*piece) for piece in group], [sizes[piece] for piece in group], "points", what)]
        # Pieces that read a step before and after its rewrite are asked again: joined, the
        # answer would mix two versions of the step, which no local query does.
        answers = batches.resent_until_one_version(answers, lambda stale: self.database.run_batches(
            [ask(*pieces[i], again=True) for i in stale], [sizes[pieces[i]] for i in stale], "points",
            f"{what} (asked again: a step was rewritten meanwhile)"), f"the query of {field}")
        series = np.empty((len(times), len(xyz)) + answers[0].shape[2:], dtype=answers[0].dtype)
        for (t0, t1, a, b), values in zip(pieces, answers):
            series[t0:t1, a:b] = values
        return series[0] if np.ndim(time) == 0 else series

    def cutout(self, field: str, *, time: Any, x: Any = None, y: Any = None, z: Any = None, stride: Any = 1,
               filter_width: int = 1) -> Any:
        """See :meth:`turbdb.Dataset.cutout`; read on the server in boxes within the token's
        point limit, sent as ``.npy``."""
        field = field_name(field)
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

            def send() -> tuple[tuple[np.ndarray, int], str | None]:
                response = self.database.request("POST", f"{self._path}/cutout", params=params, headers={"Accept": NPY})
                return (_array(response), int(response.headers["x-turbdb-time-index"])), \
                    response.headers.get(VERSIONS_HEADER)
            return send

        tasks = [ask(t, box) for t in times for box in pieces]
        sizes = [(z1 - z0) * (y1 - y0) * (x1 - x0) for _ in times for (z0, z1), (y0, y1), (x0, x1) in pieces]
        what = f"{self.name} cutout of {field}"
        answers = self.database.run_batches(tasks, sizes, "nodes", what)
        # Boxes that read a step before and after its rewrite are read again (see query).
        answers = batches.resent_until_one_version(answers, lambda stale: self.database.run_batches(
            [tasks[i] for i in stale], [sizes[i] for i in stale], "nodes",
            f"{what} (read again: a step was rewritten meanwhile)"), f"the cutout of {field}")
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
        field = field_name(field)
        method = choice("method", method, METHODS, METHOD_ALIASES)
        integrator = choice("integrator", integrator, INTEGRATORS)
        xyz = query_points(points, self.metadata)  # float32 points on a wall put on it, as locally
        params = {"start": _time_param("start", start), "end": _time_param("end", end), "dt": _time_param("dt", dt),
                  "method": method, "field": field, "integrator": integrator,
                  "return_velocity": "true" if return_velocity else "false"}
        steps = step_count(start, end, dt)  # counted, not listed: a tiny dt must not allocate
        limits = self.database.limits
        if steps > limits.max_track_steps:
            raise exc.LimitExceededError(f"tracking over {steps:,} steps; one request to this server may take "
                                     f"{limits.max_track_steps:,}: use a larger dt, or split the time span into "
                                     "several tracks (each starting where the last ended)")
        rows = (steps + 1) * len(xyz)  # the positions (and velocities) of every step come back, as locally
        check_result_bytes(rows * 24 * (2 if return_velocity else 1), f"{rows:,} particle positions",
                           "track fewer particles per call, or split the time span into several calls")
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
                    return _array(response)
                try:
                    with np.load(io.BytesIO(response.content), allow_pickle=False) as arrays:
                        return arrays["positions"], arrays["velocities"]
                except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as e:
                    raise _damaged(response, e) from None
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


def server_address(url: Any) -> str:
    """The server's base address, checked: ``http(s)://host:port``, or with the path a
    proxy serves it under, never with one of its own pages' paths (``…/v1``, ``…/docs``)."""
    if not isinstance(url, str):
        raise exc.InvalidRequestError(f"{url!r} is not an http:// or https:// address of a turbdb server")
    parts = urllib.parse.urlsplit(url.strip())
    scheme = parts.scheme.lower()  # HTTP://… is http://… (RFC 3986 §3.1)
    if scheme not in ("http", "https") or not parts.netloc:
        hint = f": add the scheme, http://{url.strip()}" if "://" not in url else ""
        raise exc.InvalidRequestError(f"{url!r} is not an http:// or https:// address of a turbdb server{hint}")
    if "?" in url or "#" in url:
        raise exc.InvalidRequestError(f"{url!r} carries a query or a fragment; give the server's address only, "
                                      "e.g. http://127.0.0.1:8000")
    path = parts.path.rstrip("/")
    page = _SERVER_PAGE.search(path)
    if page:
        server = f"{scheme}://{parts.netloc}{path[:page.start()]}"
        raise exc.InvalidRequestError(f"{url!r} is the address of the server's page {path[page.start():]!r}, not of "
                                      f"the server: connect to {server}")
    return f"{scheme}://{parts.netloc}{path}"


def _whole_number(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise exc.InvalidRequestError(f"{name} must be a whole number of at least {least}, not {value!r}")
    return int(value)


def _seconds(name: str, value: Any, zero_allowed: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not zero_allowed):
        least = "zero or more" if zero_allowed else "more than zero"
        raise exc.InvalidRequestError(f"{name} must be a finite number of seconds, {least}, not {value!r}")
    return float(value)


def _repeatable(method: str, path: str) -> bool:
    """Whether sending a request twice does what sending it once does: every GET, and the
    POSTs that compute an answer (query, cutout, track); not declaring or closing a job."""
    return method in ("GET", "HEAD") or (method == "POST" and path.startswith("/v1/datasets/"))


def _tls_failure(error: Exception, url: str) -> str | None:
    """What went wrong, when a connection failed in its TLS handshake; None otherwise."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (f"the TLS certificate of {url} is not trusted ({cause.verify_message or cause}); check the address, or "
                "have the server's operator install a certificate from a known authority")
    return (f"the server at {url} does not speak TLS ({cause.reason or cause}): `turbdb serve` serves plain HTTP, so "
            f"connect to http://{url.split('://', 1)[1]} (or put a TLS proxy in front of it)")


def _moved_server(location: str, path: str) -> str | None:
    """The server's address a redirect points to: its Location without the path asked for."""
    target = urllib.parse.urlsplit(location)
    if target.scheme not in ("http", "https") or not target.path.endswith(path):
        return None
    prefix = target.path[:len(target.path) - len(path)].rstrip("/")
    return f"{target.scheme}://{target.netloc}{prefix}"


def _array(response: httpx.Response) -> np.ndarray:
    """An ``.npy`` answer as an array; a damaged one is the transport's fault, not the caller's."""
    try:
        return load_npy_bytes(response.content)
    except exc.FormatError as e:
        raise _damaged(response, e) from None


def _address(response: httpx.Response) -> str:
    """The address a request was sent to, without its query (which can be long)."""
    return str(response.request.url.copy_with(query=None))


def _damaged(response: httpx.Response, error: Exception) -> exc.ServiceError:
    return exc.ServiceError(f"the answer of {_address(response)} is damaged ({error}): it was cut short or changed "
                            "on the way; send the request again")


def _json_or_none(response: httpx.Response) -> Any:
    """The answer's JSON body (None if it has none)."""
    try:
        return response.json()
    except ValueError:
        return None


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
        return exc.ServiceError(f"HTTP {response.status_code} {response.reason_phrase} from {_address(response)}, not "
                                f"an answer of turbdb's (a proxy in front of it?): {response.text[:300]!r}")
    cls = _CLASSES.get(name)
    if cls is exc.AccessDeniedError:
        return exc.AccessDeniedError(description, status=response.status_code)
    if cls is exc.LimitExceededError:
        return exc.LimitExceededError(description, retry_after=_retry_after(response))
    if cls is None or cls is exc.TurbdbError:
        return exc.ServiceError(f"HTTP {response.status_code}: {description}")
    return cls(description)



def _remote_database(url: str, token: str | None, options: dict[str, Any]) -> RemoteDatabase:
    """A pickled :class:`RemoteDatabase`, connected again."""
    return RemoteDatabase(url, token, **options)


def _remote_dataset(database: RemoteDatabase, name: str) -> RemoteDataset:
    """A pickled :class:`RemoteDataset`, asked of its server again."""
    return database[name]
