"""Where partitions live: chained declustering over virtual partitions (Perlman et al. §3.1,
Hsiao and DeWitt's chained declustering as River uses it).

Partitions (one shard of one time step) are grouped into many more virtual partitions than
workers; each virtual partition has a primary and ``replicas - 1`` mirrors. The primary of
virtual partition ``v`` is worker ``v mod W``; its mirror sits ``o`` workers further along
the chain, where the offset ``o`` cycles through ``1 … W-1`` from one round of ``W``
virtual partitions to the next. So every worker's partitions are mirrored on every other
worker in equal shares, and when one worker is lost its load spreads evenly over all the
others instead of doubling the load of its neighbour.

A partition's virtual partition follows space first (Perlman: spatially contiguous
collections, so a stencil or a particle stays on one node), then time: the shards of a time
step in Morton order are cut into contiguous blocks, and every ``span`` time steps the
blocks move on by one virtual partition, so consecutive steps of a region share a node
while the steps of a dataset spread over all of them.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from .. import _core

#: Virtual partitions per worker at least (Perlman et al.: eight to sixteen per node).
VIRTUAL_PER_WORKER = 8
#: Consecutive time steps that keep a region on the same virtual partition.
DEFAULT_SPAN = 8


def virtual_count(workers: int, replicas: int) -> int:
    """How many virtual partitions: at least ``VIRTUAL_PER_WORKER`` per worker, and a
    multiple of every (primary, offset) combination so that all workers hold the same
    number of primaries and mirrors and share them evenly."""
    cycle = workers * max(1, workers - replicas + 1)
    return cycle * -(-VIRTUAL_PER_WORKER * workers // cycle)


def chained_declustering(slots: Sequence[str], replicas: int, virtual: int) -> list[list[str]]:
    """The holders of each virtual partition, primary first. Copy ``k ≥ 1`` of virtual
    partition ``v`` sits ``o + k - 1`` workers after its primary, with the round's offset
    ``o`` cycling through ``1 … W - replicas + 1``: copies are always on distinct workers."""
    workers = len(slots)
    if not 1 <= replicas <= workers:
        raise ValueError(f"replicas must be between 1 and the number of workers ({workers}), not {replicas}")
    offsets = max(1, workers - replicas + 1)
    holders = []
    for v in range(virtual):
        primary, round_ = v % workers, v // workers
        offset = 1 + round_ % offsets
        copies = [primary] + [(primary + offset + k - 1) % workers for k in range(1, replicas)]
        holders.append([slots[c] for c in copies])
    return holders


class PartitionMap:
    """Which virtual partition each partition of one dataset belongs to. ``shards`` is the
    dataset's shard grid ``(sx, sy, sz)``; ``virtual`` and ``span`` come from the catalogue;
    ``name`` staggers datasets so that small ones do not all start on the same worker.
    Shards are named by their linear index ``sx + nx·(sy + ny·sz)``."""

    def __init__(self, shards: Sequence[int], virtual: int, span: int, name: str):
        self.shards = tuple(int(n) for n in shards)
        self.virtual, self.span, self.name = int(virtual), int(span), name
        self.count = int(np.prod(self.shards))
        nx, ny, nz = self.shards
        z, y, x = (a.ravel().astype(np.uint32) for a in np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx),
                                                                   indexing="ij"))
        rank = np.empty(self.count, dtype=np.int64)
        rank[np.argsort(_core.morton_encode(x, y, z), kind="stable")] = np.arange(self.count)
        # Contiguous runs of the Morton order, one per block; the larger blocks (one shard
        # more) come first, so they land on consecutive virtual partitions, which cover
        # every worker evenly as primary and as mirror (whole rounds of the chain).
        blocks = min(self.count, self.virtual)
        small, large = divmod(self.count, blocks)
        edge = large * (small + 1)
        self._block = np.where(rank < edge, rank // (small + 1), large + (rank - edge) // max(small, 1))
        self._offset = zlib.crc32(name.encode()) % self.virtual

    def virtual_of(self, t: int | np.ndarray, shard: int | np.ndarray) -> np.ndarray:
        """The virtual partition of partitions ``(t, shard)``."""
        return (self._block[shard] + np.asarray(t) // self.span + self._offset) % self.virtual

    def position(self, shard: int) -> tuple[int, int, int]:
        """``(sx, sy, sz)`` of a shard index."""
        nx, ny, _ = self.shards
        return int(shard % nx), int(shard // nx % ny), int(shard // (nx * ny))
