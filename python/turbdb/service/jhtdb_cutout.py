"""JHTDB's cutout endpoint, ``GET /turbulence-svc/cutout/api/local``: the request JHTDB's
Python client (givernylocal ``getCutout``) sends, answered in the layout it parses — an
``xarray.Dataset`` as JSON (``to_dict``): one variable ``<var>_<step:04d>`` per time step,
dims ``(zcoor, ycoor, xcoor, values)``, coordinates ``xcoor, ycoor, zcoor``.

Ranges are JHTDB's: ``xs…xe`` 1-based and inclusive (wrapping on periodic axes), ``ts…te``
the stored steps numbered 1…n, every ``stridet``-th; ``filter_width`` box-filters first
(:mod:`turbdb.cutout`). The nodes × times count against the token's point limit."""

from __future__ import annotations

import json
import math

import numpy as np
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from ..arguments import MAX_INDEX
from ..cutout import as_filter_width, node_count, nodes_read
from ..exceptions import InvalidRequestError
from ..jhtdb.cutout import attributes, check_request, giverny_cutout
from .admission import SMALL_REQUEST_POINTS
from .backend import Backend
from .jhtdb_tokens import jhtdb_token
from .json_answers import NON_FINITE_HEADER, non_finite_count, with_nulls
from .metrics import endpoint_of


def router(backend: Backend) -> APIRouter:
    api = APIRouter(tags=["JHTDB-compatible"])

    @api.get("/turbulence-svc/cutout/api/local", summary="JHTDB getCutout (givernylocal)",
             responses={200: {"description": "an xarray.Dataset as JSON (to_dict)", "content": {"application/json": {}}}})
    async def cutout(
        request: Request,
        dataset: str = Query(..., description="dataset name on this server"),
        function: str = Query(..., description="the variable: velocity, pressure, …"),
        xs: int = Query(..., description="first x node, 1-based"), xe: int = Query(..., description="last x node"),
        ys: int = Query(..., description="first y node, 1-based"), ye: int = Query(..., description="last y node"),
        zs: int = Query(..., description="first z node, 1-based"), ze: int = Query(..., description="last z node"),
        ts: int = Query(1, description="first stored step, 1-based"), te: int = Query(1, description="last stored step"),
        stridex: int = Query(1, ge=1), stridey: int = Query(1, ge=1), stridez: int = Query(1, ge=1),
        stridet: int = Query(1, ge=1),
        filter_width: int = Query(1, ge=1, description="box filter width in nodes (1: none)"),
        token: str | None = Depends(jhtdb_token),
    ) -> Response:
        limits = backend.authorize(request, token)  # token= or authToken=, else the Bearer header
        ds = backend.dataset(dataset, limits)
        limits.check_dataset(dataset)
        numbers = {"xs": xs, "xe": xe, "ys": ys, "ye": ye, "zs": zs, "ze": ze, "ts": ts, "te": te, "stridex": stridex,
                   "stridey": stridey, "stridez": stridez, "stridet": stridet}
        for key, value in numbers.items():  # beyond int64 np.array raised OverflowError: a 500
            if abs(value) > MAX_INDEX:
                raise InvalidRequestError(f"{key} = {value} is beyond any grid (at most ±2**62)")
        space, time_range, strides = check_request(
            np.array([[xs, xe], [ys, ye], [zs, ze], [ts, te]], dtype=np.int64),
            np.array([stridex, stridey, stridez, stridet], dtype=np.int64))
        width = as_filter_width(filter_width)
        # Counted, not listed: a span of 2**63 nodes is within the bounds but beyond len(range).
        nodes = math.prod(node_count(int(a) - 1, int(b), int(s)) for (a, b), s in zip(space, strides[:3]))
        steps = node_count(int(time_range[0]), int(time_range[1]) + 1, int(strides[3]))
        read = nodes_read(ds.metadata, tuple((int(a) - 1, int(b)) for a, b in space),
                          tuple(int(s) for s in strides[:3]), width)
        limits.check_points(read * steps, "nodes × times" if width == 1 else "nodes read by the box filter × times")

        def answer() -> bytes:
            result = giverny_cutout(ds, function, space, time_range, strides, width)
            result.attrs.update(attributes(dataset, space, time_range, strides, width))
            text = json.dumps(result.to_dict(data="list"), default=int)
            missing = sum(non_finite_count(np.asarray(v.values)) for v in result.data_vars.values())
            return (with_nulls(text) if missing else text).encode(), missing

        async with backend.limiter.admit(nodes * steps):
            body, missing = await backend.run(answer, long=read * steps > SMALL_REQUEST_POINTS)
        backend.metrics.points.labels(endpoint_of(request)).inc(nodes * steps)
        return Response(body, media_type="application/json",
                        headers={NON_FINITE_HEADER: str(missing)} if missing else None)

    return api
