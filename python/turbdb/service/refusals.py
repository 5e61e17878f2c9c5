"""What the connection guards (:mod:`.connections`) answer themselves, instead of the app:
connections and requests past a cap, heads too large, too slow or unreadable. Each is
counted in ``/metrics`` (``turbdb_refusals_total{reason,status}``) and logged as a warning,
at most one line a second so that an attack cannot flood the log: the lines left out are
counted in the next line, or in one of their own a second later. Refused at a cap, clients
were turned away without a trace an operator could see. (The guards' 408 for a stalled body
and 503 at shutdown are the app's requests too: it counts and logs those as it does every
request.)"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Callable

from prometheus_client import Counter

from .logs import log, status_text

#: Each refusal's ``reason`` label: its status, and what the log line says.
REASONS: dict[str, tuple[int, str]] = {
    "client_connections": (503, "this client holds as many connections as one client may"),
    "client_requests": (503, "this client has as many requests under way through the proxy as one client may"),
    "server_connections": (503, "the server holds as many connections as it may"),
    "head_too_large": (431, "its request line and headers are over the byte limit"),
    "too_many_header_fields": (431, "its head has more header fields than the limit"),
    "unreadable": (400, "it is not valid HTTP/1.1"),
    "head_timeout": (408, "its request line and headers did not all arrive in time"),
}
#: At most one refusal line this often.
LOG_INTERVAL_SECONDS = 1.0


class Refusals:
    """Counts the refusals in ``counter`` (the app's ``Metrics.refusals``; None: only
    logged) and logs them at most once every ``interval`` seconds."""

    def __init__(self, counter: Counter | None = None, interval: float = LOG_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._counter = counter
        self.interval = interval
        self._clock = clock
        self._logged_at = -math.inf
        self._left_out: collections.Counter[str] = collections.Counter()
        self._flush: asyncio.TimerHandle | None = None
        if counter is not None:  # every series from the start, at 0: a rate over a missing series is nothing
            for reason, (status, _) in REASONS.items():
                counter.labels(reason, str(status))

    def refused(self, reason: str, who: str) -> None:
        """Counts a refusal of ``reason`` and logs it, or counts it for a later line.
        ``who``: the client's address, or its request line once the head is read."""
        status, what = REASONS[reason]
        if self._counter is not None:
            self._counter.labels(reason, str(status)).inc()
        if self._clock() - self._logged_at >= self.interval:
            self._log(f"{who}: refused {status_text(status)}, {what}")
            return
        self._left_out[reason] += 1
        if self._flush is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # outside the event loop: told with the next line
                return
            self._flush = loop.call_later(self._logged_at + self.interval - self._clock(), self._log_left_out)

    def _log(self, line: str) -> None:
        self._logged_at = self._clock()
        if self._left_out:
            line += f" (and {self._left_out_text()})"
        log.warning("%s", line)

    def _log_left_out(self) -> None:
        self._flush = None
        if self._left_out:
            self._logged_at = self._clock()
            log.warning("refused %s", self._left_out_text())

    def _left_out_text(self) -> str:
        """``57 more since the last line: client_connections/503: 50, too_many_header_fields/431: 7``,
        and forgets them."""
        counts = ", ".join(f"{reason}/{REASONS[reason][0]}: {n:,}" for reason, n in self._left_out.most_common())
        text = f"{sum(self._left_out.values()):,} more since the last line: {counts}"
        self._left_out.clear()
        return text
