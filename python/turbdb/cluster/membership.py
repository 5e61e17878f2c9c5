"""Which worker serves each slot right now. A slot is a Dask worker's name, which a nanny
keeps when it restarts a killed worker, while the address changes; so the mediator asks the
scheduler for the living workers' names and addresses, and asks again whenever a unit
fails or waits, instead of trusting an address it saw before."""

from __future__ import annotations

import threading
import time

from distributed import Client

#: How long a view of the living workers is trusted when nothing went wrong.
FRESH_SECONDS = 1.0


class Membership:
    """The living workers of a Dask cluster by slot (worker name)."""

    def __init__(self, client: Client):
        self.client = client
        self._lock = threading.Lock()
        self._slots: dict[str, str] = {}
        self._seen = 0.0

    def live(self, *, refresh: bool = False) -> dict[str, str]:
        """``{slot: address}`` of the workers alive now (asked afresh when ``refresh`` or
        when the last view is older than ``FRESH_SECONDS``)."""
        with self._lock:
            if refresh or time.monotonic() - self._seen > FRESH_SECONDS:
                workers = self.client.scheduler_info(n_workers=-1)["workers"]
                self._slots = {str(w["name"]): address for address, w in workers.items()
                               if w.get("status", "running") == "running"}
                self._seen = time.monotonic()
            return dict(self._slots)
