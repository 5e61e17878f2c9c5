"""The record of each field's written steps (``steps_written``): every writer keeps it,
``info``, ``GET /v1/datasets/NAME`` and ``verify`` read it instead of every shard, a field
that lost all its steps is told from one never written, pchip over a field's last written
interval uses the steps that field has, and a cutout of a step not written names its time
index and time. Real files on disk, small grids."""

import asyncio
import json
import shutil

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

import turbdb
from turbdb.cli import main
from turbdb.dataset import Dataset
from turbdb.exceptions import DamagedMetadataError, InvalidRequestError
from turbdb.jobs import steps_read
from turbdb.written_steps import RECORD_KEY

TIMES = [0.0, 0.1, 0.2, 0.3]


def quadratic(t):
    return 100.0 * t * t  # pchip is exact for quadratics in time, at the ends too


def made(path, *, every_step=True, steps=range(4)):
    """velocity (3 components) and pressure (quadratic in time) written at ``steps``."""
    ds = turbdb.create_dataset(path, "d", grid=(16, 16, 16), times=TIMES, atom=4, partition=8,
                               fields={"velocity": 3, "pressure": {"ncomp": 1, "every_step": every_step}})
    for t in steps:
        ds.write("velocity", t, np.full((16, 16, 16, 3), float(t), np.float32))
        ds.write("pressure", t, np.full((16, 16, 16), quadratic(TIMES[t]), np.float32))
    return ds


def stored_record(ds):
    return json.loads((ds.path / "zarr.json").read_text())["attributes"]["turbdb"].get(RECORD_KEY)


@pytest.fixture
def shard_scans(monkeypatch):
    """The fields whose steps were found by looking at every shard."""
    scanned = []
    original = Dataset._steps_written
    monkeypatch.setattr(Dataset, "_steps_written",
                        lambda self, field, *a: scanned.append(field) or original(self, field, *a))
    return scanned


def test_info_and_the_full_get_read_the_record_instead_of_every_shard(tmp_path, shard_scans):
    ds = made(tmp_path / "db", steps=[0, 1, 3])
    assert stored_record(ds) == {"velocity": "0-1,3", "pressure": "0-1,3"}
    shard_scans.clear()  # each field's first write counts what is there once
    info = turbdb.open(tmp_path / "db")["d"].info
    assert info.steps_present("velocity") == [0, 1, 3] and shard_scans == []

    from turbdb.service.app import create_app

    async def get():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(tmp_path / "db")),
                                     base_url="http://t") as client:
            return (await client.get("/v1/datasets/d")).json()

    assert asyncio.run(get())["steps_present"] == {"velocity": [0, 1, 3], "pressure": [0, 1, 3]}
    assert shard_scans == []
    # A step directory deleted (a stopped run cleaned up by hand) is not listed.
    shutil.rmtree(ds.path / "pressure" / "c" / "1")
    assert turbdb.open(tmp_path / "db")["d"].info.steps_present("pressure") == [0, 3] and shard_scans == []


def test_a_dataset_written_before_the_record_is_counted_from_its_shards_and_recorded_at_its_next_write(
        tmp_path, shard_scans):
    ds = made(tmp_path / "db", steps=[0, 1])
    ds.update_attrs(lambda attrs: attrs.pop(RECORD_KEY))
    shard_scans.clear()
    assert ds.info.steps_present() == [0, 1] and sorted(shard_scans) == ["pressure", "velocity"]
    ds.write("velocity", 2, np.zeros((16, 16, 16, 3)))  # counts velocity's steps once, under the lock
    assert stored_record(ds) == {"velocity": "0-2"}
    shard_scans.clear()
    assert ds.info.fields["velocity"].steps_present == (0, 1, 2) and shard_scans == ["pressure"]


def test_every_writer_records_its_steps(tmp_path):
    from turbdb.ingest.pipeline import ingest_inputs
    from turbdb.simulation_run import run_simulation

    files = []
    for k in range(3):
        files.append(tmp_path / f"p_{k}.npy")
        np.save(files[-1], np.full((8, 8, 8), float(k), np.float32))
    ingest_inputs(tmp_path / "db", "ingested", "pressure", files, dt=0.5, quiet=True)
    assert stored_record(turbdb.open(tmp_path / "db")["ingested"]) == {"pressure": "0-2"}
    simulated = run_simulation(tmp_path / "db", "sim", grid=16, steps=2, kind="synthetic", quiet=True)
    assert stored_record(simulated) == {"velocity": "0-1", "pressure": "0-1"}
    # Threads writing separate steps at once: each step recorded, under the metadata lock.
    from concurrent.futures import ThreadPoolExecutor

    many = turbdb.create_dataset(tmp_path / "db", "many", grid=(8, 8, 8), times=list(range(12)), fields={"u": 1})
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda t: many.write("u", t, np.full((8, 8, 8), float(t))), range(12)))
    assert stored_record(many) == {"u": "0-11"}
    # Times cut back forget their steps: appended again, they are not written.
    ds = made(tmp_path / "db2", steps=[0, 1])
    ds.append_times([0.4])
    ds.write("velocity", 4, np.zeros((16, 16, 16, 3)))
    shutil.rmtree(ds.path / "velocity" / "c" / "4")
    ds.drop_unwritten_times(2)
    assert stored_record(ds) == {"velocity": "0-1", "pressure": "0-1"}


