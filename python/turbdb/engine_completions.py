"""Being told when a node engine's queries end, without a thread per query.

The engine puts the id of each query handed in with a completion queue on that queue when
it ends; one thread per engine waits there and calls what the submitter registered for the
id. ``Dataset.submit`` (:mod:`turbdb.engine_futures`) sets a future from it, the server
(:mod:`turbdb.service.engine_waits`) wakes its event loop."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ._core import CompletionQueue

#: How long (s) the waiting thread sleeps on the queue before it looks again: only how
#: soon it notices that the engine has gone.
WAIT_SECONDS = 1.0


class Completions:
    """One engine's completion queue and the thread that waits on it."""

    def __init__(self, engine: Any):
        self._engine = weakref.ref(engine)
        self._queue = CompletionQueue()
        self._lock = threading.Lock()
        self._on_done: dict[int, tuple[Any, Callable[[Any], None]]] = {}
        # The thread holds the queue, not the engine: it ends when the engine goes.
        weakref.finalize(engine, self._queue.close)
        threading.Thread(target=self._pump, name="turbdb-engine-completions", daemon=True).start()

    def submit(self, call: Any, on_done: Callable[[Any], None], stop: Any = None) -> Any:
        """Hands ``call`` (a :class:`turbdb.query.PointCall`) to the engine and returns its
        ``PendingQuery``; ``on_done(pending)`` is called once, from the waiting thread or
        from here, when it ends. Raises what ``Engine.submit`` raises (nothing is called
        then). ``stop``: a ``_core.StopFlag`` that stops a query the engine serves alone,
        here, before this returns."""
        engine = self._engine()
        if engine is None:
            raise RuntimeError("the database's node engine has been closed")
        pending = call.submit(engine, notify=self._queue, stop=stop)
        with self._lock:
            self._on_done[pending.id] = (pending, on_done)
        # Its id may have come off the queue before it was registered (a query served at
        # once, from the cache).
        if pending.done:
            self._fire(pending.id)
        return pending

    def forget(self, id: int) -> None:
        """``on_done`` of query ``id`` will not be called (its waiter has gone)."""
        with self._lock:
            self._on_done.pop(id, None)

    def _fire(self, id: int) -> None:
        with self._lock:
            registered = self._on_done.pop(id, None)
        if registered is not None:
            pending, on_done = registered
            try:
                on_done(pending)
            except Exception:  # a waiter's bug must not stop the thread that serves all of them
                logging.getLogger(__name__).exception("a completion callback failed")

    def _pump(self) -> None:
        while (ids := self._queue.wait(WAIT_SECONDS)) is not None:
            for id in ids:
                self._fire(id)


_of: weakref.WeakKeyDictionary[Any, Completions] = weakref.WeakKeyDictionary()
_of_lock = threading.Lock()


def of(engine: Any) -> Completions:
    """The completions of ``engine`` (one per engine in the process)."""
    with _of_lock:
        completions = _of.get(engine)
        if completions is None:
            completions = _of[engine] = Completions(engine)
        return completions
