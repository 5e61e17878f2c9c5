"""``Dataset.submit`` straight to a node engine: a future per query, no thread per query.

Through the thread pool of :mod:`turbdb.submission`, at most 64 submitted queries are in
flight at once, each holding a thread that waits for its answer; the engine batches only
those 64. Here a query is handed to the engine at once (up to ``MAX_IN_FLIGHT`` of them;
the rest wait in submission order) and the engine puts its id on a completion queue when
it ends; one thread per engine waits there, sets the futures and hands the engine the
queries that waited."""

from __future__ import annotations

import threading
import weakref
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ._core import CompletionQueue
from .exceptions import EngineBusyError
from .query import PointCall

#: Queries handed to the engine and not yet answered, at most; the others wait their turn.
MAX_IN_FLIGHT = 4096

#: How long (s) the waiting thread sleeps on the queue when no query waits its turn (only
#: how soon it notices the engine has gone), and when some wait for a full engine.
IDLE_WAIT, BUSY_WAIT = 1.0, 0.05


@dataclass
class _Submitted:
    dataset: Any
    call: PointCall
    future: Future
    pending: Any = None


class EngineFutures:
    """Futures of the queries submitted to one engine (see :func:`submit`)."""

    def __init__(self, engine: Any):
        self._engine = weakref.ref(engine)
        self._queue = CompletionQueue()
        self._lock = threading.Lock()
        self._in_flight: dict[int, _Submitted] = {}
        self._waiting: deque[_Submitted] = deque()
        # The thread holds the queue, not this object: it ends when the engine goes.
        weakref.finalize(engine, self._queue.close)
        threading.Thread(target=self._pump, name="turbdb-engine-futures", daemon=True).start()

    def submit(self, dataset: Any, call: PointCall) -> Future:
        future: Future = Future()
        future.set_running_or_notify_cancel()  # handed over at once: it cannot be cancelled
        with self._lock:
            self._waiting.append(_Submitted(dataset, call, future))
        self._start_waiting()
        return future

    def _start_waiting(self) -> None:
        """Hands the engine the queries that wait, while fewer than MAX_IN_FLIGHT are in it."""
        while True:
            with self._lock:
                if not self._waiting or len(self._in_flight) >= MAX_IN_FLIGHT:
                    return
                job = self._waiting.popleft()
            engine = self._engine()
            if engine is None:
                job.future.set_exception(RuntimeError("the database's node engine has been closed"))
                continue
            try:
                job.pending = job.call.submit(engine, notify=self._queue)
            except EngineBusyError:
                with self._lock:
                    self._waiting.appendleft(job)  # again when a query ends, or after BUSY_WAIT
                return
            except BaseException as e:  # a bad point, an unknown step: the future's error
                job.future.set_exception(e)
                continue
            with self._lock:
                self._in_flight[job.pending.id] = job
            # It may have ended before it was registered (served at once from the cache).
            if job.pending.done:
                self._finish([job.pending.id])

    def _finish(self, ids: list[int]) -> None:
        for id in ids:
            with self._lock:
                job = self._in_flight.pop(id, None)
            if job is None:
                continue
            try:
                values, counters = job.pending.result()
                job.future.set_result(job.call.answer(job.dataset, values, counters))
            except BaseException as e:
                job.future.set_exception(e)

    def _pump(self) -> None:
        while True:
            with self._lock:
                timeout = BUSY_WAIT if self._waiting else IDLE_WAIT
            ids = self._queue.wait(timeout)
            if ids is None:
                return
            self._finish(ids)
            self._start_waiting()


_futures: weakref.WeakKeyDictionary[Any, EngineFutures] = weakref.WeakKeyDictionary()
_futures_lock = threading.Lock()


def submit(engine: Any, dataset: Any, call: PointCall) -> Future:
    """``call`` on ``dataset`` handed to ``engine``: a future of its answer."""
    with _futures_lock:
        futures = _futures.get(engine)
        if futures is None:
            futures = _futures[engine] = EngineFutures(engine)
    return futures.submit(dataset, call)
