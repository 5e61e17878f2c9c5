"""Re-replication after workers are lost (``turbdb cluster repair``): every virtual
partition left with fewer copies than the catalogue asks for gets new holders among the
living workers — the least loaded first, so the lost worker's partitions spread over all
survivors — its shards are copied there from a surviving copy (node-local disks; on
shared storage nothing moves), and the catalogue is rewritten without the dead workers.
Living workers the catalogue does not know (new nodes) join as slots and take their
share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from distributed import Client

from ..database import Database
from . import plugin
from .catalogue import Catalogue
from .membership import Membership
from .transfer import copy_between, holdings, metadata_files, partition_files


def repair(client: Client, catalogue: Catalogue, *,
           progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Restores the number of copies of every virtual partition that still has one.
    Returns what moved: ``{"moved": [{virtual_partition, from, to, files}], "unrecoverable": [...]}``."""
    say = progress or (lambda _: None)
    live = Membership(client).live(refresh=True)
    for slot in sorted(set(live) - set(catalogue.slots)):  # new workers join as slots
        catalogue.slots[slot] = (catalogue.slots[next(iter(catalogue.slots))] if catalogue.layout == "shared"
                                 else str(Path(next(iter(catalogue.slots.values()))).parent / slot))
    plugin.install(client, catalogue, replace=True)
    load = {s: sum(1 for h in catalogue.holders if s in h) for s in live}
    wanted = min(catalogue.replicas, len(live))
    database = Database(catalogue.database)
    moved, unrecoverable = [], []
    for v, holders in enumerate(catalogue.holders):
        alive = [s for s in holders if s in live]
        if len(alive) >= wanted:
            if len(alive) < len(holders):
                catalogue.holders[v] = alive
            continue
        if not alive:
            unrecoverable.append(v)
            continue
        for target in sorted((s for s in live if s not in alive), key=lambda s: (load[s], s))[:wanted - len(alive)]:
            files = 0
            if catalogue.layout == "local":
                files = _copy_virtual(client, catalogue, database, v, live[alive[0]], live[target])
            moved.append({"virtual_partition": v, "from": alive[0], "to": target, "files": files})
            say(f"virtual partition {v}: copied from worker {alive[0]} to worker {target} ({files} files)")
            alive.append(target)
            load[target] += 1
        catalogue.holders[v] = alive
    for slot in [s for s in catalogue.slots if s not in live and not catalogue.held_by(s)]:
        del catalogue.slots[slot]
    catalogue.save()
    plugin.install(client, catalogue, replace=True)
    return {"moved": moved, "unrecoverable": unrecoverable}


def _copy_virtual(client: Client, catalogue: Catalogue, database: Database, virtual: int, source: str,
                  target: str) -> int:
    """Copies every dataset's partitions of one virtual partition between two workers."""
    count = 0
    for name in database.datasets:
        info = database[name].metadata
        pmap = catalogue.partition_map(info)
        partitions = holdings(catalogue, pmap, info.nt, set(catalogue.holders[virtual]), [virtual])
        files = metadata_files(database.path, name, info.fields) + partition_files(info, name, pmap, partitions)
        copy_between(client, catalogue, source, target, files,
                     info.partition**3 * 4 * max(f.ncomp for f in info.fields.values()))
        count += len(files)
    return count
