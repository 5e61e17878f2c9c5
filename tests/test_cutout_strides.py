"""Cutouts with a different stride per axis read only what they keep: an axis that keeps one
node is read as that node, an axis whose stride skips whole atoms plane by plane, the rest at
the strides' gcd; the values equal the whole box sampled, with and without a node engine."""

import itertools
import math

import numpy as np
import pytest

import turbdb
import turbdb.cutout as cutouts

N, ATOM = 32, 8
TIMES = [0.0, 1.0]


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    rng = np.random.default_rng(11)
    db = tmp_path_factory.mktemp("strides") / "db"
    ds = turbdb.create_dataset(db, "cube", grid=(N, N, N), periodic=(True, False, True), times=TIMES, atom=ATOM,
                               partition=16, fields={"velocity": {"ncomp": 3, "units": "m/s"}, "pressure": 1})
    for t in range(len(TIMES)):
        ds.write("velocity", t, rng.standard_normal((N, N, N, 3)).astype(np.float32))
        ds.write("pressure", t, rng.standard_normal((N, N, N)).astype(np.float32))
    return db


@pytest.fixture(scope="module")
def cube(db_path):
    return turbdb.open(db_path)["cube"]


@pytest.fixture()
def nodes_read(monkeypatch):
    """Counts the nodes every read of the store returns (a spy on cutout.read_nodes)."""
    counted = [0]
    real = cutouts.read_nodes

    def counting(dataset, field, t_index, ranges, stride, out=None):
        counted[0] += math.prod(cutouts.output_shape(ranges, (stride,) * 3))
        return real(dataset, field, t_index, ranges, stride, out)

    monkeypatch.setattr(cutouts, "read_nodes", counting)
    return counted


STRIDES = [(2, 1, 1), (1, 2, 1), (1, 1, 2), (3, 2, 1), (8, 1, 1), (1, 8, 2), (16, 3, 1), (32, 1, 1), (1, 1, 32),
           (9, 8, 1), (1, 4, 12), (32, 32, 1), (5, 7, 11)]


@pytest.mark.parametrize("strides", STRIDES)
@pytest.mark.parametrize("field", ["velocity", "pressure"])
def test_a_box_with_a_stride_per_axis_is_the_whole_box_sampled(cube, strides, field):
    whole = cube.cutout(field, time=1.0, x=(-3, 29), y=(2, 30), z=(1, 32)).values
    sx, sy, sz = strides
    cut = cube.cutout(field, time=1.0, x=(-3, 29), y=(2, 30), z=(1, 32), stride=strides)
    assert cut.values.flags.c_contiguous and cut.values.dtype == np.float32
    np.testing.assert_array_equal(cut.values, whole[::sz, ::sy, ::sx])


def test_several_times_and_small_boxes_of_every_stride_pair_agree_with_numpy(cube):
    whole = cube.cutout("velocity", time=[0.0, 1.0], y=(0, 11)).values
    for strides in itertools.product((1, 2, 8, 20), repeat=3):
        sx, sy, sz = strides
        cut = cube.cutout("velocity", time=[0.0, 1.0], y=(0, 11), stride=strides).values
        np.testing.assert_array_equal(cut, whole[:, ::sz, ::sy, ::sx], err_msg=str(strides))


@pytest.mark.parametrize("strides", [(32, 1, 1), (1, 1, 32), (16, 1, 1), (8, 2, 2), (2, 16, 2), (32, 8, 1)])
def test_a_stride_that_skips_whole_atoms_reads_only_the_kept_nodes(cube, nodes_read, strides):
    # Read at the gcd, (32, 1, 1) read the whole box: 32 times the nodes it keeps.
    cut = cube.cutout("velocity", time=0.0, stride=strides)
    assert nodes_read[0] == math.prod(cut.shape[:3]) + 1  # check_box reads one node first


@pytest.mark.parametrize("strides", [(2, 1, 1), (1, 2, 1), (3, 2, 1), (4, 2, 6)])
def test_a_small_stride_reads_the_box_at_the_gcd_once(cube, nodes_read, strides):
    cut = cube.cutout("velocity", time=0.0, stride=strides)
    gcd = math.gcd(*strides)
    assert nodes_read[0] == math.prod(len(range(0, N, gcd)) for _ in range(3)) + 1  # and one by check_box
    assert cut.shape[:3] == tuple(len(range(0, N, s)) for s in strides[::-1])


def test_through_a_node_engine_the_strided_box_is_the_same(db_path, cube):
    with turbdb.open(db_path, scheduler="jaws") as engine_db:
        for strides in [(2, 1, 1), (32, 1, 1), (1, 8, 2), (5, 7, 11)]:
            np.testing.assert_array_equal(engine_db["cube"].cutout("velocity", time=1.0, stride=strides).values,
                                          cube.cutout("velocity", time=1.0, stride=strides).values)
