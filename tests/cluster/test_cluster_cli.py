"""The commands a user types, run as the user runs them: `turbdb cluster up` in its own
process until it is stopped, `turbdb cluster status` against its address file, and
`turbdb serve --cluster` answering HTTP queries with the cluster behind it — the same
numbers as the database read on one node."""

import contextlib
import json
import math
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
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(30) == 0, serve_log.read_text()

        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0, up_log.read_text()
    assert "cluster stopped" in up_log.read_text()
    assert not address_file.exists(), "a stopped cluster leaves no address behind for others to dial"
