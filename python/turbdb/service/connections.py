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
do, like every other error of the service, instead of uvicorn's plain-text one.

Behind trusted proxies (:mod:`.proxies`) a proxy's connections carry many clients'
requests: there the cap counts each client's requests under way, by the address the proxy
forwards, the one the rate limit counts too. At shutdown a request whose body is still
arriving (a trickling upload, or one held back while it waits its turn) is answered 503 at
once, and a connection still busy ``graceful_seconds`` later is closed: either held the
shutdown for uvicorn's whole graceful limit, longer than clients retried.

A request body must keep arriving while the server reads it: no byte for
``BODY_IDLE_SECONDS``, or on average under ``BODY_MIN_BYTES_PER_SECOND`` after that long,
and the request is answered 408 and its connection closed. A query is admitted against the
points-in-flight budget before its body is read, so four stalled uploads held the whole
budget, and every other query got 503s, for as long as they kept their sockets open. Time
the server holds the body back (waiting its turn, with uvicorn's buffer full, or before its
``100 Continue``) does not count.

An answer must keep leaving too: when the connection's write buffer stays full (asyncio's
``pause_writing``, its client not reading) for ``SEND_IDLE_SECONDS``, the connection is
closed and the request's work dropped. Clients that never read four pipelined 1.5 MB
answers held 511 connections, and ``/healthz`` answered 503, for as long as they liked.
A client gone while its answer is written is a quiet disconnect, not an internal error
(uvloop raises on writing to a transport closed before uvicorn learns it).

A head may hold at most ``MAX_HEADER_FIELDS`` header fields (431 past them): 20 000
one-letter headers within the byte limit took 2.4 MB of memory and 14–21 ms of the event
loop per connection.

What the guards answer themselves (the 503s of the caps, uvicorn's server-wide one
included, 400, 408, 431) carries the app's security headers and JSON error body, and is
counted in ``/metrics`` and logged (:mod:`.refusals`): clients were turned away without a
trace. A trusted proxy's ``X-Forwarded-Prefix`` is the root path of its request."""

from __future__ import annotations

import asyncio
import collections
import json
from collections import Counter
from typing import Any

from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .errors import BODY_TIMEOUT_SCOPE_KEY, RESTART_RETRY_SECONDS, body_timeout_description
from .logs import log, request_line
from .proxies import TrustedProxies, forwarded_prefix
from .refusals import Refusals
from .security_headers import SECURITY_HEADERS, header_lines
from .tokens import client_key

HEADER_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS_PER_CLIENT = 128
MAX_HEAD_BYTES = 256 * 1024
# Apache's LimitRequestFields; browsers send about 15 and proxies add a few.
MAX_HEADER_FIELDS = 100
# An answer whose sending makes no progress this long (its client does not read) is dropped:
# long enough for a congested link or a paused client, short enough that idle readers
# cannot hold the connection limit.
SEND_IDLE_SECONDS = 30.0
# How long a refused connection drops what its client still sends before it is closed.
LINGER_SECONDS = 2.0
# Short enough that stalled uploads cannot hold admission hostage for long (nginx waits 60 s
# between reads, but holds no budget meanwhile); long enough for a congested honest link.
BODY_IDLE_SECONDS = 10.0
# 128 kbit/s: slower than any link one sends points over (a 100 MB .npy at 10 MB/s is 600 times
# faster), fast enough that holding the whole budget anonymously takes ~16 MB/s of uploads.
BODY_MIN_BYTES_PER_SECOND = 16 * 1024
# How often a body being read is looked at (the pauses the server makes are counted per tick).
_BODY_TICK_SECONDS = 1.0

_BUSY_HEADERS = b"retry-after: 1\r\n"
_BUSY = ("LimitExceededError", "this client holds too many open connections to the server; reuse connections "
                               "(keep-alive) or close some")
_BUSY_PROXIED = ("LimitExceededError", "this client has too many requests under way at once through the proxy; "
                                       "wait for some to end")
_SERVER_BUSY = ("ServiceError", "the server holds as many connections as it may; retry in a moment")
# {seconds}: the header deadline.
_HEAD_TOO_SLOW = ("ServiceError", "the request line and headers did not all arrive within {seconds:g} s of the "
                                  "connection (or of the previous answer); send them in one go")
# {docs}: the documentation's path, under the server's root path.
_HEAD_TOO_LARGE = ("LimitExceededError", f"the request line and headers are over {MAX_HEAD_BYTES // 1024} KiB; "
                                         "send points and long parameters in a POST body (see {docs})")
