"""``GET /v1/cluster``: the health of the Dask cluster behind the service (``turbdb serve DB
--cluster ADDRESS``): every worker, and the partitions left with fewer copies than asked
for once workers are lost. A service without a cluster answers 404."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ..exceptions import UnknownNameError
from .backend import Backend, with_status


def router(backend: Backend) -> APIRouter:
    routes = APIRouter()

    @routes.get("/v1/cluster", tags=["operations"], summary="health of the cluster serving the database")
    async def cluster_health(request: Request) -> dict[str, Any]:
        backend.authorize(request)
        status = getattr(backend.database, "status", None)
        if status is None:
            raise with_status(UnknownNameError("this server runs its queries in-process, on no cluster "
                                               "(start it with turbdb serve DB --cluster ADDRESS)"), 404)
        return await backend.run(status)

    return routes
