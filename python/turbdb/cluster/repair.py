"""Re-replication after workers are lost (``turbdb cluster repair``): every virtual
partition left with fewer copies than the catalogue asks for gets new holders among the
living workers — the least loaded first, so the lost worker's partitions spread over all
survivors — its shards are copied there from a surviving copy (node-local disks; on
shared storage nothing moves), and the catalogue is rewritten without the dead workers.
Living workers the catalogue does not know (new nodes) join as slots and take a fair share
of the virtual partitions from the most loaded holders: copied first, then recorded, and
only then does the old holder stop holding them, so no partition ever has fewer copies.

The catalogue is saved after every copy, so a repair that stops half-way keeps what it
copied. A worker that does not answer when the repair starts (stopped or hung, though
still in the scheduler's list) counts as lost; a copy whose worker dies or falls silent
meanwhile fails alone: the repair goes on with the others and then raises a
:class:`ServiceError` naming the failed copies. No wait on a worker outlasts its silence."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distributed import Client

from ..database import Database
from ..exceptions import ServiceError
from . import plugin
from .bounded import answering
from .catalogue import Catalogue
from .membership import Membership
from .transfer import copy_between, holdings, metadata_files, partition_files


def repair(client: Client, catalogue: Catalogue, *,
           progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Restores the number of copies of every virtual partition that still has one, then
    gives new workers their share. Returns what moved: ``{"moved": [{virtual_partition,
    from, to, files}], "unrecoverable": [...], "failed": [...]}``; raises ServiceError
    (after saving what was done) if a copy failed."""
    say = progress or (lambda _: None)
    membership = Membership(client)
    live, quiet = answering(client, membership.live(refresh=True))
    for slot in quiet:
        say(f"worker {slot} does not answer (stopped or hung): counted as lost")
    for slot in sorted(set(live) - set(catalogue.slots)):  # new workers join as slots
        catalogue.slots[slot] = (catalogue.slots[next(iter(catalogue.slots))] if catalogue.layout == "shared"
                                 else str(Path(next(iter(catalogue.slots.values()))).parent / slot))
    some_quiet = bool(quiet or membership.silent())  # a stopped worker never confirms
    plugin.install(client, catalogue, replace=True, some_quiet=some_quiet)
    load = {s: sum(1 for h in catalogue.holders if s in h) for s in live}
    wanted = min(catalogue.replicas, len(live))
    database = Database(catalogue.database)
    moved: list[dict[str, Any]] = []
    unrecoverable: list[int] = []
    failed: list[str] = []

    def copy(v: int, source: str, target: str) -> bool:
        """Copies virtual partition ``v``; False (noted in ``failed``) if a worker left."""
        nonlocal live
        files = 0
        if catalogue.layout == "local":
            try:
                current = membership.live(refresh=True)  # a worker restarted since has a new address
                current = {s: a for s, a in current.items() if s not in quiet}
                if source not in current or target not in current:
                    raise ServiceError(f"worker {source if source not in current else target} left the cluster")
                files = _copy_virtual(client, catalogue, database, v, current[source], current[target])
            except Exception as e:  # noqa: BLE001 - any failure of one copy (a dead worker, a full disk) fails it alone
                e = e if isinstance(e, ServiceError) else ServiceError(f"{type(e).__name__}: {e}")
                failed.append(f"virtual partition {v} from worker {source} to worker {target}: {e}")
                say(f"virtual partition {v}: copy from worker {source} to worker {target} FAILED ({e})")
                live = {s: a for s, a in membership.live(refresh=True).items() if s not in quiet}
                return False
        moved.append({"virtual_partition": v, "from": source, "to": target, "files": files})
        say(f"virtual partition {v}: copied from worker {source} to worker {target} ({files} files)")
        return True

    for v, holders in enumerate(catalogue.holders):
        alive = [s for s in holders if s in live]
        if len(alive) >= wanted:
            if len(alive) < len(holders):
                catalogue.holders[v] = alive
            continue
        if not alive:
            unrecoverable.append(v)
            continue
        targets = sorted((s for s in live if s not in alive), key=lambda s: (load.get(s, 0), s))
        for target in targets[:wanted - len(alive)]:
            gone = [s for s in (alive[0], target) if s not in live]
            if gone:  # left during an earlier copy
                failed.append(f"virtual partition {v} from worker {alive[0]} to worker {target}: worker "
                              f"{', '.join(gone)} left the cluster")
                continue
            if not copy(v, alive[0], target):
                continue
            alive.append(target)
            load[target] = load.get(target, 0) + 1
            catalogue.holders[v] = list(alive)
            catalogue.save()  # each copy is kept as it lands
    _share_with_new_workers(catalogue, load, copy, membership, set(quiet))
    for slot in [s for s in catalogue.slots if s not in live and not catalogue.held_by(s)]:
        del catalogue.slots[slot]
    catalogue.save()
    plugin.install(client, catalogue, replace=True, some_quiet=some_quiet)
    if failed:
        raise ServiceError(f"{len(failed)} of the copies failed ({len(moved)} made and recorded): "
                           f"{'; '.join(failed[:5])}. Run `turbdb cluster repair` again once the cluster is settled")
    return {"moved": moved, "unrecoverable": unrecoverable, "failed": failed}


def _share_with_new_workers(catalogue: Catalogue, load: dict[str, int], copy: Callable[[int, str, str], bool],
                            membership: Membership, quiet: set[str]) -> None:
    """Moves virtual partitions from the most loaded living holders to living workers
    below their fair share (new ones hold none) until the copies are spread to within one:
    each is copied, recorded, and only then taken from the old holder. Workers in ``quiet``
    (not answering) take no part."""
    while True:
        live = {s: a for s, a in membership.live().items() if s not in quiet}
        slots = [s for s in load if s in live]
        if len(slots) < 2:
            return
        poorest = min(slots, key=lambda s: (load[s], s))
        richest = max(slots, key=lambda s: (load[s], s))
        if load[richest] - load[poorest] <= 1:
            return
        movable = [v for v, h in enumerate(catalogue.holders) if richest in h and poorest not in h]
        if not movable:
            return
        # A primary moves only while that evens out the primaries too (static declustering
        # sends each unit to its primary); else a mirror copy moves.
        primaries = Counter(h[0] for h in catalogue.holders)
        as_primary = primaries[richest] - primaries[poorest] > 1
        v = ([v for v in movable if (catalogue.holders[v][0] == richest) == as_primary] or movable)[-1]
        if not copy(v, richest, poorest):
            return
        holders = catalogue.holders[v]
        holders[holders.index(richest)] = poorest  # the same place: a primary stays primary
        load[richest] -= 1
        load[poorest] += 1
        catalogue.save()


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