_TOO_MANY_FIELDS = ("LimitExceededError", f"the request has more than {MAX_HEADER_FIELDS} header fields; send fewer "
                                          "(see {docs})")
_UNREADABLE = ("InvalidRequestError", "the request is not valid HTTP/1.1 (a request line over 64 KiB is one "
                                      "such): send points and long parameters in a POST body (see {docs})")
_SHUTDOWN_HEADERS = b"retry-after: %d\r\n" % RESTART_RETRY_SECONDS
_SHUTTING_DOWN = ("ServiceError", "the server is shutting down and this request's body had not all arrived; "
                                  "send it again once the server is back")
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class _HeadTooLarge(Exception):
    pass


def _answer(status: int, error: tuple[str, str], extra_headers: bytes = b"", root_path: str = "") -> bytes:
    """A whole HTTP response with the service's JSON error body and security headers, for
    answers given before the app sees the request."""
    body = _body(status, error, root_path)
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\n%s%scontent-length: %d"
            b"\r\n\r\n%s" % (status, _REASONS[status], header_lines(), extra_headers, len(body), body))


def _body(status: int, error: tuple[str, str], root_path: str = "") -> bytes:
    name, description = error
    return json.dumps({"description": description.replace("{docs}", f"{root_path}/docs"), "error": name,
                       "status": status}).encode()


