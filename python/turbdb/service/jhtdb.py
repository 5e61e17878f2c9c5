"""The JHTDB-compatible endpoint, ``POST /turbulence-svc/values``: the REST call that
JHTDB's own Python client (givernylocal ``getData``) makes, so existing scripts work
against turbdb with only the address changed.

Request: query parameters ``authToken (or token), dataset, function=GetVariable, var, t,
sint, sop, tint, timepoint_end, delta_t`` (or the older function names, GetVelocity, …:
:mod:`.jhtdb_functions`) and one point per line of the body, ``x<TAB>y<TAB>z``.
Answer: a JSON array with one row per point per time (time-major) and JHTDB's columns
(:func:`columns`). Errors: 4xx with ``{"description": …}``. The names are mapped in
:data:`JHTDB_NAMES`; the evidence for each layout is in docs/methods.md §7."""

from __future__ import annotations

import asyncio
import copy
import math
import re

import anyio.to_thread
import numpy as np
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from ..exceptions import InvalidRequestError, LimitExceededError, UnknownNameError
from ..jhtdb.columns import columns  # noqa: F401 - JHTDB's column names, named here too
from ..jhtdb.metadata import PLACEHOLDER, check_position_arguments
from ..query import point_call
from ..track import step_count
from . import json_answers
from .backend import INLINE_JSON_BYTES, JSON_BYTES_PER_POINT, Backend, check_track_size, track_evaluations, track_steps
from .engine_waits import ENCODE_INLINE_POINTS, watch
from .metrics import endpoint_of
from .jhtdb_functions import resolve as resolve_function
from .jhtdb_tokens import jhtdb_token

# The one table from JHTDB's names to turbdb's. Keys are lower case; the service compares
# case-insensitively, so "Lag6", "LAG6" and "lag6" all work.
#   sint: giverny's REST names (none, lag4, …, fd4noint, m2q8), the SOAP/turblib enum
#         names (NoSInt, None_Fd4, Fd4Lag4, M1Q4, …) and pyJHTDB's numeric codes (4, 40, 208, …)
#   sop:  giverny's operators; older giverny and the SOAP names say "function" for field
#   tint: giverny's none/pchip, the enum names NoTInt/PCHIPInt and pyJHTDB's 0/1
JHTDB_NAMES: dict[str, dict[str, str]] = {
    "sint": {
        "none": "none", "nosint": "none",
        "lag4": "lag4", "lag6": "lag6", "lag8": "lag8",
        "fd4noint": "fd4noint", "fd6noint": "fd6noint", "fd8noint": "fd8noint",
        "none_fd4": "fd4noint", "none_fd6": "fd6noint", "none_fd8": "fd8noint",
        "fd4lag4": "fd4lag4",
        "m1q4": "m1q4", "m2q8": "m2q8",
        # pyJHTDB's names and numeric codes (dbinfo.interpolation_code)
        "nospatialinterpolation": "none", "lagrangian4thorder": "lag4", "lagrangian6thorder": "lag6",
        "lagrangian8thorder": "lag8",
        "0": "none", "4": "lag4", "6": "lag6", "8": "lag8", "40": "fd4noint", "60": "fd6noint", "80": "fd8noint",
        "44": "fd4lag4", "104": "m1q4", "208": "m2q8",
    },
    "sop": {"field": "field", "function": "field", "gradient": "gradient", "hessian": "hessian",
            "laplacian": "laplacian"},
    "tint": {"none": "none", "notint": "none", "pchip": "pchip", "pchipint": "pchip", "0": "none", "1": "pchip",
             # pyJHTDB's long names, as the spatial ones above
             "notemporalinterpolation": "none", "pchipinterpolation": "pchip"},
}
# JHTDB's spline family, MmQq (smoothness m 1…4, q 4…14 points), by name and pyJHTDB's code
# (100·m + q); turbdb implements M1Q4 and M2Q8 of it.
_SPLINES = re.compile(r"m[1-4]q(4|6|8|10|12|14)|[1-4](04|06|08|10|12|14)")
TESTING_TOKEN_LIMIT = 4096


