"""Load balancing of skewed batches by workload density (Perlman et al. §3.4). The mediator
builds an oct-tree over the shard grid from the batch's points, each region split until it
holds few enough points, and estimates every worker's load from the partitions it holds
(a group's work shared by its live workers, as graduated declustering shares it). While the
most loaded worker carries clearly more than the least loaded one, the densest region
whose partitions the first holds and the second does not — the smallest of the densest —
is lent to the second for this batch: its partitions get one more worker, and the batch's
units there are shared three ways. Lent partitions are not recorded in the catalogue; on
node-local disks the mediator copies them first (and the borrower keeps them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .placement import PartitionMap
from .routing import Reach

#: Batches smaller than this are not worth balancing.
MIN_POINTS = 1 << 15
#: Balance until the most and least loaded workers differ by less than this share of the mean.
TOLERANCE = 0.25
#: Regions lent per batch at most.
MAX_LOANS = 4
#: A region of the oct-tree is split while it holds more than this share of the batch.
LEAF_SHARE = 1 / 64


@dataclasses.dataclass
class Region:
    """A cube of the oct-tree over the shard grid: its shards (indices), points and volume."""

    shards: np.ndarray
    points: int

    @property
    def density(self) -> float:
        return self.points / len(self.shards)


def oct_tree(pmap: PartitionMap, work: np.ndarray, leaf_points: int) -> list[Region]:
    """Every region of the oct-tree of ``work`` (points per shard) over the shard grid: the
    whole grid's power-of-two cube, split in eight while a region has more than
    ``leaf_points`` points and more than one shard. Empty regions are left out."""
    nx, ny, nz = pmap.shards
    side = 1 << max(0, int(np.ceil(np.log2(max(pmap.shards)))))
    x, y, z = (a.ravel() for a in np.meshgrid(np.arange(nx), np.arange(ny), np.arange(nz), indexing="ij"))
    index = x + nx * (y + ny * z)
    regions: list[Region] = []

    def visit(corner: tuple[int, int, int], size: int, members: np.ndarray) -> None:
        points = int(work[index[members]].sum())
        if points == 0:
            return
        regions.append(Region(index[members], points))
        if points <= leaf_points or size == 1:
            return
        half = size // 2
        for dz in (0, half):
            for dy in (0, half):
                for dx in (0, half):
                    c = (corner[0] + dx, corner[1] + dy, corner[2] + dz)
                    inside = members[(x[members] >= c[0]) & (x[members] < c[0] + half) & (y[members] >= c[1])
                                     & (y[members] < c[1] + half) & (z[members] >= c[2]) & (z[members] < c[2] + half)]
                    if len(inside):
                        visit(c, half, inside)

    visit((0, 0, 0), side, np.arange(len(index)))
    return regions


class Balancer:
    """Chooses the partitions to lend for one batch."""

    def __init__(self, *, min_points: int = MIN_POINTS, tolerance: float = TOLERANCE, max_loans: int = MAX_LOANS):
        self.min_points, self.tolerance, self.max_loans = min_points, tolerance, max_loans

    def lend(self, pmap: PartitionMap, reach: Reach, levels: Sequence[tuple[int, float]],
             holders: Sequence[Sequence[str]], live: dict[str, str]) -> dict[tuple[int, int], tuple[str, ...]]:
        """``{(t, shard): workers}`` for the partitions lent in this batch (their holders
        plus the borrower), or nothing when the batch is small or balanced enough."""
        home = reach.home(pmap)
        if len(home) < self.min_points or len(live) < 2:
            return {}
        work = np.bincount(home, minlength=pmap.count)
        busy = np.flatnonzero(work)
        # The workers of each busy shard, at the batch's first time level (the others
        # almost always lie in the same span).
        virtual = pmap.virtual_of(levels[0][0], busy)
        workers = {int(s): [w for w in holders[v] if w in live] for s, v in zip(busy, virtual)}
        load = dict.fromkeys(live, 0.0)
        for s, ws in workers.items():
            for w in ws:
                load[w] += work[s] / len(ws)
        regions = sorted(oct_tree(pmap, work, max(1, int(len(home) * LEAF_SHARE))),
                         key=lambda r: (-r.density, len(r.shards)))
        lent: dict[tuple[int, int], tuple[str, ...]] = {}
        for _ in range(self.max_loans):
            over, under = max(load, key=load.get), min(load, key=load.get)
            gap = load[over] - load[under]
            if gap <= self.tolerance * np.mean(list(load.values())):
                break
            choice, best = None, 0.0
            for region in regions:
                shards = [int(s) for s in region.shards if work[s] and int(s) in workers]
                if not shards or not all(over in workers[s] and under not in workers[s] for s in shards):
                    continue
                # Sharing a region k → k+1 ways: the borrower gains w/(k+1) of each shard.
                gain = sum(work[s] / (len(workers[s]) + 1) for s in shards)
                if gain >= gap / 3:
                    choice = shards  # the densest (then smallest) region closing enough of the gap
                    break
                if gain > best:
                    choice, best = shards, gain
            if choice is None:
                break
            shards = choice
            for s in shards:
                before = len(workers[s])
                for w in workers[s]:
                    load[w] -= work[s] / before - work[s] / (before + 1)
                load[under] += work[s] / (before + 1)
                workers[s] = workers[s] + [under]
                for t, _ in levels:
                    group = tuple(holders[int(pmap.virtual_of(t, s))]) + (under,)
                    lent[(int(t), s)] = group
        return lent
