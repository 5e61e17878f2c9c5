"""Handing a unit's points to a worker on the same machine, and its answer back, through
shared memory instead of Dask's network path: the mediator writes the points into a file
in ``/dev/shm`` and the unit's call carries only its name; the worker maps it (once:
:class:`Mappings`), evaluates, and writes its answer (cast to the query's dtype on the
way) into a file the mediator gave it. The mediator hands that answer on as a view of the
file, not a copy: the file goes back to the pool when the last array looking into it is
gone (a 1-worker query's answer is the caller's array itself).

Files are kept for reuse (:class:`Pool`), each allocated once and kept mapped by the
mediator: writing 24 MB into a new tmpfs file costs 20 ms here, into pages that exist and
are mapped a memory copy, which is what makes the hand-off cheaper than the network path.
A file goes back to the pool only when no array looks into it any more, and a file that a
worker might still write into (a unit left running when its query ended)
is removed, never reused. Files are allocated in full when made, so that writing through
a mapping cannot fault on a full file system.

Whether a worker sees this machine's ``/dev/shm`` is asked once per worker address (it
reads back a token the mediator wrote; one that does not answer in ``PROBE_SECONDS``, a
stopped worker, takes the network path for now and is asked again later); remote
workers, and a full ``/dev/shm``, take the network path. A worker only ever opens files the mediator made, never creates one, so a
unit that outlives its query leaves nothing behind. The pool is emptied when the
database is closed or the process exits; the files of a mediator killed outright are
removed by the next one that starts on this machine."""

from __future__ import annotations

import dataclasses
import mmap
import os
import socket
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

#: Where the files live: a RAM-backed file system shared by the processes of one machine.
SHARED_DIR = Path("/dev/shm")
#: Arrays smaller than this ride in the call (a routed unit has at least 2¹⁴ points, 384 KiB).
MIN_BYTES = 1 << 18
#: Bytes of files the pool keeps for reuse at most.
KEEP_BYTES = 256 << 20
PREFIX = "turbdb-handoff-"
#: How long a worker may take to say whether it sees ``/dev/shm`` (it answers in
#: milliseconds unless stopped or hung), and how long one that did not is left on the
#: network path before it is asked again.
PROBE_SECONDS = 3.0
RETRY_SECONDS = 10.0
#: Map every page at once (one call) instead of faulting them in one by one (Linux).
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


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
        """The array, read-only, in this worker's mapping of its file (no copy)."""
        view = MAPPINGS.view(self.path, self.dtype, self.shape)
        if view is None:
            raise FileNotFoundError(f"{self.path}: the points of a unit whose query has ended")
        view.flags.writeable = False
        return view


def write_into(path: str, values: np.ndarray, dtype: Any = None) -> SharedArray | None:
    """On a worker: writes ``values``, cast to ``dtype`` on the way, into the file
    ``path`` that the mediator made (and sized: writing through the mapping cannot fault
    on a full file system); None if it is gone (its query ended) or too small."""
    shared = SharedArray(path, np.dtype(dtype or values.dtype).str, values.shape)
    view = MAPPINGS.view(path, shared.dtype, shared.shape)
    if view is None:
        return None
    np.copyto(view, values, casting="same_kind")
    return shared


