"""The commands a user types, run as the user runs them: `turbdb cluster up` in its own
process until it is stopped, `turbdb cluster status` against its address file, and
`turbdb serve --cluster` answering HTTP queries with the cluster behind it — the same
numbers as the database read on one node."""

import concurrent.futures
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

import turbdb

pytestmark = pytest.mark.slow

TWO_PI = 2 * math.pi


def _turbdb(*args: str) -> list[str]:
    return [sys.executable, "-m", "turbdb.cli", *args]


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("cluster-cli") / "db"
    axis = np.arange(16) * TWO_PI / 16
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    ds = turbdb.create_dataset(db, "trig", grid=(16, 16, 16), times=[0.0, 1.0], atom=4, partition=8,
                               fields={"velocity": 3})
    for t in range(2):
        ds.write("velocity", t, np.stack([np.sin(x) * (1 + t), np.cos(y) * np.sin(z), np.cos(x + z)], -1))
    return db


def _wait_for(what: str, ready, process: subprocess.Popen, log: Path, seconds: float = 90):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode}:\n{log.read_text()}")
        found = ready()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what} was not ready after {seconds} s:\n{log.read_text()}")


@contextlib.contextmanager
def _started(args: list[str], log: Path):
    with open(log, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _healthy_url(log: Path) -> str | None:
    found = re.search(r"at (http://\S+)", log.read_text())
    if found is None:
        return None
    with contextlib.suppress(httpx.TransportError):
        if httpx.get(found.group(1) + "/healthz", timeout=2).status_code == 200:
            return found.group(1)
    return None


def test_cluster_up_status_serve_and_stop(database, tmp_path):
    address_file = tmp_path / "cluster.addr"
    up_log = tmp_path / "up.log"
    with _started(_turbdb("cluster", "up", str(database), "--workers", "2", "--threads", "1",
                          "--address-file", str(address_file), "--dashboard-address", ":0"), up_log) as up:
        address = _wait_for("turbdb cluster up", lambda: address_file.is_file() and address_file.read_text().strip(),
                            up, up_log)
        assert address.startswith("tcp://")
        assert "2 workers serve" in up_log.read_text()

        status = subprocess.run(_turbdb("cluster", "status", str(database), "--address-file", str(address_file),
                                        "--json"), capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["state"] == "healthy"

        serve_log = tmp_path / "serve.log"
        with _started(_turbdb("serve", str(database), "--cluster", address, "--port", "0", "--log-level", "warning"),
                      serve_log) as serve:
            url = _wait_for("turbdb serve --cluster", lambda: _healthy_url(serve_log), serve, serve_log)
            over_http = httpx.get(url + "/v1/cluster", timeout=30)
            assert over_http.status_code == 200
            assert over_http.json()["state"] == "healthy"

            points = np.random.default_rng(3).uniform(0, TWO_PI, (500, 3))
            with turbdb.connect(url) as remote, turbdb.open(database) as local:
                for operator, method in (("field", "lag6"), ("gradient", "fd4lag4")):
                    got = remote["trig"].query("velocity", points, time=0.5, operator=operator, method=method,
                                               temporal="pchip")
                    want = local["trig"].query("velocity", points, time=0.5, operator=operator, method=method,
                                               temporal="pchip")
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
                _a_stopped_worker_is_served_around(database, address, address_file, url, points[:100], local)
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(30) == 0, serve_log.read_text()

        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0, up_log.read_text()
    assert "cluster stopped" in up_log.read_text()
    assert not address_file.exists(), "a stopped cluster leaves no address behind for others to dial"


def _a_stopped_worker_is_served_around(database: Path, address: str, address_file: Path, url: str,
                                       points: np.ndarray, local) -> None:
    """Each worker in turn stopped (SIGSTOP: alive to its nanny and, for 5 minutes, to the
    scheduler) while a small query is asked: the server keeps answering meanwhile, the
    query is served by the other copy (at once, or once the stopped worker has been silent
    for SILENT_SECONDS), and `cluster status` names it. (A 100-point query ran on the event
    loop and waited on a stopped worker without end: /healthz timed out with it.)"""
    from distributed import Client

    from turbdb.cluster.membership import SILENT_SECONDS

    with Client(address, timeout=30) as client:
        pids = sorted(client.run(os.getpid).values())
    want = local["trig"].query("velocity", points, time=0.0)
    for stopped in pids:
        os.kill(stopped, signal.SIGSTOP)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                asked = pool.submit(httpx.post, url + "/v1/datasets/trig/query",
                                    params={"field": "velocity", "time": 0.0}, json={"points": points.tolist()},
                                    timeout=SILENT_SECONDS + 60)
                time.sleep(1.0)
                began = time.monotonic()
                assert httpx.get(url + "/healthz", timeout=10).status_code == 200
                assert time.monotonic() - began < 3, "the server must answer while a query waits on a worker"
                answer = asked.result(timeout=SILENT_SECONDS + 60)
            assert answer.status_code == 200, answer.text
            np.testing.assert_allclose(answer.json()["values"], want, rtol=1e-5, atol=1e-5)
            deadline = time.monotonic() + SILENT_SECONDS + 30
            while True:
                status = subprocess.run(_turbdb("cluster", "status", str(database), "--address-file",
                                                str(address_file), "--json"), capture_output=True, text=True,
                                        timeout=120)
                report = json.loads(status.stdout)
                if report["state"] != "healthy" or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            assert report["state"] == "degraded" and status.returncode == 1
            assert [w["silent_seconds"] is not None for w in report["workers"]].count(True) == 1
        finally:
            os.kill(stopped, signal.SIGCONT)
