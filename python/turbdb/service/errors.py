"""Errors as HTTP answers: every error is a 4xx/5xx with the JSON body JHTDB clients read,
``{"description": …}``, plus the name of the turbdb exception class so that
``turbdb.connect`` raises the same class the local API would."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match
from starlette.responses import Response

from .. import exceptions as exc
from .admission import BusyError
from .head_requests import allowed_methods, request_method
from .logs import log, request_line

#: Seconds a client is asked to wait before sending again what a shutdown cut short: a
#: restart takes a few (asked again sooner, the request finds the port closed).
RESTART_RETRY_SECONDS = 2
#: The scope key :mod:`.connections` sets on a request whose body stopped arriving (its
#: answer's description): the app, which then sees its client gone, logs and counts a 408.
BODY_TIMEOUT_SCOPE_KEY = "turbdb.body_timeout"


def body_timeout_description(idle_seconds: float, min_rate: float, received: int) -> str:
    return (f"the request body stopped arriving ({received:,} bytes came; a body may pause {idle_seconds:g} s at most, "
            f"and must come at {min_rate / 1024:g} KiB/s on average): it was dropped and its admission released; "
            "send it again in one go")

# Checked in order: subclasses before their bases.
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (exc.QueryCancelledError, 499),  # the client went away (nginx's "client closed request")
    (exc.AccessDeniedError, 403),
    (exc.LimitExceededError, 413),
    (exc.OutOfDomainError, 400),
    (exc.InvalidRequestError, 400),
    (exc.DamagedMetadataError, 500),  # the store is damaged, not the request
    (exc.FormatError, 400),
    (exc.UnknownNameError, 400),
    (exc.DatasetExistsError, 409),
    (BusyError, 503),
    (exc.EngineBusyError, 503),
    (exc.CorruptDataError, 500),
    (exc.StorageError, 500),
    (exc.TurbdbError, 500),
)


def status_of(error: Exception) -> int:
    """The HTTP status of a turbdb error: its own ``status`` if it carries one (401 vs 403,
    404 for an unknown dataset), 429 for a rate limit, else by class."""
    status = getattr(error, "status", None)
    if isinstance(status, int):
        return status
    if isinstance(error, exc.LimitExceededError) and error.retry_after is not None:
        return 429
    return next(code for cls, code in _STATUS if isinstance(error, cls))


def error_response(status: int, description: str, error: str, retry_after: float | None = None) -> Response:
    headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after is not None else None
    body = json.dumps({"description": description, "error": error, "status": status}).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def turbdb_error_response(error: Exception, hide: Any = None, request: Request | None = None) -> Response:
    """The JSON answer for a turbdb error. ``hide``: the database's directory, cut out of
    the message so that answers never show the server's file paths (the log keeps them).
    A 5xx is logged with its time and ``request``; a busy server's 503 as a warning."""
    status = status_of(error)
    # The nearest public class (a step rewritten or a dataset created again during the read
    # is a DatasetBusyError to clients, which retry it), else ServiceError.
    name = next((c.__name__ for c in type(error).__mro__ if c.__name__ in exc.__all__ and c is not exc.TurbdbError),
                "ServiceError")
    if status >= 500:
        where = request_line(request.scope) if request is not None else "a request"
        log.log(logging.WARNING if status == 503 else logging.ERROR, "%s answered %d: %s: %s", where, status,
                type(error).__name__, error)
    return error_response(status, without_paths(str(error), hide), name, getattr(error, "retry_after", None))


def without_paths(message: str, hide: Any) -> str:
    """``message`` with the database's directory ``hide`` (as given and resolved) cut out,
    the data roots of its cluster's workers too (``…/nodes/1/iso/…`` gives ``iso/…``), and
    Dask addresses: a scheduler runs any code sent to it, so callers never see where it is."""
    if hide is not None:
        for root in sorted({str(Path(hide).resolve()), str(Path(hide))}, key=len, reverse=True):
            message = hide_path(message, root.rstrip("/") or "/")
        from ..cluster.catalogue import Catalogue

        for slot, root in sorted(Catalogue.node_roots(hide).items(), key=lambda item: -len(item[1])):
            at = r"(?<![\w.~/-])" + re.escape(root.rstrip("/"))
            message = re.sub(at + "/", "", message)
            message = re.sub(at + r"(?![\w.~-])", f"worker {slot}'s data root", message)
    return re.sub(r"\b(?:tcp|tls|ucx|inproc|ws|wss)://[^\s,;)'\"]+", "(a cluster address)", message)


def hide_path(message: str, root: str) -> str:
    """``message`` with the path ``root`` cut out where it stands as a path: ``root/x`` gives
    ``x``, ``root`` alone "the database". A plain substring replacement turned "no dataset"
    into "no the databaseset" for a database served from ``data``."""
    start, end = r"(?<![\w.~/-])", r"(?![\w.~-])"
    message = re.sub(start + re.escape(root) + "/", "", message)
    return re.sub(start + re.escape(root) + end, "the database", message)