class Mappings:
    """A worker's mappings of the mediator's files, kept while the files live. The pool
    hands the same files out query after query, and mapping one afresh (the page tables
    of its 12–24 MB) cost ≈ 2 ms per array here. A mapping whose file was removed or
    replaced is dropped at the next use of any (the mediator removes files it no longer
    reuses, and a mapping would keep their memory); at most ``KEEP_BYTES`` are kept, the
    least recently used unmapped first."""

    def __init__(self, keep_bytes: int = KEEP_BYTES):
        self.keep_bytes = keep_bytes
        self._maps: OrderedDict[str, tuple[int, mmap.mmap]] = OrderedDict()  # path → (inode, mapping)
        self._lock = threading.Lock()

    def view(self, path: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray | None:
        """``shape`` items of ``dtype`` at the start of the file ``path``, writable, or None
        if the file is gone or too small."""
        count = int(np.prod(shape))
        nbytes = count * np.dtype(dtype).itemsize
        with self._lock:
            self._drop_stale()
            entry = self._maps.get(path)
            if entry is None or len(entry[1]) < nbytes:
                entry = self._map(path, nbytes)
                if entry is None:
                    return None
                self._maps[path] = entry
            self._maps.move_to_end(path)
            self._evict()
            return np.frombuffer(entry[1], dtype=dtype, count=count).reshape(shape)

    def mapped(self) -> list[str]:
        with self._lock:
            return list(self._maps)

    @staticmethod
    def _map(path: str, nbytes: int) -> tuple[int, mmap.mmap] | None:
        try:
            with open(path, "r+b") as f:  # never O_CREAT: a file unlinked by the mediator stays gone
                st = os.fstat(f.fileno())
                if st.st_size < nbytes or st.st_size == 0:
                    return None
                return st.st_ino, mmap.mmap(f.fileno(), st.st_size, flags=mmap.MAP_SHARED | _POPULATE)
        except (OSError, ValueError):  # gone, or nothing to map
            return None

    def _drop_stale(self) -> None:
        for path, (inode, mapped) in list(self._maps.items()):
            try:
                alive = os.stat(path).st_ino == inode
            except OSError:
                alive = False
            if not alive:
                del self._maps[path]
                _close(mapped)

    def _evict(self) -> None:
        while len(self._maps) > 1 and sum(len(m) for _, m in self._maps.values()) > self.keep_bytes:
            _, (_, mapped) = self._maps.popitem(last=False)
            _close(mapped)


#: This process's mappings (on a worker).
MAPPINGS = Mappings()


def read_token(path: str) -> str | None:
    """On a worker: the probe file's content, or None if this worker cannot see it."""
    try:
        return Path(path).read_text()
    except OSError:
        return None


class File:
    """A shared-memory file of the pool: its path, its capacity (bytes allocated up front,
    so that writing through a mapping cannot fault on a full file system) and the
    mediator's mapping of it, kept while the file lives."""

    def __init__(self, capacity: int):
        self.path = SHARED_DIR / f"{PREFIX}{_owner()}-{uuid.uuid4().hex}"
        self.capacity = capacity
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, capacity)
            self.mapped = mmap.mmap(fd, capacity, flags=mmap.MAP_SHARED)
        except OSError:
            self.path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)

    def view(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        return np.frombuffer(self.mapped, dtype=dtype, count=int(np.prod(shape))).reshape(shape)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        _close(self.mapped)


class Pool:
    """Shared-memory files of this process kept for reuse, by capacity (powers of two), at
    most ``KEEP_BYTES`` in all; the rest are removed."""

    def __init__(self) -> None:
        self._free: dict[int, list[File]] = {}
        self._lock = threading.Lock()
        self._open = True
        self._closed = weakref.finalize(self, _remove_free, self._free)  # also at exit

    def take(self, nbytes: int) -> File:
        """A file of at least ``nbytes`` (OSError if none can be made: the network path)."""
        capacity = _capacity(nbytes)
        with self._lock:
            if self._free.get(capacity):
                return self._free[capacity].pop()
        return File(capacity)

    def give(self, file: File) -> None:
        """Takes back a file no worker will write into any more (removes it if the pool is
        closed: an answer the caller held past the database's close)."""
        with self._lock:
            kept = sum(c * len(files) for c, files in self._free.items())
            if self._open and kept + file.capacity <= KEEP_BYTES:
                self._free.setdefault(file.capacity, []).append(file)
                return
        file.remove()

    def kept(self) -> list[Path]:
        """The files waiting for reuse."""
        with self._lock:
            return [f.path for files in self._free.values() for f in files]

    def close(self) -> None:
        with self._lock:
            self._open = False
            _remove_free(self._free)


class SharedMemory:
    """The hand-off of one mediator: which workers share this machine's memory (asked
    once per address) and its pool of files. A worker that does not answer the question
    within ``PROBE_SECONDS`` (stopped, hung) takes the network path and is asked again
    ``RETRY_SECONDS`` later; each address is asked under its own lock, so a silent worker
    holds up only the units sent to it."""

    def __init__(self, client: Any):
        self.client = client
        self.pool = Pool()
        self._shared: dict[str, bool] = {}
        self._unanswered: dict[str, float] = {}  # address → when it last failed to answer
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        if SHARED_DIR.is_dir():
            _remove_orphans()

    def reaches(self, address: str) -> bool:
        with self._lock:
            if address in self._shared:
                return self._shared[address]
            lock = self._locks.setdefault(address, threading.Lock())
        with lock:
            with self._lock:
                if address in self._shared:
                    return self._shared[address]
                if time.monotonic() - self._unanswered.get(address, -RETRY_SECONDS) < RETRY_SECONDS:
                    return False
            seen = self._probe(address)
            with self._lock:
                if seen is None:
                    self._unanswered[address] = time.monotonic()
                    return False
                self._shared[address] = seen
                return seen

    def exchange(self) -> Exchange:
        return Exchange(self.pool)

    def close(self) -> None:
        self.pool.close()

    def _probe(self, address: str) -> bool | None:
        """Whether the worker at ``address`` reads this machine's ``/dev/shm``; None if it
        gave no clean answer — it did not answer in time (``client.run`` alone would wait
        for a stopped worker for as long as it stays stopped), or the probe failed — so
        that it is asked again later instead of taking the network path for good."""
        if not SHARED_DIR.is_dir():
            return False
        token = uuid.uuid4().hex
        path = SHARED_DIR / f"{PREFIX}{_owner()}-probe-{token}"
        try:
            path.write_text(token)
            answers = self.client.run(read_token, str(path), workers=[address], on_error="return",
                                      callback_timeout=PROBE_SECONDS)
        except Exception:  # timed out, or the probe itself failed (a full /dev/shm, the scheduler gone)
            return None
        finally:
            path.unlink(missing_ok=True)
        seen = answers.get(address, ValueError("no answer"))
        if seen is None or isinstance(seen, str):  # it answered: it reads the file, or cannot see it
            return seen == token
        return None  # it failed to run the probe (an exception answered), or was gone


class Exchange:
    """The shared-memory files of one query: its units' points, written once per unit
    (retries and backups on this machine read the same file), and one answer file per
    unit. ``close`` gives back to the pool the files no worker writes into any more (points,
    answers read back) and removes the others (answers of units that may still run)."""

    def __init__(self, pool: Pool):
        self.pool = pool
        self._inputs: dict[int, tuple[File, SharedArray] | None] = {}
        self._answers: dict[str, File] = {}  # answer files handed out and not read back
        self._lock = threading.Lock()

    def points(self, key: int, array: np.ndarray) -> SharedArray | None:
        """``array`` in a shared file (written once per ``key``), or None if it is too
        small to be worth one or no file can be made."""
        with self._lock:
            if key not in self._inputs:
                self._inputs[key] = self._write(array) if array.nbytes >= MIN_BYTES else None
            entry = self._inputs[key]
            return None if entry is None else entry[1]

    def answer_file(self, nbytes: int) -> str | None:
        """A file for a worker to write an answer of ``nbytes`` into (None: no room)."""
        try:
            file = self.pool.take(nbytes)
        except OSError:
            return None
        with self._lock:
            self._answers[str(file.path)] = file
        return str(file.path)

    def take(self, shared: SharedArray) -> np.ndarray:
        """An answer a worker wrote, as a view of its file (copying 12–24 MB out cost
        2–4 ms a query): the file goes back to the pool when the last array that looks
        into it is gone, whoever holds it by then."""
        with self._lock:
            file = self._answers.pop(shared.path, None)
        if file is None:
            raise RuntimeError(f"{shared.path} is not an answer file this query handed out (a bug)")
        # Views of an array keep it alive (``.base``), so this one dies with the last of them.
        root = np.frombuffer(file.mapped, dtype=shared.dtype, count=int(np.prod(shared.shape)))
        weakref.finalize(root, self.pool.give, file)
        return root.reshape(shared.shape)

    def close(self) -> None:
        with self._lock:
            for entry in self._inputs.values():
                if entry is not None:
                    self.pool.give(entry[0])
            for file in self._answers.values():
                file.remove()
            self._inputs.clear()
            self._answers.clear()

    def _write(self, array: np.ndarray) -> tuple[File, SharedArray] | None:
        try:
            file = self.pool.take(array.nbytes)
        except OSError:  # full, or no /dev/shm after all: the network path
            return None
        file.view(array.dtype, array.shape)[...] = array
        return file, SharedArray(str(file.path), array.dtype.str, array.shape)


def _capacity(nbytes: int) -> int:
    return 1 << max(nbytes - 1, 1).bit_length()


def _owner() -> str:
    """This process, as file names on this machine say it."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _remove_free(free: dict[int, list[File]]) -> None:
    for files in free.values():
        for file in files:
            file.remove()
    free.clear()


def _close(mapped: mmap.mmap) -> None:
    """Unmaps now if no array still looks into the mapping (else when the last one goes)."""
    try:
        mapped.close()
    except BufferError:
        pass


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
