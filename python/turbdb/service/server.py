"""Running the service: bind the socket (port 0 picks a free one), say where it listens,
serve on uvicorn, and on SIGINT/SIGTERM stop accepting and let requests in progress finish
(for ``graceful_seconds`` at most)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from ..exceptions import InvalidRequestError, ServiceError
from . import logs, redaction
from .app import create_app
from .connections import BODY_IDLE_SECONDS, SEND_IDLE_SECONDS, GuardedHttpProtocol
from .proxies import TrustedProxies
from .refusals import Refusals
from .tokens import Tokens, rate_text

# How long shutdown waits for requests in progress before closing their connections.
GRACEFUL_SHUTDOWN_SECONDS = 30.0
# Then how long a request whose connection was closed has to end before it is cancelled.
STRAGGLER_SECONDS = 1.0
# Open connections beyond which new ones get 503 at once (memory bound on bodies being read).
MAX_CONNECTIONS = 512


def serve(db: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 8000, tokens: str | None = None,
          workers: int | None = None, max_points_in_flight: int | None = None, cutout_chunk_bytes: int | None = None,
          log_level: str = "info", access_log: bool = False, engine: dict[str, Any] | None = None,
          cluster: str | None = None, allow_origins: tuple[str, ...] = (),
          graceful_seconds: float = GRACEFUL_SHUTDOWN_SECONDS, forwarded_allow_ips: str | Sequence[str] | None = None,
          root_path: str = "", body_idle_seconds: float = BODY_IDLE_SECONDS,
          send_idle_seconds: float = SEND_IDLE_SECONDS) -> None:
    """Serves the database at ``db`` until interrupted. ``engine``: the node engine's options
    (``scheduler``, ``cache_bytes``, ``cache_policy``, ``io``; see :func:`turbdb.open`).
    ``cluster``: a Dask scheduler address; the queries then run on that cluster.
    ``allow_origins``: web pages whose scripts may call the API from a browser (CORS).
    ``graceful_seconds``: how long a shutdown waits for the requests under way (those whose
    body is still arriving are answered 503 at once). ``forwarded_allow_ips``: the reverse
    proxies to trust (addresses or networks, comma-separated, or ``*``): a request from one
    of them counts as its ``X-Forwarded-For`` client, and its ``X-Forwarded-Prefix`` is its
    root path; none by default. ``root_path``: the path a proxy serves the server under
    (``/turbdb``), which its pages and links then name.
    ``body_idle_seconds``: how long a request body may stop arriving (and the grace before
    it must average 16 KiB/s) before it is answered 408 and its admission released.
    ``send_idle_seconds``: how long an answer may stay unread (its client reading nothing)
    before its connection is closed and its work dropped."""
    graceful_seconds = _graceful(graceful_seconds)
    body_idle_seconds = _seconds("body_idle_seconds", body_idle_seconds, low=0.5, high=3600)
    send_idle_seconds = _seconds("send_idle_seconds", send_idle_seconds, low=0.5, high=3600)
    root_path = _root_path(root_path)
    proxies = TrustedProxies(forwarded_allow_ips) if forwarded_allow_ips is not None else None
    options = {k: v for k, v in (("max_points_in_flight", max_points_in_flight),
                                 ("cutout_chunk_bytes", cutout_chunk_bytes), ("cluster", cluster)) if v is not None}
    app = create_app(db, tokens, workers=workers, engine=engine, allow_origins=allow_origins, **options)
    backend = app.state.backend
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        backend.close()
        raise ServiceError(f"cannot listen on {host}:{port} ({e.strerror or e}); choose another --port "
                           "(0 picks a free one) or --host") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{bound}"
    count = len(backend.names())
    behind = f" on the cluster at {cluster}" if cluster else ""
    # Proxies are trusted only for what they forward; uvicorn's own handling (on by default,
    # trusting 127.0.0.1) let any local process choose its address with X-Forwarded-For.
    protocol = GuardedHttpProtocol.configured(graceful_seconds=graceful_seconds, trusted_proxies=proxies,
                                              body_idle_seconds=body_idle_seconds,
                                              send_idle_seconds=send_idle_seconds,
                                              refusals=Refusals(backend.metrics.refusals))
    config = uvicorn.Config(app, log_level=log_level, access_log=False,
                            log_config=logs.logging_config(log_level, access_log),
                            timeout_graceful_shutdown=graceful_seconds + STRAGGLER_SECONDS,  # type: ignore[arg-type]
                            limit_concurrency=MAX_CONNECTIONS, server_header=False, http=protocol,
                            proxy_headers=False, root_path=root_path)
    redaction.install()  # after uvicorn configured its loggers: no token in any log line
    server = _GracefulServer(config, on_exit=backend.stopping.set)
    try:
        _say(f"turbdb: serving {Path(db)} ({count} dataset{'s' if count != 1 else ''}){behind} at {url}\n"
             f"turbdb: API docs at {url}/docs (work offline); {backend.workers} engine threads; Ctrl-C stops\n"
             + node_engine_summary(backend.database, url)
             + access_summary(backend.tokens, tokens, backend.names())
             + tokens_file_warning(tokens, backend.tokens)
             + (f"\nturbdb: web pages that may call the API from a browser: {', '.join(allow_origins)}"
                if allow_origins else "")
             + proxy_summary(proxies, root_path))
        server.run(sockets=[sock])
    finally:
        sock.close()
        backend.close()
    if not server.started:
        sys.exit(1)
    _say("turbdb: stopped")


def _say(text: str) -> None:
    """Prints a line of the server's own on standard output, naming it when that fails
    (``> /dev/full`` said "No space left on device" and no more)."""
    try:
        print(text, flush=True)
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, "standard output") from None


def _graceful(seconds: Any) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 86400:
        raise InvalidRequestError(f"graceful_seconds must be a number of seconds from 0 to a day, not {seconds!r}")
    return float(seconds)


def _seconds(name: str, seconds: Any, low: float, high: float) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not low <= seconds <= high:
        raise InvalidRequestError(f"{name} must be a number of seconds from {low:g} to {high:g}, not {seconds!r}")
    return float(seconds)


def _root_path(path: str) -> str:
    """The root path as uvicorn takes it: ``/a/b``, without a trailing slash ("" for none)."""
    path = (path or "").rstrip("/")
    if path and (not path.startswith("/") or any(c in path for c in "?#% \t")):
        raise InvalidRequestError(f"the root path must be a path such as /turbdb, the one the proxy serves the "
                                  f"server under, not {path!r}")
    return path


def proxy_summary(proxies: TrustedProxies | None, root_path: str) -> str:
    """Lines on the proxies trusted and the root path, when there are any."""
    lines = ""
    if proxies is not None:
        lines += (f"\nturbdb: trusted proxies: {proxies}; a request from one counts as coming from the client its "
                  "X-Forwarded-For names (rate limits, connection caps, the log and jobs go by it), and pages and "
                  "links name the path its X-Forwarded-Prefix gives")
    if root_path:
        lines += (f"\nturbdb: pages and links name the root path {root_path} (a proxy serves this server under "
                  f"it, without the prefix): the API docs are at {root_path}/docs through the proxy")
    return lines


def node_engine_summary(database: Any, url: str) -> str:
    """A line on the node engine the queries go through, or how to have one."""
    if database.engine is None:
        return ("turbdb: no node engine: each request runs alone, reading through the OS page cache (the fastest while "
                "the data fits in memory); with many users at once over more data than memory holds, serve with "
                "--scheduler jaws --io direct so that requests share their reads (docs/service.md)\n")
    s = database.engine_stats()
    return (f"turbdb: node engine: {s['scheduler']} scheduler, {_gib(s['cache_capacity'])} {s['cache_policy']} atom "
            f"cache, {s['io']} reads; its figures at {url}/v1/engine and {url}/metrics\n")


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.2f} GiB" if nbytes >= 1 << 30 else f"{nbytes / (1 << 20):.0f} MiB"


def tokens_file_warning(path: str | None, tokens: Tokens) -> str:
    """A warning when the tokens file holds secrets in plain text and other users of the
    machine may read it (``turbdb token alice >> tokens.toml`` makes a file of mode 644)."""
    if not path or not tokens.plaintext:
        return ""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ""
    if not mode & 0o044:  # readable by group or others
        return ""
    return (f"\nturbdb: warning: {path} holds {tokens.plaintext} secret(s) in plain text and other users of this "
            f"machine may read it (mode {mode & 0o777:o}): run chmod 600 {path}, or keep only digests "
            "(turbdb token NAME --hashed)")


def access_summary(tokens: Tokens, path: str | None, datasets: list[str] | None = None) -> str:
    """The limits in force, and how to get more: printed when the server starts, with a
    note on a token that names a dataset this server does not hold (a typo grants nothing)."""
    anonymous = tokens.anonymous
    lines = []
    if tokens.anonymous_allowed:
        lines.append(f"turbdb: anonymous use: {anonymous.max_points:,} points per request, "
                     f"{rate_text(anonymous.requests_per_minute)} requests per minute per address "
                     "(turbdb.connect splits larger work into batches by itself)")
    else:
        lines.append("turbdb: anonymous use is off: every request needs a token")
    if path:
        for name, limits in tokens.named():
            lines.append(f"turbdb: token {name!r} ({path}): {limits.max_points:,} points per request, "
                         f"{rate_text(limits.requests_per_minute)} requests per minute, datasets "
                         f"{', '.join(limits.datasets)}")
            unknown = [d for d in limits.datasets if d != "*" and datasets is not None and d not in datasets]
            if unknown:
                lines.append(f"turbdb: note: token {name!r} names dataset(s) {', '.join(unknown)}, which this server "
                             f"does not hold ({', '.join(datasets or []) or 'none'}): check {path} for a typo")
    else:
        lines.append("turbdb: for more, make a token: `turbdb token alice >> tokens.toml`, then serve with "
                     "--tokens tokens.toml (make serve TOKENS=tokens.toml); clients pass it as "
                     "turbdb.connect(url, token=…)")
    return "\n".join(lines)


class _GracefulServer(uvicorn.Server):
    """uvicorn re-raises SIGINT/SIGTERM once it has shut down, so the process dies by the
    signal (a KeyboardInterrupt traceback on Ctrl-C). The shutdown was graceful: exit 0.
    SIGHUP shuts down as they do (it killed the server at once, rc 129): the tokens file is
    read at start, so an operator who changed it restarts the server; under ``nohup``
    (SIGHUP ignored) it stays ignored. ``on_exit`` is called
    when the shutdown begins (long work under way stops)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]):
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Not where SIGHUP is ignored: a server started under nohup must outlive its terminal.
        takes_hangup = (threading.current_thread() is threading.main_thread()
                        and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN)
        hangup = signal.signal(signal.SIGHUP, self.handle_exit) if takes_hangup else None
        try:
            with super().capture_signals():
                yield
                self._captured_signals.clear()
        finally:
            if takes_hangup:  # a handler not set from Python reads as None: the default then
                signal.signal(signal.SIGHUP, hangup if hangup is not None else signal.SIG_DFL)
