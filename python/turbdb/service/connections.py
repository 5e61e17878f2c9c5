"""Connection guards in front of the app, against slowloris: uvicorn waits for a request's
headers without a time limit (its keep-alive timer stops at the first byte), so 600
connections sending half a header held every slot and the server answered 503 to everyone
for over a minute. Each connection here must finish its request headers within
``HEADER_TIMEOUT_SECONDS`` of connecting (or of starting its next request), and one client
address may hold at most ``MAX_CONNECTIONS_PER_CLIENT`` connections; the next gets a 503 at
once, so one client cannot take the server's whole connection limit.

A request's head (request line and headers) may hold at most ``MAX_HEAD_BYTES``: past that
the answer is a 431, since uvicorn kept headers of any size in memory. A request the HTTP
parser refuses (a request line over 64 KiB among others) gets a JSON 400 that says what to
do, like every other error of the service, instead of uvicorn's plain-text one."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS_PER_CLIENT = 128
MAX_HEAD_BYTES = 256 * 1024

_BUSY_HEADERS = b"retry-after: 1\r\n"
_BUSY = ("LimitExceededError", "this client holds too many open connections to the server; reuse connections "
                               "(keep-alive) or close some")
_HEAD_TOO_LARGE = ("LimitExceededError", f"the request line and headers are over {MAX_HEAD_BYTES // 1024} KiB; "
                                         "send points and long parameters in a POST body (see /docs)")
_UNREADABLE = ("InvalidRequestError", "the request is not valid HTTP/1.1 (a request line over 64 KiB is one "
                                      "such): send points and long parameters in a POST body (see /docs)")
_REASONS = {400: b"Bad Request", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class _HeadTooLarge(Exception):
    pass


def _answer(status: int, error: tuple[str, str], extra_headers: bytes = b"") -> bytes:
    """A whole HTTP response with the service's JSON error body, for answers given before
    the app sees the request."""
    name, description = error
    body = json.dumps({"description": description, "error": name, "status": status}).encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\n%scontent-length: %d"
            b"\r\n\r\n%s" % (status, _REASONS[status], extra_headers, len(body), body))


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a per-client connection cap."""

    header_timeout = HEADER_TIMEOUT_SECONDS
    per_client = MAX_CONNECTIONS_PER_CLIENT
    max_head_bytes = MAX_HEAD_BYTES
    _open: Counter[str] = Counter()  # one event loop per server process: no lock needed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._head_bytes: int | None = 0  # bytes received of an incomplete request head; None once it is whole
        self._parsed_head_bytes = 0  # its request line and headers, as parsed
        self._host = self.client[0] if self.client else ""
        self._open[self._host] += 1
        if self._open[self._host] > self.per_client:
            transport.write(_answer(503, _BUSY, _BUSY_HEADERS))
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_bytes is None or self.transport.is_closing():
            return
        # The head is still incomplete, so every byte so far is head; this bounds what the
        # parser buffers of a header that never ends (it calls on_header only once it does).
        self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes:
            self._refuse_head()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._parsed_head_bytes += size
        if self._parsed_head_bytes > self.max_head_bytes:
            raise _HeadTooLarge  # stops the parser, which answers through send_400_response

    def send_400_response(self, msg: str) -> None:
        if self._parsed_head_bytes > self.max_head_bytes:
            self._refuse_head()
            return
        self.transport.write(_answer(400, _UNREADABLE))
        self.transport.close()

    def _refuse_head(self) -> None:
        self.transport.write(_answer(431, _HEAD_TOO_LARGE))
        self.transport.close()

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
        self._head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes = self._parsed_head_bytes = 0  # the next request's head starts

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
