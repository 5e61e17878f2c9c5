"""HTTP clients for many threads that talk to one server.

One ``httpx.Client`` shared by many threads serialises them: httpcore's connection pool
takes one lock for every request and, under it, walks every connection it holds (is it
idle, is its socket readable). With 128 threads replaying a trace against a local server,
that walk and the wait for its lock took most of the client's CPU (``py-spy``: 42 % of
samples in the pool's lock), 12 CPU-seconds for 1 528 queries. Here each thread uses one
of ``STRIPES`` clients, picked by its thread id: a pool is shared by a few threads only,
and an idle connection is still reused by the next thread of its stripe (a client per
thread would keep one open for every thread, past the server's cap on connections from
one address). :func:`send_within` sends one request and reads its whole answer within a
deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from .exceptions import InvalidRequestError

#: Clients the threads are spread over.
STRIPES = 32


class ClientStripes:
    """``httpx.Client`` objects made by ``make`` (at most ``stripes``, each at its first
    use), shared by the threads that map to it."""

    def __init__(self, make: Callable[[], httpx.Client], stripes: int = STRIPES):
        self._make = make
        self._clients: list[httpx.Client | None] = [None] * stripes
        self._lock = threading.Lock()
        self._closed = False

    def get(self) -> httpx.Client:
        """The client of the calling thread's stripe."""
        # Thread ids are addresses: their low bits are alike, so they are mixed first.
        stripe = hash((threading.get_ident(),)) % len(self._clients)
        client = self._clients[stripe]
        if client is None:
            with self._lock:
                if self._closed:
                    raise InvalidRequestError("this connection to the server was closed (close(), or the end of its "
                                              "`with` block): connect again with turbdb.connect(url)")
                client = self._clients[stripe]
                if client is None:
                    client = self._clients[stripe] = self._make()
        return client

    def made(self) -> list[httpx.Client]:
        """The clients made so far."""
        with self._lock:
            return [c for c in self._clients if c is not None]

    def close(self) -> None:
        """Closes every client; later requests raise."""
        with self._lock:
            self._closed = True
            clients, self._clients = self._clients, [None] * len(self._clients)
        for client in clients:
            if client is not None:
                client.close()


class AnswerDeadlineExceeded(httpx.TimeoutException):
    """The whole answer did not arrive within the request's deadline."""


def send_within(client: httpx.Client, method: str, url: str, seconds: float, **kwargs: Any) -> httpx.Response:
    """Sends a request and reads its whole answer within about ``seconds`` (at most one
    more read past them). httpx's timeout bounds each read, not the answer: a server or
    proxy trickling a byte a second held a client forever. Raises
    :class:`AnswerDeadlineExceeded` (an ``httpx.TimeoutException``) past the deadline."""
    deadline = time.monotonic() + seconds
    request = client.build_request(method, url, **kwargs)
    response = client.send(request, stream=True)
    chunks = []
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise AnswerDeadlineExceeded(f"the whole answer took longer than {seconds:g} s", request=request)
    finally:
        response.close()
    # The decoded bytes, under the answer's headers less those that described the encoded ones.
    headers = response.headers.copy()
    for name in ("content-encoding", "content-length", "transfer-encoding"):
        headers.pop(name, None)
    return httpx.Response(response.status_code, headers=headers, content=b"".join(chunks), request=request,
                          extensions=response.extensions)