def _busy(reason: str, error: tuple[str, str], refusals: Refusals):
    """The answer to a request past a cap (its client's through a proxy, the server's), in
    place of the app's."""

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        refusals.refused(reason, request_line(scope))
        body = _body(503, error)
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"), (b"connection", b"close"), (b"retry-after", b"1"),
            *SECURITY_HEADERS, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return answer


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline, a per-client connection cap, the
    clients of trusted proxies, and a shutdown that no client can hold up."""

    header_timeout = HEADER_TIMEOUT_SECONDS
    per_client = MAX_CONNECTIONS_PER_CLIENT
    max_head_bytes = MAX_HEAD_BYTES
    max_header_fields = MAX_HEADER_FIELDS
    send_idle_seconds = SEND_IDLE_SECONDS
    body_idle_seconds = BODY_IDLE_SECONDS
    body_min_rate = BODY_MIN_BYTES_PER_SECOND
    #: Seconds into a shutdown after which a connection still busy is closed (None: never).
    graceful_seconds: float | None = None
    trusted_proxies: TrustedProxies | None = None
    #: Where the refusals are counted (the app's metrics) and logged.
    refusals: Refusals = Refusals()
    _open: Counter[str] = Counter()  # one event loop per server process: no lock needed

    @classmethod
    def configured(cls, **settings: Any) -> type[GuardedHttpProtocol]:
        """This protocol with other class settings (uvicorn makes one object per connection)."""
        return type(cls.__name__, (cls,), settings)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # uvicorn's cap of connections (--limit-concurrency) is checked here, answered as the others are.
        self._server_cap, self.limit_concurrency = self.limit_concurrency, None
        self._configured_root_path = self.root_path
        self._deadline: asyncio.TimerHandle | None = None
        self._cutoff: asyncio.TimerHandle | None = None
        self._body_watch: asyncio.TimerHandle | None = None
        self._send_stalled: asyncio.TimerHandle | None = None
        self._header_fields = 0
        self._lingering = False  # refused: what still arrives is dropped until the connection closes
        self._head_bytes: int | None = 0  # bytes received of an incomplete request head; None once it is whole
        self._parsed_head_bytes = 0  # its request line and headers, as parsed
        self._held: collections.deque[str] = collections.deque()  # the client addresses counted for it
        peer = self.client[0] if self.client else ""
        # A trusted proxy's connection counts against the client of each request it carries, while it runs.
        self._proxied = self.trusted_proxies is not None and self.client is not None and peer in self.trusted_proxies
        if not self._proxied and not self._hold(client_key(peer)):
            self.refusals.refused("client_connections", self._peer())
            transport.write(_answer(503, _BUSY, _BUSY_HEADERS))
            transport.close()
            return
        self._arm()

    def _peer(self) -> str:
        """``host:port`` of the connection's peer, for a refusal before a request is read."""
        return "%s:%d" % tuple(self.client) if self.client else "-"

    def _hold(self, host: str) -> bool:
        """Counts this connection against ``host``; whether ``host`` is within its cap."""
        self._held.append(host)
        self._open[host] += 1
        return self._open[host] <= self.per_client

    def _let_go(self) -> None:
        host = self._held.popleft()
        self._open[host] -= 1
        if self._open[host] <= 0:
            del self._open[host]

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        super().data_received(data)
        if self._lingering or self._head_bytes is None or self.transport.is_closing():
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
        self._header_fields += 1
        if self._header_fields > self.max_header_fields:
            raise _HeadTooLarge  # before uvicorn keeps it: the parser stops here
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._parsed_head_bytes += size
        if self._parsed_head_bytes > self.max_head_bytes:
            raise _HeadTooLarge  # stops the parser, which answers through send_400_response

    def send_400_response(self, msg: str) -> None:
        if self._header_fields > self.max_header_fields:
            self.refusals.refused("too_many_header_fields", self._peer())
            self.transport.write(_answer(431, _TOO_MANY_FIELDS, root_path=self.root_path))
            self._close_once_read()
            return
        if self._parsed_head_bytes > self.max_head_bytes:
            self._refuse_head()
            return
        self.refusals.refused("unreadable", self._peer())
        self.transport.write(_answer(400, _UNREADABLE, root_path=self.root_path))
        self.transport.close()

    def _close_once_read(self) -> None:
        """Ends the answer and drops what the client still sends for a moment before closing:
        closed with its head half read, the connection was reset, and the client lost the
        answer (a head is refused at its 101st field, long before its last byte). Meanwhile
        it no longer counts against its client's cap: the client may connect again at once."""
        self._lingering = True
        while self._held:
            self._let_go()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _refuse_head(self) -> None:
        self.refusals.refused("head_too_large", self._peer())
        self.transport.write(_answer(431, _HEAD_TOO_LARGE, root_path=self.root_path))
        self._close_once_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._stop_watching_body()
        if self._send_stalled is not None:
            self._send_stalled.cancel()
        if self._cutoff is not None:
            self._cutoff.cancel()
        while self._held:
            self._let_go()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        self.root_path = self._configured_root_path  # until a trusted proxy names another for this request
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._head_bytes = None
        self._watch_body()
        try:
            self._start_request()
        finally:
            if self.cycle is not None:
                self._quiet_when_gone(self.cycle)

    def _start_request(self) -> None:
        within = True
        if self._proxied:
            # The rate limit, the log and a job's owner read the client from the scope: one address for all.
            client, scheme = self.trusted_proxies.client(self.client, self.headers)  # type: ignore[union-attr,arg-type]
            self.scope["client"] = client
            if scheme is not None:
                self.scope["scheme"] = scheme
            prefix = forwarded_prefix(self.headers)
            if prefix is not None:  # uvicorn puts the root path before the request's path, as with --root-path
                self.root_path = self.scope["root_path"] = prefix
            within = self._hold(client_key(client[0]))  # held, within or not, until its answer ends
        cap = self._server_cap
        if cap is not None and (len(self.connections) >= cap or len(self.tasks) >= cap):
            self._answer_instead(_busy("server_connections", _SERVER_BUSY, self.refusals))  # as uvicorn did, in JSON
        elif not within:
            self._answer_instead(_busy("client_requests", _BUSY_PROXIED, self.refusals))
        else:
            super().on_headers_complete()

    def _answer_instead(self, app: Any) -> None:
        """Starts the request with ``app`` in place of the server's app."""
        app, self.app = self.app, app
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_response_complete(self) -> None:
        if self._proxied and self._held:
            self._let_go()
        super().on_response_complete()

    def shutdown(self) -> None:
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not cycle.response_started and not self.transport.is_closing():
            # Its body is still arriving: answered now, not waited for. The app reads the
            # body's end as a disconnection; what it answers then goes nowhere.
            self.transport.write(_answer(503, _SHUTTING_DOWN, _SHUTDOWN_HEADERS))
            cycle.disconnected = True
            cycle.message_event.set()
            self.transport.close()
            return
        super().shutdown()  # closes an idle connection; one whose answer is being written, once written
        if self.graceful_seconds is not None:
            self._cutoff = self.loop.call_later(self.graceful_seconds, self._cut)

    def _cut(self) -> None:
        """Closes a connection still open at the end of the graceful time (a request that
        still runs, an answer its client does not read): its request sees its client gone."""
        self._cutoff = None
        unread = self.transport.get_write_buffer_size()
        if self.cycle is not None and (not self.cycle.response_complete or unread):
            state = ("its answer unfinished" if not self.cycle.response_complete
                     else f"{unread:,} bytes of its answer unread")
            log.warning("%s: closed %g s into the shutdown, %s", request_line(self.cycle.scope), self.graceful_seconds,
                        state)
        self.transport.abort()  # close() waits for a reader that does not read

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._stop_watching_body()
        self._head_bytes = self._parsed_head_bytes = self._header_fields = 0  # the next request's head starts

    def _quiet_when_gone(self, cycle: Any) -> None:
        """Makes the request's ``send`` do nothing once its client has gone, as uvicorn's
        does once it has learnt so: uvloop raises on writing to a transport closed before
        ``connection_lost`` tells the cycle, and a client that closed during a static file
        logged two tracebacks as internal errors."""
        send = cycle.send

        async def quiet_send(message: Any) -> None:
            try:
                await send(message)
            except RuntimeError:
                if not self.transport.is_closing():
                    raise
                cycle.disconnected = True

        cycle.send = quiet_send

    # -- the send deadline --------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_stalled is None:
            # Whose answer it is, now: by the deadline a pipelined request may be the cycle.
            where = request_line(self.cycle.scope) if self.cycle is not None else "a connection"
            self._watch_send(self.transport.get_write_buffer_size(), where)

    def _watch_send(self, unread: int, where: str) -> None:
        self._send_stalled = self.loop.call_later(self.send_idle_seconds, self._look_at_send, unread, where)

    def resume_writing(self) -> None:
        if self._send_stalled is not None:
            self._send_stalled.cancel()
            self._send_stalled = None
        super().resume_writing()

    def _look_at_send(self, unread_before: int, where: str) -> None:
        """Closes a connection whose client has read nothing of its answer for
        ``send_idle_seconds`` (its request sees its client gone and stops); one that read
        some, however slowly, is given as long again. The buffer drains to its low mark
        before writing resumes, so a slow honest reader of a large answer (24 MB at 400 kB/s)
        stays paused longer than the deadline while it reads."""
        self._send_stalled = None
        unread = self.transport.get_write_buffer_size()
        if unread < unread_before:
            self._watch_send(unread, where)
            return
        log.warning("%s: closed, its client read nothing of the answer for %g s (%s bytes unread)", where,
                    self.send_idle_seconds, f"{unread:,}")
        self.transport.abort()

    # -- the body deadline --------------------------------------------------------------------

    def _watch_body(self) -> None:
        """Starts the body deadline of the request whose headers just ended (a request
        without a body ends at once, and stops it)."""
        self._stop_watching_body()
        now = self.loop.time()
        self._body_bytes = 0
        self._body_progress = self._body_tick = now  # the last byte (or the server's last hold), the last tick
        self._body_reading = 0.0  # seconds the server waited for bytes that did not come
        self._body_watch = self.loop.call_later(_BODY_TICK_SECONDS, self._look_at_body)

    def _stop_watching_body(self) -> None:
        if self._body_watch is not None:
            self._body_watch.cancel()
            self._body_watch = None

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._body_bytes += len(body)
        self._body_progress = self.loop.time()

    def _look_at_body(self) -> None:
        self._body_watch = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or cycle.disconnected or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused or cycle.waiting_for_100_continue:
            self._body_progress = now  # the server holds the body back: the client is not late
        else:
            self._body_reading += now - self._body_tick
        self._body_tick = now
        idle = now - self._body_progress
        owed = self.body_min_rate * (self._body_reading - self.body_idle_seconds)
        if idle >= self.body_idle_seconds or self._body_bytes < owed:
            self._cut_body(cycle)
            return
        self._body_watch = self.loop.call_later(_BODY_TICK_SECONDS, self._look_at_body)

    def _cut_body(self, cycle: Any) -> None:
        """Answers 408 a request whose body stopped arriving; the app reads its end as a
        disconnection (releasing its admission) and logs the 408 the scope says."""
        description = body_timeout_description(self.body_idle_seconds, self.body_min_rate, self._body_bytes)
        cycle.scope[BODY_TIMEOUT_SCOPE_KEY] = description
        if not cycle.response_started:
            self.transport.write(_answer(408, ("ServiceError", description)))
        cycle.disconnected = True
        cycle.message_event.set()
        self.transport.close()

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self, *_: Any) -> None:
        """Closes a connection whose request head did not arrive in time: with a 408 where
        part of it came (a connection that sent nothing, opened ahead of use, is closed
        quietly), and the answer before it, if any, was all written."""
        self._deadline = None
        if self.transport.is_closing():
            return
        answered = self.cycle is None or self.cycle.response_complete
        if not self._head_bytes or not answered:
            self.transport.close()
            return
        self.refusals.refused("head_timeout", self._peer())
        slow = (_HEAD_TOO_SLOW[0], _HEAD_TOO_SLOW[1].format(seconds=self.header_timeout))
        self.transport.write(_answer(408, slow, root_path=self.root_path))
        self._close_once_read()
