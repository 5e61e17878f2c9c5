"""What one worker does for the cluster, behind one small class: evaluate "these points,
restricted to these partitions" and hand back float64 partial sums; read a box of nodes;
hand out and take in shard files (placement, repair, load balancing).

This is the seam where the node engine plugs in: today a worker evaluates each unit with
the streaming engine of the datasets under its data root; the node engine (JAWS
scheduling and an atom cache shared by all queries of the process) replaces
:meth:`Node.partial_sums` and :meth:`Node.cutout` without the cluster noticing."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..arguments import axes_of
from ..database import Database
from ..dataset import Dataset
from ..exceptions import StorageError

Partition = tuple[int, tuple[int, int, int]]


class Node:
    """The datasets under one worker's data root (``root``), served for slot ``slot``."""

    def __init__(self, root: str | os.PathLike[str], slot: str):
        self.root = Path(root)
        self.slot = slot
        self._datasets: dict[str, Dataset] = {}
        self._lock = threading.Lock()
        #: Work done: units, points and seconds evaluating, by kind (query, cutout).
        self.work: dict[str, dict[str, float]] = {}

    def dataset(self, name: str) -> Dataset:
        with self._lock:
            if name not in self._datasets:
                if not self.root.is_dir():
                    raise StorageError(f"worker {self.slot} has no data at {self.root}: place the cluster's data "
                                       "there (turbdb cluster place) or repair the cluster")
                self._datasets[name] = Database(self.root)[name]
            return self._datasets[name]

    def partial_sums(self, dataset: str, field: str, points: np.ndarray, *, time: float, method: str, operator: str,
                     temporal: str, partitions: list[Partition], dtype: str | None = None) -> np.ndarray:
        """The sums the atoms of ``partitions`` contribute to the query at ``points``:
        ``(N × ncomp × slots)`` point-major, float64, or in ``dtype`` for a unit of whole
        points (evaluated as a local query of that dtype is, so the answers are the same bits)."""
        began = _clock()
        ds = self.dataset(dataset)
        info = ds.metadata
        # Arrays arrive from the network in buffers of any alignment; the engine wants aligned.
        points = np.require(points, np.float64, ["C", "A"])
        values, _ = ds.field_store(field).query(
            points, axes=axes_of(info), times=info.times, time=float(time), method=method, operator=operator,
            temporal=temporal, strategy="streaming", partitions=partitions,
            dtype=None if dtype is None else np.dtype(dtype))
        self._count("query", len(points), began)
        return values

    def cutout(self, dataset: str, field: str, t_index: int, ranges: Any, stride: int) -> np.ndarray:
        """The stored values on a box of nodes, which must lie in partitions this node holds."""
        began = _clock()
        ds = self.dataset(dataset)
        values = ds.field_store(field).cutout(int(t_index), axes_of(ds.metadata), tuple(map(tuple, ranges)),
                                              int(stride))
        self._count("cutout", values.shape[0] * values.shape[1] * values.shape[2], began)
        return values

    def read_files(self, relative: list[str]) -> list[bytes | None]:
        """The bytes of files under the data root (None for one that is not there: a time
        step not written yet)."""
        out: list[bytes | None] = []
        for r in relative:
            try:
                out.append((self.root / r).read_bytes())
            except FileNotFoundError:
                out.append(None)
        return out

    def write_files(self, relative: list[str], contents: list[bytes | None]) -> int:
        """Stores files under the data root, each written aside and renamed; returns the
        bytes written."""
        written = 0
        for r, data in zip(relative, contents):
            if data is None:
                continue
            target = self.root / r
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
            written += len(data)
        with self._lock:
            self._datasets.clear()  # their cached shard indexes may describe replaced files
        return written

    def copy_in(self, source: str, relative: list[str]) -> int:
        """Copies files from another root this worker can read (shared staging storage)."""
        return self.write_files(relative, Node(source, self.slot).read_files(relative))

    def _count(self, kind: str, points: int, began: float) -> None:
        with self._lock:
            work = self.work.setdefault(kind, {"units": 0, "points": 0, "seconds": 0.0})
            work["units"] += 1
            work["points"] += points
            work["seconds"] += _clock() - began


def _clock() -> float:
    return time.perf_counter()
