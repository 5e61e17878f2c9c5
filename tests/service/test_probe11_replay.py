"""`turbdb workload replay --url` as the eleventh probe ran it: the 503s of the server's
cap on connections from one address are reported as such (they were "engine busy (queue
full)"); Ctrl-C closes the jobs the replay declared (they stayed open, counting against
the token, for 600 s); a server that dies mid-replay is reported within seconds of the
first request that found it gone (206 s)."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from click.testing import CliRunner

import turbdb
from servicekit import FULL, TIMES, running_server
from turbdb.cli import main
from turbdb.service.connections import MAX_CONNECTIONS_PER_CLIENT
from turbdb.workload import Query, replay, write_trace

AUTH = {"Authorization": f"Bearer {FULL}"}
ONE = Query(arrival=0.0, job=0, index=0, dataset="trig", field="velocity", time=0.5, method="lag4", operator="field",
            temporal="none", count=20, seed=1, region=None, spread=0.1)


def jobs_of(count: int, queries: int, arrival: float = 0.0) -> list[Query]:
    """``count`` jobs of ``queries`` queries each, over the stored times in turn."""
    return [dataclasses.replace(ONE, job=j, index=i, arrival=arrival, time=TIMES[i % len(TIMES)], seed=j * 1000 + i)
            for j in range(count) for i in range(queries)]


def test_503s_of_the_connection_cap_are_reported_as_such(server, tmp_path, monkeypatch):
    # Every 503 was "engine busy (queue full)", though the server said this address held
    # too many connections (a replay of more clients than the cap only made it worse).
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, jobs_of(2, 1))
    host, port = httpx.URL(server.url).host, httpx.URL(server.url).port
    held = [socket.create_connection((host, port)) for _ in range(MAX_CONNECTIONS_PER_CLIENT)]
    threading.Timer(2.5, lambda: [s.close() for s in held]).start()  # the replay's retries then get in
    monkeypatch.setenv("TURBDB_TOKEN", FULL)
    ran = CliRunner().invoke(main, ["workload", "replay", str(trace), "--url", server.url, "--clients", "2"])
    assert ran.exit_code == 0, ran.output
    assert "server busy:" in ran.output and "engine" not in ran.output, ran.output
    assert "this address's connections or requests under way past the server's cap" in ran.output
    assert "warning: the server refused connections of this address" in ran.output
    report = json.loads(CliRunner().invoke(main, ["workload", "replay", str(trace), "--url", server.url,
                                                  "--json"]).output)
    assert report["throttling"]["busy_causes"] == {} and report["queries"] == 2


def test_ctrl_c_closes_the_jobs_the_replay_declared(server, tmp_path):
    # Each job under way stayed open on the server (its client's DELETE failed once the
    # command had closed the connection): 600 s counted against the token's open jobs.
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, jobs_of(4, 5000))  # each job takes longer than the replay is given
    before = {j["job"] for j in httpx.get(server.url + "/v1/jobs", headers=AUTH, timeout=10).json()["jobs"]}
    command = [sys.executable, "-m", "turbdb.cli", "workload", "replay", str(trace), "--url", server.url,
               "--clients", "4"]
    replaying = subprocess.Popen(command, env={**os.environ, "TURBDB_TOKEN": FULL}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)

    def declared() -> set[int]:
        jobs = httpx.get(server.url + "/v1/jobs", headers=AUTH, timeout=10).json()["jobs"]
        return {j["job"] for j in jobs if j["answered"] > 0} - before

    deadline = time.monotonic() + 30
    while len(declared()) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(declared()) == 4, replaying.stderr.read() if replaying.poll() is not None else "not under way"
    replaying.send_signal(signal.SIGINT)
    _, err = replaying.communicate(timeout=30)
    assert replaying.returncode != 0 and "Traceback" not in err, err
    assert declared() == set(), "the interrupted replay left its jobs open on the server"


@pytest.mark.parametrize("driver", ["threads", "futures"])
def test_a_server_that_dies_mid_replay_is_reported_within_seconds(service_db, tmp_path, driver):
    # After the first request found the server gone, each client closed its job, then the
    # engine's counters were asked for: each waited out the client's retries again (206 s
    # with the default retries; here 3 × 2 s).
    restart_seconds = 2.0
    with running_server(service_db, tmp_path / "dying.log", "--scheduler", "jaws") as dying:
        remote = turbdb.connect(dying.url, retries=1, backoff=0.01, restart_seconds=restart_seconds)
        killed = []

        def kill_after_some(done, total):
            if done == 10:
                dying.process.kill()
                dying.process.wait(30)
                killed.append(time.monotonic())

        report = replay(remote, jobs_of(4, 400), clients=4, progress=kill_after_some, driver=driver)
        took = time.monotonic() - killed[0]
        remote.close()
    assert report.unreachable and report.failed >= 1 and report.not_sent > 0 and report.engine == {}
    assert took < restart_seconds + 2.5, f"the report came {took:.1f} s after the server died"
