"""Laying a database out on a cluster (``turbdb cluster place``): on shared storage every
worker reads the database itself and only the catalogue is written; on node-local disks
each worker's data root receives the datasets' metadata and the shards of the partitions
it holds, copied by the worker itself from the database (which it must be able to read)
or, without a cluster, by this process; then whatever else its root holds of turbdb
datasets (partitions now held elsewhere, a dataset created again with fewer steps, one
removed) is deleted, so that no file of an earlier layout is read as this one's. A worker
that does not answer (stopped or hung) fails the placement at once, naming it; every wait
on a worker ends once it stops answering."""

from __future__ import annotations

from collections.abc import Callable

from distributed import Client

from ..database import Database
from ..exceptions import ServiceError
from . import plugin
from .bounded import answering
from .catalogue import Catalogue
from .contents import record
from .membership import Membership
from .node import Node
from .transfer import batches, holdings, metadata_files, partition_files, wait_for_task


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
    live: dict[str, str] = {}
    if client is not None:
        membership = Membership(client)
        live = membership.live(refresh=True)
        gone = [s for s in plan if s not in live]
        if gone:
            raise ServiceError(f"worker {', '.join(gone)} is not running: cannot place its partitions")
        live, quiet = answering(client, {s: live[s] for s in plan})
        if quiet:
            raise ServiceError(f"worker {', '.join(quiet)} does not answer (stopped or hung): cannot place its "
                               "partitions. Start it again (kill -CONT, or restart it), or stop it for good, and "
                               "place again")
        plugin.install(client, catalogue, replace=True, some_quiet=bool(membership.silent()))

    def run_on(slot: str, method: str, *args: object) -> None:
        """``Node.method(*args)`` on ``slot``'s node: here without a cluster, else on its worker."""
        if client is None:
            getattr(Node(catalogue.slots[slot], slot), method)(*args)
        else:
            future = client.submit(getattr(plugin, method), catalogue.plugin_name, *args, workers=[live[slot]],
                                   allow_other_workers=False, pure=False)
            wait_for_task(client, future, (future,), (live[slot],))

    for slot, files in plan.items():
        for batch in batches(files, lambda f: (db.path / f).stat().st_size if (db.path / f).exists() else 0):
            run_on(slot, "copy_in", str(db.path), batch)
            done += len(batch)
            if progress:
                progress(done, total)
        run_on(slot, "keep_only", files)
    catalogue.save()
    return {slot: len(files) for slot, files in plan.items()}
