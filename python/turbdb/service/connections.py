"""Connection guards in front of the app, against slowloris: uvicorn waits for a request's
headers without a time limit (its keep-alive timer stops at the first byte), so 600
connections sending half a header held every slot and the server answered 503 to everyone
for over a minute. Each connection here must finish its request headers within
``HEADER_TIMEOUT_SECONDS`` of connecting (or of starting its next request), and one client
address may hold at most ``MAX_CONNECTIONS_PER_CLIENT`` connections; the next gets a 503 at
once, so one client cannot take the server's whole connection limit."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS_PER_CLIENT = 128

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
         b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s")
_BUSY_BODY = (b'{"error": "LimitExceededError", "description": "this client holds too many open connections '
              b'to the server; reuse connections (keep-alive) or close some"}')


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a per-client connection cap."""

    header_timeout = HEADER_TIMEOUT_SECONDS
    per_client = MAX_CONNECTIONS_PER_CLIENT
    _open: Counter[str] = Counter()  # one event loop per server process: no lock needed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._host = self.client[0] if self.client else ""
        self._open[self._host] += 1
        if self._open[self._host] > self.per_client:
            transport.write(_BUSY % (len(_BUSY_BODY), _BUSY_BODY))
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._open[self._host] -= 1
        if self._open[self._host] <= 0:
            del self._open[self._host]
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self, *_: Any) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()
