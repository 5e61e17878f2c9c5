"""Distributed queues with graduated declustering (Arpaci-Dusseau et al., River): the work
units of a mirrored group wait in one queue, and every worker holding the group pulls from
it when it has room, at its own rate. A worker slowed by a disk, a noisy neighbour or a
throttled CPU pulls less; its mirrors take the rest, and the cluster stays near its
aggregate rate instead of waiting for the slowest node.

A worker that may serve several groups pulls from the one with the most work left: the
groups whose other workers are slow drain slowest, so fast workers drift towards them,
which is River's bias towards the lagging consumer without measuring rates. The static
policy is the baseline without declustering: each unit goes to the first live worker of
its group (the primary, or its mirror once the primary is gone)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Set

from .routing import Unit

POLICIES = ("graduated", "static")


class WorkQueue:
    """Pending units by group; :meth:`take` gives a worker its next unit."""

    def __init__(self, units: Iterable[Unit], policy: str = "graduated"):
        if policy not in POLICIES:
            raise ValueError(f"unknown declustering policy {policy!r}; valid: {', '.join(POLICIES)}")
        self.policy = policy
        self._queues: dict[tuple[str, ...], deque[Unit]] = {}
        self._left: dict[tuple[str, ...], int] = {}
        for unit in units:
            self.put(unit)

    def put(self, unit: Unit, *, front: bool = False) -> None:
        """Queues a unit (a retried one goes to the front: it is already late)."""
        queue = self._queues.setdefault(unit.holders, deque())
        queue.appendleft(unit) if front else queue.append(unit)
        self._left[unit.holders] = self._left.get(unit.holders, 0) + unit.cost

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def take(self, slot: str, alive: Set[str]) -> Unit | None:
        """The next unit for worker ``slot``, or None if none is for it."""
        best, best_key, best_unit = None, None, None
        for group, queue in self._queues.items():
            if not queue or slot not in group:
                continue
            unit = next((u for u in queue if self._may(slot, u, alive)), None)
            if unit is None:
                continue
            # Most work left first; on a tie, the group this worker is primary of.
            key = (-self._left[group], group.index(slot))
            if best_key is None or key < best_key:
                best, best_key, best_unit = group, key, unit
        if best is None:
            return None
        self._queues[best].remove(best_unit)
        self._left[best] -= best_unit.cost
        return best_unit

    def _may(self, slot: str, unit: Unit, alive: Set[str]) -> bool:
        """Whether ``slot`` should do ``unit``: not a worker that failed it while another
        live one has not; under the static policy only the first such worker."""
        fresh = [s for s in unit.holders if s in alive and s not in unit.avoid]
        eligible = fresh or [s for s in unit.holders if s in alive]
        if self.policy == "static":
            return bool(eligible) and eligible[0] == slot
        return slot in eligible

    def stranded(self, alive: Set[str]) -> list[Unit]:
        """Units none of whose workers is alive."""
        return [u for group, queue in self._queues.items() if not any(s in alive for s in group) for u in queue]
