"""Splitting a query by partition: the partial sums of the units, each evaluated over its
own partitions only, add up to the single-node answer for every method, operator and
temporal mode; a point reaches each group of workers once; points shared out without
routing are cut into equal contiguous runs that cover each point once;
cutout pieces tile the box.
The units are evaluated here by the engine itself, restricted as a worker restricts them."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turbdb
from turbdb.arguments import METHODS, OPERATORS, SLOTS, axes_of
from turbdb.cluster.placement import PartitionMap, chained_declustering, virtual_count
from turbdb.cluster.routing import Groups, Reach, shared_runs, split_cutout, split_query, unit_count

TWO_PI = 2 * math.pi
TIMES = (0.0, 0.5, 1.0, 1.5, 2.0)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """A periodic 32³ field in 8³-node partitions (64 a step, 5 steps) and a bounded one."""
    db = tmp_path_factory.mktemp("routing")
    axis = np.arange(32) * TWO_PI / 32
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    trig = turbdb.create_dataset(db, "trig", grid=(32, 32, 32), times=TIMES, atom=4, partition=8,
                                 fields={"velocity": 3})
    for t, time in enumerate(TIMES):
        trig.write("velocity", t, np.stack([np.sin(x) * np.cos(2 * y) * (1 + time), np.cos(z) * np.sin(x + y),
                                            np.sin(3 * z) + np.cos(x) * time], -1))
    box = turbdb.create_dataset(db, "box", grid=(20, 12, 9), spacing=(0.5, 0.5, 0.5), periodic=(False,) * 3,
                                times=TIMES[:2], fields={"p": 1}, atom=4, partition=4)
    zz, yy, xx = np.meshgrid(np.arange(9) * 0.5, np.arange(12) * 0.5, np.arange(20) * 0.5, indexing="ij")
    for t in range(2):
        box.write("p", t, np.sin(xx) * yy - zz**2 + t)
    return {"trig": (trig, "velocity", TWO_PI), "box": (box, "p", None)}


def placement(info, workers: int, seed: int):
    slots = [str(i) for i in range(workers)]
    virtual = virtual_count(workers, min(2, workers))
    holders = chained_declustering(slots, min(2, workers), virtual)
    rng = np.random.default_rng(seed)
    rng.shuffle(holders)
    shards = tuple(-(-n // info.partition) for n in info.grid)
    return PartitionMap(shards, virtual, int(rng.integers(1, 4)), info.name), holders


def points_for(name, info, n, seed):
    rng = np.random.default_rng(seed)
    if name == "trig":
        pts = rng.uniform(-TWO_PI, 2 * TWO_PI, (n, 3))  # wrapped by the engine
        pts[: n // 4] = np.round(pts[: n // 4] / (TWO_PI / 32)) * (TWO_PI / 32)  # on nodes and shard edges
        return pts
    hi = (np.array(info.grid) - 1) * 0.5
    return rng.uniform(0, 1, (n, 3)) * hi


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["trig", "box"]), method=st.sampled_from(METHODS), operator=st.sampled_from(OPERATORS),
       temporal=st.sampled_from(["none", "pchip"]), workers=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_unit_partial_sums_add_up_to_the_single_node_answer(datasets, name, method, operator, temporal, workers, seed):
    ds, field, _ = datasets[name]
    info = ds.metadata
    pts = points_for(name, info, 300, seed)
    time = 0.7 if name == "trig" else 0.4
    try:
        whole = ds.query(field, pts, time=time, method=method, operator=operator, temporal=temporal, dtype=np.float64)
    except turbdb.InvalidRequestError:
        return  # a combination the method does not support: the mediator raises the same error
    store = ds.field_store(field)
    levels = store.time_levels(info.times, time, temporal)
    pmap, holders = placement(info, workers, seed)
    reach = Reach.of(info, pts, method=method, operator=operator, axes=axes_of(info))
    groups = Groups.of(pmap, levels, holders)
    units = split_query(pmap, reach, levels, groups, lambda g: True)
    width = info.fields[field].ncomp * SLOTS[operator]
    total = np.zeros((len(pts), width))
    for unit in units:
        values, _ = store.query(pts[unit.points], axes=axes_of(info), times=info.times, time=time, method=method,
                                operator=operator, temporal=temporal, strategy="streaming",
                                partitions=unit.partitions)
        total[unit.points] += values.reshape(-1, width)
    np.testing.assert_allclose(total.reshape(whole.shape), whole, rtol=1e-9, atol=1e-9 * np.abs(whole).max())
    # Each point meets each group once, and only groups holding a partition it needs.
    seen = set()
    for unit in units:
        for p in unit.points.tolist():
            assert (p, unit.holders) not in seen
            seen.add((p, unit.holders))
        parts = {(t, s) for t, s in unit.partitions}
        assert all(tuple(holders[int(pmap.virtual_of(t, s[0] + pmap.shards[0] * (s[1] + pmap.shards[1] * s[2])))])
                   == unit.holders for t, s in parts)


def test_units_of_a_shared_group_are_neighbours(datasets):
    ds, field, _ = datasets["trig"]
    info = ds.metadata
    pts = np.random.default_rng(3).uniform(0, TWO_PI, (200_000, 3))
    pmap, holders = placement(info, 2, 0)
    levels = [(1, 1.0)]
    units = split_query(pmap, Reach.of(info, pts, method="lag4", operator="field", axes=axes_of(info)), levels,
                        Groups.of(pmap, levels, holders), lambda g: True)
    assert len(units) >= 8  # enough for two workers to share at their own rates
    home = Reach.of(info, pts, method="lag4", operator="field", axes=axes_of(info)).home(pmap)
    for unit in units:
        # Each unit spans a short run of shards, not the whole grid.
        assert len(np.unique(home[unit.points])) <= pmap.count // 4


@given(points=st.integers(0, 3_000_000), workers=st.integers(1, 20))
def test_shared_runs_cover_every_point_once_in_equal_runs(points, workers):
    bounds = shared_runs(points, workers)
    sizes = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == points and (sizes >= 0).all()
    assert len(sizes) == (unit_count(points) if workers > 1 else 1)
    assert sizes.max() - sizes.min() <= 1


@pytest.mark.parametrize("ranges,stride", [(((-5, 30), (3, 20), (0, 32)), 2), (((0, 32), (0, 32), (0, 32)), 1),
                                           (((7, 9), (31, 33), (-1, 0)), 1), (((0, 100), (4, 5), (4, 5)), 3)])
def test_cutout_pieces_tile_the_box(datasets, ranges, stride):
    ds, field, _ = datasets["trig"]
    info = ds.metadata
    pmap, _ = placement(info, 3, 1)
    whole = ds.cutout(field, time=1.0, x=ranges[0], y=ranges[1], z=ranges[2], stride=stride).values
    out = np.full(whole.shape, np.nan, dtype=np.float32)
    store = ds.field_store(field)
    for box in split_cutout(info, pmap, ranges, stride):
        (x0, x1), (y0, y1), (z0, z1) = box.out
        assert np.isnan(out[z0:z1, y0:y1, x0:x1]).all()  # no overlap
        out[z0:z1, y0:y1, x0:x1] = store.cutout(2, axes_of(info), box.ranges, stride)
        # One partition per piece.
        nodes = [np.mod(np.arange(*r, stride), n) // info.partition for r, n in zip(box.ranges, info.grid)]
        assert all(len(set(a.tolist())) == 1 for a in nodes)
    np.testing.assert_array_equal(out, whole)


def test_cutout_ranges_are_checked_as_the_engine_checks_them(datasets):
    ds, field, _ = datasets["box"]
    info = ds.metadata
    pmap, _ = placement(info, 3, 1)
    with pytest.raises(turbdb.OutOfDomainError, match="outside the non-periodic axis"):
        split_cutout(info, pmap, ((-1, 4), (0, 4), (0, 4)), 1)
    with pytest.raises(turbdb.InvalidRequestError, match="is empty"):
        split_cutout(info, pmap, ((4, 4), (0, 4), (0, 4)), 1)
