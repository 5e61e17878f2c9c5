"""Queries handed in without waiting: ``Dataset.submit`` (local or remote) returns a
:class:`concurrent.futures.Future` at once and runs the query on a thread of one pool
shared by the process. Queries submitted together are in flight together, so a node
engine co-schedules them and one read serves all, as if each had its own thread; the
threads only wait (the evaluation releases the GIL)."""

from __future__ import annotations

import difflib
import inspect
import os
import threading
from collections.abc import Callable, Mapping
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


def failed(error: BaseException) -> Future:
    """A future that holds ``error``: a submission's errors come with its answer."""
    future: Future = Future()
    future.set_exception(error)
    return future


def options_error(query: Callable[..., Any], options: Mapping[str, Any]) -> TypeError | None:
    """The TypeError of ``submit(field, points, **options)`` given options that ``query``
    does not take, or without one it needs, worded for ``submit``; None when they fit.
    Checked before the query goes anywhere: through a node engine the error named an
    internal function (``point_call()``), through the pool ``query()``."""
    parameters = inspect.signature(query).parameters
    owner = query.__qualname__.rsplit(".", 1)[0]  # Dataset, RemoteDataset
    takes = [name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    for name in options:
        if name not in takes:
            close = difflib.get_close_matches(name, takes, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            return TypeError(f"{owner}.submit() got an unexpected keyword argument {name!r}: {hint}it takes the "
                             f"options of {owner}.query(): {', '.join(takes)}")
    missing = [name for name in takes if parameters[name].default is inspect.Parameter.empty and name not in options]
    if missing:
        return TypeError(f"{owner}.submit() missing required keyword argument(s) {', '.join(map(repr, missing))} "
                         f"(the options of {owner}.query())")
    return None
