"""This process's CPU use over time, sampled while a replay runs, so a benchmark can say how
many cores were busy in each part of the run — its steady state against its ramp-up and
its last queries — and count only the replay's own window (a replay's setup, drawing the
points and starting a thousand client threads, is CPU of the same process)."""

from __future__ import annotations

import bisect
import math
import os
import threading
import time


def process_cpu() -> float:
    """User plus system seconds of this process so far."""
    t = os.times()
    return t.user + t.system


class CpuTimeline:
    """Samples :func:`process_cpu` every ``interval`` seconds in a thread of its own, from
    ``with`` to its end. Between two instants (``time.perf_counter`` times) it gives the
    CPU seconds spent, the cores busy on average and in each sampling interval."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-timeline", daemon=True)

    def __enter__(self) -> CpuTimeline:
        self._take()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def _take(self) -> None:
        self.samples.append((time.perf_counter(), process_cpu()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._take()

    def cpu_at(self, when: float) -> float:
        """This process's CPU seconds at ``when``, interpolated between the samples around it."""
        times = [t for t, _ in self.samples]
        i = min(max(bisect.bisect_left(times, when), 1), len(times) - 1)
        (t0, c0), (t1, c1) = self.samples[i - 1], self.samples[i]
        return c0 + (c1 - c0) * min(max((when - t0) / max(t1 - t0, 1e-9), 0.0), 1.0)

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds spent between ``start`` and ``end``."""
        return self.cpu_at(end) - self.cpu_at(start)

    def cores_busy(self, start: float, end: float) -> float:
        """Cores busy on average between ``start`` and ``end`` (NaN for an empty span)."""
        return self.cpu_between(start, end) / (end - start) if end > start else math.nan

    def intervals(self, start: float, end: float) -> list[float]:
        """Cores busy in each sampling interval that lies between ``start`` and ``end``."""
        return [(c1 - c0) / max(t1 - t0, 1e-9)
                for (t0, c0), (t1, c1) in zip(self.samples, self.samples[1:]) if start <= t0 and t1 <= end]
