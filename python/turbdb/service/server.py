"""Running the service: bind the socket (port 0 picks a free one), say where it listens,
serve on uvicorn, and on SIGINT/SIGTERM stop accepting and let requests in progress finish."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from ..exceptions import ServiceError
from . import redaction
from .app import create_app
from .connections import GuardedHttpProtocol
from .tokens import Tokens, rate_text

# How long shutdown waits for requests in progress before closing their connections.
GRACEFUL_SHUTDOWN_SECONDS = 30
# Open connections beyond which new ones get 503 at once (memory bound on bodies being read).
MAX_CONNECTIONS = 512


def serve(db: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 8000, tokens: str | None = None,
          workers: int | None = None, max_points_in_flight: int | None = None, cutout_chunk_bytes: int | None = None,
          log_level: str = "info", access_log: bool = False, engine: dict[str, Any] | None = None,
          cluster: str | None = None, allow_origins: tuple[str, ...] = ()) -> None:
    """Serves the database at ``db`` until interrupted. ``engine``: the node engine's options
    (``scheduler``, ``cache_bytes``, ``cache_policy``, ``io``; see :func:`turbdb.open`).
    ``cluster``: a Dask scheduler address; the queries then run on that cluster.
    ``allow_origins``: web pages whose scripts may call the API from a browser (CORS)."""
    options = {k: v for k, v in (("max_points_in_flight", max_points_in_flight),
                                 ("cutout_chunk_bytes", cutout_chunk_bytes), ("cluster", cluster)) if v is not None}
    app = create_app(db, tokens, workers=workers, engine=engine, allow_origins=allow_origins, **options)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ServiceError(f"cannot listen on {host}:{port} ({e.strerror or e}); choose another --port "
                           "(0 picks a free one) or --host") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{bound}"
    backend = app.state.backend
    count = len(backend.names())
    behind = f" on the cluster at {cluster}" if cluster else ""
    print(f"turbdb: serving {Path(db)} ({count} dataset{'s' if count != 1 else ''}){behind} at {url}\n"
          f"turbdb: API docs at {url}/docs (work offline); {backend.workers} engine threads; Ctrl-C stops\n"
          + node_engine_summary(backend.database, url)
          + access_summary(backend.tokens, tokens, backend.names())
          + (f"\nturbdb: web pages that may call the API from a browser: {', '.join(allow_origins)}"
             if allow_origins else ""), flush=True)
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log,
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS, limit_concurrency=MAX_CONNECTIONS,
                            server_header=False, http=GuardedHttpProtocol)
    if access_log:  # asked for: logged whatever --log-level says (warning hid every line)
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    redaction.install()  # after uvicorn configured its loggers: no token in any log line
    server = _GracefulServer(config, on_exit=backend.stopping.set)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        backend.close()
    if not server.started:
        sys.exit(1)
    print("turbdb: stopped", flush=True)


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
