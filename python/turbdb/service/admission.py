"""Admission control: a first-come, first-served budget of points in flight, so that many or
large requests wait their turn instead of growing the server's memory without bound."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

from ..exceptions import TurbdbError


class BusyError(TurbdbError):
    """The server stayed at capacity for longer than a request may wait (HTTP 503)."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class PointsLimiter:
    """At most ``capacity`` points admitted at once. A request larger than the capacity is
    admitted alone (its weight is capped), so every request can eventually run. Waiting is
    in arrival order: a large request is not starved by a stream of small ones. Lives on the
    event loop: no locks."""

    def __init__(self, capacity: int, timeout: float = 60.0, on_change=None):
        self.capacity = int(capacity)
        self.timeout = timeout
        self.used = 0
        self.peak = 0
        self._queue: collections.deque[tuple[int, asyncio.Future]] = collections.deque()
        self._on_change = on_change

    @contextlib.asynccontextmanager
    async def admit(self, points: int) -> AsyncIterator[Admission]:
        admission = Admission(self, points)
        await admission.acquire()
        try:
            yield admission
        finally:
            admission.release()

    def admission(self, points: int) -> Admission:
        """An admission of ``points`` not yet acquired (see :class:`Admission`)."""
        return Admission(self, points)

    def _weight(self, points: int) -> int:
        return min(max(int(points), 1), self.capacity)

    async def _acquire(self, weight: int) -> None:
        if not self._queue and self.used + weight <= self.capacity:
            self._take(weight)
            return
        future = asyncio.get_running_loop().create_future()
        entry = (weight, future)
        self._queue.append(entry)
        try:
            await asyncio.wait_for(future, self.timeout)
        except TimeoutError:
            self._abandon(entry)
            raise BusyError(
                f"the server is at capacity ({self.capacity:,} points in flight) and this request waited "
                f"{self.timeout:g} s; retry later or send smaller batches", retry_after=min(30.0, self.timeout)) from None
        except BaseException:  # the client went away while waiting
            self._abandon(entry)
            raise

    def _abandon(self, entry: tuple[int, asyncio.Future]) -> None:
        weight, future = entry
        if future.done() and not future.cancelled():
            self._release(weight)  # admitted just as the wait ended
            return
        with contextlib.suppress(ValueError):
            self._queue.remove(entry)
        self._wake()  # a large request leaving the head may let others in

    def _take(self, weight: int) -> None:
        self.used += weight
        self.peak = max(self.peak, self.used)
        if self._on_change:
            self._on_change(self.used, self.peak)

    def _release(self, weight: int) -> None:
        self.used -= weight
        if self._on_change:
            self._on_change(self.used, self.peak)
        self._wake()

    def _wake(self) -> None:
        while self._queue and self.used + self._queue[0][0] <= self.capacity:
            weight, future = self._queue.popleft()
            if future.done():
                continue
            self._take(weight)
            future.set_result(None)


class Admission:
    """Points admitted by a :class:`PointsLimiter`, acquired once and released once. A
    request whose points are in its body is admitted on what its body declares, before it
    is read (a body read and then held while waiting is memory outside the budget), and
    :meth:`resize`\ d to what it holds once it is."""

    def __init__(self, limiter: PointsLimiter, points: int):
        self._limiter = limiter
        self.weight = limiter._weight(points)
        self._held = False

    async def acquire(self) -> None:
        await self._limiter._acquire(self.weight)
        self._held = True

    def resize(self, points: int) -> None:
        """Holds ``points`` instead: less lets waiting requests in; more is taken at once
        (the estimate was low, and the points are already in memory)."""
        weight = self._limiter._weight(points)
        if self._held and weight < self.weight:
            self._limiter._release(self.weight - weight)
        elif self._held and weight > self.weight:
            self._limiter._take(weight - self.weight)
        self.weight = weight

    def release(self) -> None:
        if self._held:
            self._held = False
            self._limiter._release(self.weight)
