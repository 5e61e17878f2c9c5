"""Handing a unit's points to a worker on the same machine, and its answer back, through
shared memory instead of Dask's network path: the mediator writes the points into a file
in ``/dev/shm`` and the task carries only its name; the worker maps it, evaluates, and
writes its answer into a file the mediator gave it, which the mediator reads back.

Files are kept for reuse (:class:`Pool`): writing into a tmpfs file whose pages exist
costs a third of writing a new one (24 MB: 6 ms against 20 ms here), which is what makes
the hand-off cheaper than the network path. An answer is therefore copied out of its file
before the file goes back to the pool, and a file that a worker might still write into (a
task left running when its query ended) is unlinked, never reused.

Whether a worker sees this machine's ``/dev/shm`` is asked once per worker address (it
reads back a token the mediator wrote); remote workers, and any file that cannot be
written (a full ``/dev/shm``), take the network path. A worker only ever opens files the
mediator made, never creates one, so a task that outlives its query leaves nothing behind.
The pool is emptied when the database is closed or the process exits; the files of a
mediator killed outright are removed by the next one that starts on this machine."""

from __future__ import annotations

import dataclasses
import mmap
import os
import socket
import threading
import uuid
import weakref
from pathlib import Path
from typing import Any

import numpy as np

#: Where the files live: a RAM-backed file system shared by the processes of one machine.
SHARED_DIR = Path("/dev/shm")
#: Arrays smaller than this ride in the task (a routed unit has at least 2¹⁴ points, 384 KiB).
MIN_BYTES = 1 << 18
#: Bytes of files the pool keeps for reuse at most.
KEEP_BYTES = 256 << 20
PREFIX = "turbdb-handoff-"


@dataclasses.dataclass(frozen=True)
class SharedArray:
    """An array in a shared-memory file: its path, dtype and shape (from the file's start)."""

    path: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize

    def load(self) -> np.ndarray:
        """The array, mapped read-only from its file (no copy)."""
        with open(self.path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), self.nbytes, access=mmap.ACCESS_READ)
        return np.frombuffer(mapped, dtype=self.dtype).reshape(self.shape)

    def read(self) -> np.ndarray:
        """A copy of the array (the file may be reused once this returns)."""
        out = np.empty(self.shape, dtype=self.dtype)
        with open(self.path, "rb") as f:
            if f.readinto(memoryview(out).cast("B")) != out.nbytes:
                raise OSError(f"{self.path} is shorter than the {out.nbytes} bytes of its answer")
        return out


def write_into(path: str, values: np.ndarray) -> SharedArray | None:
    """On a worker: writes ``values`` into the existing file ``path`` (the mediator's);
    None if it is gone (its query ended) or cannot hold them (the file system is full)."""
    values = np.ascontiguousarray(values)
    try:
        with open(path, "r+b") as f:  # never O_CREAT: a file unlinked by the mediator stays gone
            f.write(values.data)
    except OSError:
        return None
    return SharedArray(path, values.dtype.str, values.shape)


def read_token(path: str) -> str | None:
    """On a worker: the probe file's content, or None if this worker cannot see it."""
    try:
        return Path(path).read_text()
    except OSError:
        return None


class Pool:
    """Shared-memory files of this process kept for reuse, by capacity (powers of two), at
    most ``KEEP_BYTES`` in all; the rest are unlinked."""

    def __init__(self) -> None:
        self._free: dict[int, list[Path]] = {}
        self._lock = threading.Lock()
        self._closed = weakref.finalize(self, _unlink_free, self._free)  # also at exit

    def take(self, nbytes: int) -> Path:
        capacity = _capacity(nbytes)
        with self._lock:
            if self._free.get(capacity):
                return self._free[capacity].pop()
        path = SHARED_DIR / f"{PREFIX}{_owner()}-{uuid.uuid4().hex}"
        path.touch()
        return path

    def give(self, path: Path, nbytes: int) -> None:
        """Takes back a file no worker will write into any more."""
        capacity = _capacity(nbytes)
        with self._lock:
            kept = sum(c * len(paths) for c, paths in self._free.items())
            if kept + capacity <= KEEP_BYTES:
                self._free.setdefault(capacity, []).append(path)
                return
        path.unlink(missing_ok=True)

    def kept(self) -> list[Path]:
        """The files waiting for reuse."""
        with self._lock:
            return [p for paths in self._free.values() for p in paths]

    def close(self) -> None:
        with self._lock:
            _unlink_free(self._free)


