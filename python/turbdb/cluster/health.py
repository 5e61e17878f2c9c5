"""The health of a cluster, as ``GET /v1/cluster`` and ``turbdb cluster status`` report it:
each worker slot and whether a worker serves it, and — once workers are lost — the
partitions left with fewer copies than the catalogue asks for (``degraded``: one copy
left; ``unavailable``: none), named per dataset; node-local copies older than the
database (``stale``: those datasets are refused) and copies a worker found damaged
(``damaged``: served from their mirrors).

The ``state`` is the worst that applies: ``unavailable`` (partitions without a copy),
``stale``, ``degraded`` (partitions with fewer copies than asked, or damaged copies),
else ``healthy``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..database import Database
from .catalogue import Catalogue

#: Partitions named per dataset in a report, at most (the count is always given).
EXAMPLES = 20


def cluster_status(database: Database, catalogue: Catalogue, live: dict[str, str], *,
                   scheduler: str | None = None, dashboard: str | None = None,
                   silent: dict[str, float] | None = None, stale: list[str] | None = None,
                   damaged: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """The report of a cluster whose living workers are ``live`` (``{slot: address}``);
    ``silent``: running workers not heard from for so many seconds, counted as down;
    ``stale``: how the database changed since its node-local copies were placed;
    ``damaged``: per slot, the datasets whose copy there may not serve, and why."""
    silent, stale, damaged = silent or {}, stale or [], damaged or {}
    copies = [sum(s in live for s in h) for h in catalogue.holders]
    short = [v for v, c in enumerate(copies) if 0 < c < catalogue.replicas]
    lost = [v for v, c in enumerate(copies) if c == 0]
    workers = []
    for slot, root in catalogue.slots.items():
        held = catalogue.held_by(slot)
        workers.append({"slot": slot, "alive": slot in live, "address": live.get(slot), "root": root,
                        "silent_seconds": round(silent[slot], 1) if slot in silent else None,
                        "virtual_partitions": len(held),
                        "primary": sum(1 for v in held if catalogue.holders[v][0] == slot),
                        "damaged": damaged.get(slot, {})})
    state = ("unavailable" if lost else "stale" if stale else "degraded" if short or any(damaged.values())
             else "healthy")
    return {
        "state": state,
        "scheduler": scheduler,
        "dashboard": dashboard,
        "catalogue": catalogue.to_json(),
        "workers": workers,
        "spare_workers": sorted(set(live) - set(catalogue.slots)),
        "degraded": _named(database, catalogue, short),
        "unavailable": _named(database, catalogue, lost),
        "stale": stale,
        "damaged": [{"slot": slot, "dataset": name, "why": why}
                    for slot, problems in sorted(damaged.items()) for name, why in problems.items()],
    }


def _named(database: Database, catalogue: Catalogue, virtual: list[int]) -> dict[str, Any]:
    """The partitions of virtual partitions ``virtual``: per dataset their number and the
    first few as ``[t, sx, sy, sz]``."""
    out: dict[str, Any] = {"virtual_partitions": virtual, "datasets": {}}
    if not virtual:
        return out
    chosen = np.zeros(catalogue.virtual, dtype=bool)
    chosen[virtual] = True
    for name in database.datasets:
        info = database[name].metadata
        pmap = catalogue.partition_map(info)
        shards = np.arange(pmap.count)
        count, examples = 0, []
        for t in range(info.nt):
            hit = shards[chosen[pmap.virtual_of(t, shards)]]
            count += len(hit)
            for s in hit[:max(0, EXAMPLES - len(examples))]:
                examples.append([t, *pmap.position(int(s))])
        if count:
            out["datasets"][name] = {"partitions": count, "examples": examples}
    return out
