"""``GET /turbulence-svc/metadata``: the document JHTDB's givernylocal downloads (from GitHub,
normally) before any request, describing this server's datasets (:mod:`turbdb.jhtdb.metadata`).
Its ``max_data_points`` is the largest point limit of any token here, so that the client
never refuses what the server would accept; the server still enforces each token's own.

It lists the datasets the caller's token (``authToken``, ``token`` or the Bearer header) may read.
givernylocal downloads it without a token, before it knows one, and then refuses any
dataset the document does not list: so a caller without a token gets every dataset's
description (names, grids, times; never data), whatever anonymous use may read."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Request

from ..exceptions import TurbdbError
from ..jhtdb.metadata import document
from .backend import Backend
from .jhtdb_tokens import jhtdb_token


def router(backend: Backend) -> APIRouter:
    api = APIRouter(tags=["JHTDB-compatible"])

    @api.get("/turbulence-svc/metadata", summary="givernylocal's metadata document (jhtdb_config.json) of the "
             "datasets here")
    async def metadata(request: Request, token: str | None = Depends(jhtdb_token)) -> dict[str, Any]:
        limits = backend.known_token(token or backend.bearer(request))
        # Opening every dataset reads its metadata: off the event loop, which a database of
        # hundreds of datasets would hold up for seconds.
        infos = await anyio.to_thread.run_sync(_readable_metadata, backend, limits)
        return document(infos, max_data_points=backend.tokens.largest_max_points(), source="turbdb server")

    return api


def _readable_metadata(backend: Backend, limits: Any) -> list[Any]:
    """The metadata of every dataset ``limits`` may read (all of them where ``None``); a
    damaged dataset is left out, not the whole document."""
    infos = []
    for name in (n for n in backend.names() if limits is None or limits.allows(n)):
        try:
            infos.append(backend.dataset(name).metadata)
        except TurbdbError:
            continue
    return infos
