"""The server under load and over its life: 16 concurrent clients × 50 mixed requests
without an error, a bounded number of points in flight however many arrive, anonymous
use refused when the tokens file says so, a graceful shutdown that finishes the
requests in progress, and a restart that no slow client holds up past turbdb.connect's
retries."""

import concurrent.futures
import re
import signal
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

import turbdb

from servicekit import FULL, npy_body, random_points, running_serve, running_server

CLIENTS, REQUESTS = 16, 50


def test_sixteen_concurrent_clients_fifty_mixed_requests_each_without_an_error(server, local):
    pts = random_points(64, seed=11)
    expected = {
        "npy": local["trig"].query("velocity", pts, time=0.5, method="lag4", dtype=np.float64),
        "json": local["trig"].query("pressure", pts, time=1.2, method="lag6", operator="gradient",
                                    temporal="pchip", dtype=np.float64),
        "cutout": local["trig"].cutout("velocity", time=1.0, x=(0, 8), y=(4, 12), z=(30, 38)).values,
    }
    tsv = "\n".join("\t".join("%.8f" % c for c in p) for p in pts)
    jhtdb_expected = local["trig"].query("velocity", np.array([[float("%.8f" % c) for c in p] for p in pts]),
                                         time=0.5, method="fd4lag4", operator="gradient").reshape(64, 9)
    requests_before = server.metric("turbdb_requests_total", endpoint="/v1/datasets/{name}/query", status="200")

    def client(k: int) -> int:
        done = 0
        with turbdb.connect(server.url, token=FULL) as db, httpx.Client(base_url=server.url, timeout=60) as raw:
            ds = db["trig"]
            for i in range(REQUESTS):
                kind = (k + i) % 5
                if kind == 0:
                    got = ds.query("velocity", pts, time=0.5, method="lag4", dtype=np.float64)
                    np.testing.assert_allclose(got, expected["npy"], rtol=1e-12, atol=1e-12)
                elif kind == 1:
                    answer = raw.post("/v1/datasets/trig/query", params={"field": "pressure", "time": 1.2,
                                      "method": "lag6", "operator": "gradient", "temporal": "pchip", "dtype": "float64"},
                                      json={"points": pts.tolist()}, headers={"Authorization": f"Bearer {FULL}"})
                    assert answer.status_code == 200, answer.text
                    np.testing.assert_allclose(answer.json()["values"], expected["json"], rtol=1e-12, atol=1e-12)
                elif kind == 2:
                    answer = raw.post("/turbulence-svc/values", params={"authToken": FULL, "dataset": "trig",
                                      "function": "GetVariable", "var": "velocity", "t": 0.5, "sint": "fd4lag4",
                                      "sop": "gradient", "tint": "none"}, content=tsv)
                    assert answer.status_code == 200, answer.text
                    np.testing.assert_allclose(np.array(answer.json(), dtype=np.float32), jhtdb_expected, rtol=1e-5,
                                               atol=1e-5)
                elif kind == 3:
                    got = ds.cutout("velocity", time=1.0, x=(0, 8), y=(4, 12), z=(30, 38))
                    np.testing.assert_array_equal(got.values, expected["cutout"])
                else:
                    assert ds.info.steps_present() == [0, 1, 2, 3]
                done += 1
        return done

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        completed = list(pool.map(client, range(CLIENTS)))
    seconds = time.perf_counter() - started
    assert completed == [REQUESTS] * CLIENTS
    assert server.alive()
    queries = server.metric("turbdb_requests_total", endpoint="/v1/datasets/{name}/query", status="200") - requests_before
    assert queries >= CLIENTS * REQUESTS * 2 // 5
    assert seconds < 60


@pytest.fixture(scope="module")
def strict_server(service_db, tmp_path_factory):
    """A second server: no anonymous use, few points in flight, two engine threads."""
    tokens = tmp_path_factory.mktemp("strict") / "tokens.toml"
    tokens.write_text(f'[anonymous]\nallowed = false\n\n[[token]]\ntoken = "{FULL}"\nmax_points = 1000000\n'
                      "requests_per_minute = 100000\n")
    with running_server(service_db, tokens.parent / "strict.log", "--tokens", str(tokens), "--max-inflight-points",
                        "3000", "--workers", "2") as s:
        yield s


