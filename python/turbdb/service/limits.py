"""``GET /v1/limits``: what the caller's token may do, so that a client splits its work into
requests the server accepts and paces them under the rate limit (``turbdb.connect`` reads
it once per connection). Asking is free: it is not counted against the rate, and needs no
token: a caller without one where anonymous use is off learns that it may do nothing.
Besides the token's limits it states the server's own: the bytes one answer may take
(``max_result_bytes``, :mod:`.result_limit`), the track's rows and steps."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from . import result_limit
from .backend import MAX_TRACK_ROWS, MAX_TRACK_STEPS, Backend
from .tokens import JHTDB_TESTING_TOKEN, TOKEN_NEEDED, Limits


def describe(limits: Limits, backend: Backend) -> dict[str, Any]:
    """The limits document: what counts against ``max_points``, the rate and its burst."""
    anonymous = limits is backend.tokens.anonymous
    return {
        "token": None if anonymous else limits.name,
        "anonymous": anonymous,
        "allowed": True,
        "max_points": limits.max_points,
        "counts": "query points (× times for a time series), cutout nodes (× times), tracked particles",
        # The v1 query endpoint takes several comma-separated times (time=0.1,0.2): a client
        # sends a series in one request where the server says so, else one per time.
        "time_series_queries": True,
        "requests_per_minute": limits.requests_per_minute,
        # The token bucket holds a minute's worth: that many requests may come at once.
        "burst": max(1.0, limits.requests_per_minute),
        "rate_per": "address" if anonymous else "token",
        "max_track_rows": MAX_TRACK_ROWS,
        "max_track_steps": MAX_TRACK_STEPS,
        # The server's TURBDB_MAX_RESULT_BYTES: the most bytes one answer may take, as
        # Dataset.query/cutout/track count them (a query also its float64 sums).
        result_limit.LIMITS_FIELD: result_limit.current(),
        "datasets": list(limits.datasets),
    }


def closed() -> dict[str, Any]:
    """The limits document of a caller without a token where anonymous use is off: nothing."""
    return {"token": None, "anonymous": True, "allowed": False, "description": TOKEN_NEEDED, "max_points": 0,
            "requests_per_minute": 0, "burst": 0, "rate_per": "address", "max_track_rows": 0, "max_track_steps": 0,
            result_limit.LIMITS_FIELD: 0, "datasets": []}


def router(backend: Backend) -> APIRouter:
    api = APIRouter(tags=["datasets"])

    @api.get("/v1/limits", summary="the limits of the caller's token (points per request, requests per minute)")
    async def limits(request: Request) -> dict[str, Any]:
        token = backend.bearer(request)
        if (not token or token == JHTDB_TESTING_TOKEN) and not backend.tokens.anonymous_allowed:
            return closed()
        return describe(backend.tokens.identify(token), backend)

    return api
