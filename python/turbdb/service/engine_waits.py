"""Point queries the node engine serves, awaited on the event loop.

A query handed to the engine mostly waits for a batch that shares its reads. Waited for
in a worker thread, every pending query held a thread, at most 128 of them, and each one
asked the event loop every 50 ms whether its client had gone (a call across threads):
``py-spy`` of a 128-client replay found a fifth of the server's samples in those checks
and as much again in handing work to threads and back. Here the engine is told to put the
id of each query that ends on one completion queue; a single thread waits on it and wakes
the event loop, which awaits each query as a future beside its client's disconnection
(the ASGI ``http.disconnect`` message, no polling). A client that goes away cancels its
query: the engine drops the pending work."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
import numpy as np
from starlette.requests import Request

from .._core import CompletionQueue
from ..exceptions import QueryCancelledError
from ..query import PointCall

#: Queries of at most this many points are handed to the engine, and their answers taken,
#: on the event loop. Cutting a query into sub-queries holds the loop (with the GIL
#: released): lag8, 1 000 clustered points 0.2–0.3 ms, 4 096 points 0.9–2.9 ms (the
#: 2-core Intel Xeon); larger ones go to a worker thread, so that the loop answers others.
INLINE_POINTS = 1024

#: Answers of at most this many points are encoded on the event loop (a JSON one of 1 000
#: points takes about a millisecond); larger ones in a worker thread.
ENCODE_INLINE_POINTS = 1024

#: How long (s) the waiting thread sleeps on the queue before it looks again: only how
#: soon it notices that the server is closing.
PUMP_TIMEOUT = 1.0


class EngineWaits:
    """Awaits point queries of one node engine, for every request of a server."""

    def __init__(self, engine: Any):
        self.engine = engine
        self._queue = CompletionQueue()
        self._lock = threading.Lock()
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._thread: threading.Thread | None = None

    async def query(self, dataset: Any, call: PointCall, gone: asyncio.Future[None]) -> np.ndarray:
        """The answer to ``call`` on ``dataset``, evaluated by the engine; raises
        :class:`QueryCancelledError` if ``gone`` (:func:`watch`) is done first: the client
        went away."""
        self._start()
        inline = len(call.points) <= INLINE_POINTS
        if inline:
            pending = call.submit(self.engine, notify=self._queue)
        else:
            pending = await anyio.to_thread.run_sync(lambda: call.submit(self.engine, notify=self._queue))
        done = self._register(pending)
        answered = False
        try:
            await asyncio.wait((done, gone), return_when=asyncio.FIRST_COMPLETED)
            answered = done.done()
        finally:
            if not answered:  # the client went away, or this request was cancelled
                self._forget(pending.id)
                pending.cancel()
        if not answered:
            raise QueryCancelledError("the client went away; the engine dropped the query's pending work")
        if inline:
            values, counters = pending.result()
        else:
            values, counters = await anyio.to_thread.run_sync(pending.result)
        return call.answer(dataset, values, counters)

    def close(self) -> None:
        """Stops the waiting thread (queries still pending are cancelled by their tickets)."""
        self._queue.close()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._pump, name="turbdb-engine-waits", daemon=True)
                self._thread.start()

    def _register(self, pending: Any) -> asyncio.Future[None]:
        """A future done when ``pending`` ends. Its id may have come off the queue before it
        was registered (a query served at once, from the cache): then it is done here."""
        done = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiting[pending.id] = done
        if pending.done and self._forget(pending.id) is not None:
            done.set_result(None)
        return done

    def _forget(self, id: int) -> asyncio.Future[None] | None:
        with self._lock:
            return self._waiting.pop(id, None)

    def _pump(self) -> None:
        """The waiting thread: hands the ids that end to the loops awaiting them, each loop
        woken once for all of its own."""
        while (ids := self._queue.wait(PUMP_TIMEOUT)) is not None:
            by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = defaultdict(list)
            with self._lock:
                for id in ids:
                    future = self._waiting.pop(id, None)
                    if future is not None:
                        by_loop[future.get_loop()].append(future)
            for loop, futures in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_set_done, futures)
                except RuntimeError:  # that loop has closed: nobody awaits these
                    pass


def _set_done(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


@contextlib.asynccontextmanager
async def watch(request: Request) -> AsyncIterator[asyncio.Future[None]]:
    """A future done when the client of ``request`` (whose body has been read) disconnects,
    for the queries of the request to await beside their answers; one listener however
    many queries the request makes."""
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        yield gone
    finally:
        gone.cancel()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
