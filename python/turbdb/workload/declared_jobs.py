"""The jobs a replay has declared and not yet closed, so that each is closed once, by its
client at its end or by the replay when it is interrupted: a Ctrl-C left every job under
way open on the server (the command closed the connection under the clients, whose
closing then failed quietly), where it counted against the token's open jobs for 600 s."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from ..exceptions import TurbdbError
from .trace import Query

#: Seconds an interrupted replay spends closing the jobs it left open: a live server closes
#: one in milliseconds; one that does not answer within this forgets them when they have
#: been unused for its idle timeout.
CLOSE_SECONDS = 5.0
#: Jobs closed at once when a replay is interrupted.
CLOSERS = 8


class DeclaredJobs:
    """Declares jobs of several queries to ``database`` (``POST /v1/jobs`` on a server)
    and closes each once: by the client that ran it, or by :meth:`close_all`."""

    def __init__(self, database: Any):
        self._database = database
        self._changed = threading.Condition()
        self._open: set[Any] = set()
        self._declaring = 0
        self._closing_all = False

    def declare(self, job: list[Query]) -> Any:
        """``job`` declared (None for a single query, a database that takes no jobs, a
        refused declaration — a job is a scheduling hint — or once the replay is being
        closed)."""
        if len(job) < 2 or not hasattr(self._database, "job"):
            return None
        with self._changed:
            if self._closing_all:
                return None
            self._declaring += 1
        declared = None
        try:
            declared = self._database.job([(q.dataset, q.field, q.time, q.temporal) for q in job])
        except TurbdbError:  # the job's queries go undeclared
            pass
        finally:
            with self._changed:
                self._declaring -= 1
                late = declared is not None and self._closing_all
                if declared is not None and not late:
                    self._open.add(declared)
                self._changed.notify_all()
        if late:  # declared while the replay was being closed, which may not have waited for it
            _close(declared)
            return None
        return declared

    def close(self, declared: Any) -> None:
        """Closes ``declared`` (from :meth:`declare`) unless :meth:`close_all` took it."""
        if self._take(declared):
            _close(declared)

    def forget(self, declared: Any) -> None:
        """Leaves ``declared`` unclosed: its server cannot be reached (a server that comes
        back has forgotten it: jobs do not outlive a restart)."""
        self._take(declared)

    def close_all(self, seconds: float = CLOSE_SECONDS) -> int:
        """Closes every job still open, declarations under way included, within about
        ``seconds``; returns how many could not be closed in that time. Nothing is
        declared afterwards."""
        deadline = time.monotonic() + seconds
        with self._changed:
            self._closing_all = True
            self._changed.wait_for(lambda: self._declaring == 0, timeout=seconds)
            left, self._open = list(self._open), set()
        pending = list(left)
        lock = threading.Lock()
        closed = [0]

        def closer() -> None:
            while True:
                with lock:
                    if not pending:
                        return
                    declared = pending.pop()
                if _close(declared):
                    with lock:
                        closed[0] += 1

        # Daemons: a server that does not answer must not hold up the program's exit.
        threads = [threading.Thread(target=closer, name=f"replay-closer-{k}", daemon=True)
                   for k in range(min(CLOSERS, len(left)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with lock:
            return len(left) - closed[0]

    def _take(self, declared: Any) -> bool:
        with self._changed:
            if declared not in self._open:
                return False
            self._open.discard(declared)
            return True


def _close(declared: Any) -> bool:
    """Closes a job; whether it was (closing is a hint, as declaring is)."""
    with contextlib.suppress(TurbdbError):
        declared.close()
        return True
    return False
