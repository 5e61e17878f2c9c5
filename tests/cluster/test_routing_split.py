"""The mediator's split of a point query (``split_query``, one pass in the core) gives the
same units as the numpy implementation it replaced — same groups, partitions, point
indices in the same order — for random points on periodic and bounded grids (with partial
edge shards), every method, several time levels with their own tables, and partitions lent
for load balancing. The numpy implementation is kept here as the reference."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turbdb
from turbdb.arguments import METHODS, axes_of
from turbdb.cluster.placement import PartitionMap, chained_declustering, virtual_count
from turbdb.cluster.routing import Groups, Reach, Unit, split_query, unit_count


def reference_split_query(pmap, reach, levels, groups, shareable):
    """The numpy split as it was before it moved to the core (commit 81c75f6)."""

    def combinations():
        nx, ny, _ = pmap.shards
        xs, ys, zs = reach.shards
        for cx in xs.T:
            for cy in ys.T:
                for cz in zs.T:
                    valid = (cx >= 0) & (cy >= 0) & (cz >= 0)
                    yield np.where(valid, cx + nx * (cy + ny * cz), -1)

    home = reach.home(pmap)
    touched = np.zeros((len(groups.tables), len(groups.groups), pmap.count), dtype=bool)
    group_cols = []
    for shard in combinations():
        valid = shard >= 0
        for u, table in enumerate(groups.tables):
            column = np.where(valid, table[np.maximum(shard, 0)], -1)
            touched[u, column[valid], shard[valid]] = True
            group_cols.append(column)
    g = np.stack(group_cols, axis=1)
    for j in range(1, g.shape[1]):
        g[(g[:, j:j + 1] == g[:, :j]).any(axis=1), j] = -1
    rows, cols = np.nonzero(g >= 0)
    grp = g[rows, cols]
    key = grp.astype(np.int64) * pmap.count + home[rows]
    order = np.argsort(key.astype(np.uint16) if key.max(initial=0) < 2**16 else key, kind="stable")
    rows, grp = rows[order], grp[order]
    bounds = np.flatnonzero(np.diff(grp)) + 1
    units = []
    for start, stop in zip(np.r_[0, bounds], np.r_[bounds, len(grp)]):
        gid = int(grp[start])
        group = groups.groups[gid]
        partitions = [(int(t), pmap.position(s)) for (t, _), u in zip(levels, groups.level_table)
                      for s in np.flatnonzero(touched[u, gid])]
        pieces = unit_count(stop - start) if shareable(group) else 1
        units.extend(Unit(group, partitions, points=piece, cost=len(piece))
                     for piece in np.array_split(rows[start:stop], pieces))
    return units


@pytest.fixture(scope="module")
def infos(tmp_path_factory):
    """Metadata only (routing reads no field): a periodic grid whose last shards are
    partial, and a bounded one with unequal axes."""
    db = tmp_path_factory.mktemp("split")
    periodic = turbdb.create_dataset(db, "ring", grid=(20, 24, 12), times=[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], atom=4,
                                     partition=8, fields={"u": 3}).metadata
    bounded = turbdb.create_dataset(db, "box", grid=(20, 12, 9), spacing=(0.5, 0.5, 0.5), periodic=(False,) * 3,
                                    times=[0.0, 1.0, 2.0], fields={"p": 1}, atom=4, partition=4).metadata
    return {"ring": periodic, "box": bounded}


def points_in(info, n, rng):
    spacing = np.array(info.spacing)
    extent = np.array(info.grid) * spacing
    if all(info.periodic):
        pts = rng.uniform(-1, 2, (n, 3)) * extent  # wrapped by the engine
        pts[: n // 3] = np.round(pts[: n // 3] / spacing) * spacing  # on nodes and shard edges
        return pts
    return rng.uniform(0, 1, (n, 3)) * (np.array(info.grid) - 1) * spacing


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["ring", "box"]), method=st.sampled_from(METHODS),
       operator=st.sampled_from(["field", "gradient", "laplacian"]), workers=st.integers(1, 6),
       steps=st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True), loans=st.integers(0, 6),
       n=st.sampled_from([1, 7, 500, 2000]), seed=st.integers(0, 2**16))
def test_core_split_equals_the_numpy_split(infos, name, method, operator, workers, steps, loans, n, seed):
    info = infos[name]
    rng = np.random.default_rng(seed)
    pts = points_in(info, n, rng)
    try:
        reach = Reach.of(info, pts, method=method, operator=operator, axes=axes_of(info))
    except turbdb.InvalidRequestError:
        return  # a combination the method does not support
    replicas = min(2, workers)
    slots = [str(i) for i in range(workers)]
    virtual = virtual_count(workers, replicas)
    holders = chained_declustering(slots, replicas, virtual)
    rng.shuffle(holders)
    shards = tuple(-(-g // info.partition) for g in info.grid)
    pmap = PartitionMap(shards, virtual, int(rng.integers(1, 4)), info.name)
    levels = [(t % len(info.times), 0.5) for t in steps]
    lent = {}
    for _ in range(loans):
        t, s = levels[int(rng.integers(len(levels)))][0], int(rng.integers(pmap.count))
        lent[(t, s)] = tuple(holders[int(pmap.virtual_of(t, s))]) + (f"borrower{int(rng.integers(3))}",)
    groups = Groups.of(pmap, levels, holders, lent)
    shareable = lambda g: len(g) > 1  # noqa: E731
    got = split_query(pmap, reach, levels, groups, shareable)
    want = reference_split_query(pmap, reach, levels, groups, shareable)
    assert [(u.holders, u.partitions, u.cost) for u in got] == [(u.holders, u.partitions, u.cost) for u in want]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.points, b.points)
        assert a.points.dtype == b.points.dtype


def test_a_large_query_splits_as_the_numpy_split_did(infos):
    """Enough points for several units per group, at many (time, shard) tables."""
    info = infos["ring"]
    pts = points_in(info, 100_000, np.random.default_rng(5))
    reach = Reach.of(info, pts, method="lag6", operator="gradient", axes=axes_of(info))
    slots = [str(i) for i in range(4)]
    holders = chained_declustering(slots, 2, virtual_count(4, 2))
    pmap = PartitionMap(tuple(-(-g // info.partition) for g in info.grid), virtual_count(4, 2), 1, info.name)
    levels = [(0, 0.2), (1, 0.3), (2, 0.3), (3, 0.2)]
    groups = Groups.of(pmap, levels, holders, {(1, 3): ("0", "1", "2")})
    got = split_query(pmap, reach, levels, groups, lambda g: True)
    want = reference_split_query(pmap, reach, levels, groups, lambda g: True)
    assert len(got) == len(want) > len(groups.groups)
    for a, b in zip(got, want):
        assert (a.holders, a.partitions, a.cost) == (b.holders, b.partitions, b.cost)
        np.testing.assert_array_equal(a.points, b.points)


def test_no_points_make_no_units(infos):
    """(The numpy split raised IndexError here.)"""
    info = infos["box"]
    reach = Reach.of(info, np.empty((0, 3)), method="lag4", operator="field", axes=axes_of(info))
    pmap = PartitionMap(tuple(-(-g // info.partition) for g in info.grid), 16, 1, info.name)
    groups = Groups.of(pmap, [(0, 1.0)], chained_declustering(["0", "1"], 2, 16))
    assert split_query(pmap, reach, [(0, 1.0)], groups, lambda g: True) == []


def test_bad_group_tables_are_refused_with_a_clear_error():
    from turbdb import _core

    cols = np.zeros((3, 1), dtype=np.int32)
    with pytest.raises(turbdb.InvalidRequestError, match="group index 5 outside"):
        _core.split_points(cols, cols, cols, shards=(1, 1, 1), tables=np.array([[5]], dtype=np.int32), groups=2)
    with pytest.raises(turbdb.InvalidRequestError, match="shard 2 outside"):
        _core.split_points(cols + 2, cols, cols, shards=(2, 1, 1), tables=np.zeros((1, 2), dtype=np.int32), groups=1)