def test_verify_tells_a_field_that_lost_every_step_from_one_never_written(tmp_path):
    ds = made(tmp_path / "db", every_step=False, steps=[0, 2])
    ds.add_field("tracer", 1)  # never written
    shutil.rmtree(ds.path / "pressure" / "c")  # written at some steps only, and lost them all
    reports = ds.verify()
    lost = [(t, message) for _, t, message in reports["pressure"]["problems"]]
    assert [t for t, _ in lost] == [0, 2]
    assert "every shard of this step is missing, and the dataset records it as written" in lost[0][1]
    assert not reports["tracer"]["problems"] and not reports["velocity"]["problems"]
    said = CliRunner().invoke(main, ["verify", str(tmp_path / "db"), "d"])
    assert said.exit_code == 1 and "pressure/c/2 (time step 2): every shard" in said.stdout
    # A single field that lost every step: no other field to compare with.
    alone = turbdb.create_dataset(tmp_path / "db", "alone", grid=(8, 8, 8), times=[0, 1], fields={"u": 1})
    for t in range(2):
        alone.write("u", t, np.ones((8, 8, 8)))
    shutil.rmtree(alone.path / "u" / "c")
    assert [t for _, t, _ in alone.verify()["u"]["problems"]] == [0, 1]


def test_verify_notes_a_whole_step_the_record_does_not_list(tmp_path):
    ds = made(tmp_path / "db", steps=[0, 1])
    ds.update_attrs(lambda attrs: attrs[RECORD_KEY].update(velocity="0"))  # as a write stopped before recording
    assert ds.verify()["velocity"]["unrecorded"] == [1] and not ds.verify()["velocity"]["problems"]
    said = CliRunner().invoke(main, ["verify", str(tmp_path / "db"), "d"])
    assert said.exit_code == 0 and "time step(s) 1 hold every shard but are not recorded" in said.stdout
    ds.write("velocity", 1, np.ones((16, 16, 16, 3)))  # written again: recorded
    assert ds.verify()["velocity"]["unrecorded"] == []


def test_a_damaged_record_is_named(tmp_path):
    ds = made(tmp_path / "db", steps=[0])
    ds.update_attrs(lambda attrs: attrs[RECORD_KEY].update(pressure="3-1"))
    with pytest.raises(DamagedMetadataError, match="'steps_written' attribute of field 'pressure'.*'3-1'"):
        turbdb.open(tmp_path / "db")["d"].info


def test_pchip_over_a_fields_last_written_interval_holds_after_another_fields_later_step(tmp_path):
    ds = made(tmp_path / "db")
    point = [[1.0, 1.0, 1.0]]
    before = ds.query("pressure", point, time=0.25, temporal="pchip", dtype=np.float64)
    assert before[0, 0] == pytest.approx(quadratic(0.25), rel=1e-6)
    ds.append_times([0.4])
    ds.write("velocity", 4, np.full((16, 16, 16, 3), 4.0, np.float32))  # pressure has no step 4
    for opened in (ds, turbdb.open(tmp_path / "db", scheduler="jaws")["d"]):
        after = opened.query("pressure", point, time=0.25, temporal="pchip", dtype=np.float64)
        assert np.array_equal(after, before)  # as at the end of the data: the same stencil
    assert steps_read(ds, "pressure", 0.25, "pchip") == [1, 2, 3]
    assert steps_read(ds, "velocity", 0.25, "pchip") == [1, 2, 3, 4]  # velocity has step 4
    # Past pressure's last step it has nothing to interpolate: the missing step is named.
    with pytest.raises(InvalidRequestError, match=r"time index 4 \(t = 0.4\) of pressure is not stored"):
        ds.query("pressure", point, time=0.35, temporal="pchip")


def test_a_cutout_of_a_step_not_written_names_its_time_index_and_time(tmp_path):
    ds = made(tmp_path / "db")
    ds.append_times([0.4])
    ds.write("velocity", 4, np.zeros((16, 16, 16, 3)))
    with pytest.raises(InvalidRequestError, match=r"^time index 4 \(t = 0.4\) of pressure is not stored: "):
        ds.cutout("pressure", time=0.4)
    # JHTDB's numbering (from 1) still names it as step 5.
    from turbdb.jhtdb.cutout import giverny_cutout

    with pytest.raises(InvalidRequestError, match=r"time step 5 of 'pressure' \(ts … te number the stored steps"):
        giverny_cutout(ds, "pressure", np.array([[1, 4], [1, 4], [1, 4]]), np.array([5, 5]), np.array([1, 1, 1, 1]))
