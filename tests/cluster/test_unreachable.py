"""Parts of a cluster that stop answering: a stopped worker (SIGSTOP) holds a mediator's
first query for no longer than it takes to count it silent, and the question whether a
worker shares this machine's memory waits for that worker alone; a scheduler that died
is a 503 naming it, and the cluster's status says so, instead of a KeyError."""

import math
import os
import signal
import threading
import time

import numpy as np
import pytest

import turbdb
from turbdb.cluster import handoff
from turbdb.cluster.launch import start_local
from turbdb.cluster.membership import SILENT_SECONDS

pytestmark = pytest.mark.slow

TWO_PI = 2 * math.pi


@pytest.fixture(scope="module")
def database(tmp_path_factory, make_trig):
    return make_trig(tmp_path_factory.mktemp("unreachable") / "db")


def test_a_probe_of_a_silent_worker_holds_up_no_other(monkeypatch):
    class StuckClient:  # worker "stuck" never answers, as a stopped process
        def run(self, function, path, *, workers, on_error, callback_timeout):
            if workers == ["stuck"]:
                time.sleep(callback_timeout)
                raise TimeoutError
            return {workers[0]: function(path)}

    monkeypatch.setattr(handoff, "PROBE_SECONDS", 1.0)
    shared = handoff.SharedMemory(StuckClient())
    try:
        waiting = threading.Thread(target=shared.reaches, args=("stuck",))
        waiting.start()
        time.sleep(0.1)
        began = time.monotonic()
        assert shared.reaches("fine")  # not behind the stuck probe
        assert time.monotonic() - began < 0.5
        waiting.join(5)
        assert not waiting.is_alive()
        began = time.monotonic()
        assert not shared.reaches("stuck")  # the network path, not asked again at once
        assert time.monotonic() - began < 0.5
    finally:
        shared.close()


def test_a_stopped_worker_is_dropped_after_silent_seconds_and_its_units_go_to_the_mirror(database):
    run = start_local(database, 3, threads=1, dashboard_address=":0")
    stopped = None
    try:
        pids = run.client.run(os.getpid)
        names = {a: str(w["name"]) for a, w in run.client.scheduler_info()["workers"].items()}
        stopped = next(pid for a, pid in pids.items() if names[a] == "1")
        points = np.random.default_rng(3).uniform(0, TWO_PI, (200_000, 3))  # units for every worker
        answer = {}
        with turbdb.open(database, cluster=run.client) as cdb:  # a fresh mediator: nothing asked yet
            os.kill(stopped, signal.SIGSTOP)
            began = time.monotonic()
            query = threading.Thread(target=lambda: answer.update(
                values=cdb["trig"].query("velocity", points, time=0.5), took=time.monotonic() - began))
            query.start()
            query.join(SILENT_SECONDS + 30)  # it waited for as long as the worker stayed stopped before
            os.kill(stopped, signal.SIGCONT)
            query.join(60)
        assert answer["took"] < SILENT_SECONDS + 30, answer["took"]
        np.testing.assert_allclose(answer["values"], turbdb.open(database)["trig"].query("velocity", points, time=0.5),
                                   rtol=1e-6, atol=1e-6)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        run.close()


def test_a_dead_scheduler_is_a_503_naming_it_and_the_status_says_so(database):
    import dask

    run = start_local(database, 1, threads=1, dashboard_address=":0")
    # The client's attempts to reach the scheduler again give up sooner (the test's time).
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        _dead_scheduler(database, run)


def _dead_scheduler(database, run):
    try:
        with turbdb.open(database, cluster=run.address) as cdb:
            points = np.random.default_rng(5).uniform(0, TWO_PI, (100, 3))
            cdb["trig"].query("velocity", points, time=0.0)
            run.local.sync(run.local.scheduler.close)
            deadline = time.monotonic() + 20
            while cdb.client.status == "running" and time.monotonic() < deadline:
                time.sleep(0.1)
            with pytest.raises(turbdb.ServiceError, match=f"scheduler at {run.address} cannot be reached") as error:
                cdb["trig"].query("velocity", points, time=0.0)
            assert error.value.status == 503
            report = cdb.status()
            assert report["state"] == "unavailable" and not report["scheduler_reachable"]
            assert "cannot be reached" in report["error"]
    finally:
        run.close()


def test_status_without_a_scheduler_reports_every_partition_unavailable(tmp_path, make_trig, monkeypatch):
    # It printed "error: cannot reach the Dask scheduler" and no report, where docs/cluster.md
    # promises every partition unavailable and scheduler_reachable false.
    import json
    import socket

    from click.testing import CliRunner

    from turbdb.cli import main
    from turbdb.cluster import mediator

    db = make_trig(tmp_path / "db")
    runner = CliRunner()
    assert runner.invoke(main, ["cluster", "place", str(db), "--workers", "2"]).exit_code == 0
    monkeypatch.setattr(mediator, "CONNECT_SECONDS", 1)  # the test's time
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{unused.getsockname()[1]}"  # nobody listens there
    result = runner.invoke(main, ["cluster", "status", str(db), "--scheduler", address, "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["state"] == "unavailable" and report["scheduler_reachable"] is False
    assert "cannot reach the Dask scheduler" in report["error"] and report["scheduler"] == address
    assert report["unavailable"]["virtual_partitions"] == list(range(report["catalogue"]["virtual_partitions"]))
    assert not any(worker["alive"] for worker in report["workers"])
    shown = runner.invoke(main, ["cluster", "status", str(db), "--scheduler", address])
    assert shown.exit_code == 1 and "UNAVAILABLE" in shown.output and "cannot reach" in shown.output
    assert "cluster repair" not in shown.output  # no cluster to repair on
