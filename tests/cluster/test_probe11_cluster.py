"""The eleventh probe of the cluster: a worker's node-local copy that does not hold what
was laid out (a disk restored from an older backup, a shard file gone) is not served —
its units go to the mirror and `cluster status` names it — a step written after the
layout is the documented 503, a new layout leaves no file of an earlier one, commands
that wait on workers end while one is stopped, `cluster up` with a worker down serves
degraded and says so, `GET /v1/cluster` shows a caller its own datasets and nowhere the
cluster runs, and a server reconnects to a restarted scheduler."""

import asyncio
import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

import turbdb
from turbdb.cli import main
from turbdb.cluster import bounded, plugin, reconnect
from turbdb.cluster.catalogue import Catalogue
from turbdb.cluster.launch import attach, start_local
from turbdb.cluster.layout import place
from turbdb.cluster.repair import repair
from turbdb.service.app import create_app
from turbdb.service.errors import without_paths
from turbdb.service.tokens import Tokens

pytestmark = pytest.mark.slow

TWO_PI = 2 * math.pi
SHAPE = (16, 16, 16, 3)


def _constant(db: Path, name: str, values: dict[int, float], times=(0.0,), overwrite: bool = False):
    """A 16³ dataset (partitions of 8³, so 8 a step) whose velocity is ``values[t]`` at
    the steps given; the other times are declared and not written."""
    ds = turbdb.create_dataset(db, name, grid=SHAPE[:3], times=list(times), atom=4, partition=8,
                               fields={"velocity": 3}, overwrite=overwrite)
    for t, value in values.items():
        ds.write("velocity", t, np.full(SHAPE, value, np.float32))
    return ds


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three workers (named 0, 1, 2): every test lays its own database out on them."""
    first = tmp_path_factory.mktemp("probe11-cluster") / "db"
    _constant(first, "d", {0: 1.0})
    run = start_local(first, 3, threads=1, dashboard_address=":0")
    yield run
    run.close()


def _points(n: int = 2000) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, TWO_PI, (n, 3))


def _ends_within(seconds: float, work):
    """``work()``'s result; a failure, not a hang, if it takes longer than ``seconds``."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = work()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    began = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], time.monotonic() - began


def test_a_copy_restored_from_before_a_rewrite_is_not_served_and_status_names_it(cluster, tmp_path):
    # The probe: a node's disk restored from a backup made before step 0 was corrected
    # answered 0.377–5.73 (its old partial sums added to the new copies'), status HEALTHY.
    db, nodes = tmp_path / "db", tmp_path / "nodes"
    ds = _constant(db, "d", {0: 1.0})
    assert attach(db, cluster.client, data_root=nodes).placed
    shutil.copytree(nodes / "1", tmp_path / "backup")
    ds.write("velocity", 0, np.full(SHAPE, 5.0, np.float32))
    assert attach(db, cluster.client, data_root=nodes).placed  # laid out again: the database changed
    shutil.rmtree(nodes / "1")
    shutil.copytree(tmp_path / "backup", nodes / "1")
    with turbdb.open(db, cluster=cluster.client) as cdb:
        values = cdb["d"].query("velocity", _points(), time=0.0)
        report = cdb.status()
    np.testing.assert_allclose(values, 5.0, rtol=1e-6)
    assert report["state"] == "degraded"
    assert [(d["slot"], d["dataset"]) for d in report["damaged"]] == [("1", "d")]
    assert "does not hold what the cluster laid out (the rewrite counts of its steps differ" in (
        report["damaged"][0]["why"])
    shown = CliRunner().invoke(main, ["cluster", "status", str(db), "--scheduler", cluster.address])
    assert shown.exit_code == 1
    assert "DEGRADED" in shown.output.splitlines()[0] and "DAMAGED copy of d" in shown.output


def test_a_shard_missing_from_one_workers_disk_is_read_from_its_mirror_and_named(cluster, tmp_path):
    # It failed the whole query with "time step 1 is not stored: …/nodes/1/… does not
    # exist", the mirrors holding it, status HEALTHY.
    db, nodes = tmp_path / "db", tmp_path / "nodes"
    _constant(db, "g", {0: 1.0, 1: 2.0}, times=(0.0, 1.0))
    attach(db, cluster.client, data_root=nodes)
    step = nodes / "1" / "g" / "velocity" / "c" / "1"
    assert step.is_dir()
    shutil.rmtree(step)
    with turbdb.open(db, cluster=cluster.client) as cdb:
        np.testing.assert_allclose(cdb["g"].query("velocity", _points(), time=1.0), 2.0, rtol=1e-6)
        np.testing.assert_allclose(cdb["g"].cutout("velocity", time=1.0), 2.0)
        report = cdb.status()
    assert report["state"] == "degraded"
    assert [(d["slot"], d["dataset"]) for d in report["damaged"]] == [("1", "g")]
    assert "lacks time index 1" in report["damaged"][0]["why"]


