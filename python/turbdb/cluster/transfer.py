"""Moving partitions between data roots: which files make up a dataset's metadata and its
partitions, and copying them from worker to worker through Dask (the bytes travel between
the two workers, not through the mediator), in batches of bounded size."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from distributed import Client
from distributed import TimeoutError as DaskTimeoutError

from ..exceptions import ServiceError
from ..info import DatasetInfo
from . import plugin
from .catalogue import Catalogue
from .membership import Membership
from .placement import PartitionMap

#: Bytes of shard files one copy task moves at most.
BATCH_BYTES = 64 << 20
#: How often a copy in flight checks that both its workers are still there.
POLL_SECONDS = 1.0


def metadata_files(database: Path, name: str, fields: Iterable[str]) -> list[str]:
    """The files of dataset ``name`` other than its fields' shards (group and array
    documents, coordinate arrays), relative to the database."""
    root = database / name
    shard_dirs = {root / field / "c" for field in fields}
    files = []
    for directory, subdirs, names in os.walk(root):
        here = Path(directory)
        subdirs[:] = [d for d in subdirs if here / d not in shard_dirs]
        files += [str((here / n).relative_to(database)) for n in names if not n.startswith(".")]
    return sorted(files)


def partition_files(info: DatasetInfo, name: str, pmap: PartitionMap, partitions: Iterable[tuple[int, int]]) -> list[str]:
    """The shard files of partitions ``(t, shard)`` for every field, relative to the database."""
    files = []
    for t, shard in partitions:
        sx, sy, sz = pmap.position(shard)
        files += [f"{name}/{field}/c/{t}/{sz}/{sy}/{sx}/0" for field in info.fields]
    return files


def holdings(catalogue: Catalogue, pmap: PartitionMap, nt: int, slots: set[str] | str,
             virtual: Iterable[int] | None = None) -> list[tuple[int, int]]:
    """The partitions ``(t, shard)`` of a dataset of ``nt`` steps held by ``slots`` (in the
    virtual partitions ``virtual`` only, when given)."""
    slots = {slots} if isinstance(slots, str) else slots
    wanted = np.array([bool(slots.intersection(h)) for h in catalogue.holders])
    if virtual is not None:
        only = np.zeros(len(wanted), dtype=bool)
        only[list(virtual)] = True
        wanted &= only
    shards = np.arange(pmap.count)
    out = []
    for t in range(nt):
        out += [(t, int(s)) for s in shards[wanted[pmap.virtual_of(t, shards)]]]
    return out


def batches(files: list[str], sizes: Callable[[str], int]) -> list[list[str]]:
    """``files`` cut into batches of at most ``BATCH_BYTES`` (a larger file goes alone)."""
    out: list[list[str]] = [[]]
    used = 0
    for f in files:
        size = sizes(f)
        if out[-1] and used + size > BATCH_BYTES:
            out.append([])
            used = 0
        out[-1].append(f)
        used += size
    return [b for b in out if b]


def copy_between(client: Client, catalogue: Catalogue, source: str, target: str, files: list[str],
                 file_bytes: int, progress: Callable[[int], None] | None = None) -> int:
    """Copies ``files`` from the worker at address ``source`` to the one at ``target``;
    returns the bytes written. ``file_bytes`` is the usual size of one file (for batching).
    A :class:`ServiceError` if either worker leaves during the copy."""
    written = 0
    for batch in batches(files, lambda _: file_bytes):
        read = client.submit(plugin.read_files, catalogue.plugin_name, batch, workers=[source],
                             allow_other_workers=False, pure=False, key=f"turbdb-read-{uuid.uuid4().hex}")
        write = client.submit(plugin.write_files, catalogue.plugin_name, batch, read, workers=[target],
                              allow_other_workers=False, pure=False, key=f"turbdb-write-{uuid.uuid4().hex}")
        written += wait_for_task(client, write, (read, write), (source, target))
        if progress:
            progress(len(batch))
    return written


def wait_for_task(client: Client, future: Any, futures: tuple[Any, ...], addresses: tuple[str, ...]) -> Any:
    """The result of a task bound to workers (a copy), or a :class:`ServiceError` once one
    of the workers at ``addresses`` leaves or falls silent (``futures`` are then
    cancelled): a task bound to one worker (``allow_other_workers=False``) would wait for a
    dead or stopped one for ever."""
    while True:
        try:
            return future.result(timeout=POLL_SECONDS)
        except DaskTimeoutError:
            if future.done():  # it finished while the wait timed out
                continue
            live = set(Membership(client).live(refresh=True).values())
            gone = [a for a in addresses if a not in live]
            if gone:
                for f in futures:
                    f.cancel()
                raise ServiceError(f"worker {', '.join(gone)} left the cluster (or stopped answering) during "
                                   "the copy") from None
