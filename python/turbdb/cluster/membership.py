"""Which worker serves each slot right now. A slot is a Dask worker's name, which a nanny
keeps when it restarts a killed worker, while the address changes; so the mediator asks the
scheduler for the living workers' names and addresses, and asks again whenever a unit
fails or waits, instead of trusting an address it saw before."""

from __future__ import annotations

import asyncio
import threading
import time

from distributed import Client

from ..exceptions import ServiceError

#: How long a view of the living workers is trusted when nothing went wrong.
FRESH_SECONDS = 1.0
#: A worker the scheduler has not heard from for this long is taken for down: a stopped or
#: hung process sends no heartbeats (every 0.5–1 s on small clusters), but the scheduler
#: drops it only after its worker-ttl, 5 minutes by default, and a query waited on it.
SILENT_SECONDS = 10.0
#: How often the scheduler's clock is read again (``last_seen`` is in its time).
CLOCK_SECONDS = 60.0


def scheduler_workers(client: Client, address: str | None = None) -> dict[str, dict]:
    """The scheduler's view of its workers by address; a 503 :class:`ServiceError` naming
    the scheduler (at ``address``, as the client knew it: a client that lost its scheduler
    forgets it) when it cannot be asked (such a client answers an empty
    ``scheduler_info`` instead of raising)."""
    return _scheduler_info(client, address)["workers"]


def _scheduler_info(client: Client, address: str | None) -> dict:
    """The scheduler's report (its id, its workers), or the 503 of :func:`scheduler_workers`."""
    try:
        info = client.scheduler_info(n_workers=-1)
        workers = info.get("workers")
    except (OSError, TimeoutError, asyncio.TimeoutError):
        info, workers = {}, None
    if workers is None or client.status != "running":
        error = ServiceError(f"the Dask scheduler at {address or scheduler_address(client)} cannot be reached "
                             "(it stopped, or the network to it is down): the cluster answers nothing without it. "
                             "Start it again (`turbdb cluster up`, or your `dask scheduler` and its workers): "
                             "`turbdb serve --cluster` and databases opened with the address reconnect by themselves, "
                             "others must open the database again")
        error.status = 503  # type: ignore[attr-defined]  # unavailable until the scheduler is back
        raise error
    return info


def scheduler_address(client: Client) -> str:
    try:
        return client.scheduler.address
    except Exception:  # no scheduler object left at all
        return "(unknown)"


class Membership:
    """The living workers of a Dask cluster by slot (worker name)."""

    def __init__(self, client: Client, *, silent_seconds: float = SILENT_SECONDS):
        self.client = client
        self.address = scheduler_address(client)
        self.silent_seconds = silent_seconds
        self._lock = threading.Lock()
        self._slots: dict[str, str] = {}
        self._silent: dict[str, float] = {}
        self._seen = 0.0
        #: The id of the scheduler last asked (a new one: the scheduler was restarted).
        self.scheduler_id: str | None = None
        self._clock_offset, self._clock_read = 0.0, -CLOCK_SECONDS

    def live(self, *, refresh: bool = False) -> dict[str, str]:
        """``{slot: address}`` of the workers alive now (asked afresh when ``refresh`` or
        when the last view is older than ``FRESH_SECONDS``): running, and heard from by the
        scheduler within ``silent_seconds``."""
        with self._lock:
            if refresh or time.monotonic() - self._seen > FRESH_SECONDS:
                info = _scheduler_info(self.client, self.address)
                workers, self.scheduler_id = info["workers"], info.get("id", self.scheduler_id)
                now = self._scheduler_time()
                running = {str(w["name"]): (address, now - w.get("last_seen", now)) for address, w in workers.items()
                           if w.get("status", "running") == "running"}
                self._slots = {slot: address for slot, (address, quiet) in running.items()
                               if quiet <= self.silent_seconds}
                self._silent = {slot: quiet for slot, (_, quiet) in running.items() if quiet > self.silent_seconds}
                self._seen = time.monotonic()
            return dict(self._slots)

    def silent(self) -> dict[str, float]:
        """``{slot: seconds}`` of running workers left out of :meth:`live` because the
        scheduler has not heard from them for that long (as of the last look)."""
        with self._lock:
            return dict(self._silent)

    def _scheduler_time(self) -> float:
        """The scheduler's clock now, from this machine's and their difference (read again
        every ``CLOCK_SECONDS``); this machine's where the scheduler cannot be asked."""
        if time.monotonic() - self._clock_read > CLOCK_SECONDS:
            try:
                self._clock_offset = self.client.run_on_scheduler(time.time) - time.time()
            except Exception:  # an old or locked-down scheduler: assume the clocks agree
                self._clock_offset = 0.0
            self._clock_read = time.monotonic()
        return time.time() + self._clock_offset
