"""Queries handed in without waiting: ``Dataset.submit`` (local or remote) returns a
:class:`concurrent.futures.Future` at once and runs the query on a thread of one pool
shared by the process. Queries submitted together are in flight together, so a node
engine co-schedules them and one read serves all, as if each had its own thread; the
threads only wait (the evaluation releases the GIL)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

#: Queries in flight at once from ``submit``; more wait their turn in the pool's queue.
MAX_IN_FLIGHT = 64

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    """In a fork's child: the parent's pool threads do not exist there; make a new pool."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def submit(run: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
    """``run(*args, **kwargs)`` on the shared pool; its result or error in the future."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT, thread_name_prefix="turbdb-submit")
        return _pool.submit(run, *args, **kwargs)
