"""Long evaluations that Ctrl-C, ``cancel=`` and the interpreter's exit stop.

The kernel runs with the GIL released and looks at a ``_core.StopFlag`` before each cell it
sums. Python delivers Ctrl-C to the main thread only, between bytecodes: a main thread
inside the kernel saw it once the whole query was done (10⁷ lag8 gradient points: 5 s
later). So a large query on the main thread, or one given a ``cancel`` event, runs on a
helper thread while the caller waits, ready to set the flag; the kernel then stops before
its next cell (the plan before the cells and the reorder after them do not look at it: at
10⁷ points a query stops within about 0.5 s). Other large queries (a ``Dataset.submit``
pool's) are stopped as the interpreter exits for a Ctrl-C, and those still queued refused,
instead of holding it until they end."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from . import _core
from .exceptions import QueryCancelledError

T = TypeVar("T")

#: Points from which a query gets a stop flag: smaller ones end within milliseconds, and
#: the flag would cost their loops (a 10-point query takes 30–50 µs).
STOPPABLE_POINTS = 1 << 12

#: Points from which a query on the main thread runs on a helper thread, so that Ctrl-C
#: stops it: the hop costs about 0.1 ms (95 µs a call, 2-core Xeon), 0.2 % of a query of
#: this size (50 ms or more); a smaller one ends about as soon as Ctrl-C could stop it.
WATCHED_POINTS = 1 << 18

#: How often (seconds) the waiting thread looks at ``cancel``.
POLL = 0.05

#: How long (seconds) a stopped query may take to notice before the caller goes on without
#: it (the kernel looks at its flag before every cell; the plan before the cells and the
#: reorder after them do not look: up to about 0.5 s at 10⁷ points).
STOP_GRACE = 10.0

_running: set[Any] = set()
_running_lock = threading.Lock()
#: Set as the interpreter exits for a Ctrl-C: queries that would start then (a pool's
#: queued ones: Python runs them before its threads end) are refused at once.
_exiting = False


def _forget_running() -> None:
    """In a fork's child: a lock another thread of the parent held would stay held, and
    the parent's queries are not the child's."""
    global _running, _running_lock
    _running, _running_lock = set(), threading.Lock()


os.register_at_fork(after_in_child=_forget_running)


def run(evaluate: Callable[[Any], T], *, points: int, cancel: threading.Event | None = None) -> T:
    """``evaluate(stop)``, where ``stop`` is a ``_core.StopFlag`` to hand to the kernel (or
    None for a small query): stopped by Ctrl-C on the main thread, by ``cancel`` being set
    (then ``QueryCancelledError``), and by the interpreter's exit."""
    if cancel is None and points < STOPPABLE_POINTS:
        return evaluate(None)
    if _exiting:
        raise QueryCancelledError("the program is ending after Ctrl-C: the query was not started")
    stop = _core.StopFlag()
    with _running_lock:
        _running.add(stop)
        _stop_at_exit()
    try:
        on_main = threading.current_thread() is threading.main_thread()
        if cancel is None and not (on_main and points >= WATCHED_POINTS):
            return evaluate(stop)
        return _watched(evaluate, stop, cancel)
    finally:
        with _running_lock:
            _running.discard(stop)


def _watched(evaluate: Callable[[Any], T], stop: Any, cancel: threading.Event | None) -> T:
    """``evaluate(stop)`` on a helper thread, this one waiting for it or for a reason to stop."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = evaluate(stop)
        except BaseException as e:  # handed to the caller as it is
            outcome["error"] = e
        finally:
            done.set()

    threading.Thread(target=work, name="turbdb-query", daemon=True).start()
    try:
        while not done.wait(POLL):
            if cancel is not None and cancel.is_set():
                raise QueryCancelledError("the query was cancelled; its evaluation stopped")
    except BaseException:  # Ctrl-C, the cancel above, a timeout a signal handler raised
        stop.set()
        done.wait(STOP_GRACE)
        raise
    error = outcome.pop("error", None)  # not kept: its traceback would hold the points
    if error is not None:
        raise error
    return outcome["value"]


def stop_all() -> None:
    """Sets the flag of every query running, if the interpreter exits for a Ctrl-C (or a
    SIGTERM the CLI raises as one); a normal exit waits for them, as Python does."""
    global _exiting
    if not isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):
        return
    _exiting = True
    with _running_lock:
        for stop in _running:
            stop.set()


_hooked = False


def _stop_at_exit() -> None:
    """Has :func:`stop_all` run as the interpreter exits, before it waits for the threads
    still running (`atexit` runs after that wait), so a Ctrl-C'd script left with submitted
    queries ends at once. The hook concurrent.futures joins its pools' threads from, which
    runs the latest registered first: registered at the first stoppable query, after
    concurrent.futures (imported with turbdb) registered its own."""
    global _hooked
    register = getattr(threading, "_register_atexit", None)
    if not _hooked and register is not None:
        try:
            register(stop_all)
        except RuntimeError:  # the interpreter is already exiting
            pass
        _hooked = True