def shutting_down(request: Request) -> bool:
    """Whether the server is shutting down: a request whose connection it closed (its body
    still arriving, or past the graceful time) sees its client gone, and is a 503, not a 499."""
    backend = getattr(request.app.state, "backend", None)
    return backend is not None and backend.stopping.is_set()


def shutdown_response() -> Response:
    return error_response(503, "the server is shutting down and this request was cut short; send it again once the "
                               "server is back", "ServiceError", retry_after=RESTART_RETRY_SECONDS)


def docs_path(request: Request) -> str:
    """The path of the API documentation, under the root path a proxy serves the server under."""
    return request.scope.get("root_path", "") + "/docs"


def _endpoint_without_slash(request: Request) -> str | None:
    """The path asked for without its trailing slash, when that is an endpoint."""
    path = request.url.path
    stripped = path.rstrip("/")
    if not stripped or stripped == path:
        return None
    scope = {**request.scope, "path": stripped}
    found = any(route.matches(scope)[0] != Match.NONE for route in _every_route(request.app.router.routes))
    return stripped if found else None


def _methods_on_path(request: Request) -> str:
    """Every method of every route on the request's path: starlette's 405 names only the
    first route's (``PUT /v1/jobs`` said "use POST", though ``GET /v1/jobs`` exists too)."""
    methods: list[str] = []
    for route in _every_route(request.app.router.routes):
        if route.matches(request.scope)[0] != Match.NONE:
            methods += [m for m in sorted(getattr(route, "methods", None) or ()) if m not in methods]
    return ", ".join(methods)


def _every_route(routes: Any) -> Any:
    """The routes, those of included routers among them (FastAPI keeps an included router
    as one entry; ours are included without a prefix)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _every_route(included.routes)
        else:
            yield route


def install(app: FastAPI) -> None:
    """Registers the handlers that give every error the same JSON shape."""

    @app.exception_handler(exc.TurbdbError)
    async def _turbdb(request: Request, error: exc.TurbdbError) -> Response:
        if status_of(error) == 499 and shutting_down(request):
            return shutdown_response()
        return turbdb_error_response(error, hide=getattr(getattr(app.state, "backend", None), "path", None),
                                     request=request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, error: RequestValidationError) -> Response:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or e['loc'][0]}: {e['msg']}" for e in error.errors())
        return error_response(400, f"invalid parameters: {problems}", "InvalidRequestError")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> Response:
        description = str(error.detail)
        headers = dict(error.headers or {})
        docs = docs_path(request)
        if error.status_code == 404:
            description = f"no such endpoint {request.url.path!r}; see {docs} for the API"
            without = _endpoint_without_slash(request)
            if without is not None:
                description = f"no such endpoint {request.url.path!r}: the endpoint is {without!r}, without the " \
                              f"trailing slash (see {docs})"
        elif error.status_code == 405:
            allowed = headers["Allow"] = allowed_methods(_methods_on_path(request) or headers.get("Allow", ""))
            description = (f"{request_method(request.scope)} is not allowed on {request.url.path}; "
                           f"use {allowed or 'another method'} (see {docs})")
        name = "InvalidRequestError" if error.status_code < 500 else "ServiceError"
        response = error_response(error.status_code, description, name)
        response.headers.update(headers)  # a 405 must say Allow
        return response

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, error: ClientDisconnect) -> Response:
        # Nobody is left to read an answer; no traceback in the log either. Counted as 499,
        # as a client gone while its query ran, not as a bad request (a 400 in /metrics).
        if shutting_down(request):
            return shutdown_response()
        timed_out = request.scope.get(BODY_TIMEOUT_SCOPE_KEY)
        if timed_out is not None:
            return error_response(408, timed_out, "ServiceError")  # sent already by the connection; logged here
        return error_response(499, "the client closed the connection before sending the whole body",
                              "InvalidRequestError")

    @app.exception_handler(Exception)
    async def _internal(request: Request, error: Exception) -> Response:
        log.exception("internal error answering %s %s", request.method, request.url.path)
        return internal_error_response(error)

    app.add_middleware(_InternalErrors)  # before the other middleware: innermost, so they see its 500


def internal_error_response(error: Exception) -> Response:
    return error_response(500, f"internal error ({type(error).__name__}); the server log has the details",
                          "ServiceError")


class _InternalErrors:
    """Answers an unexpected exception with the JSON 500 inside the middleware stack.
    Starlette answers it from its outermost layer and then raises it again: the traceback
    was logged twice (once more by uvicorn), the access line said 0 B sent, and uvicorn
    closed the connection, so a keep-alive client's next request was reset."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watching_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watching_send)
        except Exception as error:
            if started:  # half an answer is out: only closing the connection can tell the client
                raise
            log.exception("internal error answering %s", request_line(scope))
            await internal_error_response(error)(scope, receive, send)