class SharedMemory:
    """The hand-off of one mediator: which workers share this machine's memory (asked
    once per address) and its pool of files."""

    def __init__(self, client: Any):
        self.client = client
        self.pool = Pool()
        self._shared: dict[str, bool] = {}
        self._lock = threading.Lock()
        if SHARED_DIR.is_dir():
            _remove_orphans()

    def reaches(self, address: str) -> bool:
        with self._lock:
            if address not in self._shared:
                self._shared[address] = self._probe(address)
            return self._shared[address]

    def exchange(self) -> Exchange:
        return Exchange(self.pool)

    def close(self) -> None:
        self.pool.close()

    def _probe(self, address: str) -> bool:
        if not SHARED_DIR.is_dir():
            return False
        token = uuid.uuid4().hex
        path = SHARED_DIR / f"{PREFIX}{_owner()}-probe-{token}"
        try:
            path.write_text(token)
            seen = self.client.run(read_token, str(path), workers=[address], on_error="return")
            return seen.get(address) == token
        except Exception:  # a worker that cannot answer is not known to share memory
            return False
        finally:
            path.unlink(missing_ok=True)


class Exchange:
    """The shared-memory files of one query: its units' points, written once per unit
    (retries and backups on this machine read the same file), and one answer file per
    task. ``close`` gives back to the pool the files no worker writes into any more (points,
    answers read back) and unlinks the others (answers of tasks that may still run)."""

    def __init__(self, pool: Pool):
        self.pool = pool
        self._inputs: dict[int, SharedArray | None] = {}
        self._answers: dict[str, int] = {}  # answer files handed out and not read back: their capacity
        self._lock = threading.Lock()

    def points(self, key: int, array: np.ndarray) -> SharedArray | None:
        """``array`` in a shared file (written once per ``key``), or None if it is too
        small to be worth one or cannot be written."""
        with self._lock:
            if key not in self._inputs:
                self._inputs[key] = self._write(array) if array.nbytes >= MIN_BYTES else None
            return self._inputs[key]

    def answer_file(self, nbytes: int) -> str:
        """A file for a worker to write an answer of ``nbytes`` into."""
        path = self.pool.take(nbytes)
        with self._lock:
            self._answers[str(path)] = nbytes
        return str(path)

    def take(self, shared: SharedArray) -> np.ndarray:
        """An answer a worker wrote (a copy), its file back in the pool."""
        values = shared.read()
        with self._lock:
            nbytes = self._answers.pop(shared.path, None)
        if nbytes is not None:
            self.pool.give(Path(shared.path), nbytes)
        return values

    def close(self) -> None:
        with self._lock:
            for shared in self._inputs.values():
                if shared is not None:
                    self.pool.give(Path(shared.path), shared.nbytes)
            for path in self._answers:
                Path(path).unlink(missing_ok=True)
            self._inputs.clear()
            self._answers.clear()

    def _write(self, array: np.ndarray) -> SharedArray | None:
        array = np.ascontiguousarray(array)
        path = self.pool.take(array.nbytes)
        try:
            with open(path, "r+b") as f:
                f.write(array.data)
        except OSError:  # full, or no /dev/shm after all: the network path
            path.unlink(missing_ok=True)
            return None
        return SharedArray(str(path), array.dtype.str, array.shape)


def _capacity(nbytes: int) -> int:
    return 1 << max(nbytes - 1, 1).bit_length()


def _owner() -> str:
    """This process, as file names on this machine say it."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _unlink_free(free: dict[int, list[Path]]) -> None:
    for paths in free.values():
        for path in paths:
            path.unlink(missing_ok=True)
    free.clear()


def _remove_orphans() -> None:
    """Removes the files of mediators on this host that no longer run (killed outright)."""
    host = socket.gethostname()
    for path in SHARED_DIR.glob(f"{PREFIX}{host}-*"):
        pid = path.name[len(f"{PREFIX}{host}-"):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
