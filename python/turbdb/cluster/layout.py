"""Laying a database out on a cluster (``turbdb cluster place``): on shared storage every
worker reads the database itself and only the catalogue is written; on node-local disks
each worker's data root receives the datasets' metadata and the shards of the partitions
it holds, copied by the worker itself from the database (which it must be able to read)
or, without a cluster, by this process."""

from __future__ import annotations

from collections.abc import Callable

from distributed import Client

from ..database import Database
from ..exceptions import ServiceError
from . import plugin
from .catalogue import Catalogue
from .contents import record
from .membership import Membership
from .node import Node
from .transfer import batches, holdings, metadata_files, partition_files


def place(catalogue: Catalogue, *, client: Client | None = None,
          progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Copies each slot's partitions into its data root (local layout) and saves the
    catalogue. Returns the number of files placed per slot. ``progress(done, total)``
    is called as files land."""
    db = Database(catalogue.database)
    # Recorded before copying: a step written meanwhile then shows as a change, never as placed.
    catalogue.contents = record(db) if catalogue.layout == "local" else None
    plan: dict[str, list[str]] = {}
    if catalogue.layout == "local":
        for slot in catalogue.slots:
            files = []
            for name in db.datasets:
                info = db[name].metadata
                pmap = catalogue.partition_map(info)
                files += metadata_files(db.path, name, info.fields)
                files += partition_files(info, name, pmap, holdings(catalogue, pmap, info.nt, slot))
            plan[slot] = files
    total, done = sum(len(f) for f in plan.values()), 0
    live = {}
    if client is not None:
        plugin.install(client, catalogue, replace=True)
        live = Membership(client).live(refresh=True)
    for slot, files in plan.items():
        if client is not None and slot not in live:
            raise ServiceError(f"worker slot {slot} is not running: cannot place its partitions")
        for batch in batches(files, lambda f: (db.path / f).stat().st_size if (db.path / f).exists() else 0):
            if client is None:
                Node(catalogue.slots[slot], slot).copy_in(str(db.path), batch)
            else:
                client.submit(plugin.copy_in, catalogue.plugin_name, str(db.path), batch, workers=[live[slot]],
                              allow_other_workers=False, pure=False).result()
            done += len(batch)
            if progress:
                progress(done, total)
    catalogue.save()
    return {slot: len(files) for slot, files in plan.items()}
