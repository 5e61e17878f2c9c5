"""A database on a turbdb server, used like a local one: ``turbdb.connect(url, token)``
gives the interface of ``turbdb.open(path)`` (``datasets``, ``db[name].info``, ``query``,
``cutout``, ``track``) over HTTP with ``.npy`` bodies, retrying connection failures with
backoff and raising the server's errors as the exceptions the local API raises."""

from __future__ import annotations

import io
import os
import random
import time as _time
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import numpy as np

from . import __version__
from . import exceptions as exc
from .info import DatasetInfo, is_plain_name
from .arguments import as_points, finite_number, node_range, result_dtype
from .query import cutout_array
from .service.transport import NPY, encode_npy, load_npy_bytes

# Transport failures after which the same request is sent again: the server was not
# reached, or dropped the connection (a restart, a stale keep-alive). Every request the
# client makes is a read, so repeating one is safe. Read timeouts are not retried: the
# server is working, just slowly.
_RETRIED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
            httpx.WriteError, httpx.PoolTimeout)
# Waiting for a busy (503) or rate-limited (429) server: at most this long per retry.
_MAX_RETRY_AFTER = 10.0


def connect(url: str, token: str | None = None, *, timeout: float = 300.0, retries: int = 4,
            backoff: float = 0.25, transport: httpx.BaseTransport | None = None) -> RemoteDatabase:
    """The database served at ``url`` (``turbdb serve``). ``token`` defaults to the
    environment variable ``TURBDB_TOKEN``; without one the server's anonymous limits apply.
    Connection failures are retried ``retries`` times, waiting ``backoff``·2ᵏ seconds."""
    return RemoteDatabase(url, token, timeout=timeout, retries=retries, backoff=backoff, transport=transport)


class RemoteDatabase(Mapping[str, "RemoteDataset"]):
    """The datasets of a turbdb server, by name (the same interface as :class:`turbdb.Database`)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 300.0, retries: int = 4,
                 backoff: float = 0.25, transport: httpx.BaseTransport | None = None):
        if not url.startswith(("http://", "https://")):
            raise exc.InvalidRequestError(f"{url!r} is not an http:// or https:// address of a turbdb server")
        self.url = url.rstrip("/")
        token = token if token is not None else os.environ.get("TURBDB_TOKEN")
        headers = {"User-Agent": f"turbdb/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(base_url=self.url, headers=headers, transport=transport,
                                    timeout=httpx.Timeout(timeout, connect=10.0))
        self.retries = retries
        self.backoff = backoff

    def __repr__(self) -> str:
        return f"<turbdb.RemoteDatabase {self.url!r}>"

    def close(self) -> None:
        self._client.close()

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

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Sends a request, retrying transport failures and busy answers; raises the
        server's error as its turbdb exception."""
        for attempt in range(self.retries + 1):
            try:
                response = self._client.request(method, path, **kwargs)
            except _RETRIED as e:
                if attempt == self.retries:
                    raise exc.ServiceError(f"cannot reach the turbdb server at {self.url} ({type(e).__name__}: {e}) "
                                           f"after {self.retries + 1} attempts; is `turbdb serve` running?") from None
                _time.sleep(self.backoff * 2**attempt * (0.5 + random.random()))
                continue
            except httpx.TimeoutException as e:
                raise exc.ServiceError(f"the turbdb server at {self.url} did not answer in time ({e}); "
                                       "send smaller batches or pass a larger timeout to turbdb.connect") from None
            if response.status_code in (429, 503) and attempt < self.retries:
                wait = _retry_after(response)
                if wait is not None and wait <= _MAX_RETRY_AFTER:
                    _time.sleep(wait)
                    continue
            if response.status_code >= 400:
                raise _error(response)
            return response
        raise AssertionError("unreachable")


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

    def query(self, field: str, points: Any, *, time: float, method: str = "lag6", operator: str = "field",
              temporal: str = "none", dtype: Any = np.float32, strategy: str = "streaming") -> np.ndarray:
        """See :meth:`turbdb.Dataset.query`; evaluated on the server."""
        xyz = as_points(points)
        dtype = result_dtype(dtype)
        params = {"field": field, "time": _time_param("time", time)}
        # Only what differs from the server's defaults: every parameter costs on both sides.
        for key, value, default in (("method", method, "lag6"), ("operator", operator, "field"),
                                    ("temporal", temporal, "none"), ("dtype", dtype.name, "float32"),
                                    ("strategy", strategy, "streaming")):
            if value != default:
                params[key] = value
        response = self.database.request("POST", f"{self._path}/query", params=params, content=encode_npy(xyz),
                                         headers={"Content-Type": NPY, "Accept": NPY})
        return load_npy_bytes(response.content)

    def cutout(self, field: str, *, time: float, x: Any = None, y: Any = None, z: Any = None, stride: int = 1) -> Any:
        """See :meth:`turbdb.Dataset.cutout`; read on the server, sent as ``.npy``."""
        if not isinstance(stride, (int, np.integer)) or stride < 1:
            raise exc.InvalidRequestError(f"stride must be a positive integer, not {stride!r}")
        info = self._metadata
        ranges = [(0, n) if value is None else node_range(axis, value) for axis, value, n in zip("xyz", (x, y, z), info.grid)]
        params = {"field": field, "time": _time_param("time", time), "stride": int(stride), "format": "npy",
                  **{axis: f"{a},{b}" for axis, (a, b) in zip("xyz", ranges)}}
        response = self.database.request("POST", f"{self._path}/cutout", params=params, headers={"Accept": NPY})
        data = load_npy_bytes(response.content)
        if field not in info.fields or int(response.headers["x-turbdb-time-index"]) >= info.nt:
            info = self.info  # the dataset grew since it was opened
        return cutout_array(self.name, info, field, data, ranges, int(stride),
                            int(response.headers["x-turbdb-time-index"]))

    def track(self, points: Any, *, start: float, end: float, dt: float, method: str = "lag6",
              field: str = "velocity", integrator: str = "rk2", return_velocity: bool = False) -> Any:
        """See :meth:`turbdb.Dataset.track`; integrated on the server."""
        params = {"start": _time_param("start", start), "end": _time_param("end", end), "dt": _time_param("dt", dt),
                  "method": method, "field": field, "integrator": integrator,
                  "return_velocity": "true" if return_velocity else "false"}
        response = self.database.request("POST", f"{self._path}/track", params=params,
                                         content=encode_npy(as_points(points)),
                                         headers={"Content-Type": NPY, "Accept": NPY})
        if not return_velocity:
            return load_npy_bytes(response.content)
        with np.load(io.BytesIO(response.content), allow_pickle=False) as arrays:
            return arrays["positions"], arrays["velocities"]


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

