"""What the connection guards answer themselves (408, 431, 503 at the caps) carries the app's
security headers and JSON body, and is counted in /metrics and logged (a line a second at
most); a trusted proxy's X-Forwarded-Prefix is the root path of its request's links; and a
small request is never starved by a stream of large ones, whatever the budget."""

import asyncio
import contextlib
import json
import logging
import re
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from prometheus_client import CollectorRegistry, Counter

from turbdb.service.admission import SMALL_REQUEST_POINTS, PointsLimiter, small_reserve
from turbdb.service.app import create_app
from turbdb.service.connections import GuardedHttpProtocol
from turbdb.service.refusals import Refusals
from turbdb.service.security_headers import SECURITY_HEADERS

from servicekit import prefix_proxy, running_serve

SECURITY = {name.decode(): value.decode() for name, value in SECURITY_HEADERS}


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.settimeout(10)
    return sock


def _whole_answer(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _refusal(answer: bytes, status: int) -> dict:
    """The JSON body of a refusal written by the connection guards, its head checked."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {status} "), answer[:300]
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    for name, value in SECURITY.items():
        assert headers.get(name) == value.lower(), (name, headers)
    assert headers["content-type"] == "application/json"
    error = json.loads(body)
    assert error["status"] == status and error["error"] and error["description"]
    return error


def _refusals_counted(port: int) -> dict[tuple[str, str], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {(reason, status): float(value) for reason, status, value in
            re.findall(r'^turbdb_refusals_total\{reason="(\w+)",status="(\d+)"\} (\S+)$', text, re.MULTILINE)}


@contextlib.contextmanager
def _guarded_server(app, limit_concurrency: int | None = None, **settings):
    """The app on uvicorn in a thread, behind the connection guards with ``settings``
    (shorter deadlines than `turbdb serve` lets one choose), counting into the app's metrics."""
    protocol = GuardedHttpProtocol.configured(refusals=Refusals(app.state.backend.metrics.refusals), **settings)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, http=protocol, proxy_headers=False, log_level="warning",
                                           limit_concurrency=limit_concurrency))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield listening.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def guarded(service_db):
    """A server whose guards answer quickly: heads within 0.5 s, bodies idle 0.5 s, 2
    connections a client."""
    app = create_app(service_db)
    with _guarded_server(app, header_timeout=0.5, body_idle_seconds=0.5, per_client=2) as port:
        yield port


def test_a_slow_head_is_answered_408_with_the_security_headers(guarded):
    before = _refusals_counted(guarded)["head_timeout", "408"]
    sock = _connect(guarded, "127.0.0.41")
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    answer = _whole_answer(sock)  # closed quietly before: b""
    sock.close()
    assert "did not all arrive within 0.5 s" in _refusal(answer, 408)["description"]
    assert _refusals_counted(guarded)["head_timeout", "408"] == before + 1


def test_a_connection_that_sends_nothing_is_closed_quietly(guarded):
    before = _refusals_counted(guarded)["head_timeout", "408"]
    sock = _connect(guarded, "127.0.0.42")
    assert _whole_answer(sock) == b""  # opened ahead of use (a browser's preconnect): no refusal
    sock.close()
    assert _refusals_counted(guarded)["head_timeout", "408"] == before


def test_a_stalled_body_is_answered_408_with_the_security_headers(guarded):
    before = _refusals_counted(guarded)
    sock = _connect(guarded, "127.0.0.43")
    sock.sendall(b"POST /v1/datasets/trig/query?field=velocity&time=0 HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"points\": ")
    answer = _whole_answer(sock)
    sock.close()
    assert "stopped arriving" in _refusal(answer, 408)["description"]
    assert _refusals_counted(guarded) == before  # the app's request: counted and logged by the app


def test_heads_too_large_or_of_too_many_fields_and_unreadable_requests_carry_the_headers(guarded):
    fields = "".join(f"X-{i}: v\r\n" for i in range(150))
    before = _refusals_counted(guarded)
    answers = {}
    for name, head in (("fields", f"GET /healthz HTTP/1.1\r\n{fields}\r\n".encode()),
                       ("bytes", b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 300_000 + b"\r\n\r\n"),
                       ("unreadable", b"NOT HTTP AT ALL\r\n\r\n")):
        sock = _connect(guarded, "127.0.0.44")
        with contextlib.suppress(OSError):
            sock.sendall(head)
        answers[name] = _whole_answer(sock)
        sock.close()
    assert "header fields" in _refusal(answers["fields"], 431)["description"]
    assert "KiB" in _refusal(answers["bytes"], 431)["description"]
    assert "not valid HTTP" in _refusal(answers["unreadable"], 400)["description"]
    counted = _refusals_counted(guarded)
    for reason in (("too_many_header_fields", "431"), ("head_too_large", "431"), ("unreadable", "400")):
        assert counted[reason] == before[reason] + 1, reason


