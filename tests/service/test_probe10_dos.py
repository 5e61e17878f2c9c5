"""The tenth probe's denial-of-service findings against `turbdb serve`: stalled track bodies
holding the budget, long work starving small requests of points and threads, answers
nobody reads, floods of header fields, paths in listings, tracebacks for clients gone,
and the token guards (one test each, against a real server where it matters)."""

import asyncio
import json
import socket
import time

import httpx
import numpy as np
import pytest

from turbdb.exceptions import FormatError
from turbdb.service import tokens as tokens_module
from turbdb.service.app import create_app
from turbdb.service.tokens import Tokens

from servicekit import FULL, running_serve, running_server

QUERY = "/v1/datasets/trig/query?field=velocity&time=0"
ONE_POINT = {"points": [[1.0, 2.0, 3.0]]}


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _raw(url: str, head: bytes, source: str = "127.0.0.1", rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((source, 0))
    sock.connect(_address(url))
    sock.sendall(head)
    return sock


def _timed_query(url: str, **kwargs) -> tuple[int, float]:
    start = time.monotonic()
    status = httpx.post(url + QUERY, json=ONE_POINT, timeout=30, **kwargs).status_code
    return status, time.monotonic() - start


def _track_head(url: str, particles: int, steps: int, token: str = FULL) -> bytes:
    body = json.dumps({"points": np.random.default_rng(0).uniform(0, 6, (particles, 3)).tolist()}).encode()
    path = f"/v1/datasets/trig/track?start=0&end={steps * 7.5e-5:.10g}&dt=7.5e-5"
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Accept: application/x-npy\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def _in_flight(url: str) -> int:
    return httpx.get(url + "/healthz").json()["in_flight_points"]


def _wait_for_in_flight(url: str, at_least: int) -> None:
    deadline = time.monotonic() + 10
    while _in_flight(url) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_stalled_track_body_holds_the_points_of_its_body_not_times_its_steps(server):
    # 1 000 declared bytes of JSON, a track of 10 000 steps, no body sent.
    head = (b"POST /v1/datasets/trig/track?start=0&end=1&dt=1e-4 HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    stalled = _raw(server.url, head, source="127.0.0.21")
    try:
        _wait_for_in_flight(server.url, 1)
        held = _in_flight(server.url)
        status, took = _timed_query(server.url)
    finally:
        stalled.close()
    assert held <= 125 and status == 200 and took < 1  # held 125 × 10 001 (the budget) before


def test_a_track_heavier_than_the_budget_leaves_small_queries_their_share(service_db, tokens_file, tmp_path):
    with running_serve(service_db, tmp_path / "reserve.log", tokens=str(tokens_file),
                       max_points_in_flight=10_000) as s:
        track = _raw(s.url, _track_head(s.url, 50, 7000))  # 350 050 point-steps: capped to what large ones may use
        try:
            _wait_for_in_flight(s.url, 1000)
            status, took = _timed_query(s.url)
            still_running = _in_flight(s.url) > 0
        finally:
            track.close()
    assert status == 200 and took < 1 and still_running


def test_long_work_leaves_a_thread_for_a_small_cutout(service_db, tokens_file, tmp_path):
    with running_serve(service_db, tmp_path / "threads.log", tokens=str(tokens_file), workers=2) as s:
        tracks = [_raw(s.url, _track_head(s.url, 50, 7000)) for _ in range(2)]
        try:
            _wait_for_in_flight(s.url, 2 * 350_050)  # both admitted: before, each held a thread
            start = time.monotonic()
            cutout = httpx.post(s.url + "/v1/datasets/trig/cutout?field=velocity&time=0&x=0,4&y=0,4&z=0,4",
                                timeout=30)
            took = time.monotonic() - start
            still_running = _in_flight(s.url) > 0
        finally:
            for track in tracks:
                track.close()
    assert cutout.status_code == 200 and took < 1 and still_running


def test_an_answer_its_client_does_not_read_is_dropped_after_the_send_deadline(service_db, tmp_path):
    with running_serve(service_db, tmp_path / "unread.log", send_idle_seconds=1) as s:
        get = b"GET /static-offline-docs/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n"
        reader = _raw(s.url, get * 4, rcvbuf=4096)
        time.sleep(3)
        received = 0
        reader.settimeout(10)
        try:
            while chunk := reader.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        reader.close()
        whole = len(httpx.get(s.url + "/static-offline-docs/swagger-ui-bundle.js").content)
        log = s.log.read_text()
    assert received < 2 * whole and "read nothing of the answer for 1 s" in log


def test_a_head_of_too_many_header_fields_is_refused_431(server):
    fields = "".join(f"X-{i}: v\r\n" for i in range(200))
    sock = _raw(server.url, f"GET /healthz HTTP/1.1\r\nHost: x\r\n{fields}\r\n".encode())
    sock.settimeout(10)
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 431") and b"header fields" in answer
    assert httpx.get(server.url + "/healthz", headers={f"X-{i}": "v" for i in range(50)}).status_code == 200


def test_a_damaged_dataset_is_listed_without_the_servers_path(tmp_path):
    import turbdb

    db = tmp_path / "db"
    turbdb.create_dataset(db, "fine", grid=(8, 8, 8), times=[0.0], fields={"pressure": 1}, atom=4, partition=8)
    (db / "broken").mkdir()
    (db / "broken" / "zarr.json").write_text("garbage")
    with running_server(db, tmp_path / "listing.log") as s:
        text = httpx.get(s.url + "/v1/datasets").text
    assert "broken" in text and str(tmp_path) not in text


def test_a_client_gone_during_a_static_answer_is_no_internal_error(server):
    logged = len(server.log.read_text())
    get = b"GET /static-offline-docs/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n"
    for _ in range(2):
        sock = _raw(server.url, get * 4, rcvbuf=4096)
        time.sleep(0.5)
        sock.close()
    time.sleep(0.5)
    assert httpx.get(server.url + "/healthz").status_code == 200
    new = server.log.read_text()[logged:]
    assert "internal error" not in new and "Traceback" not in new


def test_wrong_tokens_are_throttled_per_address(server):
    most = getattr(tokens_module, "FAILED_TOKENS_PER_MINUTE", 30)
    transport = httpx.HTTPTransport(local_address="127.0.0.22")
    with httpx.Client(transport=transport) as client:
        statuses = [client.get(server.url + "/v1/datasets", headers={"Authorization": "Bearer wrong"}).status_code
                    for _ in range(most + 1)]
    assert statuses[:-1] == [401] * most and statuses[-1] == 429
    assert httpx.get(server.url + "/v1/datasets", headers={"Authorization": f"Bearer {FULL}"}).status_code == 200


def test_serve_warns_of_a_tokens_file_others_may_read(server, tokens_file):
    # The session's tokens file holds plain secrets, written with the default mode 644.
    assert tokens_file.stat().st_mode & 0o044
    assert f"chmod 600 {tokens_file}" in server.log.read_text()


def test_a_sha256_token_that_is_no_digest_is_refused():
    with pytest.raises(FormatError, match="not a SHA-256 digest"):
        Tokens.from_document({"token": [{"token": "sha256:abc", "name": "x"}]})


def test_ipv6_clients_count_by_their_64_and_the_buckets_stay_bounded(monkeypatch):
    from turbdb.service.tokens import client_key

    assert client_key("2001:db8::1") == client_key("2001:db8::ffff:2") != client_key("2001:db8:0:1::1")
    assert client_key("192.0.2.1") != client_key("192.0.2.2") and client_key("::ffff:192.0.2.1") == "192.0.2.1"
    monkeypatch.setattr(tokens_module, "MAX_BUCKETS", 1000)
    tokens = Tokens()
    for i in range(5000):
        tokens.take(tokens.anonymous, now=0.0, key=f"anonymous@10.0.{i // 256}.{i % 256}")
    assert len(tokens._buckets) == 1000


def test_answers_carry_security_headers_and_the_home_page_a_policy(server):
    home = httpx.get(server.url + "/", headers={"Accept": "text/html"})
    docs = httpx.get(server.url + "/docs")
    error = httpx.get(server.url + "/v1/datasets/nothing-here")
    for answer in (home, docs, error):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY" and answer.headers["referrer-policy"] == "no-referrer"
    assert "default-src 'none'" in home.headers["content-security-policy"] and docs.status_code == 200


def test_a_refused_cors_preflight_has_the_json_error_shape(service_db):
    app = create_app(service_db, allow_origins=["https://lab.example"])

    async def preflight():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.options("/v1/datasets", headers={"Origin": "https://evil.example",
                                                                 "Access-Control-Request-Method": "GET"})

    answer = asyncio.run(preflight())
    assert answer.status_code == 400 and answer.json()["error"] == "InvalidRequestError"
    assert "Disallowed CORS origin" in answer.json()["description"]


def test_a_slow_reader_that_keeps_reading_is_not_cut_by_the_send_deadline(service_db, tmp_path):
    # The deadline ran from the moment the buffer filled until it had nearly drained: a
    # client reading a large answer steadily but slowly was cut as if it read nothing.
    # A deadline of 3 s: a reader on a loaded 2-core machine can itself stall a second.
    with running_serve(service_db, tmp_path / "slow.log", send_idle_seconds=3) as s:
        get = b"GET /static-offline-docs/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n"
        whole = len(httpx.get(s.url + "/static-offline-docs/swagger-ui-bundle.js").content)
        reader = _raw(s.url, get * 4, rcvbuf=4096)
        reader.settimeout(10)
        received, began = 0, time.monotonic()
        while received < 4 * whole and time.monotonic() - began < 60:
            chunk = reader.recv(16384)
            if not chunk:
                break
            received += len(chunk)
            time.sleep(0.002)  # about 8 MB/s at most, in small reads
        reader.close()
        log = s.log.read_text()
    assert received >= 4 * whole, (received, 4 * whole, time.monotonic() - began)
    assert "read nothing of the answer" not in log
