"""Bringing a cluster up (``turbdb cluster up``): start a Dask ``LocalCluster`` of worker
processes on this machine, or attach to a running Dask cluster (SLURM through
dask-jobqueue, Kubernetes, ``dask scheduler``/``dask worker`` by hand); place the database
on its workers if the catalogue does not fit them (other workers or options, or node-local
copies of a database that changed since); give every worker its node."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import dask
from distributed import Client, LocalCluster

from ..database import Database
from ..exceptions import ServiceError
from . import plugin
from .catalogue import Catalogue
from .contents import differences
from .layout import place
from .membership import Membership
from .mediator import connect_client


class _LocalCluster(LocalCluster):
    """``LocalCluster`` that survives a worker's removal reported after it left its list.

    distributed (2026.8) looks a removed worker up in ``scheduler_info`` to name it; when
    the periodic sync has already dropped it (a worker scaled away or lost just before),
    the lookup raises ``KeyError``, which ends the task watching the workers and is raised
    again by ``close()``, leaving the cluster half closed. Such a worker has nothing left
    to update."""

    def _update_worker_status(self, op, msg):
        if op == "remove" and msg not in self.scheduler_info.get("workers", {}):
            return
        super()._update_worker_status(op, msg)


@dataclasses.dataclass
class Running:
    """A cluster serving a database: its client, the local cluster if this process runs one,
    and the catalogue."""

    client: Client
    catalogue: Catalogue
    local: LocalCluster | None = None
    placed: bool = False

    @property
    def address(self) -> str:
        return self.client.scheduler.address

    @property
    def dashboard(self) -> str | None:
        return self.client.dashboard_link

    def close(self) -> None:
        self.client.close()
        if self.local is not None:
            self.local.close()


def start_local(database: str | os.PathLike[str], workers: int, *, replicas: int = 2,
                data_root: str | os.PathLike[str] | None = None, threads: int | None = None,
                dashboard_address: str | None = ":8787", host: str = "127.0.0.1",
                progress: Callable[[int, int], None] | None = None) -> Running:
    """A ``LocalCluster`` of ``workers`` processes serving ``database``. Each worker runs
    one task at a time with ``threads`` engine threads (default: the cores shared out)."""
    Database(database)  # a clear error if there is none
    threads = threads or max(1, (os.cpu_count() or 1) // workers)
    # A worker's engine sizes its own buffers; the nanny's default of trimming freed memory
    # back to the OS at 64 KiB would refault the engine's large buffers on every query.
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        local = _LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host=host,
                             dashboard_address=dashboard_address, env={"RAYON_NUM_THREADS": str(threads)})
    client = Client(local, direct_to_workers=True, set_as_default=False)
    try:
        return _serve(database, client, replicas=replicas, data_root=data_root, progress=progress, local=local)
    except BaseException:
        client.close()
        local.close()
        raise


def attach(database: str | os.PathLike[str], scheduler: str | Client, *, replicas: int = 2,
           data_root: str | os.PathLike[str] | None = None,
           progress: Callable[[int, int], None] | None = None) -> Running:
    """Serves ``database`` on the running Dask cluster at ``scheduler``: its workers, named
    as they are, become the slots."""
    Database(database)
    client = connect_client(scheduler)
    return _serve(database, client, replicas=replicas, data_root=data_root, progress=progress, local=None)


def _serve(database: str | os.PathLike[str], client: Client, *, replicas: int,
           data_root: str | os.PathLike[str] | None, progress: Callable[[int, int], None] | None,
           local: LocalCluster | None) -> Running:
    live = Membership(client).live(refresh=True)
    if not live:
        raise ServiceError(f"the Dask cluster at {client.scheduler.address} has no workers yet; start some and retry")
    slots = sorted(live, key=_natural)
    catalogue = Catalogue.load(database) if Catalogue.exists(database) else None
    wanted_layout = "shared" if data_root is None else "local"
    fits = (catalogue is not None and sorted(catalogue.slots, key=_natural) == slots
            and catalogue.layout == wanted_layout and catalogue.replicas == min(replicas, len(slots))
            and (data_root is None or all(Path(r).parent == Path(data_root).resolve()
                                          for r in catalogue.slots.values()))
            # Node-local copies of a database that grew or was written since are stale.
            and (data_root is None or not differences(catalogue.contents, Database(database))))
    placed = False
    if not fits:
        catalogue = Catalogue.create(database, slots, replicas=replicas, data_root=data_root)
        place(catalogue, client=client, progress=progress)
        placed = True
    plugin.install(client, catalogue, replace=True)
    return Running(client, catalogue, local, placed)


def _natural(slot: str) -> tuple:
    """Worker names in numeric order where they are numbers (2 before 10)."""
    return (0, int(slot), "") if slot.isdigit() else (1, 0, slot)
