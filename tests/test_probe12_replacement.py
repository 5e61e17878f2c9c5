"""Reads of a dataset created again (``overwrite=True``) or losing a field while they run:
an answer comes from one dataset, or the read says the dataset was created again — never
the new store read with the old axes and times (wrong values, an engine panic on another
grid), never a shard "copied from another dataset", never a storage error for a field
removed meanwhile. Each replacement lands at a set moment (the points being read, a track's
progress callback), not by racing threads."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

import turbdb
from turbdb.exceptions import DatasetBusyError, UnknownNameError
from turbdb.service.cutout import plan
from turbdb.step_versions import DatasetReplacedError
from turbdb.zarr_meta import ZARR_JSON, consolidated_metadata, read_json, write_json_atomic

POINT = [[1.0, 1.0, 1.0]]


def make(db, n, length, times, version):
    """Dataset ``b`` (made again over the one there): field ``c`` is
    ``1000·version + 100·t_index + sin(2πx/length)`` on an ``n``³ grid of side ``length``."""
    ds = turbdb.create_dataset(db, "b", grid=(n,) * 3, spacing=(length / n,) * 3, times=times, fields={"c": 1},
                               partition=16, overwrite=True)
    x = np.arange(n) * length / n
    for t in range(len(times)):
        ds.write("c", t, ((1000.0 * version + 100 * t + np.sin(2 * np.pi * x / length))[None, None, :, None]
                          * np.ones((n, n, 1, 1))).astype(np.float32))


class ReplacingPoints:
    """Points whose reading (``np.asarray``) creates the dataset again first."""

    def __init__(self, replace):
        self.replace = replace

    def __array__(self, dtype=None, copy=None):
        self.replace()
        return np.array(POINT)


@pytest.mark.parametrize("scheduler", [None, "jaws"])
@pytest.mark.parametrize("change", ["spacing", "grid", "times"])
def test_a_query_whose_dataset_is_created_again_as_it_starts_answers_from_the_new_one(tmp_path, scheduler, change):
    # The query took the metadata, then the store of the dataset made again meanwhile:
    # 2100.84 for 2100.48 (the old spacing), the old times' step, or the engine panicking
    # on the new grid ("range end index 1 out of range").
    make(tmp_path, 16, 2 * np.pi, [0.0, 0.1], 1)
    ds = turbdb.open(tmp_path, scheduler=scheduler)["b"]
    ds.query("c", POINT, time=0.0)  # store open, metadata cached
    new = {"spacing": (16, 4 * np.pi, [0.0, 0.1]), "grid": (32, 2 * np.pi, [0.0, 0.1]),
           "times": (16, 2 * np.pi, [0.0, 0.05, 0.1])}[change]
    answer = ds.query("c", ReplacingPoints(lambda: make(tmp_path, *new, 2)), time=0.1, method="lag4",
                      dtype=np.float64)
    fresh = turbdb.open(tmp_path)["b"].query("c", POINT, time=0.1, method="lag4", dtype=np.float64)
    np.testing.assert_array_equal(answer, fresh)
    assert 2000 < answer.item() < 3000


def test_a_query_checked_before_and_read_after_a_creation_says_the_dataset_was_created_again(tmp_path):
    # Evaluated through the old dataset's store after the new one was in place, its shards
    # read as the old field's ("a shard copied from another dataset") or the old axes kept.
    from turbdb.query import evaluate_call, point_call

    make(tmp_path, 16, 2 * np.pi, [0.0, 0.1], 1)
    ds = turbdb.open(tmp_path)["b"]
    call = point_call(ds, "c", POINT, time=0.1, method="lag4")
    make(tmp_path, 16, 4 * np.pi, [0.0, 0.1], 2)
    with pytest.raises(DatasetReplacedError, match="was created again") as caught:
        evaluate_call(ds, call)
    assert isinstance(caught.value, DatasetBusyError) and caught.value.status == 503  # asked again, it answers
    assert ds.query("c", POINT, time=0.1, method="lag4", dtype=np.float64).item() == pytest.approx(2100 + np.sin(0.5),
                                                                                                    abs=1e-3)


@pytest.mark.parametrize("scheduler", [None, "jaws"])
def test_a_track_over_a_dataset_created_again_midway_says_so_and_the_next_tracks_the_new_one(tmp_path, scheduler):
    # The track kept the old store: "shard was written for a field … of id X but this field
    # has id Y (a shard copied from another dataset)", a 500 over HTTP.
    def velocity(u):
        ds = turbdb.create_dataset(tmp_path, "v", grid=(16,) * 3, times=np.arange(5) * 0.1, fields={"velocity": 3},
                                   partition=16, overwrite=True)
        field = np.zeros((16, 16, 16, 3), np.float32)
        field[..., 0] = u
        for t in range(5):
            ds.write("velocity", t, field)

    velocity(0.1)
    ds = turbdb.open(tmp_path, scheduler=scheduler)["v"]
    replace = lambda done, total: velocity(0.2) if done == 2 else None  # noqa: E731
    with pytest.raises(DatasetReplacedError, match="created again"):
        ds.track(POINT, start=0.0, end=0.4, dt=0.05, method="lag4", progress=replace)
    again = ds.track(POINT, start=0.0, end=0.4, dt=0.05, method="lag4")
    assert again[-1, 0, 0] == pytest.approx(1.0 + 0.2 * 0.4)


def test_a_streamed_cutout_of_a_dataset_created_again_after_its_plan_says_so(tmp_path):
    make(tmp_path, 16, 2 * np.pi, [0.0, 0.1], 1)
    ds = turbdb.open(tmp_path)["b"]
    planned = plan(ds, "c", time=0.1, x=(0, 8), y=(0, 8), z=(0, 8), strides=(1, 1, 1), filter_width=1,
                   chunk_bytes=2**20)
    make(tmp_path, 32, 2 * np.pi, [0.0, 0.1], 2)
    with pytest.raises(DatasetReplacedError):
        planned.read((0, 8))
    assert (ds.cutout("c", time=0.1, x=(0, 8), y=(0, 8), z=(0, 8)).values > 2000).all()


def _removing_field(ds, field, read):
    """Runs ``read`` on another thread while ``field`` is being removed as
    ``remove_empty_field`` does (its directory first, the metadata after, under the metadata
    lock); returns what it answered or raised."""
    outcome = {}

    def run():
        try:
            outcome["answer"] = read()
        except Exception as error:  # noqa: BLE001  # handed to the test
            outcome["error"] = error

    reader = threading.Thread(target=run)
    with ds._metadata_lock():
        shutil.rmtree(ds.path / field)
        reader.start()
        reader.join(1.0)
        # It waits for the removal to end (it raised StorageError: …/tmp/zarr.json does not exist).
        assert reader.is_alive(), outcome
        document = read_json(ds.path / ZARR_JSON)
        del document["attributes"]["turbdb"]["fields"][field]
        document["consolidated_metadata"] = consolidated_metadata(ds.path)
        write_json_atomic(ds.path / ZARR_JSON, document)
    reader.join(30)
    return outcome


def test_a_query_of_a_field_being_removed_says_there_is_no_such_field(tmp_path):
    make(tmp_path, 16, 2 * np.pi, [0.0, 0.1], 1)
    ds = turbdb.open(tmp_path)["b"]
    ds.add_field("tmp", 1)
    outcome = _removing_field(ds, "tmp", lambda: ds.query("tmp", POINT, time=0.0))
    assert isinstance(outcome.get("error"), UnknownNameError), outcome
    assert "no field 'tmp'" in str(outcome["error"])


def test_verify_while_a_field_is_removed_checks_the_fields_left(tmp_path):
    make(tmp_path, 16, 2 * np.pi, [0.0, 0.1], 1)
    ds = turbdb.open(tmp_path)["b"]
    ds.add_field("tmp", 1)
    outcome = _removing_field(ds, "tmp", ds.verify)
    assert "error" not in outcome, outcome
    assert list(outcome["answer"]) == ["c"] and outcome["answer"]["c"]["problems"] == []


@pytest.mark.parametrize("scheduler", [None, "jaws"])
def test_a_query_at_a_step_not_written_names_its_time_and_field(tmp_path, scheduler):
    # "time step 5 is not stored: …/c/5/0/0/0/0 does not exist": the user had to map the
    # index back to a time; cutouts and tracks said "time index 5 (t = 0.005) of s".
    ds = turbdb.create_dataset(tmp_path, "a", grid=(8, 8, 8), times=[0.0, 0.005, 0.01], fields={"s": 1}, atom=4,
                               partition=8)
    ds.write("s", 0, np.ones((8, 8, 8)))
    ds = turbdb.open(tmp_path, **({"scheduler": scheduler} if scheduler else {}))["a"]
    for call in (lambda: ds.query("s", [[0.1, 0.2, 0.3]], time=0.005, method="none"),
                 lambda: ds.query("s", [[0.1, 0.2, 0.3]], time=[0.0, 0.005], method="none"),
                 lambda: ds.submit("s", [[0.1, 0.2, 0.3]], time=0.005, method="none").result()):
        with pytest.raises(turbdb.TurbdbError, match=r"time index 1 \(t = 0\.005\) of s is not stored"):
            call()
