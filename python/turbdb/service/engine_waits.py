"""Point queries the node engine serves, awaited on the event loop.

A query handed to the engine mostly waits for a batch that shares its reads. Waited for
in a worker thread, every pending query held a thread, at most 128 of them, and each one
asked the event loop every 50 ms whether its client had gone (a call across threads):
``py-spy`` of a 128-client replay found a fifth of the server's samples in those checks
and as much again in handing work to threads and back. Here the engine reports each
query that ends to one thread (:mod:`turbdb.engine_completions`), which wakes the event
loop; the loop awaits each query as a future beside its client's disconnection (the ASGI
``http.disconnect`` message, no polling). A client that goes away cancels its
query: the engine drops the pending work."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
import numpy as np
from starlette.requests import Request

from .. import _core, engine_completions
from ..exceptions import QueryCancelledError, TurbdbError
from ..query import PointCall

#: Queries of at most this many points are handed to the engine, and their answers taken,
#: on the event loop. Cutting a query into sub-queries holds the loop (with the GIL
#: released): lag8, 1 000 clustered points 0.2–0.3 ms, 4 096 points 0.9–2.9 ms (the
#: 2-core Intel Xeon); larger ones go to a worker thread, so that the loop answers others.
INLINE_POINTS = 1024

#: Answers of at most this many points are encoded on the event loop (a JSON one of 1 000
#: points takes about a millisecond); larger ones in a worker thread.
ENCODE_INLINE_POINTS = 1024


class EngineWaits:
    """Awaits point queries of one node engine, for every request of a server."""

    def __init__(self, engine: Any):
        self._completions = engine_completions.of(engine)

    async def query(self, dataset: Any, call: PointCall, gone: asyncio.Future[None]) -> np.ndarray:
        """The answer to ``call`` on ``dataset``, evaluated by the engine; raises
        :class:`QueryCancelledError` if ``gone`` (:func:`watch`) is done first: the client
        went away. Evaluated again while a rewrite of a step it reads overlapped it
        (:mod:`turbdb.step_versions`), waiting for one under way."""
        if call.versions.rewriter() is not None:
            call = dataclasses.replace(call, versions=await call.versions.settled_async(dataset))
        while True:
            try:
                return await self._evaluate(dataset, call, gone)
            except TurbdbError as error:  # any of them: DatasetReplacedError where the dataset was created again
                if not call.versions.spoiled(dataset, error):
                    # Not bound to a name: a local holding the error would keep this frame (the
                    # dataset, its engine) alive in a cycle through its traceback until a collection.
                    if call.named(error) is error:
                        raise
                    raise call.named(error) from None
            call = call.again(await call.versions.renewed(dataset).settled_async(dataset))

    async def _evaluate(self, dataset: Any, call: PointCall, gone: asyncio.Future[None]) -> np.ndarray:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def wake(_pending: Any) -> None:  # on the engine's waiting thread, or here at once
            try:
                loop.call_soon_threadsafe(_set_done, done)
            except RuntimeError:  # the loop has closed: nobody awaits it
                pass

        inline = len(call.points) <= INLINE_POINTS
        if inline:
            pending = self._completions.submit(call, wake)
        else:
            # A large query the idle engine serves alone runs within submit: the flag stops it.
            stop = _core.StopFlag()
            gone.add_done_callback(lambda _: stop.set())
            pending = await anyio.to_thread.run_sync(self._completions.submit, call, wake, stop)
        answered = False
        try:
            await asyncio.wait((done, gone), return_when=asyncio.FIRST_COMPLETED)
            answered = done.done()
        finally:
            if not answered:  # the client went away, or this request was cancelled
                self._completions.forget(pending.id)
                pending.cancel()
        if not answered:
            raise QueryCancelledError("the client went away; the engine dropped the query's pending work")
        if inline:
            values, counters = pending.result()
        else:
            values, counters = await anyio.to_thread.run_sync(pending.result)
        return call.answer(dataset, values, counters)


def _set_done(future: asyncio.Future[None]) -> None:
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
