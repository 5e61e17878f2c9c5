"""Node-local copies of a database that grew after it was placed: the mediator refuses
the changed dataset (503) instead of answering from the old copies, and bringing the
cluster up again with the same options lays it out anew."""

import math

import numpy as np
import pytest

import turbdb
from turbdb.cluster.launch import attach, start_local

pytestmark = pytest.mark.slow

TWO_PI = 2 * math.pi


def test_a_grown_database_is_refused_on_stale_copies_and_placed_again_by_up(tmp_path, make_trig):
    database = make_trig(tmp_path / "db")
    nodes = tmp_path / "nodes"
    run = start_local(database, 2, threads=1, data_root=nodes, dashboard_address=":0")
    try:
        assert run.placed
        assert not attach(database, run.client, data_root=nodes).placed  # unchanged: the copies fit
        points = np.random.default_rng(1).uniform(0, TWO_PI, (300, 3))
        with turbdb.open(database, cluster=run.client) as cdb:
            ds = turbdb.open(database)["trig"]
            axis = np.arange(16) * TWO_PI / 16
            z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
            (new,) = ds.append_times([2.0])
            ds.write("velocity", new, np.stack([np.cos(x) * 3, np.sin(y) * 2, np.sin(x + z)], -1))
            with pytest.raises(turbdb.ServiceError, match="changed since.*cluster place") as error:
                cdb["trig"].query("velocity", points, time=1.5, temporal="pchip")
            assert error.value.status == 503
            assert cdb.status()["stale"] == ["dataset 'trig': 2 times then (0 to 1), 3 now (0 to 2)"]
            with pytest.raises(turbdb.ServiceError, match="stale"):
                cdb["trig"].cutout("velocity", time=2.0, x=(0, 4), y=(0, 4), z=(0, 4))
            assert attach(database, run.client, data_root=nodes).placed  # `cluster up` again
            assert cdb.status()["stale"] == []
            local = turbdb.open(database)["trig"]
            for when in (1.5, 2.0):
                np.testing.assert_allclose(cdb["trig"].query("velocity", points, time=when, temporal="pchip"),
                                           local.query("velocity", points, time=when, temporal="pchip"),
                                           rtol=1e-6, atol=1e-6)
    finally:
        run.close()