def test_a_step_written_after_the_layout_is_a_503_and_a_new_layout_leaves_no_old_file(cluster, tmp_path):
    # A step written in place answered "not stored" (the written steps were never compared
    # per query); old shards of a dataset created again stayed on the nodes (500
    # CorruptDataError); status said HEALTHY in green while listing stale copies.
    db, nodes = tmp_path / "db", tmp_path / "nodes"
    _constant(db, "g", {0: 1.0, 1: 2.0}, times=(0.0, 1.0, 2.0))
    attach(db, cluster.client, data_root=nodes)
    turbdb.open(db)["g"].write("velocity", 2, np.full(SHAPE, 3.0, np.float32))
    with turbdb.open(db, cluster=cluster.client) as cdb:
        refused = r"changed since the cluster was laid out on its workers' disks \(steps were written\)"
        with pytest.raises(turbdb.ServiceError, match=refused) as e:
            cdb["g"].query("velocity", _points(50), time=2.0)
        assert e.value.status == 503
    shown = CliRunner().invoke(main, ["cluster", "status", str(db), "--scheduler", cluster.address])
    assert shown.exit_code == 1 and "STALE" in shown.output.splitlines()[0], shown.output

    assert attach(db, cluster.client, data_root=nodes).placed
    assert (nodes / "0" / "g" / "velocity" / "c" / "2").is_dir()
    _constant(db, "g", {0: 9.0}, times=(0.0, 1.0, 2.0), overwrite=True)  # created again, one step written
    assert attach(db, cluster.client, data_root=nodes).placed
    left = sorted(str(p.relative_to(nodes)) for p in nodes.glob("*/g/velocity/c/*"))
    assert left == ["0/g/velocity/c/0", "1/g/velocity/c/0", "2/g/velocity/c/0"]
    with turbdb.open(db, cluster=cluster.client) as cdb:
        np.testing.assert_allclose(cdb["g"].query("velocity", _points(), time=0.0), 9.0, rtol=1e-6)
        with pytest.raises(turbdb.InvalidRequestError, match="not stored"):
            cdb["g"].query("velocity", _points(50), time=1.0)


def test_up_with_a_worker_of_the_layout_down_serves_degraded_and_says_so(cluster, tmp_path):
    # It laid the database out again on the others without a word; the worker became a spare.
    db, nodes = tmp_path / "db", tmp_path / "nodes"
    _constant(db, "d", {0: 4.0})
    runner = CliRunner()
    placed = runner.invoke(main, ["cluster", "place", str(db), "--workers", "4", "--data-root", str(nodes)])
    assert placed.exit_code == 0, placed.output
    up = runner.invoke(main, ["cluster", "up", str(db), "--scheduler", cluster.address, "--data-root", str(nodes)])
    assert up.exit_code == 0, up.output
    assert "warning: worker 3 is not running" in up.stderr and "DEGRADED" in up.stderr and "cluster repair" in up.stderr
    assert "placing again" not in up.output and "3 of 4 workers serve" in up.stdout
    assert sorted(Catalogue.load(db).slots) == ["0", "1", "2", "3"]
    with turbdb.open(db, cluster=cluster.client) as cdb:
        np.testing.assert_allclose(cdb["d"].query("velocity", _points(), time=0.0), 4.0, rtol=1e-6)
        assert cdb.status()["state"] == "degraded"


def test_get_v1_cluster_shows_a_caller_its_own_datasets_and_nowhere_the_cluster_runs(cluster, tmp_path):
    # Any caller, anonymous too, saw hidden datasets' names, every worker's data root, the
    # scheduler's address (which runs any code sent to it) and its dashboard; errors named
    # the workers' data roots.
    db, nodes = tmp_path / "db", tmp_path / "nodes"
    _constant(db, "public", {0: 1.0}, times=(0.0, 1.0))
    _constant(db, "secret", {0: 1.0})
    attach(db, cluster.client, data_root=nodes)
    shutil.rmtree(nodes / "1" / "secret")  # a damaged copy the report names
    tokens = Tokens.from_document({"anonymous": {"datasets": ["public"]},
                                   "token": [{"token": "operator-7f3a9c2e51d8", "name": "op", "datasets": ["*"]}]})
    app = create_app(db, tokens, cluster=cluster.client)

    async def ask():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            anonymous = await client.get("/v1/cluster")
            operator = await client.get("/v1/cluster", headers={"Authorization": "Bearer operator-7f3a9c2e51d8"})
            unstored = await client.post("/v1/datasets/public/query", params={"field": "velocity", "time": 1.0},
                                         json={"points": [[1.0, 1.0, 1.0]]})
            return anonymous, operator, unstored

    try:
        anonymous, operator, unstored = asyncio.run(ask())
    finally:
        app.state.backend.close()
    assert anonymous.status_code == 200 and operator.status_code == 200
    for answer in (anonymous, operator):
        report = answer.json()
        assert "scheduler" not in report and "dashboard" not in report and "slots" not in report["catalogue"]
        assert all("address" not in w and "root" not in w for w in report["workers"])
        for hidden in ("tcp://", "127.0.0.1", str(nodes), str(tmp_path)):
            assert hidden not in answer.text
    assert "secret" not in anonymous.text and anonymous.json()["state"] == "healthy"
    assert [d["dataset"] for d in operator.json()["damaged"]] == ["secret"] and operator.json()["state"] == "degraded"
    assert unstored.status_code == 400 and "not stored" in unstored.text and str(nodes) not in unstored.text
    roots = Catalogue.node_roots(db)
    assert without_paths(f"{roots['1']}/public/velocity/c/1 does not exist at tcp://10.0.0.1:8786", db) == (
        "public/velocity/c/1 does not exist at (a cluster address)")


