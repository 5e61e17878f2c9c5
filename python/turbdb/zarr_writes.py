"""Zarr stores written by one export that a failure stops cleanly. Zarr writes a store's
chunks from tasks on its own event-loop thread, each file in a worker thread: neither an
interrupt of the waiting thread nor one chunk's failure stops the others. After Ctrl-C they
went on failing at exit, printing a traceback each (68–294 lines); on a full disk the other
chunks' writes went on while the temporary store was removed, and made it again (left
behind, with asyncio's tracebacks). Only this export's writes are stopped and waited for:
another export, or the user's own Zarr work, in the same process goes on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from zarr.storage import LocalStore

#: How long a failed export waits for its file writes already under way.
WRITES_WAIT_SECONDS = 60.0


class StoppableStore(LocalStore):
    """A directory store that refuses further writes once stopped, and counts its file
    writes under way (each runs in a thread, which cancelling its task does not stop)."""

    def __init__(self, root: str | os.PathLike[str]):
        super().__init__(root)
        self._stopped = False
        self._writing: set[asyncio.Future[None]] = set()  # each until its thread is done
        self._idle = threading.Condition()

    async def _set(self, key: str, value: Any, exclusive: bool = False) -> None:
        if self._stopped:  # the export failed: the rest of its chunks are dropped, quietly
            raise asyncio.CancelledError
        write = asyncio.ensure_future(super()._set(key, value, exclusive=exclusive))
        with self._idle:
            self._writing.add(write)
        write.add_done_callback(self._written)
        await asyncio.shield(write)  # a cancelled task leaves the write counted until it ends

    def _written(self, write: asyncio.Future[None]) -> None:
        if not write.cancelled():
            write.exception()  # retrieved: told once, by the export's own failure
        with self._idle:
            self._writing.discard(write)
            self._idle.notify_all()

    def stop(self, timeout: float = WRITES_WAIT_SECONDS) -> None:
        """Refuses further writes and waits for those under way."""
        self._stopped = True
        with self._idle:
            self._idle.wait_for(lambda: not self._writing, timeout)

    def writes(self) -> set[asyncio.Future[None]]:
        """The file writes under way (tasks of zarr's loop that must not be cancelled: their
        threads would go on writing, uncounted)."""
        with self._idle:
            return set(self._writing)


@contextlib.contextmanager
def stopped_if_failed(store: StoppableStore) -> Iterator[None]:
    """Within the block, an export writes ``store``; on any exception its writes are
    stopped and waited for before the exception goes on (to the cleanup that removes the
    store). On an interrupt, or in the ``turbdb`` program (which exits next, with nothing
    else of Zarr's running), the tasks zarr started meanwhile are cancelled and awaited
    too: left pending, each printed "Task was destroyed but it is pending!" at exit. In a
    Python session after any other failure they end by themselves (their writes are
    refused), and another export's tasks are left alone."""
    from zarr.core import sync

    from .cli.interrupts import as_program

    before = _tasks_of(sync.loop[0])
    try:
        yield
    except BaseException as failure:
        loop = sync.loop[0]
        if (as_program() or not isinstance(failure, Exception)) and loop is not None and loop.is_running():
            # Coroutines of chunks not yet started are dropped unawaited: no warning each as
            # the program exits (in a Python session the filter would hide the user's own).
            if as_program():
                warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_since(before, store), loop).result(timeout=WRITES_WAIT_SECONDS)
        store.stop()
        raise


def _tasks_of(loop: asyncio.AbstractEventLoop | None) -> set[asyncio.Task[Any]]:
    """The tasks of zarr's ``loop`` now (none if it has not started)."""
    if loop is None or not loop.is_running():
        return set()
    with contextlib.suppress(Exception):
        return asyncio.run_coroutine_threadsafe(_all_tasks(), loop).result(timeout=10)
    return set()


async def _all_tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks()


async def _cancel_since(before: set[asyncio.Task[Any]], store: StoppableStore) -> None:
    keep = before | store.writes() | {asyncio.current_task()}
    tasks = [t for t in asyncio.all_tasks() if t not in keep]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)  # retrieved: no "never retrieved" at exit
