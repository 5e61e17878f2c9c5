"""What one worker does for the cluster, behind one small class: evaluate "these points,
restricted to these partitions" and hand back float64 partial sums; read a box of nodes;
hand out and take in shard files (placement, repair, load balancing).

A node-local copy is checked against what the catalogue records was placed before it
serves (and again whenever its metadata files change): a copy that does not hold the same
data — a disk restored from an older backup, a shard file missing or damaged — fails its
units with :class:`DamagedCopyError`, which sends them to the mirror, and is remembered
for ``turbdb cluster status``. Answering from it would add its partial sums to the other
copies' and give wrong values without an error.

This is the seam where the node engine plugs in: today a worker evaluates each unit with
the streaming engine of the datasets under its data root; the node engine (JAWS
scheduling and an atom cache shared by all queries of the process) replaces
:meth:`Node.partial_sums` and :meth:`Node.cutout` without the cluster noticing."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..arguments import axes_of
from ..database import Database
from ..dataset import Dataset
from ..exceptions import CorruptDataError, DatasetBusyError, InvalidRequestError, StorageError, TurbdbError
from ..written_steps import UNSTORED_STEP, holds, parse_runs
from ..zarr_meta import ZARR_JSON, read_json
from .contents import copy_difference, metadata_key

Partition = tuple[int, tuple[int, int, int]]

#: The file an engine found missing, in its "time step N is not stored: PATH does not exist".
_MISSING_FILE = re.compile(r": (.+) does not exist")


class DamagedCopyError(StorageError):
    """This worker's copy of a dataset does not hold what the cluster laid out (older or
    newer metadata, a shard file missing or unreadable): a fault of this copy alone, so
    the unit goes to another copy."""


class Node:
    """The datasets under one worker's data root (``root``), served for slot ``slot``.
    ``expected``: what the catalogue records was placed, per dataset (node-local copies;
    None on shared storage, where the workers read the database itself)."""

    def __init__(self, root: str | os.PathLike[str], slot: str, expected: dict[str, dict[str, Any]] | None = None):
        self.root = Path(root)
        self.slot = slot
        self.expected = expected
        self._datasets: dict[str, Dataset] = {}
        self._checked: dict[str, tuple[Any, ...]] = {}  # per dataset, the metadata key its copy was found sound at
        #: Faults of this copy met while serving: per dataset, why, and the file found
        #: missing (forgotten once it is there again) or None.
        self.damage: dict[str, tuple[str, str | None]] = {}
        self._lock = threading.Lock()
        #: Work done: units, points and seconds evaluating, by kind (query, cutout).
        self.work: dict[str, dict[str, float]] = {}

    def dataset(self, name: str) -> Dataset:
        """The copy of dataset ``name``, once it is found to hold what was placed."""
        with self._lock:
            try:
                if name not in self._datasets:
                    if not self.root.is_dir():
                        raise StorageError(f"worker {self.slot} has no data at {self.root}: place the cluster's "
                                           "data there (turbdb cluster place) or repair the cluster")
                    self._datasets[name] = Database(self.root)[name]
                ds = self._datasets[name]
                if self.expected is not None:
                    key = metadata_key(ds)
                    if self._checked.get(name) != key:
                        change = copy_difference(self.expected.get(name), ds)
                        if change:
                            raise DamagedCopyError(
                                f"worker {self.slot}'s copy of dataset {name!r} does not hold what the cluster laid "
                                f"out ({change}): its disk was restored from another time, or changed by hand")
                        self._checked[name] = key
                        if name in self.damage and self.damage[name][1] is None:
                            del self.damage[name]
                return ds
            except DatasetBusyError:
                raise
            except TurbdbError as e:
                if self.expected is None:
                    raise
                self._datasets.pop(name, None)
                self._checked.pop(name, None)
                raise self._damaged(name, e, None) from None

    @contextlib.contextmanager
    def _serving(self, name: str, field: str) -> Iterator[None]:
        """Turns a fault of this copy met by a unit into :class:`DamagedCopyError`: a shard
        file missing of a step the layout holds (the engine takes it for a step not
        written: a request error, which no other copy would have been asked about), or a
        file that cannot be read."""
        try:
            yield
        except (DamagedCopyError, DatasetBusyError):
            raise
        except InvalidRequestError as e:
            unstored = UNSTORED_STEP.match(str(e))
            if self.expected is None or unstored is None or not self._holds(name, field, int(unstored.group(1))):
                raise
            missing = _MISSING_FILE.search(unstored.group(2))
            raise self._damaged(name, DamagedCopyError(
                f"worker {self.slot}'s copy of {name}/{field} lacks time index {unstored.group(1)}, which the cluster "
                f"laid out{unstored.group(2)}"), missing.group(1) if missing else None) from None
        except (CorruptDataError, StorageError) as e:
            if self.expected is None:
                raise
            raise self._damaged(name, e, None) from None

    def _holds(self, name: str, field: str, t: int) -> bool:
        """Whether the catalogue records step ``t`` of ``field`` as written when placed."""
        entry = ((self.expected or {}).get(name) or {}).get("written", {}).get(field)
        return entry is not None and holds(parse_runs(entry, field), t)

    def _damaged(self, name: str, error: TurbdbError, missing: str | None) -> DamagedCopyError:
        damaged = error if isinstance(error, DamagedCopyError) else DamagedCopyError(
            f"worker {self.slot}'s copy of dataset {name!r} cannot be read ({type(error).__name__}: {error})")
        self.damage[name] = (str(damaged), missing)
        return damaged

    def problems(self) -> dict[str, str]:
        """Per dataset, why this worker's copy may not serve (``turbdb cluster status``): its
        metadata checked against the catalogue's record now, and the faults met while
        serving (a missing file that is back is forgotten)."""
        for name in sorted(self.expected or {}):
            with contextlib.suppress(TurbdbError):
                self.dataset(name)
        with self._lock:
            for name, (_, missing) in list(self.damage.items()):
                if missing is not None and Path(missing).exists():
                    del self.damage[name]
            return {name: why for name, (why, _) in sorted(self.damage.items())}

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
        with self._serving(dataset, field):
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
        with self._serving(dataset, field):
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
        bytes written. A file the source does not have (None: a step not written there) is
        removed here too: one left from an earlier dataset of that name would be read as
        this one's."""
        written = 0
        for r, data in zip(relative, contents):
            target = self.root / r
            if data is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
            written += len(data)
        self._forget()
        return written

    def keep_only(self, relative: list[str]) -> int:
        """Removes the files of this root's dataset copies that are not in ``relative`` (a
        new layout: partitions now held elsewhere, steps, fields and datasets the database
        no longer has); returns how many. Only directories holding a turbdb dataset are
        looked into: whatever else lies under the root is left alone."""
        keep = set(relative)
        datasets = {k.split("/", 1)[0] for k in keep}
        removed = 0
        if not self.root.is_dir():
            return 0
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith(".") or not entry.is_dir() or not _is_turbdb_dataset(entry):
                continue
            if entry.name not in datasets:
                shutil.rmtree(entry)  # a dataset the database no longer has
                removed += 1
                continue
            for directory, subdirs, names in os.walk(entry, topdown=False):
                here = Path(directory)
                for n in names:
                    if str((here / n).relative_to(self.root)) not in keep:
                        (here / n).unlink()
                        removed += 1
                if here != entry and not any(here.iterdir()):
                    here.rmdir()
        self._forget()
        return removed

    def _forget(self) -> None:
        """Drops opened datasets (their cached shard indexes may describe replaced files),
        their checks and the faults met: the files are new."""
        with self._lock:
            self._datasets.clear()
            self._checked.clear()
            self.damage.clear()

    def copy_in(self, source: str, relative: list[str]) -> int:
        """Copies files from another root this worker can read (shared staging storage)."""
        return self.write_files(relative, Node(source, self.slot).read_files(relative))

    def _count(self, kind: str, points: int, began: float) -> None:
        with self._lock:
            work = self.work.setdefault(kind, {"units": 0, "points": 0, "seconds": 0.0})
            work["units"] += 1
            work["points"] += points
            work["seconds"] += _clock() - began


def _is_turbdb_dataset(directory: Path) -> bool:
    try:
        return "turbdb" in read_json(directory / ZARR_JSON).get("attributes", {})
    except TurbdbError:
        return False


def _clock() -> float:
    return time.perf_counter()
