"""Getting the scheduler back. A Dask client that lost its scheduler tries to reach it for
its connect timeout, then closes for good: a mediator made from an address (``turbdb serve
--cluster``) answered 503 for ever after its scheduler was restarted. A
:class:`Reconnection` makes a new client once the scheduler answers again, trying in a
thread of its own at growing pauses (1, 2, 4, 8, then every 10 s), and hands it to the mediator."""

from __future__ import annotations

import threading
from collections.abc import Callable

from distributed import Client

#: The pause before the first attempt, doubled after each failed one …
FIRST_SECONDS = 1.0
#: … up to this.
MOST_SECONDS = 10.0


class Reconnection:
    """Makes a client of the scheduler at ``address`` with ``connect`` once it can, and
    gives it to ``connected`` (which may raise to be tried again later)."""

    def __init__(self, address: str, connect: Callable[[str], Client], connected: Callable[[Client], None]):
        self.address = address
        self._connect = connect
        self._connected = connected
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        #: Attempts made since the scheduler was lost, and why the last one failed.
        self.attempts = 0
        self.last_error: str | None = None

    @property
    def trying(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Starts trying, unless already trying or closed."""
        with self._lock:
            if self._closed.is_set() or self.trying:
                return
            self.attempts, self.last_error = 0, None
            self._thread = threading.Thread(target=self._run, name="turbdb-reconnect", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        pause = FIRST_SECONDS
        while not self._closed.wait(pause):
            self.attempts += 1
            pause = min(2 * pause, MOST_SECONDS)
            try:
                client = self._connect(self.address)
            except Exception as e:  # noqa: BLE001 - not back yet: try again after a longer pause
                self.last_error = f"{type(e).__name__}: {e}"
                continue
            try:
                if self._closed.is_set():
                    raise RuntimeError("the database was closed meanwhile")
                self._connected(client)
                return
            except Exception as e:  # noqa: BLE001 - lost again while taking it in
                self.last_error = f"{type(e).__name__}: {e}"
                client.close(timeout=2)

    def close(self) -> None:
        self._closed.set()