def jhtdb_name(kind: str, value: str | int) -> str:
    table = JHTDB_NAMES[kind]
    # pyJHTDB scripts hold the codes as numbers (sinterp = 4, interpolation_code['Lag4']).
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = str(int(value))
    if not isinstance(value, str):
        raise InvalidRequestError(f"{kind} {value!r} is neither a name nor one of pyJHTDB's numeric codes")
    key = value.strip().lower()
    if key not in table:
        if kind == "sint" and _SPLINES.fullmatch(key):
            raise UnknownNameError(f"{value!r} is not a valid sint here: of JHTDB's spline methods (M1Q4 … M4Q14) "
                                   "turbdb implements M1Q4 and M2Q8: use sint=m1q4 or m2q8, or a Lagrange method "
                                   "(lag4, lag6, lag8)")
        names = sorted({name for name in table if not name.isdigit()})
        codes = " and pyJHTDB's numeric codes" if any(name.isdigit() for name in table) else ""
        raise UnknownNameError(f"{value!r} is not a valid {kind}; use one of {', '.join(names)}{codes}")
    return table[key]


#: Most times one series may have; more would not fit any token's point limit anyway.
MAX_SERIES_TIMES = 2**40


def series_length(t: float, end: float, delta_t: float) -> int:
    """How many times :func:`series_times` gives (at most), counted by arithmetic so that
    a request is checked against its limits before any array is built."""
    if math.isclose(end, PLACEHOLDER) and math.isclose(delta_t, PLACEHOLDER):
        return 1
    if not delta_t > 0:
        raise InvalidRequestError(f"delta_t must be positive for a time series, not {delta_t:g}")
    if not end > t:
        raise InvalidRequestError(f"timepoint_end ({end:g}) must come after t ({t:g}) for a time series")
    ratio = (end - t) / delta_t
    if not ratio < MAX_SERIES_TIMES:  # also an infinite ratio
        raise LimitExceededError(f"a series from t={t:g} to {end:g} in steps of {delta_t:g} has {ratio:.3g} times; "
                                 "use a larger delta_t or a shorter span")
    return math.ceil(ratio) + 1


def series_times(t: float, end: float, delta_t: float) -> np.ndarray:
    """The times of a request, as givernylocal computes them: ``t`` alone when
    ``timepoint_end`` and ``delta_t`` are the placeholder, else ``arange(t, end, delta_t)``
    with ``end`` appended when the last step lands on it (relative 1e-9)."""
    if math.isclose(end, PLACEHOLDER) and math.isclose(delta_t, PLACEHOLDER):
        return np.array([t])
    if not delta_t > 0:
        raise InvalidRequestError(f"delta_t must be positive for a time series, not {delta_t:g}")
    if not end > t:
        raise InvalidRequestError(f"timepoint_end ({end:g}) must come after t ({t:g}) for a time series")
    times = np.arange(t, end, delta_t)
    if math.isclose(times[-1] + delta_t, end, rel_tol=1e-9, abs_tol=0.0):
        times = np.append(times, end)
    return times


def parse_points(body: bytes) -> np.ndarray:
    """``x<TAB>y<TAB>z`` lines (any whitespace) as an ``(N, 3)`` float64 array."""
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidRequestError("the points must be plain text, one 'x<TAB>y<TAB>z' line per point") from None
    if "_" in text:  # float() read 1_0 as 10
        raise InvalidRequestError("the points must be numbers written with plain digits (no '_'), one "
                                  "'x<TAB>y<TAB>z' line per point")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InvalidRequestError("the body holds no points: send one 'x<TAB>y<TAB>z' line per point")
    for number, line in enumerate(lines, 1):
        if len(line.split()) != 3:
            raise InvalidRequestError(f"line {number} of the points has {len(line.split())} values, not 3: {line[:60]!r}")
    try:
        points = np.array(text.split(), dtype=np.float64).reshape(-1, 3)
    except ValueError as e:
        raise InvalidRequestError(f"the points must be numbers, one 'x<TAB>y<TAB>z' line per point ({e})") from None
    if not np.isfinite(points).all():
        bad = int(np.flatnonzero(~np.isfinite(points).all(axis=1))[0])
        raise InvalidRequestError(f"point {bad} (line {bad + 1}) is not finite: {lines[bad]!r}")
    return points