def test_a_connection_past_the_clients_cap_is_answered_503_and_counted(guarded):
    before = _refusals_counted(guarded)["client_connections", "503"]
    held = [_connect(guarded, "127.0.0.45") for _ in range(2)]
    third = _connect(guarded, "127.0.0.45")
    answer = _whole_answer(third)
    for sock in (*held, third):
        sock.close()
    assert "too many open connections" in _refusal(answer, 503)["description"]
    assert _refusals_counted(guarded)["client_connections", "503"] == before + 1


def test_a_request_past_the_servers_connection_cap_is_answered_503_in_json_and_counted(service_db):
    # uvicorn's own 503 (--limit-concurrency, 512 connections in turbdb serve) was plain text,
    # without the security headers, and neither counted nor logged but by uvicorn's warning.
    app = create_app(service_db)
    with _guarded_server(app, limit_concurrency=3) as port:
        idle = [_connect(port) for _ in range(3)]
        late = _connect(port)
        late.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = late.recv(65536)
        for sock in (*idle, late):
            sock.close()
        time.sleep(0.2)  # the server learns the connections closed
        assert "as many connections as it may" in _refusal(answer, 503)["description"]
        assert _refusals_counted(port)["server_connections", "503"] == 1


def test_refusals_at_the_cap_are_counted_each_and_logged_a_line_a_second_at_most(server):
    # 128 connections a client: the next 300 from the same address are refused, counted one
    # by one in /metrics, and logged in a few lines that count those left out.
    before = server.metric("turbdb_refusals_total", reason="client_connections", status="503")
    logged = len(server.log.read_text())
    port = int(server.url.rsplit(":", 1)[1])
    held = [_connect(port, "127.0.0.46") for _ in range(128)]
    began = time.monotonic()
    try:
        refused = []
        for _ in range(300):
            sock = _connect(port, "127.0.0.46")
            refused.append(_whole_answer(sock))
            sock.close()
    finally:
        took = time.monotonic() - began
        for sock in held:
            sock.close()
    assert all(answer.startswith(b"HTTP/1.1 503") for answer in refused)
    assert server.metric("turbdb_refusals_total", reason="client_connections", status="503") == before + 300
    time.sleep(1.5)  # the line that counts those left out comes a second after the last line
    lines = [line for line in server.log.read_text()[logged:].splitlines() if "refused" in line]
    one_by_one = [line for line in lines if "127.0.0.46:" in line and "refused 503 Service Unavailable" in line]
    left_out = sum(int(n.replace(",", "")) for n in re.findall(r"client_connections/503: ([\d,]+)", "\n".join(lines)))
    assert one_by_one and len(one_by_one) + left_out == 300, lines
    assert len(lines) <= took + 3, lines  # a line a second, the first at once, the last a second later


def test_requests_the_parser_refuses_are_logged_a_line_a_second_not_one_each(server):
    # uvicorn warned "Invalid HTTP request received." for every one, however many came.
    logged = len(server.log.read_text())
    port = int(server.url.rsplit(":", 1)[1])
    for _ in range(30):
        sock = _connect(port, "127.0.0.47")
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert _whole_answer(sock).startswith(b"HTTP/1.1 400")
        sock.close()
    time.sleep(1.5)
    new = server.log.read_text()[logged:]
    assert "Invalid HTTP request" not in new and 1 <= new.count("refused") <= 4, new
    assert re.search(r"unreadable/400: \d+", new), new


def test_the_refusal_log_counts_the_lines_it_leaves_out(caplog):
    now = [100.0]
    registry = CollectorRegistry()
    counter = Counter("refusals_probe", "refusals", ["reason", "status"], registry=registry)
    refusals = Refusals(counter, interval=1.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="turbdb.service"):
        for k in range(50):
            refusals.refused("client_connections" if k % 5 else "too_many_header_fields", f"10.0.0.{k}:1")
        now[0] += 1.5
        refusals.refused("client_connections", "10.0.0.99:1")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[0].startswith("10.0.0.0:1: refused 431")
    assert "49 more since the last line: client_connections/503: 40, too_many_header_fields/431: 9" in lines[1]
    assert registry.get_sample_value("refusals_probe_total", {"reason": "client_connections", "status": "503"}) == 41


