"""``Dataset.submit`` straight to a node engine: a future per query, no thread per query.

Through the thread pool of :mod:`turbdb.submission`, at most 64 submitted queries are in
flight at once, each holding a thread that waits for its answer; the engine batches only
those 64. Here a query is handed to the engine at once (up to ``MAX_IN_FLIGHT`` of them;
the rest wait in submission order), and its future is set when the engine reports it done
(:mod:`turbdb.engine_completions`), which also hands the engine the next query waiting."""

from __future__ import annotations

import threading
import weakref
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from . import engine_completions, submission
from .exceptions import EngineBusyError, QueryCancelledError
from .query import PointCall, evaluate_call
from .step_versions import REWRITE_ERRORS

#: Queries handed to the engine and not yet answered, at most; the others wait their turn.
MAX_IN_FLIGHT = 4096

#: Points from which a query is handed to the engine from a thread of its own, so that
#: ``submit`` returns at once (smaller ones are handed in by the caller: no thread to start).
BACKGROUND_POINTS = 1 << 12

#: Seconds before queries refused by a full engine, with none of ours in it to end and
#: make room, are handed in again.
BUSY_RETRY = 0.05


@dataclass
class _Submitted:
    dataset: Any
    call: PointCall
    future: Future


class EngineFutures:
    """Futures of the queries submitted to one engine (see :func:`submit`)."""

    def __init__(self, engine: Any):
        self._completions = engine_completions.of(engine)
        self._lock = threading.Lock()
        self._starting = threading.Lock()
        self._in_flight = 0
        self._waiting: deque[_Submitted] = deque()

    def submit(self, dataset: Any, call: PointCall) -> Future:
        future: Future = Future()
        future.set_running_or_notify_cancel()  # handed over at once: it cannot be cancelled
        with self._lock:
            self._waiting.append(_Submitted(dataset, call, future))
        if len(call.points) >= BACKGROUND_POINTS:
            # Handing it in takes long: cutting 10⁵ points takes about 20 ms, and an idle
            # engine serves a large query alone, inside the hand-in (10⁷ points: 9 s).
            threading.Thread(target=self._start_waiting, name="turbdb-hand-in", daemon=True).start()
        else:
            self._start_waiting()
        return future

    def _start_waiting(self) -> None:
        """Hands the engine the queries that wait, while fewer than MAX_IN_FLIGHT are in it.
        One thread at a time does it; a query that ends meanwhile (from the cache, at once,
        in this very loop) leaves the next ones to that thread, so that nothing recurses."""
        while self._starting.acquire(blocking=False):
            try:
                refused = self._hand_in()
            finally:
                self._starting.release()
            if refused:
                return
            with self._lock:
                if not self._waiting or self._in_flight >= MAX_IN_FLIGHT:
                    return

    def _hand_in(self) -> bool:
        """Hands in queries while there is room; whether a full engine refused one."""
        while True:
            with self._lock:
                if not self._waiting or self._in_flight >= MAX_IN_FLIGHT:
                    return False
                job = self._waiting.popleft()
                self._in_flight += 1
            try:
                self._completions.submit(job.call, lambda pending, job=job: self._finish(job, pending))
            except EngineBusyError:
                with self._lock:
                    self._waiting.appendleft(job)
                    self._in_flight -= 1
                    idle = self._in_flight == 0
                if idle:  # no query of ours will end and make room: try again in a moment
                    threading.Timer(BUSY_RETRY, self._start_waiting).start()
                return True
            except Exception as e:  # a bad point, an unknown step: the future's error
                with self._lock:
                    self._in_flight -= 1
                job.future.set_exception(e)
            except BaseException:  # Ctrl-C while the engine served it here: abandoned, and the interrupt goes on
                with self._lock:
                    self._in_flight -= 1
                job.future.set_exception(QueryCancelledError("interrupted (Ctrl-C) as it was handed to the engine"))
                raise

    def _finish(self, job: _Submitted, pending: Any) -> None:
        with self._lock:
            self._in_flight -= 1
        try:
            values, counters = pending.result()
            job.future.set_result(job.call.answer(job.dataset, values, counters))
        except REWRITE_ERRORS as e:
            if job.call.versions.spoiled(job.dataset, e):
                # A rewrite overlapped it: evaluated again on a thread, which may wait for the rewrite.
                again = submission.submit(lambda: evaluate_call(job.dataset, job.call.renewed(job.dataset)))
                again.add_done_callback(lambda done: _pass_on(done, job.future))
            else:
                job.future.set_exception(job.call.named(e))
        except BaseException as e:
            job.future.set_exception(job.call.named(e))
        self._start_waiting()


def _pass_on(done: Future, future: Future) -> None:
    """Sets ``future`` as ``done`` ended."""
    error = done.exception()
    if error is None:
        future.set_result(done.result())
    else:
        future.set_exception(error)


_futures: weakref.WeakKeyDictionary[Any, EngineFutures] = weakref.WeakKeyDictionary()
_futures_lock = threading.Lock()


def submit(engine: Any, dataset: Any, call: PointCall) -> Future:
    """``call`` on ``dataset`` handed to ``engine``: a future of its answer."""
    with _futures_lock:
        futures = _futures.get(engine)
        if futures is None:
            futures = _futures[engine] = EngineFutures(engine)
    return futures.submit(dataset, call)