def router(backend: Backend) -> APIRouter:
    api = APIRouter(tags=["JHTDB-compatible"])

    @api.post(
        "/turbulence-svc/values",
        summary="JHTDB getData (GetVariable)",
        openapi_extra={"requestBody": {"required": True, "content": {"text/plain": {
            "schema": {"type": "string"}, "example": "0.1\t0.2\t0.3\n1.5\t2.5\t3.5\n"}}}},
        responses={200: {"description": "rows (point × time, time-major) of JHTDB's columns",
                         "content": {"application/json": {"example": [[0.1, 0.2, 0.3]]}}}},
    )
    async def values(
        request: Request,
        dataset: str = Query(..., description="dataset name on this server"),
        var: str | None = Query(None, description="field: velocity, pressure, …, or position (particle tracking); "
                                                   "needed with function=GetVariable"),
        t: float = Query(..., description="time (the start time for position)"),
        sint: str = Query("none", description="spatial method: none, lag4/6/8, fd4noint…, fd4lag4, m1q4, m2q8 "
                                               "(position: lag4/6/8)"),
        sop: str = Query("field", description="operator: field, gradient, hessian, laplacian (position: field)"),
        tint: str | None = Query(None, description="temporal method: none (the default) or pchip (position: pchip, "
                                                   "the default there)"),
        timepoint_end: float = Query(PLACEHOLDER, description="end of a time series (or of tracking for position)"),
        delta_t: float = Query(PLACEHOLDER, description="time step of a series (or of tracking)"),
        function: str = Query("GetVariable", description="GetVariable (with var), or a JHTDB function name: "
                                                         "GetVelocity, GetPressureGradient, GetVelocityHessian, "
                                                         "GetVelocityAndPressure, GetPosition, …"),
        token: str | None = Depends(jhtdb_token),
    ) -> Response:
        limits = backend.authorize(request, token)  # authToken= or token=, else the Bearer header
        ds = backend.dataset(dataset, limits)
        limits.check_dataset(dataset)
        fields, named_operator = resolve_function(function, var, sop)
        for name, value in (("t", t), ("timepoint_end", timepoint_end), ("delta_t", delta_t)):
            if not math.isfinite(value):
                raise InvalidRequestError(f"{name} must be a finite number, not {value}")
        tracking = fields == ["position"]
        method = jhtdb_name("sint", sint)
        temporal = jhtdb_name("tint", tint or ("pchip" if tracking else "none"))
        operator = named_operator or jhtdb_name("sop", sop)
        if tracking:
            if math.isclose(timepoint_end, PLACEHOLDER) or math.isclose(delta_t, PLACEHOLDER):
                raise InvalidRequestError("var=position needs timepoint_end (the end time) and delta_t (the time step)")
            check_position_arguments(method, operator, temporal, delta_t)
        if tracking:
            # counted, not listed: a tiny dt must not allocate
            steps = track_steps(ds, t, timepoint_end, delta_t, ("t", "timepoint_end", "delta_t"))
            check_track_size(0, steps)  # before the admission: a refused request must not wait its turn
            evaluations = steps + 1
        else:  # counted before the times are listed: a tiny delta_t must not allocate gigabytes
            evaluations = series_length(t, timepoint_end, delta_t)
            limits.check_points(evaluations, "point-times (points × times)")
            for field in fields:
                if field not in ds.metadata.fields:
                    raise UnknownNameError(f"{field!r} is not a variable of dataset {dataset!r}; it has "
                                           f"{', '.join(ds.metadata.fields)}, position")
        async with backend.admitted(request, limits, text=True) as admission:
            body = await backend.body(request, limits, JSON_BYTES_PER_POINT, "text")
            points = await anyio.to_thread.run_sync(parse_points, body) if len(body) > INLINE_JSON_BYTES \
                else parse_points(body)
            del body
            if tracking:
                limits.check_points(len(points))
                check_track_size(len(points), steps)
                await admission.hold(len(points) * evaluations)
                return await _position(backend, request, ds, points, t, timepoint_end, delta_t, method)
            limits.check_points(len(points) * evaluations, "point-times (points × times)")
            times = series_times(t, timepoint_end, delta_t)
            limits.check_points(len(points) * len(times), "point-times (points × times)")
            await admission.hold(len(points) * len(times))
            if backend.waits is not None:
                return await _through_engine(backend, request, ds, points, fields, times, method, operator, temporal)

            def evaluate() -> np.ndarray:
                rows = []
                for ti in times:
                    # Several fields (GetVelocityAndPressure) side by side, in the order named.
                    rows.append(np.hstack([ds.query(field, points, time=float(ti), method=method, operator=operator,
                                                    temporal=temporal).reshape(len(points), -1)
                                           for field in fields]))
                    for field in fields:
                        backend.record_reads(ds, field)
                return np.concatenate(rows)

            answer = await backend.run(evaluate, points=len(points) * len(times))
        backend.metrics.points.labels(endpoint_of(request)).inc(len(points) * len(times))
        return json_answers.list_answer(answer)

    return api


