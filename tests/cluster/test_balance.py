"""Load balancing by workload density (Perlman et al. §3.4): the oct-tree counts every
point of a batch once per level; a skewed batch lends its densest region to a worker that
holds none of it, a uniform or small one lends nothing; and on a real 3-worker cluster with
node-local disks (``--data-root``) a skewed query is shared with the borrower, which gets
its own copy of the lent partitions, and the answer equals the single node's."""

import math
from pathlib import Path

import numpy as np
import pytest

import turbdb
from turbdb.arguments import axes_of
from turbdb.cluster.balance import Balancer, oct_tree
from turbdb.cluster.launch import start_local
from turbdb.cluster.placement import PartitionMap, chained_declustering, virtual_count
from turbdb.cluster.routing import Reach

TWO_PI = 2 * math.pi
N, PARTITION = 32, 8
SLOTS = ("0", "1", "2")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    db = tmp_path_factory.mktemp("balance") / "db"
    axis = np.arange(N) * TWO_PI / N
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    ds = turbdb.create_dataset(db, "trig", grid=(N, N, N), times=[0.0, 1.0], atom=4, partition=PARTITION,
                               fields={"velocity": 3})
    for t in range(2):
        ds.write("velocity", t, np.stack([np.sin(x) * (1 + t), np.cos(y) * np.sin(z), np.cos(x + 2 * z)], -1))
    return db


def _placement(name: str):
    virtual = virtual_count(len(SLOTS), 2)
    holders = chained_declustering(list(SLOTS), 2, virtual)
    return PartitionMap((N // PARTITION,) * 3, virtual, 1, name), holders


def _hot_spot(n: int, seed: int = 0) -> np.ndarray:
    """Many users on one region: every point inside one partition, clear of its edges."""
    spacing = TWO_PI / N
    low, high = (1 + 3) * spacing + 8 * spacing, (8 - 3) * spacing + 8 * spacing  # partition (1, 1, 1)
    return np.random.default_rng(seed).uniform(low, high, (n, 3))


def test_the_oct_tree_counts_every_point_once_per_level():
    pmap = PartitionMap((4, 4, 4), 6, 1, "t")
    work = np.zeros(pmap.count, dtype=np.int64)
    rng = np.random.default_rng(1)
    work[rng.choice(pmap.count, 20, replace=False)] = rng.integers(1, 1000, 20)
    regions = oct_tree(pmap, work, leaf_points=200)
    assert regions[0].points == work.sum() and len(regions[0].shards) == pmap.count
    for region in regions:
        assert region.points == work[region.shards].sum() > 0
    # The cubes of one level (one size: the 4³ grid is a whole cube) are disjoint, and a
    # cube is split only while it has more than the leaf's points: every point is in the
    # cubes of each level down to its leaf, once.
    for size in {len(r.shards) for r in regions}:
        level = np.concatenate([r.shards for r in regions if len(r.shards) == size])
        assert len(level) == len(set(level.tolist()))
    for region in regions:
        children = [r for r in regions if len(r.shards) == len(region.shards) // 8
                    and set(r.shards.tolist()) <= set(region.shards.tolist())]
        if region.points > 200 and len(region.shards) > 1:
            assert sum(c.points for c in children) == region.points
        else:
            assert not children


def test_a_skewed_batch_lends_its_densest_region_to_a_worker_holding_none_of_it(database):
    ds = turbdb.open(database)["trig"]
    info = ds.metadata
    pmap, holders = _placement(info.name)
    points = _hot_spot(50_000)
    reach = Reach.of(info, points, method="lag4", operator="field", axes=axes_of(info))
    levels = [(0, 0.0)]
    hot = int(np.bincount(reach.home(pmap)).argmax())
    owners = holders[int(pmap.virtual_of(0, hot))]
    lent = Balancer().lend(pmap, reach, levels, holders, dict.fromkeys(SLOTS, "addr"))
    assert (0, hot) in lent, lent
    borrower = lent[(0, hot)][-1]
    assert borrower not in owners and lent[(0, hot)] == (*owners, borrower)


def test_a_uniform_or_small_batch_lends_nothing(database):
    ds = turbdb.open(database)["trig"]
    info = ds.metadata
    pmap, holders = _placement(info.name)
    live = dict.fromkeys(SLOTS, "addr")
    uniform = np.random.default_rng(2).uniform(0, TWO_PI, (60_000, 3))
    for points in (uniform, _hot_spot(1_000)):
        reach = Reach.of(info, points, method="lag4", operator="field", axes=axes_of(info))
        assert Balancer().lend(pmap, reach, [(0, 0.0)], holders, live) == {}


@pytest.mark.slow
def test_on_node_local_disks_the_borrower_gets_a_copy_and_a_share_of_a_skewed_query(database, tmp_path):
    run = start_local(database, 3, threads=1, data_root=tmp_path / "nodes", dashboard_address=":0")
    try:
        assert run.catalogue.layout == "local"
        pmap = run.catalogue.partition_map(turbdb.open(database)["trig"].metadata)
        owners = run.catalogue.holders[int(pmap.virtual_of(0, 1 + 4 * (1 + 4 * 1)))]
        (borrower,) = set(SLOTS) - set(owners)
        lent_shard = Path(run.catalogue.slots[borrower]) / "trig/velocity/c/0/1/1/1/0"
        assert not lent_shard.exists(), "a worker holds only its own partitions until one is lent"
        points = _hot_spot(200_000, seed=3)
        expected = turbdb.open(database)["trig"].query("velocity", points, time=0.0, method="lag4")
        with turbdb.open(database, cluster=run.client) as db:
            got = db["trig"].query("velocity", points, time=0.0, method="lag4")
            report = db.last_report
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
        assert report.work.get(borrower, {}).get("points", 0) > 0, report
        # The borrower now has the lent shard on its own disk, for the batches that follow.
        assert lent_shard.is_file()
    finally:
        run.close()