def test_a_tokens_file_can_forbid_anonymous_use(strict_server):
    refused = strict_server.post("/v1/datasets/trig/query", params={"field": "velocity", "time": 0},
                                 json={"points": [[1, 2, 3]]})
    assert refused.status_code == 401 and "needs a token" in refused.json()["description"]
    jhtdb = strict_server.post("/turbulence-svc/values", params={"authToken": "edu.jhu.pha.turbulence.testing-201406",
                               "dataset": "trig", "var": "velocity", "t": 0}, content="1\t2\t3")
    assert jhtdb.status_code == 401 and "authToken" in jhtdb.json()["description"]
    with turbdb.connect(strict_server.url) as db, pytest.raises(turbdb.AccessDeniedError, match="needs a token"):
        db.datasets
    assert strict_server.get("/healthz").status_code == 200


def test_points_in_flight_stay_within_the_limit_however_many_requests_arrive(strict_server, local):
    sizes = [2000] * 8 + [5000]  # the last is larger than the limit: admitted alone
    batches = [random_points(n, seed=20 + i) for i, n in enumerate(sizes)]

    def ask(pts):
        with turbdb.connect(strict_server.url, token=FULL) as db:
            return db["trig"].query("velocity", pts, time=0.5, method="lag8", operator="gradient", dtype=np.float64)

    with concurrent.futures.ThreadPoolExecutor(len(sizes)) as pool:
        answers = list(pool.map(ask, batches))
    for pts, got in zip(batches, answers):
        np.testing.assert_allclose(got, local["trig"].query("velocity", pts, time=0.5, method="lag8", operator="gradient",
                                                           dtype=np.float64), rtol=1e-12, atol=1e-12)
    assert strict_server.metric("turbdb_points_in_flight_limit") == 3000
    assert 2000 <= strict_server.metric("turbdb_points_in_flight_peak") <= 3000
    assert strict_server.metric("turbdb_points_in_flight") == 0


