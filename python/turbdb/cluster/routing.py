"""Splitting a query by the partitions its stencils touch (Kanov et al. §3.3). Each point
goes to every group of workers that holds a partition its stencil reaches, with the list of
that group's partitions; the group adds only their atoms, and the mediator adds the
groups' partial sums. No edge is replicated: a stencil that crosses partitions is summed
piecewise where each piece is stored.

A *group* is the set of workers holding a virtual partition (primary first). Points are
grouped, not partitions one by one, so that a point crosses the network once per group its
stencil reaches rather than once per partition. Within a group, points are ordered by the
shard they lie in and cut into work units of neighbouring points, which any of its workers
may evaluate (graduated declustering)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .. import _core
from ..exceptions import InvalidRequestError, OutOfDomainError
from ..info import DatasetInfo
from .placement import PartitionMap

#: A group that several workers may serve is cut into at least this many units, so that
#: a faster worker can take more of them …
UNITS_PER_GROUP = 8
#: … of at most this many points …
UNIT_POINTS = 1 << 17
#: … and at least this many (a unit costs a task round trip and rebuilds its cells' blocks).
MIN_UNIT_POINTS = 1 << 14

Partition = tuple[int, tuple[int, int, int]]


@dataclasses.dataclass
class Box:
    """One piece of a cutout: output index ranges ``(start, stop)`` per axis (x, y, z), the
    node ranges a worker reads for them (unwrapped, same stride), and the partition."""

    out: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
    ranges: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
    shard: int


@dataclasses.dataclass(eq=False)
class Unit:
    """Work for one worker: points of a query or a piece of a cutout, the partitions it
    reads (None: all it holds), and the workers that may do it (primary first). Units are
    equal only to themselves: two pieces of one query may hold the same values, and the
    queue must hand out and remove the very unit it chose."""

    holders: tuple[str, ...]
    partitions: list[Partition] | None
    #: The query's points this unit evaluates (indices; None: all of them) …
    points: np.ndarray | None = None
    #: … or the piece of a cutout it reads.
    box: Box | None = None
    #: How much work: points, or nodes of a cutout.
    cost: int = 0
    #: Workers that failed this unit: others are asked first.
    avoid: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class Reach:
    """Where a batch's stencils lie: for each axis the shards each point's stencil touches
    (``(N, K)``, -1 where a column repeats an earlier one; column 0 is the shard the
    stencil starts in)."""

    shards: list[np.ndarray]

    @classmethod
    def of(cls, info: DatasetInfo, points: np.ndarray, *, method: str, operator: str, axes) -> Reach:
        """Raises the query's own errors for bad points or an unsupported method."""
        first, width = _core.stencil_reach(points, axes=axes, method=method, operator=operator)
        columns = []
        for a, (n, periodic) in enumerate(zip(info.grid, info.periodic)):
            p = info.partition
            # Sampled every shard's width (the narrowest shard's, at a partial edge) and at
            # the stencil's last node, no shard it crosses is missed.
            narrowest = min(p, n - (-(-n // p) - 1) * p)
            offsets = sorted(set(range(0, width, narrowest)) | {width - 1})
            nodes = first[:, a].astype(np.int64)
            cols = np.empty((len(first), len(offsets)), dtype=np.int32)
            for j, k in enumerate(offsets):
                node = nodes + k
                if periodic:
                    node %= n
                cols[:, j] = node // p
                for earlier in range(j):
                    cols[cols[:, j] == cols[:, earlier], j] = -1
            columns.append(cols)
        return cls(columns)

    def home(self, pmap: PartitionMap) -> np.ndarray:
        """The shard each stencil starts in."""
        nx, ny, _ = pmap.shards
        xs, ys, zs = self.shards
        return xs[:, 0] + nx * (ys[:, 0] + ny * zs[:, 0])


@dataclasses.dataclass
class Groups:
    """Which group of workers holds every shard at each time level of a query:
    ``tables[level_table[l]][shard]`` is an index into ``groups``."""

    groups: list[tuple[str, ...]]
    tables: list[np.ndarray]
    level_table: list[int]

    @classmethod
    def of(cls, pmap: PartitionMap, levels: Sequence[tuple[int, float]], holders: Sequence[Sequence[str]],
           lent: Mapping[tuple[int, int], tuple[str, ...]] | None = None) -> Groups:
        """``holders[v]`` are the workers of virtual partition ``v``; ``lent`` adds workers
        that borrowed partitions ``(t, shard)`` for this batch (load balancing)."""
        ids: dict[tuple[str, ...], int] = {}
        by_virtual = np.array([ids.setdefault(tuple(h), len(ids)) for h in holders], dtype=np.int32)
        tables: list[np.ndarray] = []
        level_table: list[int] = []
        shards = np.arange(pmap.count)
        for t, _ in levels:
            table = by_virtual[pmap.virtual_of(t, shards)]
            for (lent_t, shard), group in (lent or {}).items():
                if lent_t == t:
                    table[shard] = ids.setdefault(tuple(group), len(ids))
            same = [u for u, known in enumerate(tables) if np.array_equal(known, table)]
            if same:
                level_table.append(same[0])
            else:
                tables.append(table)
                level_table.append(len(tables) - 1)
        return cls(list(ids), tables, level_table)


def unit_count(points: int) -> int:
    """How many units a group's ``points`` are cut into, so that its workers share them."""
    return max(1, min(points // MIN_UNIT_POINTS, max(UNITS_PER_GROUP, -(-points // UNIT_POINTS))))


def shared_runs(points: int, workers: int) -> np.ndarray:
    """Where the contiguous runs of ``points`` points begin and end when each of ``workers``
    live workers holds every partition (no routing): :func:`unit_count` equal runs for them
    to share, or one run for one worker. Cutting a lone worker's points into runs, so that
    one arrives while another is evaluated, saved 20 ms of transfer latency per 10⁶ points
    but cost more in Dask's CPU per task and slower evaluation on this 2-core machine
    (docs/cluster.md)."""
    return np.linspace(0, points, (unit_count(points) if workers > 1 else 1) + 1).astype(int)


def split_query(pmap: PartitionMap, reach: Reach, levels: Sequence[tuple[int, float]], groups: Groups,
                shareable: Callable[[tuple[str, ...]], bool]) -> list[Unit]:
    """The work units of a point query. A group for which ``shareable`` is false (one
    live worker) is one unit: nobody could take a share of it.

    A point goes to each of its groups once, however many of the group's shards it
    reaches; a group's points are ordered by the shard they lie in (units of neighbours),
    then by index. One pass over the points in the core (``_core.split_points``)."""
    xs, ys, zs = (np.ascontiguousarray(a, dtype=np.int32) for a in reach.shards)
    tables = np.ascontiguousarray(np.stack(groups.tables), dtype=np.int32)
    rows, offsets, touched = _core.split_points(xs, ys, zs, shards=pmap.shards, tables=tables,
                                                groups=len(groups.groups))
    units = []
    for gid in np.flatnonzero(np.diff(offsets)):
        start, stop = int(offsets[gid]), int(offsets[gid + 1])
        group = groups.groups[gid]
        partitions = [(int(t), pmap.position(s)) for (t, _), u in zip(levels, groups.level_table)
                      for s in np.flatnonzero(touched[u, gid])]
        pieces = unit_count(stop - start) if shareable(group) else 1
        units.extend(Unit(group, partitions, points=piece, cost=len(piece))
                     for piece in np.array_split(rows[start:stop], pieces))
    return units


def split_cutout(info: DatasetInfo, pmap: PartitionMap, ranges, stride: int) -> list[Box]:
    """The pieces of a cutout, one per partition it crosses (each piece is read where its
    partition is stored). Checks the ranges as the engine does."""
    if not isinstance(stride, (int, np.integer)) or stride < 1:
        raise InvalidRequestError("stride must be at least 1")
    runs = []
    for name, (start, stop), n, periodic in zip("xyz", ranges, info.grid, info.periodic):
        start, stop = int(start), int(stop)
        if stop <= start:
            raise InvalidRequestError(f"{name} range [{start}, {stop}) is empty")
        if not periodic and (start < 0 or stop > n):
            raise OutOfDomainError(f"{name} range [{start}, {stop}) is outside the non-periodic axis [0, {n})")
        unwrapped = np.arange(start, stop, stride)
        shard = np.mod(unwrapped, n) // info.partition
        cuts = np.r_[0, np.flatnonzero(np.diff(shard)) + 1, len(shard)]
        runs.append([((int(a), int(b)), (int(unwrapped[a]), int(unwrapped[b - 1]) + 1), int(shard[a]))
                     for a, b in zip(cuts[:-1], cuts[1:])])
    nx, ny, _ = pmap.shards
    return [Box((ox, oy, oz), (rx, ry, rz), sx + nx * (sy + ny * sz))
            for (oz, rz, sz) in runs[2] for (oy, ry, sy) in runs[1] for (ox, rx, sx) in runs[0]]
