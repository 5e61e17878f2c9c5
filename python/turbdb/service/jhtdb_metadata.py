"""``GET /turbulence-svc/metadata``: the document JHTDB's givernylocal downloads (from GitHub,
normally) before any request, describing this server's datasets (:mod:`turbdb.jhtdb.metadata`).
Its ``max_data_points`` is the largest point limit of any token here, so that the client
never refuses what the server would accept; the server still enforces each token's own."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..exceptions import TurbdbError
from ..jhtdb.metadata import document
from .backend import Backend


def router(backend: Backend) -> APIRouter:
    api = APIRouter(tags=["JHTDB-compatible"])

    @api.get("/turbulence-svc/metadata", summary="givernylocal's metadata document (jhtdb_config.json) of the "
             "datasets here")
    async def metadata() -> dict[str, Any]:
        infos = []
        for name in backend.names():
            try:
                infos.append(backend.dataset(name).metadata)
            except TurbdbError:  # a damaged dataset is left out, not the whole document
                continue
        return document(infos, max_data_points=backend.tokens.largest_max_points(), source="turbdb server")

    return api