def test_shutdown_lets_the_request_in_progress_finish(service_db, tmp_path):
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[[token]]\ntoken = "{FULL}"\nmax_points = 1000000\n')
    with running_server(service_db, tmp_path / "shutdown.log", "--tokens", str(tokens)) as s:
        result = {}

        def slow_request(pts):
            with turbdb.connect(s.url, token=FULL) as db:
                result["values"] = db["trig"].query("velocity", pts, time=0.7, method="lag8", operator="hessian",
                                                    temporal="pchip")

        # The signal must come while the request is in flight. A poll of /healthz takes tens of
        # milliseconds and a short request can end between two of them (60 000 points did,
        # now and then, and the signal then came after it), so a request that ends unseen is
        # asked again, bigger.
        for n in (120_000, 480_000):
            result.clear()  # an answer must be this request's, not an earlier one's
            pts = random_points(n, seed=30)
            worker = threading.Thread(target=slow_request, args=(pts,))
            worker.start()
            in_flight = False
            while worker.is_alive() and not in_flight:
                in_flight = s.get("/healthz").json()["in_flight_points"] > 0
                time.sleep(0.01)
            if in_flight:
                break
            worker.join()
        else:
            pytest.fail("no request was seen in flight: it ended between two polls of /healthz")
        s.process.send_signal(signal.SIGTERM)
        worker.join(60)
        assert result["values"].shape == (n, 3, 6)
        assert s.process.wait(30) == 0
        with pytest.raises(httpx.TransportError):
            httpx.get(s.url + "/healthz", timeout=2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_shutdown_stops_a_long_track_with_a_503_and_sighup_shuts_down_too(service_db, tmp_path, sig):
    # A track of 10⁵ steps would outlast the shutdown's 30 s; it stops at its next
    # evaluation and says why. SIGHUP (which killed the server at once) shuts down as well.
    with running_server(service_db, tmp_path / "stop.log") as s:
        answer = {}

        def track():
            answer["response"] = httpx.post(f"{s.url}/v1/datasets/trig/track", params={"start": 0, "end": 0.9,
                                            "dt": 9e-6, "method": "lag4"}, json={"points": [[0.1, 0.2, 0.3]]},
                                            timeout=60)

        worker = threading.Thread(target=track)
        worker.start()
        time.sleep(1.5)
        began = time.monotonic()
        s.process.send_signal(sig)
        assert s.process.wait(20) == 0
        worker.join(20)
        assert time.monotonic() - began < 10
        response = answer["response"]
        assert response.status_code == 503 and "shutting down" in response.json()["description"]
        assert "turbdb: stopped" in s.log.read_text()


def test_a_server_started_with_sighup_ignored_outlives_a_hangup(service_db, tmp_path):
    # As under nohup: the server must not take SIGHUP back to stop on it.
    import subprocess
    import sys

    log = tmp_path / "nohup.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "turbdb.cli", "serve", str(service_db), "--port", "0"],
                                   stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 30
        while "serving" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert process.poll() is None, log.read_text()
    finally:
        process.terminate()
        assert process.wait(30) == 0


def test_a_client_still_sending_does_not_hold_a_restart_and_calls_made_during_it_succeed(service_db, tmp_path):
    # One anonymous client trickling its body held the shutdown for its whole 30 s, longer
    # than turbdb.connect's retries: calls made during a routine restart failed with "cannot
    # reach … is `turbdb serve` running there?", and the trickler was logged as a 500 with a
    # 70-line traceback (the body read, cancelled at the graceful limit).
    with running_server(service_db, tmp_path / "old.log", "--access-log", "--log-level", "info") as old:
        port = urlsplit(old.url).port
        with socket.create_connection(("127.0.0.1", port), timeout=10) as trickler:
            trickler.sendall(b"POST /v1/datasets/trig/query?field=velocity&time=0 HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"points\": [")
            time.sleep(0.5)
            signalled = time.monotonic()
            old.process.send_signal(signal.SIGTERM)
            answer = {}

            def call_during_the_restart():
                with turbdb.connect(old.url) as db:
                    answer["datasets"] = db.datasets

            caller = threading.Thread(target=call_during_the_restart)
            caller.start()
            assert old.process.wait(20) == 0
            stopped = time.monotonic() - signalled
            told = trickler.recv(65536)
        with running_server(service_db, tmp_path / "new.log", "--port", str(port)):
            caller.join(60)
    assert stopped < 5, f"the shutdown waited {stopped:.1f} s for a body still arriving"
    assert told.startswith(b"HTTP/1.1 503") and b"shutting down" in told, told
    assert answer["datasets"] == ["other", "trig"]
    log = old.log.read_text()
    assert "Traceback" not in log and "CancelledError" not in log, log
    lines = [line for line in log.splitlines() if "POST /v1/datasets/trig/query" in line]
    assert len(lines) == 1 and re.search(r'HTTP/1.1" 503 Service Unavailable \d+ B [\d.]+ s$', lines[0]), lines


def test_a_client_that_never_reads_its_answer_holds_a_shutdown_for_graceful_seconds_only(service_db, tmp_path):
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[[token]]\ntoken = "{FULL}"\nmax_points = 2000000\n')
    body = npy_body(random_points(1_000_000, seed=3))  # answered with 24 MB: more than the sockets buffer
    with running_serve(service_db, tmp_path / "reader.log", tokens=str(tokens), graceful_seconds=2,
                       log_level="info") as s:
        with socket.create_connection(("127.0.0.1", urlsplit(s.url).port), timeout=30) as reader:
            reader.sendall(b"POST /v1/datasets/trig/query?field=velocity&time=0&method=none&dtype=float64 HTTP/1.1\r\n"
                           b"Host: x\r\nAuthorization: Bearer " + FULL.encode() + b"\r\nContent-Type: application/x-npy"
                           b"\r\nAccept: application/x-npy\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            deadline = time.monotonic() + 30
            while s.get("/healthz").json()["in_flight_points"] == 0 and time.monotonic() < deadline:
                time.sleep(0.02)  # admitted...
            while s.get("/healthz").json()["in_flight_points"] > 0 and time.monotonic() < deadline:
                time.sleep(0.02)  # ...and answered: its answer waits for a reader that does not read
            time.sleep(0.3)
            signalled = time.monotonic()
            s.process.send_signal(signal.SIGTERM)
            assert s.process.wait(20) == 0
            stopped = time.monotonic() - signalled
    assert 2 <= stopped < 6, stopped
    log = s.log.read_text()
    assert re.search(r'"POST /v1/datasets/trig/query\?\S+ HTTP/1.1": closed 2 s into the shutdown, '
                     r'(its answer unfinished|[\d,]+ bytes of its answer unread)', log), log
    assert "Traceback" not in log and "ERROR" not in log, log


def test_serve_refuses_settings_it_cannot_use_before_it_starts(service_db):
    from turbdb.exceptions import InvalidRequestError
    from turbdb.service.server import serve

    for options, words in (({"graceful_seconds": -1}, "graceful_seconds must be"),
                           ({"graceful_seconds": True}, "graceful_seconds must be"),
                           ({"root_path": "turbdb"}, "root path must be a path such as /turbdb"),
                           ({"forwarded_allow_ips": "localhost"}, "not an IP address or network")):
        with pytest.raises(InvalidRequestError, match=words):
            serve(service_db, port=0, **options)
    # From the command line, a malformed option is a usage error (exit 2), as everywhere.
    from click.testing import CliRunner

    from turbdb.cli import main

    for option, value in (("--root-path", "turbdb"), ("--forwarded-allow-ips", "10.0.0.0/33"),
                          ("--forwarded-allow-ips", ",")):
        result = CliRunner().invoke(main, ["serve", str(service_db), option, value])
        assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, result.output
