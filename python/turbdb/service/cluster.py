"""``GET /v1/cluster``: the health of the Dask cluster behind the service (``turbdb serve DB
--cluster ADDRESS``): every worker, and the partitions left with fewer copies than asked
for once workers are lost. A service without a cluster answers 404.

The report is the caller's: only the datasets its token may read are named, and nothing
says where the cluster runs — no scheduler or worker address, no dashboard, no data root.
A Dask scheduler runs any code sent to it, so its address is for operators alone, who
read the whole report with ``turbdb cluster status`` where the cluster runs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request

from ..exceptions import UnknownNameError
from .backend import Backend, with_status
from .errors import without_paths

#: A line of the report about one dataset starts by naming it (``dataset 'iso': …``).
_NAMED = re.compile(r"dataset '([^']*)'")


def router(backend: Backend) -> APIRouter:
    routes = APIRouter()

    @routes.get("/v1/cluster", tags=["operations"], summary="health of the cluster serving the database")
    async def cluster_health(request: Request) -> dict[str, Any]:
        limits = backend.authorize(request)
        status = getattr(backend.database, "status", None)
        if status is None:
            raise with_status(UnknownNameError("this server runs its queries in-process, on no cluster "
                                               "(start it with turbdb serve DB --cluster ADDRESS)"), 404)
        report = await backend.run(status)
        return for_caller(report, limits.allows, lambda text: without_paths(text, backend.path))

    return routes


def for_caller(report: dict[str, Any], may_read: Callable[[str], bool], scrub: Callable[[str], str]) -> dict[str, Any]:
    """``report`` (:meth:`~turbdb.cluster.mediator.ClusterDatabase.status`) as a caller who
    may read the datasets ``may_read`` accepts sees it: the others left out, addresses and
    data roots removed, and ``scrub`` applied to every sentence (the paths it names)."""

    def shown(line: str) -> bool:
        named = _NAMED.match(line)
        return named is None or may_read(named.group(1))

    def partitions(part: dict[str, Any]) -> dict[str, Any]:
        return {"virtual_partitions": part["virtual_partitions"],
                "datasets": {n: d for n, d in part["datasets"].items() if may_read(n)}}

    out: dict[str, Any] = {
        "catalogue": {k: v for k, v in report["catalogue"].items() if k != "slots"},
        "workers": [{"slot": w["slot"], "alive": w["alive"], "silent_seconds": w.get("silent_seconds"),
                     "virtual_partitions": w["virtual_partitions"], "primary": w["primary"],
                     "damaged": {n: scrub(why) for n, why in w.get("damaged", {}).items() if may_read(n)}}
                    for w in report["workers"]],
        "spare_workers": report["spare_workers"],
        "degraded": partitions(report["degraded"]),
        "unavailable": partitions(report["unavailable"]),
        "stale": [scrub(line) for line in report.get("stale", []) if shown(line)],
        "damaged": [{**d, "why": scrub(d["why"])} for d in report.get("damaged", []) if may_read(d["dataset"])],
        "scheduler_reachable": report.get("scheduler_reachable", True),
    }
    # The state again from what is shown: a hidden dataset's stale or damaged copies are not the caller's.
    out["state"] = ("unavailable" if out["unavailable"]["virtual_partitions"] else "stale" if out["stale"]
                    else "degraded" if out["degraded"]["virtual_partitions"] or out["damaged"] else "healthy")
    if report.get("error"):
        out["error"] = scrub(report["error"])
    return out