def test_place_up_and_repair_end_in_bounded_time_while_a_worker_is_stopped(cluster, tmp_path, monkeypatch):
    # Each hung without a word, for as long as the worker stayed stopped (blocked in
    # registering the worker plugin, then in a copy's `.result()` without a limit).
    monkeypatch.setattr(bounded, "ASK_SECONDS", 1.0, raising=False)
    monkeypatch.setattr(plugin, "QUIET_INSTALL_SECONDS", 0.5, raising=False)
    db, nodes = tmp_path / "db", tmp_path / "nodes"
    _constant(db, "d", {0: 6.0})
    attach(db, cluster.client, data_root=nodes)
    names = {a: str(w["name"]) for a, w in cluster.client.scheduler_info(n_workers=-1)["workers"].items()}
    stopped = next(pid for a, pid in cluster.client.run(os.getpid).items() if names[a] == "2")
    os.kill(stopped, signal.SIGSTOP)
    try:
        with pytest.raises(turbdb.ServiceError, match="worker 2 does not answer"):
            _ends_within(20, lambda: place(Catalogue.create(db, ["0", "1", "2"], data_root=nodes),
                                           client=cluster.client))
        running, took = _ends_within(20, lambda: attach(db, cluster.client, data_root=nodes))
        assert not running.placed and running.missing == {"2": "does not answer (stopped or hung)"}
        assert took < 10, took
        result, took = _ends_within(30, lambda: repair(cluster.client, Catalogue.load(db)))
        assert not result["failed"] and "2" not in Catalogue.load(db).slots
        assert took < 20, took
    finally:
        os.kill(stopped, signal.SIGCONT)
    with turbdb.open(db, cluster=cluster.client) as cdb:
        np.testing.assert_allclose(cdb["d"].query("velocity", _points(), time=0.0), 6.0, rtol=1e-6)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _dask(*args: str, log: Path):
    """``dask ARGS`` in a session of its own (a worker's nanny and its worker), killed after."""
    with open(log, "ab") as out:
        process = subprocess.Popen([str(Path(sys.executable).parent / "dask"), *args], stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_cluster_server_reconnects_to_a_restarted_scheduler_and_healthz_says_so_meanwhile(tmp_path, monkeypatch):
    # After a scheduler restart `serve --cluster` answered 503 for ever while /healthz said ok.
    monkeypatch.setattr(reconnect, "FIRST_SECONDS", 0.2)
    monkeypatch.setattr(reconnect, "MOST_SECONDS", 0.5)
    db = tmp_path / "db"
    _constant(db, "d", {0: 3.0})
    assert CliRunner().invoke(main, ["cluster", "place", str(db), "--workers", "1"]).exit_code == 0
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = ["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]
    worker = ["worker", address, "--name", "0", "--nthreads", "1", "--no-dashboard"]
    log = tmp_path / "dask.log"

    async def poll(client, path, status, seconds, **request):
        deadline = time.monotonic() + seconds
        while True:
            answer = await (client.post(path, **request) if request else client.get(path))
            if answer.status_code == status or time.monotonic() > deadline:
                return answer
            await asyncio.sleep(0.2)

    query = {"params": {"field": "velocity", "time": 0.0}, "json": {"points": [[1.0, 1.0, 1.0]]}}

    async def served(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            answer = await poll(client, "/v1/datasets/d/query", 200, 30, **query)
            return answer, (await client.get("/healthz"))

    async def lost(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await poll(client, "/healthz", 503, 20), await client.post("/v1/datasets/d/query", **query)

    with contextlib.ExitStack() as closing:
        with _dask(*scheduler, log=log) as first, _dask(*worker, log=log):
            app = _ends_within(60, lambda: create_app(db, cluster=address))[0]
            closing.callback(app.state.backend.close)
            answer, health = asyncio.run(served(app))
            assert answer.status_code == 200
            np.testing.assert_allclose(answer.json()["values"], 3.0, rtol=1e-6)
            assert health.status_code == 200 and health.json()["status"] == "ok"
            os.killpg(first.pid, signal.SIGKILL)
            health, refused = asyncio.run(lost(app))
        assert health.status_code == 503 and health.json()["status"] == "cluster unreachable", health.text
        assert refused.status_code == 503 and "tcp://" not in health.text + refused.text
        with _dask(*scheduler, log=log), _dask(*worker, log=log):
            answer, health = asyncio.run(served(app))  # reconnected, and the new worker given its node
            assert answer.status_code == 200, answer.text
            np.testing.assert_allclose(answer.json()["values"], 3.0, rtol=1e-6)
            assert health.status_code == 200 and health.json()["status"] == "ok"
