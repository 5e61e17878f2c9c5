"""One writer at a time per stored step within a process: threads writing the same step of
the same field (its shards, its rewrite mark) wait for each other; other steps stay parallel.

Across processes the dataset's writer lock already keeps writes apart, but the threads of
one process share that hold. Two of them rewriting one step at once mixed it: the rewrite
mark (``PID@HOST``, :mod:`turbdb.rewrites`) was cleared by the first to finish while the
other still wrote, so readers took the step for settled and read both versions; and the
shards' temporaries are named by process (``.turbdb-tmp-<shard>-<pid>``), so one thread
renamed or removed the other's (a ``StorageError``, "No such file or directory")."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


class _StepLock:
    """The lock of one step and how many threads hold or wait for it: dropped at zero, so a
    long run of writes keeps no lock per step it ever wrote."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


#: The steps being written: (dataset's real path, field, time index) → its lock.
_STEPS: dict[tuple[str, str, int], _StepLock] = {}
_GUARD = threading.Lock()


@contextlib.contextmanager
def step_written(dataset: Path, field: str, t: int) -> Iterator[None]:
    """Held while this thread writes step ``t`` of ``field`` in the dataset at ``dataset``
    (its real path: two handles on one dataset share the lock); waits for another thread
    of this process writing the same step."""
    key = (os.path.realpath(dataset), field, t)
    with _GUARD:
        step = _STEPS.setdefault(key, _StepLock())
        step.users += 1
    try:
        with step.lock:
            yield
    finally:
        with _GUARD:
            step.users -= 1
            if step.users == 0 and _STEPS.get(key) is step:  # not after a fork cleared them
                del _STEPS[key]


def _forget_after_fork() -> None:
    # A forked child has only the forking thread: locks other threads held would never be
    # released there.
    global _GUARD
    _STEPS.clear()
    _GUARD = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
