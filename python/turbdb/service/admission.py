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


# Requests of at most this many points are small (JHTDB's limit without a token, and the
# anonymous one here): they always find budget, in a share of it that larger ones never take.
SMALL_REQUEST_POINTS = 4096
# The share of the budget only small requests may use: 500 000 points of the default 4·10⁶,
# room for 122 anonymous requests at their limit while tracks and series hold the rest.
SMALL_RESERVE_FRACTION = 8


def small_reserve(capacity: int) -> int:
    """Points of a budget of ``capacity`` that only small requests may hold: an eighth, and
    room for one small request at its largest where the budget allows it."""
    return min(capacity // 2, max(capacity // SMALL_RESERVE_FRACTION, SMALL_REQUEST_POINTS))


class PointsLimiter:
    """At most ``capacity`` points admitted at once, in two lanes. Small requests (at most
    ``SMALL_REQUEST_POINTS``) may use the whole budget; larger ones all but
    :func:`small_reserve` of it, and a request larger than that is admitted alone among the
    large (its weight is capped), so every request can eventually run. One anonymous track
    held the whole budget for 70 s, and every query behind it waited 60 s for its 503.

    Waiting is in arrival order, with one exception: a small request may pass large ones
    that arrived before it, within the reserve. So while a large request waits, a stream of
    small ones does not starve it (they use only the reserve), and a large request never
    passes a small one that arrived before it, so a stream of large ones does not starve a
    small one either: on a budget under 8 192 points the reserve is smaller than the largest
    small request, and one of 3 500 points on a 6 000-point budget waited behind every large
    request that came after it. Lives on the event loop: no locks."""

    def __init__(self, capacity: int, timeout: float = 60.0, on_change=None):
        self.capacity = int(capacity)
        self.reserve = small_reserve(self.capacity)
        self.timeout = timeout
        self.used = 0
        self.small_used = 0  # of ``used``, what small requests hold
        self.peak = 0
        # Every request waiting, in arrival order: (weight, small, future).
        self._queue: collections.deque[tuple[int, bool, asyncio.Future]] = collections.deque()
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

    @staticmethod
    def is_small(points: int) -> bool:
        return points <= SMALL_REQUEST_POINTS

    def _weight(self, points: int) -> int:
        most = self.capacity if self.is_small(points) else self.capacity - self.reserve
        return min(max(int(points), 1), most)

    def _fits(self, weight: int, small: bool, behind_large: bool) -> bool:
        """Whether ``weight`` points fit now; ``behind_large``: a large request that
        arrived earlier still waits, so a small one may use the reserve only."""
        if small:
            return self.used + weight <= self.capacity and (
                not behind_large or self.small_used + weight <= self.reserve)
        # The reserve is what small requests hold first: theirs within it takes nothing from large ones.
        large_used = self.used - self.small_used
        return large_used + weight <= self.capacity - self.reserve and self.used + weight <= self.capacity

    async def _acquire(self, weight: int, small: bool | None = None) -> None:
        small = self.is_small(weight) if small is None else small
        future = asyncio.get_running_loop().create_future()
        entry = (weight, small, future)
        self._queue.append(entry)
        self._wake()  # admitted at once where nobody it may not pass waits and it fits
        if future.done():
            return
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

    def _abandon(self, entry: tuple[int, bool, asyncio.Future]) -> None:
        weight, small, future = entry
        if future.done() and not future.cancelled():
            self._release(weight, small)  # admitted just as the wait ended
            return
        with contextlib.suppress(ValueError):
            self._queue.remove(entry)
        self._wake()  # a request leaving may let those behind it in

    def _take(self, weight: int, small: bool = False) -> None:
        self.used += weight
        self.small_used += weight if small else 0
        self.peak = max(self.peak, self.used)
        if self._on_change:
            self._on_change(self.used, self.peak)

    def _release(self, weight: int, small: bool = False) -> None:
        self.used -= weight
        self.small_used -= weight if small else 0
        if self._on_change:
            self._on_change(self.used, self.peak)
        self._wake()

    def _wake(self) -> None:
        """Admits the waiting requests that may go, in arrival order: within each lane
        none passes another, a small one passes earlier large ones only within the
        reserve, and a large one never passes a small one."""
        small_blocked = large_blocked = behind_large = False
        waiting = []  # those looked at that stay, put back in front in their order
        while self._queue and not (small_blocked and large_blocked):
            entry = self._queue.popleft()
            weight, small, future = entry
            if future.done():  # given up (timed out or cancelled) and not yet removed
                continue
            if (small_blocked if small else large_blocked) or not self._fits(weight, small, behind_large):
                waiting.append(entry)
                large_blocked = True  # nobody passes a small request, and large ones keep their order
                small_blocked = small_blocked or small
                behind_large = behind_large or not small
                continue
            self._take(weight, small)
            future.set_result(None)
        self._queue.extendleft(reversed(waiting))


class Admission:
    """Points admitted by a :class:`PointsLimiter`, acquired once and released once. A
    request whose points are in its body is admitted on what its body declares, before it
    is read (a body read and then held while waiting is memory outside the budget), and
    resized to what it holds once it is (:meth:`resize`), or given more, in its turn, once
    its body tells how many points are evaluated how many times (:meth:`hold`)."""

    def __init__(self, limiter: PointsLimiter, points: int):
        self._limiter = limiter
        self.small = limiter.is_small(points)
        self.weight = limiter._weight(points)
        self._held = False

    async def acquire(self) -> None:
        await self._limiter._acquire(self.weight, self.small)
        self._held = True

    def resize(self, points: int) -> None:
        """Holds ``points`` instead: less lets waiting requests in; more is taken at once
        (the estimate was low, and the points are already in memory)."""
        weight = self._limiter._weight(points)
        if self._held and weight < self.weight:
            self._limiter._release(self.weight - weight, self.small)
        elif self._held and weight > self.weight:
            self._limiter._take(weight - self.weight, self.small)
        self.weight = weight

    async def hold(self, points: int) -> None:
        """Holds ``points`` instead, waiting its turn for more than it holds (a track's
        steps, a series' times): admitted on the points of its body alone, a stalled upload
        declaring one particle of 10⁵ steps held the whole budget. What it held is let go
        while it waits, so that no two requests each hold part and wait for the rest."""
        if self._limiter._weight(points) <= self.weight:
            self.resize(points)
            return
        self.release()
        self.small, self.weight = self._limiter.is_small(points), self._limiter._weight(points)
        await self.acquire()

    def release(self) -> None:
        if self._held:
            self._held = False
            self._limiter._release(self.weight, self.small)
