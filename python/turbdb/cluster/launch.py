"""Bringing a cluster up (``turbdb cluster up``): start a Dask ``LocalCluster`` of worker
processes on this machine, or attach to a running Dask cluster (SLURM through
dask-jobqueue, Kubernetes, ``dask scheduler``/``dask worker`` by hand); place the database
on its workers if the catalogue does not fit them (other workers or options, or node-local
copies of a database that changed since); give every worker its node.

A worker of the catalogue that is not running, or does not answer (stopped or hung), does
not make a new layout by itself: while every partition keeps a copy on the others, the
cluster serves degraded and says so (:attr:`Running.missing`), so that the worker gets its
partitions back when it returns (or ``turbdb cluster repair`` re-replicates them). A new
layout made while workers are missing says which (:attr:`Running.placed_because`)."""

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
from .bounded import answering
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
    and the catalogue. ``placed``: the database was laid out anew, for the reasons
    ``placed_because``; ``missing``: slots of the catalogue whose worker is not running or
    does not answer (and which), served from the other copies meanwhile."""

    client: Client
    catalogue: Catalogue
    local: LocalCluster | None = None
    placed: bool = False
    placed_because: list[str] = dataclasses.field(default_factory=list)
    missing: dict[str, str] = dataclasses.field(default_factory=dict)

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
    membership = Membership(client)
    running = membership.live(refresh=True)
    if not running:
        raise ServiceError(f"the Dask cluster at {client.scheduler.address} has no workers yet; start some and retry")
    live, quiet = answering(client, running)
    if not live:
        raise ServiceError(f"no worker of the Dask cluster at {client.scheduler.address} answers (worker "
                           f"{', '.join(quiet)} stopped or hung); start them again and retry")
    slots = sorted(live, key=_natural)
    catalogue = Catalogue.load(database) if Catalogue.exists(database) else None
    reasons = _why_place_again(catalogue, slots, Path(database), replicas=replicas, data_root=data_root)
    missing = [] if catalogue is None else sorted(set(catalogue.slots) - set(live), key=_natural)
    why_missing = {s: "does not answer (stopped or hung)" if s in quiet else "is not running" for s in missing}
    if reasons or (missing and not _every_partition_kept(catalogue, set(live))):
        reasons = reasons or ["no copy of some partitions is left on the workers that answer"]
        reasons += [f"worker {s} {why_missing[s]}" for s in missing]
        catalogue = Catalogue.create(database, slots, replicas=replicas, data_root=data_root)
        place(catalogue, client=client, progress=progress)
        return Running(client, catalogue, local, True, reasons)
    plugin.install(client, catalogue, replace=True, some_quiet=bool(quiet or membership.silent()))
    return Running(client, catalogue, local, False, [], why_missing)


def _why_place_again(catalogue: Catalogue | None, slots: list[str], database: Path, *, replicas: int,
                     data_root: str | os.PathLike[str] | None) -> list[str]:
    """Why the catalogue does not fit the workers that answer and the options given (empty:
    it fits, perhaps with some of its workers missing)."""
    if catalogue is None:
        return ["the database was not laid out yet"]
    wanted_layout = "shared" if data_root is None else "local"
    if catalogue.layout != wanted_layout:
        return [f"the layout changes from {catalogue.layout} to {wanted_layout}"]
    if data_root is not None and not all(Path(r).parent == Path(data_root).resolve()
                                         for r in catalogue.slots.values()):
        return [f"the data root changes to {data_root}"]
    known = set(catalogue.slots)
    joined = [s for s in slots if s not in known]
    if joined:
        return [f"worker {', '.join(joined)} joined"]
    if catalogue.replicas != min(replicas, len(known)):
        return [f"the copies of each partition change from {catalogue.replicas} to {min(replicas, len(known))}"]
    if data_root is not None:
        # Node-local copies of a database that grew or was written since are stale.
        changes = differences(catalogue.contents, Database(database))
        if changes:
            return [f"the database changed since it was laid out ({'; '.join(changes[:3])})"]
    return []


def _every_partition_kept(catalogue: Catalogue, live: set[str]) -> bool:
    return all(any(s in live for s in holders) for holders in catalogue.holders)


def _natural(slot: str) -> tuple:
    """Worker names in numeric order where they are numbers (2 before 10)."""
    return (0, int(slot), "") if slot.isdigit() else (1, 0, slot)
