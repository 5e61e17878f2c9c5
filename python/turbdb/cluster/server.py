"""A direct line from the mediator to each worker: a Dask actor per worker (and mediator)
whose methods evaluate a unit on the worker's node. A call on an actor goes from the
client straight to the actor's worker and its answer comes back in the reply — one
request — where a task goes client → scheduler → worker → scheduler → client and then a
fetch from the worker: on this machine a trivial call took ≈ 1.2 ms, a trivial task
≈ 13 ms, which was most of a 1-worker query's time outside the engine.

The scheduler does not see the calls as tasks; each unit is logged instead and drawn on
the dashboard's Task Stream by :mod:`~turbdb.cluster.dashboard`. A worker runs them one at
a time, in its actor thread, as ``turbdb cluster up`` runs one task at a time. An actor is
made on first use for each worker address; a worker restarted by its nanny has a new
address and gets a new one. A call to a worker that died raises, which the dispatcher treats as a lost unit."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid
from typing import Any

from distributed import Client
from distributed import TimeoutError as DaskTimeoutError

from ..exceptions import ServiceError
from . import dashboard, plugin
from .membership import Membership, scheduler_workers

#: How long making a worker's actor (a task through the scheduler, once per worker) may take.
CREATE_SECONDS = 30.0
#: How often a mediator waiting for a new actor looks whether its worker is still there.
POLL_SECONDS = 0.5


class NodeServer:
    """The actor on a worker: the unit tasks of :mod:`~turbdb.cluster.plugin`, called directly."""

    def partial_sums(self, plugin_name: str, dataset: str, field: str, *rest: Any) -> Any:
        with dashboard.shown("query", dataset, field):
            return plugin.partial_sums(plugin_name, dataset, field, *rest)

    def cutout(self, plugin_name: str, dataset: str, field: str, *rest: Any) -> Any:
        with dashboard.shown("cutout", dataset, field):
            return plugin.cutout(plugin_name, dataset, field, *rest)

    def ping(self, value: Any) -> Any:
        """``value`` back: the cost of a call and of moving its arguments (bench/cluster.py)."""
        return value


class Servers:
    """The mediator's side: each worker's actor, made on first use. With ``membership``,
    waiting for an actor ends as soon as its worker falls silent (a stopped worker stays in
    the scheduler's list for minutes)."""

    def __init__(self, client: Client, membership: Membership | None = None):
        self.client = client
        self.membership = membership
        self._lock = threading.Lock()
        self._actors: dict[str, tuple[Any, Any]] = {}  # address → (the actor's future, the actor)

    def call(self, address: str, method: str, *args: Any) -> Call:
        """Starts ``method(*args)`` on the actor of the worker at ``address``."""
        actor = self._actor(address)
        with self.client.as_current():  # an actor finds its client here (ours is not the default)
            return Call(getattr(actor, method)(*args), self.client.loop.asyncio_loop)

    def _actor(self, address: str) -> Any:
        with self._lock:
            # Actors of workers that are gone (their future is no longer finished) are dropped.
            for a, (future, _) in list(self._actors.items()):
                if future.status != "finished":
                    del self._actors[a]
                    future.release()
            if address in self._actors:
                return self._actors[address][1]
        future = self.client.submit(NodeServer, actor=True, workers=[address], allow_other_workers=False,
                                    key=f"turbdb-node-server-{uuid.uuid4().hex}")
        deadline = time.monotonic() + CREATE_SECONDS
        while True:
            try:
                with self.client.as_current():
                    actor = future.result(timeout=POLL_SECONDS)
                break
            except DaskTimeoutError:
                # Bound to its worker, the actor would wait for it forever if it died.
                if not self._there(address) or time.monotonic() > deadline:
                    future.cancel()
                    raise ServiceError(f"could not reach worker {address} (it left the cluster, or took over "
                                       f"{CREATE_SECONDS:.0f} s to answer)") from None
        with self._lock:
            self._actors[address] = (future, actor)
        return actor

    def _there(self, address: str) -> bool:
        if self.membership is not None:
            return address in self.membership.live(refresh=True).values()
        return address in scheduler_workers(self.client)

    def close(self) -> None:
        with self._lock:
            for future, _ in self._actors.values():
                future.release()
            self._actors.clear()


class Call:
    """An actor call as the dispatcher sees a unit in flight (the parts of a Dask future it
    uses): ``status``, ``result(timeout)``, ``add_done_callback`` and ``cancel`` (which
    forgets the call; the worker finishes it)."""

    def __init__(self, call: Any, loop: asyncio.AbstractEventLoop):
        self._future = asyncio.run_coroutine_threadsafe(_outcome(call), loop)

    @property
    def status(self) -> str:
        f = self._future
        if not f.done():
            return "pending"
        if f.cancelled():
            return "cancelled"
        return "error" if f.exception() is not None else "finished"

    def result(self, timeout: float | None = None) -> Any:
        try:
            return self._future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise DaskTimeoutError(f"no answer in {timeout} s") from None

    def add_done_callback(self, fn: Any) -> None:
        self._future.add_done_callback(lambda _: fn(self))

    def cancel(self) -> None:
        self._future.cancel()


async def _outcome(call: Any) -> Any:
    return await call