def test_behind_a_trusted_proxy_its_x_forwarded_prefix_roots_the_links(service_db, tmp_path):
    # nginx `location /turbdb/ { proxy_pass http://up/; proxy_set_header X-Forwarded-Prefix /turbdb; }`:
    # the server, started without --root-path, linked outside the prefix.
    with running_serve(service_db, tmp_path / "prefix.log", forwarded_allow_ips="127.0.0.1") as s, \
            prefix_proxy(s.url, "/turbdb") as proxy:
        base = proxy + "/turbdb"
        with httpx.Client(headers={"X-Forwarded-Prefix": "/turbdb"}, timeout=30) as through:
            about = through.get(base + "/").json()
            assert all(link.startswith("/turbdb/") for link in about["links"].values()), about["links"]
            page = through.get(base + "/", headers={"Accept": "text/html"}).text
            assert '<a href="/turbdb/docs">' in page and f'turbdb.connect("{base}")' in page
            for path in ("/docs", "/redoc"):
                docs = through.get(base + path)
                assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
                assert docs.status_code == 200 and "/turbdb/openapi.json" in docs.text
                assert assets and all(a.startswith("/turbdb/") for a in assets), assets
                for asset in assets:
                    assert through.get(proxy + asset).status_code == 200, asset
            assert through.get(base + "/openapi.json").json()["servers"] == [{"url": "/turbdb"}]
            missing = through.get(base + "/v1/nothing").json()["description"]
            assert "'/turbdb/v1/nothing'" in missing and "see /turbdb/docs" in missing, missing
            # A prefix that is no plain path is ignored (it is written into pages and scripts).
            odd = through.get(base + "/", headers={"X-Forwarded-Prefix": "/x'+alert(1)+'"}).json()
            assert odd["links"]["docs"] == "/docs"
        # The same server asked without the header: links from the site's root.
        assert httpx.get(base + "/", timeout=30).json()["links"]["docs"] == "/docs"


def test_x_forwarded_prefix_from_a_peer_not_trusted_changes_nothing(server):
    about = server.get("/", headers={"X-Forwarded-Prefix": "/elsewhere"}).json()
    assert about["links"]["docs"] == "/docs"
    assert "servers" not in server.get("/openapi.json", headers={"X-Forwarded-Prefix": "/elsewhere"}).json()


@pytest.mark.parametrize("capacity, small", [(1_000, 1_000), (6_000, 3_500), (8_191, SMALL_REQUEST_POINTS),
                                             (100_000, SMALL_REQUEST_POINTS)])
def test_a_small_request_is_not_starved_by_a_stream_of_large_ones(capacity, small):
    # On a budget under 8 192 points the reserve is under the largest small request: while
    # large requests kept waiting, one of 3 500 points on 6 000 waited for all of them.
    async def scenario():
        limiter = PointsLimiter(capacity, timeout=30)
        order = []

        async def request(name: str, points: int, hold: float) -> None:
            async with limiter.admit(points):
                order.append(name)
                await asyncio.sleep(hold)

        tasks = []
        for k in range(30):  # a large request every 5 ms, each holding the large requests' share 20 ms
            tasks.append(asyncio.ensure_future(request(f"large{k}", 10 * capacity, 0.02)))
            if k == 2:
                tasks.append(asyncio.ensure_future(request("small", small, 0.0)))
            await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
        return order, limiter

    order, limiter = asyncio.run(scenario())
    assert small > small_reserve(capacity) or capacity >= 8192
    # Admitted before every large request that came after it.
    assert order.index("small") < order.index("large3"), order
    assert limiter.used == 0 and not limiter._queue


def test_a_large_request_is_not_starved_by_a_stream_of_small_ones():
    async def scenario():
        limiter = PointsLimiter(6_000, timeout=30)
        order = []

        async def request(name: str, points: int, hold: float) -> None:
            async with limiter.admit(points):
                order.append(name)
                await asyncio.sleep(hold)

        tasks = [asyncio.ensure_future(request("small-first", 3_000, 0.03))]
        await asyncio.sleep(0)
        for k in range(30):  # small requests overlapping one another, every 5 ms
            tasks.append(asyncio.ensure_future(request(f"small{k}", 3_000, 0.02)))
            if k == 1:
                tasks.append(asyncio.ensure_future(request("large", 10_000, 0.0)))
            await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
        return order

    order = asyncio.run(scenario())
    assert order.index("large") < order.index("small10"), order
