"""The web service: a FastAPI app over one database. ``create_app(db_path, tokens)`` builds
it; ``turbdb serve`` runs it on uvicorn. Endpoints: ``/`` (what this is), ``/v1/datasets…``
(JSON or ``.npy``), ``/v1/limits``, the JHTDB-compatible ``/turbulence-svc/values``,
``/turbulence-svc/cutout/api/local`` and ``/turbulence-svc/metadata``, ``/healthz``,
``/metrics``, and the OpenAPI description at ``/openapi.json`` with interactive docs at
``/docs`` (Swagger UI served from the package, so it works offline)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import itertools
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio.to_thread
import numpy as np
from fastapi import Depends, FastAPI, Query, Request
from fastapi_offline import FastAPIOffline
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__, _core
from ..arguments import known_field
from ..exceptions import InvalidRequestError, TurbdbError
from ..query import evaluate_call, point_call
from ..step_versions import VERSIONS_HEADER
from ..cutout import as_filter_width, parse_strides
from ..database_listing import misnamed_error
from . import cutout as cutouts
from . import cluster as cluster_routes
from . import errors, home, jhtdb, jhtdb_cutout, jhtdb_metadata, jobs, json_answers, limits as limits_api, logs
from . import result_limit
from .answer_types import answer_dtype, cutout_format
from .admission import SMALL_REQUEST_POINTS
from .backend import INLINE_POINTS, Backend, check_track_size, parse_range, track_evaluations, track_steps
from .engine_metrics import EngineCollector
from .engine_waits import ENCODE_INLINE_POINTS, watch
from .metrics import CONTENT_TYPE_LATEST, Metrics, endpoint_of
from .head_requests import HEAD_REQUEST, HeadAsGet
from .known_parameters import known_query_parameters
from .negotiation import preferred
from .numerals import check_plain_number, check_plain_numbers, plain_numeric_parameters
from .security_headers import SecurityHeaders
from .tokens import Tokens
from .transport import NETCDF, NPY, encode_npy

NPZ = "application/x-npz"
#: turbdb's own answer headers a page's script may read (CORS hides all others but a few).
EXPOSED_HEADERS = ["X-Turbdb-Time", "X-Turbdb-Time-Index", "X-Turbdb-Shape", VERSIONS_HEADER, "Retry-After",
                   "Content-Disposition", json_answers.NON_FINITE_HEADER]
DEFAULT_MAX_POINTS_IN_FLIGHT = 4_000_000
DEFAULT_CUTOUT_CHUNK_BYTES = 16 * 2**20

_POINTS_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "object", "required": ["points"], "properties": {
        "points": {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 3,
                                               "maxItems": 3}}}},
        "example": {"points": [[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]]}},
    NPY: {"schema": {"type": "string", "format": "binary"}, "description": "an (N, 3) float array written by np.save"},
}}}
_ARRAY_ANSWER = {200: {"description": "JSON {shape, dtype, values}, or .npy with Accept: application/x-npy",
                       "content": {"application/json": {}, NPY: {}}}}


def _describe_bearer_tokens(app: FastAPI) -> None:
    """The OpenAPI description says how a token is sent (a Bearer token, or none), so that
    the Authorize button of ``/docs`` sends it: without it every form got 401 on a server
    that needs a token."""
    make = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = make()
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "description": "a turbdb token (`turbdb token NAME`)"}}
            schema["security"] = [{"bearer": []}, {}]  # a token, or none: anonymous use
            _describe_errors(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


_ERROR_SCHEMA = {"type": "object", "required": ["description", "error", "status"], "properties": {
    "description": {"type": "string", "description": "what went wrong and what to do"},
    "error": {"type": "string", "description": "the turbdb exception's name, e.g. InvalidRequestError"},
    "status": {"type": "integer"}}}
#: Answers whose body is not JSON (FastAPI lists application/json for every 200).
_NOT_JSON = {("/v1/datasets/{name}/cutout", "post"): None, ("/metrics", "get"): {CONTENT_TYPE_LATEST: {}}}


def _describe_errors(schema: dict[str, Any]) -> None:
    """Every error is ``{description, error, status}`` with a 4xx or 5xx status (400 for bad
    parameters: the validation handler answers 400, never FastAPI's 422); the OpenAPI
    description says so instead of listing FastAPI's 422 ``HTTPValidationError``."""
    schema["components"].setdefault("schemas", {})["Error"] = _ERROR_SCHEMA
    for name in ("HTTPValidationError", "ValidationError"):
        schema["components"]["schemas"].pop(name, None)
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            responses["4XX"] = {"description": "a bad request (400), no or a wrong token (401, 403), an unknown "
                                "name (404), past a limit (413, 429): the description says what to do", **error}
            responses["5XX"] = {"description": "busy (503, with Retry-After), damaged data or a server fault "
                                "(500)", **error}
            if (path, method) in _NOT_JSON and "200" in responses:
                content = responses["200"].setdefault("content", {})
                content.pop("application/json", None)
                content.update(_NOT_JSON[path, method] or {})


def create_app(db_path: str | os.PathLike[str], tokens: Tokens | str | os.PathLike[str] | None = None, *,
               workers: int | None = None, max_points_in_flight: int = DEFAULT_MAX_POINTS_IN_FLIGHT,
               cutout_chunk_bytes: int = DEFAULT_CUTOUT_CHUNK_BYTES, queue_timeout: float = 60.0,
               engine: dict[str, Any] | None = None, cluster: Any = None,
               allow_origins: Sequence[str] = ()) -> FastAPI:
    """The app serving the database at ``db_path``. ``tokens``: a :class:`Tokens`, the path
    of a tokens file, or ``None`` (anonymous use only, with JHTDB's small limits).
    ``workers``: engine calls run at once (threads; default: the number of cores).
    ``max_points_in_flight``: points admitted at once; further requests wait their turn,
    up to ``queue_timeout`` seconds, then get 503. ``cutout_chunk_bytes``: size of the
    slabs a cutout is streamed in. ``engine``: options of the node engine that every point
    query then goes through (``scheduler``, ``cache_bytes``, ``cache_policy``, ``io``; see
    :func:`turbdb.open`); without them each query runs alone.
    ``cluster``: a Dask scheduler address (or client) whose workers serve the database
    (``turbdb cluster up``). ``allow_origins``: the web pages (``https://host[:port]``, or
    ``*`` for any) whose scripts may call the API from a browser (CORS); none by default."""
    origins = _origins(allow_origins)
    if not isinstance(tokens, Tokens):
        tokens = Tokens.load(tokens)
    metrics = Metrics()
    backend = Backend(db_path, tokens, metrics, workers=workers or os.cpu_count() or 2,
                      max_points_in_flight=max_points_in_flight, cutout_chunk_bytes=cutout_chunk_bytes,
                      queue_timeout=queue_timeout, engine=engine, cluster=cluster)
    if backend.database.engine is not None:
        metrics.registry.register(EngineCollector(backend.database.engine_stats))
    app = FastAPIOffline(
        title="turbdb",
        version=__version__,
        summary="A turbulence database: point queries, cutouts and particle tracking where the data lives.",
        description=(
            "Send a token as `Authorization: Bearer <token>` (JHTDB endpoints: also `authToken=` or `token=`). "
            "Without one, "
            "requests get small anonymous limits. Points travel as JSON or `.npy` (`Content-Type: "
            "application/x-npy`); answers are JSON, or `.npy` with `Accept: application/x-npy`. Every error is "
            "a 4xx/5xx with `{\"description\": …, \"error\": <turbdb exception class>}`."),
        # A trailing slash answered 307 with an empty body, which `curl -f -X POST` saved as
        # the answer; the 404 names the path without it instead (errors.py).
        redirect_slashes=False,
        # A parameter the route does not take is refused (a typo answered with the defaults);
        # time=1_0 was read as 10.
        dependencies=[Depends(known_query_parameters), Depends(plain_numeric_parameters)],
    )
    app.state.backend = backend
    _describe_bearer_tokens(app)
    errors.install(app)
    result_limit.install(app)  # its 413 in HTTP's words; after errors.install, whose answer it gives
    app.add_middleware(_Instrument, metrics=metrics)
    app.add_middleware(HeadAsGet)
    if origins:  # added last, so outermost: a preflight OPTIONS is answered before routing
        app.add_middleware(_JsonCors, allow_origins=origins, allow_methods=["GET", "HEAD", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Accept"], expose_headers=EXPOSED_HEADERS,
                           max_age=600)
    app.add_middleware(SecurityHeaders)  # outermost: on every answer, a refused preflight's too
    app.include_router(home.router(backend))
    app.include_router(limits_api.router(backend))
    app.include_router(jhtdb.router(backend))
    app.include_router(jhtdb_cutout.router(backend))
    app.include_router(jhtdb_metadata.router(backend))
    app.include_router(cluster_routes.router(backend))
    registry = jobs.JobRegistry()
    app.state.jobs = registry
    app.include_router(jobs.router(backend, registry))

    @app.get("/healthz", tags=["operations"], summary="liveness")
    async def healthz() -> Any:
        health = {"status": "ok", "version": __version__, "in_flight_points": backend.limiter.used}
        # On a cluster whose scheduler is gone nothing is served: a 503 that probes see (docs/cluster.md).
        problem = getattr(backend.database, "scheduler_problem", lambda: None)()
        if problem is not None:
            return JSONResponse({**health, "status": "cluster unreachable",
                                 "cluster": errors.without_paths(problem, backend.path)}, 503)
        return health

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    async def metrics_text() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/engine", tags=["operations"], summary="what the node engine has done and holds")
    async def engine_state() -> dict[str, Any]:
        if backend.database.engine is None:
            return {"enabled": False}
        return {"enabled": True, **backend.database.engine_stats()}

    @app.get("/v1/datasets", tags=["datasets"], summary="metadata of every dataset this token may read")
    async def list_datasets(request: Request) -> dict[str, Any]:
        limits = backend.authorize(request)
        # In a worker thread: it reads every dataset's metadata once (the first time), and
        # /healthz and small queries must keep answering meanwhile.
        return {"datasets": await anyio.to_thread.run_sync(_listed_datasets, backend, limits)}

    @app.get("/v1/datasets/{name}", tags=["datasets"], summary="metadata of one dataset, with the steps written")
    async def get_dataset(name: str, request: Request, steps: bool = Query(
            True, description="list the steps written of each field (steps_present): those the metadata records "
                              "whose directory is there (a field written before turbdb recorded them: every shard "
                              "file is looked at, about 5 µs each); false answers the metadata alone")) -> dict[str, Any]:
        limits = backend.authorize(request)
        ds = backend.dataset(name, limits)
        limits.check_dataset(name)
        if not steps:
            return ds.metadata.to_served_attrs()
        info = await backend.run(lambda: ds.info)
        return {**info.to_served_attrs(), "steps_present": {f: list(fi.steps_present) for f, fi in info.fields.items()}}

    @app.post("/v1/datasets/{name}/query", tags=["queries"], summary="evaluate a field, its gradient, Hessian or "
              "Laplacian at points", openapi_extra=_POINTS_BODY, responses=_ARRAY_ANSWER)
    async def query(
        name: str,
        request: Request,
        field: str = Query(..., description="e.g. velocity, pressure"),
        time: str = Query(..., description="physical time; or several, comma-separated (0.1,0.2,0.3): a time "
                                           "series, answered (times, N, …) in one request, its points × times "
                                           "counted against the token's limit"),
        method: str = Query("lag6", description="none, lag4, lag6, lag8, fd4noint, fd6noint, fd8noint, fd4lag4, "
                                                 "m1q4, m2q8"),
        operator: str = Query("field", description="field, gradient, hessian, laplacian"),
        temporal: str = Query("none", description="none (nearest stored time) or pchip"),
        dtype: str = Query("float32", description="dtype of the answer: float32 (f4) or float64 (f8), any case"),
        strategy: str = Query("streaming", description="streaming, or the sorted/direct baselines"),
        job: int | None = Query(None, description="the job (POST /v1/jobs) this query is the next query of (one "
                                                   "time)"),
    ) -> Response:
        times = query_times(time)  # before anything else, as when FastAPI read one float
        dtype = answer_dtype(dtype)
        limits = backend.authorize(request)
        ds = backend.dataset(name, limits)
        limits.check_dataset(name)
        if len(times) > 1:
            if job is not None:  # a job plans one query per time, each gated at its turn in the engine
                raise InvalidRequestError(f"a query with job={job} is one query of the job, at one time; send one "
                                          f"request per time with job=, or the {len(times)} times without it")
            limits.check_points(len(times), "point-times (points × times)")
        job, owner = jobs.job_parameter(request), jobs.owner_of(request, limits, backend)  # job=5.0 was taken for 5
        # The plan's next query only: the engine gates a job's queries by their place in its plan.
        asked = None if job is None else jobs.planned_read(ds, field, times[0], temporal)
        engine_job = registry.engine_job(job, owner, asked)
        encode = _encoder(request)
        known_field(name, ds.metadata.fields, field)  # before the admission: a refused request must not wait its turn
        async with backend.admitted(request, limits) as admission:
            points = await backend.points(request, limits)
            evaluations = len(points) * len(times)
            if len(times) > 1:
                limits.check_points(evaluations, "point-times (points × times)")
            await admission.hold(evaluations)
            calls = None
            if backend.waits is not None:
                calls = [point_call(ds, field, points, time=t, method=method, operator=operator, temporal=temporal,
                                    dtype=dtype, strategy=strategy, job=engine_job) for t in times]
                if calls[0].through_engine(ds):
                    # Awaited on the event loop: no thread held while the engine batches it, and a
                    # client that goes away cancels its pending work.
                    async with watch(request) as gone:
                        values, versions = await _through_engine(backend, ds, field, calls, gone)
                        response = (encode(values) if evaluations <= ENCODE_INLINE_POINTS
                                    else await anyio.to_thread.run_sync(encode, values))
                    response.headers[VERSIONS_HEADER] = versions
                    registry.answered(job, owner, asked)
                    backend.metrics.points.labels(endpoint_of(request)).inc(evaluations)
                    return response
            # Here with a node engine only for the sorted/direct baselines, which look at the
            # client's disconnection before they start. Without one, a streaming query is
            # stopped between its cells when the client goes away.
            gone = backend.disconnection(request)
            stop = _core.StopFlag()

            def answer() -> Response:  # in the worker thread, encoding included: a large JSON takes a while
                answers, versions = [], []
                for k, t in enumerate(times):  # one time after another, as Dataset.query(time=[…]) goes
                    checked = calls[k] if calls else point_call(
                        ds, field, points, time=t, method=method, operator=operator, temporal=temporal, dtype=dtype,
                        strategy=strategy, job=engine_job)
                    answers.append(evaluate_call(ds, checked, cancel=gone, stop=stop))
                    versions.append(ds.last_read_versions.tag())
                    backend.record_reads(ds, field)
                response = encode(answers[0] if len(times) == 1 else np.stack(answers))
                response.headers[VERSIONS_HEADER] = ";".join(versions)
                return response

            # Answered on the event loop, at once; a series goes to a thread: each time is a query of its own.
            if evaluations <= INLINE_POINTS and len(times) == 1:
                response = await backend.run(answer, points=evaluations)
            else:
                async with watch(request) as left:
                    left.add_done_callback(lambda _: stop.set())
                    response = await backend.run(answer, long=evaluations > SMALL_REQUEST_POINTS)
        registry.answered(job, owner, asked)
        backend.metrics.points.labels(endpoint_of(request)).inc(evaluations)
        return response

    @app.post("/v1/datasets/{name}/cutout", tags=["queries"], summary="the stored values on a box of nodes, "
              "streamed as .npy or NetCDF",
              responses={200: {"description": "(nz, ny, nx, ncomp) float32", "content": {NPY: {}, NETCDF: {}}}})
    async def cutout(
        name: str,
        request: Request,
        field: str = Query(..., description="e.g. velocity"),
        time: str = Query(..., description="one physical time (a cutout takes one a request); the nearest stored "
                                           "step is read"),
        x: str | None = Query(None, description="node range start,stop (half-open, wraps on periodic axes); "
                                                "default the whole axis"),
        y: str | None = Query(None, description="as x"),
        z: str | None = Query(None, description="as x"),
        stride: str = Query("1", description="every stride-th node: one stride, or three (x,y,z) such as 1,2,2"),
        filter_width: int = Query(1, description="JHTDB's box filter: average each node's box of filter_width³ "
                                                 "nodes first (1: none)"),
        format: str | None = Query(  # noqa: A002
            None, description="npy, or netcdf (nc), any case; default: from Accept, else npy"),
    ) -> Response:
        time = cutout_time(time)
        fmt = cutout_format(format)
        limits = backend.authorize(request)
        ds = backend.dataset(name, limits)
        limits.check_dataset(name)
        fmt = fmt or ("netcdf" if preferred(request, [NPY, NETCDF]) == NETCDF else "npy")
        ranges = {axis: parse_range(axis, value) for axis, value in (("x", x), ("y", y), ("z", z))}
        check_plain_numbers("stride", stride)
        strides, width = parse_strides(stride), as_filter_width(filter_width)
        plan = await backend.run(lambda: cutouts.plan(ds, field, time=time, strides=strides, filter_width=width,
                                                      chunk_bytes=backend.cutout_chunk_bytes, **ranges))
        limits.check_points(plan.nodes_read, "nodes" if width == 1 else "nodes read by the box filter")
        backend.metrics.points.labels(endpoint_of(request)).inc(plan.nodes)
        return await cutouts.respond(backend, plan, fmt)

    @app.post("/v1/datasets/{name}/track", tags=["queries"], summary="advect particles through the stored "
              "velocity", openapi_extra=_POINTS_BODY,
              responses={200: {"description": "positions (n_steps+1, N, 3) float64 as .npy, or with "
                                              "return_velocity an .npz of positions and velocities; JSON otherwise",
                               "content": {"application/json": {}, NPY: {}, NPZ: {}}}})
    async def track(
        name: str,
        request: Request,
        start: float = Query(..., description="start time"),
        end: float = Query(..., description="end time"),
        dt: float = Query(..., description="time step"),
        method: str = Query("lag6", description="spatial interpolation of the velocity"),
        field: str = Query("velocity", description="the velocity field to advect with"),
        integrator: str = Query("rk2", description="time integrator: rk2 (Heun's predictor–corrector, second "
                                "order) or euler (first order)"),
        return_velocity: bool = Query(False, description="also return the velocity at each position"),
    ) -> Response:
        limits = backend.authorize(request)
        ds = backend.dataset(name, limits)
        limits.check_dataset(name)
        steps = track_steps(ds, start, end, dt)  # counted, not listed: a tiny dt must not allocate
        check_track_size(0, steps)  # the steps before the admission: a refused track must not wait its turn
        binary = preferred(request, ["application/json", NPY, NPZ]) != "application/json"
        encode = _encoder(request)
        gone = backend.track_disconnection(request)  # a client gone stops its track

        def evaluate() -> Response:
            result = ds.track(points, start=start, end=end, dt=dt, method=method, field=field,
                              integrator=integrator, return_velocity=return_velocity, cancel=gone)
            if not return_velocity:
                return encode(result)
            positions, velocities = result
            if binary:
                buffer = io.BytesIO()
                np.savez(buffer, positions=positions, velocities=velocities)
                return Response(buffer.getvalue(), media_type=NPZ)
            pieces = itertools.chain([b'{"positions": '], json_answers.array_chunks(positions), [b', "velocities": '],
                                     json_answers.array_chunks(velocities), [b"}"])
            return json_answers.answer(pieces, positions.size + velocities.size)

        async with backend.admitted(request, limits) as admission:
            points = await backend.points(request, limits)
            check_track_size(len(points), steps)
            await admission.hold(len(points) * (steps + 1))
            response = await backend.run_track(evaluate)
        backend.metrics.points.labels(endpoint_of(request)).inc(
            len(points) * track_evaluations(steps, integrator, return_velocity))
        return response

    return app


def query_times(text: str) -> list[float]:
    """The query endpoint's ``time``: one time, or several comma-separated (a time series,
    answered in one request: one request per time was 100 requests for a 100-time series,
    43 s under the anonymous rate of 60 a minute). Each checked as FastAPI's float was
    (plain ASCII digits; not finite is refused by the query, with its name)."""
    times = []
    for part in text.split(","):
        check_plain_number("time", part)
        try:
            times.append(float(part))
        except ValueError:
            raise InvalidRequestError(f"invalid parameters: time: {text[:80]!r} is not a number, nor numbers "
                                      "separated by commas (a time series, such as 0.1,0.2,0.3)") from None
    return times


def cutout_time(text: str) -> float:
    """The cutout endpoint's ``time``: one, since a cutout answers one box (pydantic's "unable
    to parse string as a number" was all ``time=0,0.01`` got; Dataset.cutout and ``turbdb
    cutout`` take several, and turbdb.connect sends one request per time)."""
    times = query_times(text)
    if len(times) > 1:
        raise InvalidRequestError(f"a cutout takes one time per request, not {len(times)} ({text[:80]}): send one "
                                  "request per time (turbdb.connect's cutout and turbdb cutout URL do so for a list "
                                  "of times)")
    return times[0]


async def _through_engine(backend: Backend, ds: Any, field: str, calls: list[Any],
                          gone: Any) -> tuple[np.ndarray, str]:
    """The answer of the point queries ``calls`` (one per time) from the node engine: one
    alone, or several handed over at once, so that the engine batches them, stacked
    ``(times, N, …)``; one that fails cancels the others' pending work. A dataset copy per
    query keeps its own counters for :meth:`Backend.record_reads`. With the answer, the
    versions of the steps read (:data:`VERSIONS_HEADER`)."""
    if len(calls) == 1:
        values = await backend.waits.query(ds, calls[0], gone)
        backend.record_reads(ds, field)
        return values, ds.last_read_versions.tag()
    copies = [copy.copy(ds) for _ in calls]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(backend.waits.query(d, call, gone)) for d, call in zip(copies, calls)]
    except ExceptionGroup as failed:  # the first failure answers, as when they ran one by one
        raise failed.exceptions[0] from None
    for d in copies:
        backend.record_reads(d, field)
    return np.stack([task.result() for task in tasks]), ";".join(d.last_read_versions.tag() for d in copies)


def _origins(origins: Sequence[str]) -> list[str]:
    """The CORS origins, checked: a browser compares the page's origin, scheme://host[:port]
    with no path or slash, to these exactly, so anything else would match nothing."""
    if isinstance(origins, str):
        origins = [origins]
    checked = []
    for origin in origins:
        if origin != "*" and not re.fullmatch(r"https?://[^/\s?#]+", origin):
            raise InvalidRequestError(f"{origin!r} is not a web origin: give scheme://host[:port], such as "
                                      "https://example.org or http://localhost:8080, without a path or trailing slash "
                                      "(or * for any page)")
        # As a browser sends it: lower case, no default port (https://Lab.org:443 matched nothing).
        origin = origin.lower()
        origin = re.sub(r"^(http://[^/]+):80$|^(https://[^/]+):443$", lambda m: m.group(1) or m.group(2), origin)
        checked.append(origin)
    return checked


def _listed_datasets(backend: Backend, limits: Any) -> list[dict[str, Any]]:
    """The metadata of every dataset ``limits`` may read, by name; with them, saying what
    is wrong, those damaged or unreadable, and the directories holding a dataset under a
    name that is no dataset name (not served: see ``misnamed_error``)."""
    listing = backend.database.listing()
    entries = {n: _metadata_json(backend, n) for n in listing.names if limits.allows(n)}
    for name in listing.misnamed:
        if limits.allows(name):
            entries[name] = _error_json(backend, name, misnamed_error(name))
    return [entries[n] for n in sorted(entries)]


def _metadata_json(backend: Backend, name: str) -> dict[str, Any]:
    """A dataset's stored metadata; a damaged one is listed with what is wrong with it."""
    try:
        return backend.dataset(name).metadata.to_served_attrs()
    except TurbdbError as e:
        return _error_json(backend, name, e)


def _error_json(backend: Backend, name: str, error: Exception) -> dict[str, Any]:
    # Without the server's paths, as every error answer (a damaged zarr.json named its own);
    # a name that is not UTF-8 (a directory renamed by hand) shown with replacement characters.
    shown = name.encode(errors="surrogateescape").decode(errors="replace")
    return {"name": shown, "error": type(error).__name__,
            "description": errors.without_paths(str(error), backend.path)}


def _encoder(request: Request) -> Callable[[np.ndarray], Response]:
    """How to answer with an array: ``.npy`` if the client accepts it, else JSON."""
    if preferred(request, ["application/json", NPY]) == NPY:
        return lambda values: Response(encode_npy(values), media_type=NPY)
    return json_answers.array_answer


class _JsonCors(CORSMiddleware):
    """CORS, whose refused preflight has the service's JSON error shape (starlette's is
    plain text) and says what was refused."""

    def preflight_response(self, request_headers: Any) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        refused = response.body.decode(errors="replace")
        answer = errors.error_response(400, f"{refused}: this server's --allow-origin does not let this page make "
                                            "this request from a browser", "InvalidRequestError")
        for name, value in response.headers.items():
            if name not in ("content-type", "content-length"):
                answer.headers[name] = value
        return answer


class _Instrument:
    """Counts every request by endpoint (the route's path template, so unknown paths do
    not grow the label set) and status, with its latency and the bytes sent (none for a
    HEAD, whose body :class:`HeadAsGet` drops), and writes its access-log line."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, sent, answering = 500, 0, False
        head = bool(scope.get(HEAD_REQUEST))

        async def counting_send(message: Message) -> None:
            nonlocal status, sent, answering
            if message["type"] == "http.response.start":
                status, answering = message["status"], True
            elif message["type"] == "http.response.body" and not head:
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except asyncio.CancelledError:
            # uvicorn cancels what still runs past its graceful time (or everything, on a
            # second Ctrl-C): a 503 and one line, not a 500 and a traceback. Ended here, the
            # task has nothing left to do.
            logs.log.warning("%s: cancelled, still running when the server stopped", logs.request_line(scope))
            if not answering:
                with contextlib.suppress(Exception):
                    await errors.shutdown_response()(scope, receive, counting_send)
            status = 503
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", "other")
            seconds = time.perf_counter() - started
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(seconds)
            self.metrics.bytes_sent.labels(endpoint).inc(sent)
            logs.access(scope, status, sent, seconds)
