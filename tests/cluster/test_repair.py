"""``turbdb cluster repair`` on node-local disks: a worker that dies mid-repair fails the
copies it was part of (no hang) and the copies made before it are kept in the catalogue;
a worker that joins a healthy cluster takes a fair share of the partitions."""

import math
import os
import re
import signal
import threading
import time

import numpy as np
import pytest

import turbdb
from turbdb.cluster.catalogue import Catalogue
from turbdb.cluster.launch import start_local
from turbdb.cluster.membership import Membership
from turbdb.cluster.repair import repair

pytestmark = pytest.mark.slow

TWO_PI = 2 * math.pi


@pytest.fixture()
def database(tmp_path, make_trig):
    return make_trig(tmp_path / "db")


def _wait_for_workers(run, count: int) -> None:
    """Until ``count`` workers run (one just started is not running at once)."""
    deadline = time.monotonic() + 30
    while len(Membership(run.client).live(refresh=True)) != count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(Membership(run.client).live(refresh=True)) == count


def test_a_worker_dying_mid_repair_fails_its_copies_and_keeps_those_made(database, tmp_path):
    run = start_local(database, 3, threads=1, data_root=tmp_path / "nodes", dashboard_address=":0")
    try:
        run.local.scale(2)  # worker "2" is lost for good
        _wait_for_workers(run, 2)
        pids = run.client.run(os.getpid)
        names = {a: str(w["name"]) for a, w in run.client.scheduler_info(n_workers=-1)["workers"].items()}
        victim = next(pid for a, pid in pids.items() if names[a] == "1")
        said: list[str] = []

        def progress(line: str) -> None:  # worker "1", part of every copy, dies after the first
            said.append(line)
            if len(said) == 1:
                os.kill(victim, signal.SIGKILL)

        outcome: dict = {}

        def run_repair() -> None:
            try:
                outcome["result"] = repair(run.client, Catalogue.load(database), progress=progress)
            except Exception as e:  # noqa: BLE001 - what the test looks at
                outcome["error"] = e

        repairing = threading.Thread(target=run_repair, daemon=True)
        repairing.start()
        repairing.join(60)
        assert not repairing.is_alive(), f"repair hung after: {said}"
        assert isinstance(outcome.get("error"), turbdb.ServiceError), outcome
        assert "of the copies failed" in str(outcome["error"]) and "FAILED" in " ".join(said)
        v, target = re.match(r"virtual partition (\d+): copied from worker \d+ to worker (\d+)", said[0]).groups()
        assert target in Catalogue.load(database).holders[int(v)]  # the copy made first is recorded
    finally:
        run.close()


def test_a_new_worker_takes_a_fair_share_at_repair(database, tmp_path):
    run = start_local(database, 2, threads=1, data_root=tmp_path / "nodes", dashboard_address=":0")
    try:
        run.local.scale(3)  # worker "2" joins
        _wait_for_workers(run, 3)
        with turbdb.open(database, cluster=run.client) as cdb:
            assert cdb.status()["spare_workers"] == ["2"]
            result = repair(run.client, cdb.catalogue)
            assert result["moved"] and {m["to"] for m in result["moved"]} == {"2"}
            catalogue = Catalogue.load(database)
            loads = [len(catalogue.held_by(s)) for s in ("0", "1", "2")]
            assert max(loads) - min(loads) <= 1, loads
            primaries = [sum(h[0] == s for h in catalogue.holders) for s in ("0", "1", "2")]
            assert max(primaries) - min(primaries) <= 1, primaries
            assert all(len(set(h)) == catalogue.replicas for h in catalogue.holders)
            report = cdb.status()
            assert report["state"] == "healthy" and report["spare_workers"] == []
            points = np.random.default_rng(2).uniform(0, TWO_PI, (20_000, 3))
            np.testing.assert_allclose(cdb["trig"].query("velocity", points, time=0.5, method="lag4"),
                                       turbdb.open(database)["trig"].query("velocity", points, time=0.5,
                                                                           method="lag4"),
                                       rtol=1e-6, atol=1e-6)
        # Each unit to its primary: worker "2" now is one (graduated declustering lets either
        # copy pull a unit, and on a loaded machine the new worker could pull none).
        with turbdb.open(database, cluster=run.client, declustering="static") as cdb:
            cdb["trig"].query("velocity", points, time=0.5, method="lag4")
            assert cdb.last_report.work.get("2", {}).get("points", 0) > 0
    finally:
        run.close()
