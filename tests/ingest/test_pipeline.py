"""turbdb ingest end to end: steps are appended in order, a rerun resumes, and a kill -9
in the middle followed by a rerun gives the same bytes as an uninterrupted ingest."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

import turbdb
from turbdb.ingest.pipeline import ingest_inputs


def write_inputs(folder, count, shape=(24, 20, 16, 3), seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = folder / f"step{i:03d}.npy"
        np.save(path, rng.standard_normal(shape).astype(np.float32))
        paths.append(path)
    return paths


def shard_bytes(dataset_dir, field):
    """Every shard's bytes but its header's field id and checksum (two datasets made the
    same way differ in their random field ids only)."""
    return {str(p.relative_to(dataset_dir)): _without_field_id(p.read_bytes())
            for p in sorted((dataset_dir / field / "c").rglob("*")) if p.is_file()}


def _without_field_id(raw):
    assert raw[:12] == b"TURBDBSH\x02\x00\x00\x00", "a version 2 shard header"
    header_len = int.from_bytes(raw[12:16], "little")
    return raw[:40] + raw[48:header_len - 4] + raw[header_len:]


def test_ingest_appends_steps_with_times_and_skips_what_is_stored(tmp_path):
    paths = write_inputs(tmp_path / "in", 3)
    ingest_inputs(tmp_path / "db", "run", "velocity", paths[:2], dt=0.5, t0=1.0, quiet=True)
    ingest_inputs(tmp_path / "db", "run", "velocity", paths, quiet=True)
    info = turbdb.open(tmp_path / "db")["run"].info
    assert info.grid == (16, 20, 24) and info.fields["velocity"].ncomp == 3
    np.testing.assert_allclose(info.times, [1.0, 1.5, 2.0])
    stored = zarr.open_array(tmp_path / "db" / "run" / "velocity", mode="r")
    for t, path in enumerate(paths):
        np.testing.assert_array_equal(stored[t], np.load(path))


def test_a_second_field_fills_the_same_time_steps(tmp_path):
    velocity = write_inputs(tmp_path / "u", 2)
    pressure = write_inputs(tmp_path / "p", 2, shape=(24, 20, 16), seed=1)
    ingest_inputs(tmp_path / "db", "run", "velocity", velocity, quiet=True)
    ingest_inputs(tmp_path / "db", "run", "pressure", pressure, quiet=True)
    info = turbdb.open(tmp_path / "db")["run"].info
    assert info.nt == 2 and info.steps_present() == [0, 1]


def test_inputs_of_the_wrong_grid_are_refused_with_the_file_named(tmp_path):
    good = write_inputs(tmp_path / "a", 1)
    bad = write_inputs(tmp_path / "b", 1, shape=(24, 20, 17, 3))
    with pytest.raises(turbdb.FormatError, match="step000.npy"):
        ingest_inputs(tmp_path / "db", "run", "velocity", good + bad, quiet=True)
    ingest_inputs(tmp_path / "db", "run", "velocity", good, quiet=True)
    with pytest.raises(turbdb.FormatError, match="grid"):
        ingest_inputs(tmp_path / "db", "run", "velocity", bad, quiet=True)
    scalar = write_inputs(tmp_path / "c", 1, shape=(24, 20, 16))
    with pytest.raises(turbdb.FormatError, match="component"):
        ingest_inputs(tmp_path / "db", "run", "velocity", scalar, quiet=True)


def test_a_step_with_nan_is_refused_naming_the_input_and_nothing_is_lost(tmp_path):
    paths = write_inputs(tmp_path / "in", 2)
    data = np.load(paths[1])
    data[1, 2, 3, 0] = np.nan
    np.save(paths[1], data)
    with pytest.raises(turbdb.InvalidRequestError, match=r"step001.npy.*NaN"):
        ingest_inputs(tmp_path / "db", "run", "velocity", paths, quiet=True)
    info = turbdb.open(tmp_path / "db")["run"].info
    assert info.steps_present("velocity") == [0]
    assert info.nt == 1, "the time appended for the refused step stays behind, holding no data"


def test_a_first_ingest_that_fails_leaves_no_dataset_behind_and_the_corrected_one_works(tmp_path):
    paths = write_inputs(tmp_path / "in", 1)
    broken = tmp_path / "broken.npy"
    np.save(broken, np.full((40, 20, 16, 3), np.nan, dtype=np.float32))
    with pytest.raises(turbdb.InvalidRequestError, match="NaN"):
        ingest_inputs(tmp_path / "db", "run", "velocity", [broken], quiet=True)
    assert not (tmp_path / "db" / "run").exists()
    with pytest.raises(turbdb.InvalidRequestError, match="--t0 must be a finite number"):
        ingest_inputs(tmp_path / "db", "run", "velocity", paths, t0=float("nan"), quiet=True)
    ingest_inputs(tmp_path / "db", "run", "velocity", paths, quiet=True)  # the grid of the good input
    assert turbdb.open(tmp_path / "db")["run"].info.grid == (16, 20, 24)


@pytest.mark.parametrize("field", ["x", "y", "z", "time", "zarr.json"])
def test_a_field_named_as_a_coordinate_is_refused_and_the_dataset_stays_readable(tmp_path, field):
    paths = write_inputs(tmp_path / "in", 1)
    ingest_inputs(tmp_path / "db", "run", "velocity", paths, quiet=True)
    scalar = write_inputs(tmp_path / "s", 1, shape=(24, 20, 16))
    with pytest.raises(turbdb.InvalidRequestError, match="is taken by the dataset's own"):
        ingest_inputs(tmp_path / "db", "run", field, scalar, quiet=True)
    with pytest.raises(turbdb.InvalidRequestError, match="is taken"):
        ingest_inputs(tmp_path / "db", "fresh", field, scalar, quiet=True)
    with pytest.raises(turbdb.InvalidRequestError, match="is taken by the database's own metadata"):
        ingest_inputs(tmp_path / "db", "zarr.json", "velocity", paths, quiet=True)
    run = turbdb.open(tmp_path / "db")["run"]
    np.testing.assert_array_equal(run.cutout("velocity", time=0.0).values, np.load(paths[0]))


def test_options_for_a_new_dataset_must_agree_when_appending(tmp_path):
    paths = write_inputs(tmp_path / "in", 3)
    db = tmp_path / "db"
    ingest_inputs(db, "run", "velocity", paths[:1], spacing=(1.0, 1.0, 1.0), units="m/s", dt=0.25, quiet=True)
    for given, value in [("spacing", (2.0, 1.0, 1.0)), ("origin", (1.0, 0.0, 0.0)), ("periodic", (False,) * 3),
                         ("t0", 5.0), ("units", "km/s")]:
        with pytest.raises(turbdb.InvalidRequestError, match=f"--{given} .* does not match"):
            ingest_inputs(db, "run", "velocity", paths[1:2], given={given}, **{given: value}, quiet=True)
    # Agreeing ones are fine; unset ones are not compared; a dataset of one time remembers
    # the --dt its ingest was given.
    ingest_inputs(db, "run", "velocity", paths[1:2], spacing=(1.0, 1.0, 1.0), units="m/s", quiet=True,
                  given={"spacing", "units", "periodic", "t0"})
    ingest_inputs(db, "run", "velocity", paths[2:], origin=(7.0, 7.0, 7.0), quiet=True)
    info = turbdb.open(db)["run"].info
    np.testing.assert_allclose(info.times, [0.0, 0.25, 0.5])
    assert info.origin == (0.0, 0.0, 0.0) and info.fields["velocity"].units == "m/s"


def test_another_field_steps_on_by_the_dt_a_one_time_ingest_was_given(tmp_path):
    db = tmp_path / "db"
    ingest_inputs(db, "run", "velocity", write_inputs(tmp_path / "u", 1), dt=0.5, quiet=True)
    ingest_inputs(db, "run", "pressure", write_inputs(tmp_path / "p", 3, shape=(24, 20, 16, 1)), quiet=True)
    np.testing.assert_allclose(turbdb.open(db)["run"].info.times, [0.0, 0.5, 1.0])


def _journal_next(dataset_dir):
    try:
        attrs = json.loads((dataset_dir / "zarr.json").read_text())["attributes"]["turbdb"]
        return attrs.get("ingest", {}).get("velocity", {}).get("next", 0)
    except (OSError, ValueError, KeyError):
        return 0


def _steps_on_disk(dataset_dir):
    try:
        return len(os.listdir(dataset_dir / "velocity" / "c"))
    except OSError:
        return 0


@pytest.mark.slow
def test_kill_9_mid_ingest_then_rerun_gives_identical_bytes(tmp_path):
    paths = write_inputs(tmp_path / "in", 30, shape=(64, 64, 96, 3))
    command = [sys.executable, "-m", "turbdb.cli", "ingest", None, *map(str, paths), "--name", "run",
               "--field", "velocity", "--dt", "0.1", "--quiet"]

    def ingest(db):
        return subprocess.run([c if c is not None else str(db) for c in command], capture_output=True, text=True)

    reference = ingest(tmp_path / "ref")
    assert reference.returncode == 0, reference.stderr

    killed_db = tmp_path / "killed"
    process = subprocess.Popen([c if c is not None else str(killed_db) for c in command])
    deadline = time.monotonic() + 60
    # Killed once 5 steps are on disk: the journal, saved once a second, may record fewer.
    while _steps_on_disk(killed_db / "run") < 5 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.005)
    assert process.poll() is None, "ingest finished before it could be killed; make the inputs larger"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert _journal_next(killed_db / "run") < 30

    resumed = ingest(killed_db)
    assert resumed.returncode == 0, resumed.stderr
    assert shard_bytes(killed_db / "run", "velocity") == shard_bytes(tmp_path / "ref" / "run", "velocity")
    ref_info = turbdb.open(tmp_path / "ref")["run"].info
    info = turbdb.open(killed_db)["run"].info
    np.testing.assert_array_equal(info.times, ref_info.times)
    assert info.steps_present() == list(range(30))
    assert turbdb.open(killed_db)["run"].verify()["velocity"]["problems"] == []


def test_a_second_writer_is_refused_while_an_ingest_holds_the_dataset(tmp_path):
    paths = write_inputs(tmp_path / "in", 2)
    dataset = ingest_inputs(tmp_path / "db", "run", "velocity", paths[:1], quiet=True)
    before = shard_bytes(dataset.path, "velocity")
    with dataset.writer_lock():  # what a running ingest holds
        with pytest.raises(turbdb.DatasetBusyError, match="is writing dataset 'run'"):
            ingest_inputs(tmp_path / "db", "run", "velocity", paths, quiet=True)
    assert shard_bytes(dataset.path, "velocity") == before, "the refused writer must not have written"
    ingest_inputs(tmp_path / "db", "run", "velocity", paths, quiet=True)  # free again: it completes
    assert list(turbdb.open(tmp_path / "db")["run"].info.steps_present("velocity")) == [0, 1]


def test_two_concurrent_ingest_processes_never_mix_steps(tmp_path):
    first, second = write_inputs(tmp_path / "a", 3, seed=1), write_inputs(tmp_path / "b", 3, seed=2)
    turbdb.create_dataset(tmp_path / "db", "run", grid=(16, 20, 24), times=[], fields={"velocity": 3})
    command = [sys.executable, "-m", "turbdb.cli", "ingest", str(tmp_path / "db"), "--name", "run", "--field",
               "velocity"]
    procs = [subprocess.Popen([*command, *map(str, paths)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for paths in (first, second)]
    results = [(p.wait(120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert any(code == 0 for code, _ in results), results
    for code, err in results:
        if code != 0:
            assert "another process is writing" in err and "Traceback" not in err, err
    ds = turbdb.open(tmp_path / "db")["run"]
    assert ds.verify()["velocity"]["problems"] == []
    for t in ds.info.steps_present("velocity"):
        whole = np.asarray(ds.cutout("velocity", time=float(ds.info.times[t]))).reshape(-1)
        assert any(np.array_equal(whole, np.load(p).reshape(-1)) for p in first + second), \
            f"step {t} is not any one input: it mixes shards of two"


def test_float64_values_that_round_to_float32s_largest_are_kept_and_larger_ones_refused(tmp_path):
    # 3.4028235e38 is how float32's largest prints: numpy rounds it to that, not to infinity.
    data = np.zeros((8, 8, 8), dtype=np.float64)
    data[0, 0, 0], data[1, 1, 1] = 3.4028235e38, -3.4028235e38
    np.save(tmp_path / "p.npy", data)
    ingest_inputs(tmp_path / "db", "run", "pressure", [tmp_path / "p.npy"], quiet=True)
    stored = zarr.open_array(tmp_path / "db" / "run" / "pressure", mode="r")[0]
    assert stored[0, 0, 0, 0] == np.finfo(np.float32).max and stored[1, 1, 1, 0] == -np.finfo(np.float32).max
    data[2, 2, 2] = 3.5e38
    np.save(tmp_path / "q.npy", data)
    with pytest.raises(turbdb.InvalidRequestError, match="beyond float32's range"):
        ingest_inputs(tmp_path / "db", "run", "pressure", [tmp_path / "q.npy"], quiet=True)


def test_the_journal_is_saved_at_the_first_step_and_the_end_not_at_every_step(tmp_path, monkeypatch):
    # Saved at every step with the whole metadata: quadratic in the number of files (2 000
    # one-step files 77.8 s). A numpy dt (orjson cannot encode it) is saved as json would.
    from turbdb.ingest import pipeline

    saves = []
    real = pipeline._save_journal
    monkeypatch.setattr(pipeline, "_save_journal", lambda *a: saves.append(a[2]["next"]) or real(*a))
    paths = write_inputs(tmp_path / "in", 6, shape=(8, 8, 8, 3))
    dataset = ingest_inputs(tmp_path / "db", "run", "velocity", paths, dt=np.float64(0.5), quiet=True)
    assert saves == [1, 6]
    assert dataset.info.steps_present("velocity") == list(range(6))
    assert json.loads((dataset.path / "zarr.json").read_text())["attributes"]["turbdb"]["ingest"]["velocity"]["dt"] == 0.5
