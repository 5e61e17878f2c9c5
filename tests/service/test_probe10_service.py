"""What the tenth probe of the HTTP API found: stalled bodies holding admission, 500s on
huge integers, JSON with Infinity, a 405 that hid GET, track messages naming the wrong
limit, non-ASCII digits read as numbers, and a 403 that told hidden datasets apart."""

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

import turbdb
from turbdb.exceptions import LimitExceededError

from servicekit import FULL, OTHER_ONLY, running_serve

QUERY = "/v1/datasets/{name}/query?field=velocity&time=0"


def _stalled_upload(url: str, name: str, length: int) -> socket.socket:
    """A query that declares a body of ``length`` bytes and sends only its start (the probe's hold.py)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    sock.sendall(b"POST " + QUERY.format(name=name).encode() + b" HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"points\": [[1,2,3]" % length)
    return sock


def _answer_of(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except OSError:
        pass
    return data


def test_stalled_bodies_are_answered_408_and_release_their_admission(service_db, tmp_path):
    with running_serve(service_db, tmp_path / "stall.log", max_points_in_flight=10_000, body_idle_seconds=2,
                       access_log=True) as s:
        name = "trig"
        stalled = [_stalled_upload(s.url, name, 32_768) for _ in range(2)]  # 2 × 4 096 points admitted
        try:
            time.sleep(0.5)
            assert s.get("/healthz").json()["in_flight_points"] >= 8_000
            started = time.monotonic()
            answer = s.post(QUERY.format(name=name), json={"points": [[1, 2, 3]] * 2000})
            assert answer.status_code == 200, answer.text
            assert time.monotonic() - started < 8  # not the 60 s queue timeout
            for sock in stalled:
                sock.settimeout(10)
                reply = _answer_of(sock)
                assert reply.startswith(b"HTTP/1.1 408"), reply
                assert b"stopped arriving" in reply
            assert s.get("/healthz").json()["in_flight_points"] == 0
            time.sleep(0.3)
            assert " 408 " in s.log.read_text()
        finally:
            for sock in stalled:
                sock.close()


def test_an_honest_body_with_short_pauses_still_goes_through_and_a_trickle_does_not(service_db, tmp_path):
    with running_serve(service_db, tmp_path / "pauses.log", body_idle_seconds=2) as s:
        name = "trig"
        body = json.dumps({"points": [[1.0, 2.0, 3.0]] * 500}).encode()
        parts = urlsplit(s.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(b"POST " + QUERY.format(name=name).encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            for i in range(0, len(body), len(body) // 3 + 1):  # three pieces, 1.2 s apart: within the 2 s
                sock.sendall(body[i:i + len(body) // 3 + 1])
                time.sleep(1.2)
            assert _answer_of(sock).startswith(b"HTTP/1.1 200")
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(b"POST " + QUERY.format(name=name).encode() + b" HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            started, reply = time.monotonic(), b""
            sock.settimeout(0.5)
            for byte in body:  # a byte every 0.5 s: never idle 2 s, far under 16 KiB/s
                try:
                    sock.sendall(bytes([byte]))
                    reply = sock.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    break
                if reply or time.monotonic() - started > 20:
                    break
            assert reply.startswith(b"HTTP/1.1 408"), reply
            assert time.monotonic() - started < 8


JHTDB_CUTOUT = "/turbulence-svc/cutout/api/local"
BOX = {"dataset": "trig", "function": "velocity", "xs": 1, "xe": 1, "ys": 1, "ye": 1, "zs": 1, "ze": 1}


@pytest.mark.parametrize("changed", [
    {"xe": "99999999999999999999"}, {"xs": "-9223372036854775807"}, {"xs": "-9223372036854775808"},
    {"ze": "99999999999999999999"}, {"te": "99999999999999999999"}, {"stridex": "99999999999999999999"},
    {"xs": "-4611686018427387904", "xe": "4611686018427387904"},  # within ±2**62, a span beyond len(range)
])
def test_jhtdb_cutouts_of_huge_integers_are_refused_as_4xx(server, changed):
    answer = server.get(JHTDB_CUTOUT, params={**BOX, **changed})
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.json()["description"]


def test_a_v1_cutout_spanning_2_to_the_63_nodes_is_refused_against_its_limit(server, service_db):
    answer = server.post("/v1/datasets/trig/cutout", params={"field": "velocity", "time": 0,
                                                            "x": "-4611686018427387904,4611686018427387904",
                                                            "y": "0,1", "z": "0,1"})
    assert answer.status_code == 413, answer.text
    with pytest.raises(LimitExceededError):
        turbdb.open(service_db)["trig"].cutout("velocity", time=0, x=(-2**62, 2**62), y=(0, 1), z=(0, 1))


def test_an_internal_error_is_answered_inside_the_app_and_counted_with_its_bytes(service_db, caplog):
    import asyncio

    from fastapi import APIRouter

    from turbdb.service.app import create_app

    app = create_app(service_db)
    broken = APIRouter()

    @broken.get("/broken")
    async def _broken():
        raise OverflowError("boom")

    app.include_router(broken)

    async def exchange():
        # raise_app_exceptions: an exception that escapes the app (and made uvicorn log it
        # again and close the connection) fails the test.
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get("/broken"), (await client.get("/metrics")).text

    answer, metrics = asyncio.run(exchange())
    assert answer.status_code == 500 and answer.json()["error"] == "ServiceError"
    assert "OverflowError" in answer.json()["description"]
    sent = [line for line in metrics.splitlines() if line.startswith('turbdb_response_bytes_total{endpoint="/broken"}')]
    assert sent and float(sent[0].split()[-1]) == len(answer.content)
    assert sum("Traceback" in (r.exc_text or "") or r.exc_info is not None for r in caplog.records) == 1


def test_non_finite_values_are_null_in_json_and_counted(tmp_path):
    from servicekit import running_server

    ds = turbdb.create_dataset(tmp_path / "db", "bigset", grid=(16, 16, 16), times=[0.0, 1.0],
                               fields={"velocity": 3})
    for t in range(2):
        u = np.zeros((16, 16, 16, 3), np.float32)
        u[::2], u[1::2] = 3e38, -3e38
        ds.write("velocity", t, u)
    with running_server(tmp_path / "db", tmp_path / "big.log") as s:
        answer = s.post("/v1/datasets/bigset/query", params={"field": "velocity", "time": 0, "method": "lag8",
                                                              "operator": "laplacian"},
                        json={"points": [[0.2, 0.3, 0.4]]})
        assert answer.status_code == 200
        document = json.loads(answer.content, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
        assert document["non_finite"] == 3 and document["values"] == [[None, None, None]]
        assert "float64" in document["non_finite_note"]
        wide = s.post("/v1/datasets/bigset/query", params={"field": "velocity", "time": 0, "method": "lag8",
                                                            "operator": "laplacian", "dtype": "float64"},
                      json={"points": [[0.2, 0.3, 0.4]]}).json()
        assert "non_finite" not in wide and all(isinstance(v, float) for v in wide["values"][0])
        jhtdb = s.post("/turbulence-svc/values", params={"dataset": "bigset", "function": "GetVariable",
                                                          "var": "velocity", "t": 0, "sint": "lag8",
                                                          "sop": "laplacian"}, content="0.2\t0.3\t0.4\n")
        assert jhtdb.status_code == 200
        assert json.loads(jhtdb.content, parse_constant=lambda c: pytest.fail(f"{c} in JSON")) == [[None] * 3]
        assert jhtdb.headers["x-turbdb-non-finite"] == "3"


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_405_allows_every_method_on_the_path(server, method):
    answer = server.request(method, "/v1/jobs")
    assert answer.status_code == 405
    allowed = {m.strip() for m in answer.headers["allow"].split(",")}
    assert {"GET", "HEAD", "POST"} <= allowed, answer.headers["allow"]
    assert "GET" in answer.json()["description"] and "POST" in answer.json()["description"]


@pytest.mark.parametrize("path, params, named", [
    ("/v1/datasets/trig/track", {"start": 0, "end": 0.02, "dt": 1e-300}, "100,000"),
    ("/turbulence-svc/values", {"dataset": "trig", "function": "GetVariable", "var": "position", "t": 0,
                                "sint": "lag4", "timepoint_end": 0.5, "delta_t": 1e-12}, "100,000"),
])
def test_too_many_track_steps_name_the_servers_limit(server, path, params, named):
    answer = server.post(path, params=params, content="0.1\t0.2\t0.3\n" if "values" in path else None,
                         json=None if "values" in path else {"points": [[0.1, 0.2, 0.3]]})
    assert answer.status_code == 413, answer.text
    assert named in answer.json()["description"] and "2,147,483,648" not in answer.json()["description"]


def test_a_track_outside_the_stored_times_says_so_before_counting_steps(server):
    answer = server.post("/v1/datasets/trig/track", params={"start": -2e16, "end": 5e231, "dt": 1},
                         json={"points": [[0.1, 0.2, 0.3]]})
    assert answer.status_code == 400, answer.text
    assert "outside the stored times" in answer.json()["description"]


@pytest.mark.parametrize("path, params", [
    ("/v1/datasets/trig/cutout", {"field": "velocity", "time": 0, "x": "٣,٤", "y": "0,1", "z": "0,1"}),
    ("/v1/datasets/trig/cutout", {"field": "velocity", "time": 0, "x": "0,1", "y": "0,1", "z": "0,1", "stride": "١"}),
    ("/v1/datasets/trig/cutout", {"field": "velocity", "time": "0_0", "x": "0,1", "y": "0,1", "z": "0,1"}),
    (JHTDB_CUTOUT, {**BOX, "xe": "1_0"}),
])
def test_numbers_with_other_than_ascii_digits_are_refused(server, path, params):
    send = server.get if path == JHTDB_CUTOUT else server.post
    answer = send(path, params=params)
    assert answer.status_code == 400, answer.text
    assert "ASCII" in answer.json()["description"]


def test_jhtdb_points_with_underscores_are_refused(server):
    answer = server.post("/turbulence-svc/values", params={"dataset": "trig", "function": "GetVariable",
                                                           "var": "velocity", "t": 0, "sint": "lag4"},
                         content="1_0\t0.2\t0.3\n")
    assert answer.status_code == 400, answer.text


def test_a_hidden_dataset_is_answered_as_an_absent_one(server):
    headers = {"Authorization": f"Bearer {OTHER_ONLY}"}
    hidden = server.get("/v1/datasets/trig", headers=headers)
    absent = server.get("/v1/datasets/nosuch", headers=headers)
    assert hidden.status_code == absent.status_code == 404
    assert hidden.json()["description"].replace("'trig'", "'nosuch'") == absent.json()["description"]
    assert "other" in absent.json()["description"]
    query = server.post(QUERY.format(name="trig"), json={"points": [[1, 2, 3]]}, headers=headers)
    assert query.status_code == 404
    jhtdb = server.get(JHTDB_CUTOUT, params={**BOX, "token": OTHER_ONLY})
    assert jhtdb.status_code == 404


def test_a_look_up_over_http_asks_for_the_metadata_without_the_steps_written(server):
    # The steps written are found by looking at every shard file (about 5 µs each): a
    # dataset of millions of shards took seconds a look-up, and `connect(url)[name]` asked.
    headers = {"Authorization": f"Bearer {FULL}"}
    whole = server.get("/v1/datasets/trig", headers=headers).json()
    bare = server.get("/v1/datasets/trig", params={"steps": "false"}, headers=headers).json()
    assert "steps_present" in whole and "steps_present" not in bare
    assert bare == {k: v for k, v in whole.items() if k != "steps_present"}
    with turbdb.connect(server.url, token=FULL, progress=False) as remote:
        ds = remote["trig"]
        assert ds.metadata.grid == tuple(whole["grid"])
        assert ds.metadata.fields["velocity"].steps_present == ()  # not asked for
        assert ds.info.fields["velocity"].steps_present == tuple(whole["steps_present"]["velocity"])