async def _through_engine(backend: Backend, request: Request, ds, points: np.ndarray, fields: list[str],
                          times: list[float], method: str, operator: str, temporal: str) -> Response:
    """getData through the node engine, awaited on the event loop: every (time, field) query
    of the request handed over at once, so that the engine batches them; a client that
    goes away, or one query that fails, cancels the others' pending work."""
    # (time, field) in the answer's order; a dataset copy a query keeps its own counters.
    asked = [(copy.copy(ds), field, point_call(ds, field, points, time=float(ti), method=method, operator=operator,
                                               temporal=temporal))
             for ti in times for field in fields]
    async with watch(request) as gone:  # admitted by the caller
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(backend.waits.query(d, call, gone)) for d, _, call in asked]
        except ExceptionGroup as failed:  # the first failure answers, as when they ran one by one
            raise failed.exceptions[0] from None
    for d, field, _ in asked:
        backend.record_reads(d, field)
    # Several fields (GetVelocityAndPressure) side by side, in the order named; time-major.
    columns = [t.result().reshape(len(points), -1) for t in tasks]
    rows = np.concatenate([np.hstack(columns[k:k + len(fields)]) for k in range(0, len(columns), len(fields))])
    backend.metrics.points.labels(endpoint_of(request)).inc(len(points) * len(times))
    if len(rows) <= ENCODE_INLINE_POINTS:
        return json_answers.list_answer(rows)
    return await anyio.to_thread.run_sync(json_answers.list_answer, rows)


async def _position(backend: Backend, request: Request, ds, points: np.ndarray, t: float, end: float,
                    dt: float, method: str) -> Response:
    """``var=position``: JHTDB's GetPosition, the final positions of particles advected
    from ``t`` to ``timepoint_end`` with steps ``delta_t`` (PCHIP in time, RK2); admitted,
    and its size checked, by the caller."""
    steps = step_count(t, end, dt)
    gone = backend.track_disconnection(request)

    def evaluate() -> np.ndarray:
        return np.asarray(ds.track(points, start=t, end=end, dt=dt, method=method, cancel=gone)[-1], dtype=np.float32)

    answer = await backend.run_track(evaluate)
    backend.metrics.points.labels(endpoint_of(request)).inc(len(points) * track_evaluations(steps, "rk2"))
    return json_answers.list_answer(answer)
