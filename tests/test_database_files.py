"""A database's directories changed by hand or by another process: a dataset replaced while
another writes it, a project moved with mv, a dataset's directory renamed, a path given with ~."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import turbdb
from turbdb.exceptions import DatasetBusyError
from turbdb.info import DatasetInfo
from turbdb.ingest import pipeline
from turbdb.ingest.pipeline import ingest_inputs


def run(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "turbdb.cli", *map(str, args)], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def small_dataset(db, name="flow", value=1.0):
    ds = turbdb.create_dataset(db, name, grid=(8, 8, 8), times=[0.0], fields={"velocity": 3}, atom=4, partition=8)
    ds.write("velocity", 0, np.full((8, 8, 8, 3), value, np.float32))
    return ds


def step(seed):
    return np.random.default_rng(seed).standard_normal((8, 8, 8, 3)).astype(np.float32)


def test_create_dataset_refuses_to_replace_a_dataset_another_process_is_writing(tmp_path):
    ds = small_dataset(tmp_path / "db")
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import sys, turbdb\nwith turbdb.open({str(ds.path)!r})['flow'].writer_lock():\n"
                               "    print('locked', flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DatasetBusyError, match="another process is writing"):
            turbdb.create_dataset(tmp_path / "db", "flow", grid=(8, 8, 8), times=[0.0], overwrite=True)
    finally:
        holder.communicate("\n", timeout=30)
    assert float(turbdb.open(tmp_path / "db")["flow"].cutout("velocity", time=0).values.max()) == 1.0
    # Once the writer is done it may be replaced, and (as turbdb simulate does) by a
    # process that holds the lock itself.
    with ds.writer_lock():
        turbdb.create_dataset(tmp_path / "db", "flow", grid=(4, 4, 4), times=[0.0], overwrite=True)
    assert turbdb.open(tmp_path / "db")["flow"].info.grid == (4, 4, 4)


def test_create_dataset_refuses_to_replace_a_dataset_another_thread_is_writing(tmp_path):
    # The review: the lock counted as held by whoever asked, in any thread of the process
    # that held it (an ingest in a worker thread lost its steps).
    import threading

    ds = small_dataset(tmp_path / "db")
    locked, done = threading.Event(), threading.Event()

    def writer():
        with ds.writer_lock():
            locked.set()
            done.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert locked.wait(30)
        with pytest.raises(DatasetBusyError):
            turbdb.create_dataset(tmp_path / "db", "flow", grid=(8, 8, 8), times=[0.0], overwrite=True)
    finally:
        done.set()
        thread.join()
    assert float(turbdb.open(tmp_path / "db")["flow"].cutout("velocity", time=0).values.max()) == 1.0


def test_a_failed_ingest_leaves_a_dataset_made_over_the_one_it_created(tmp_path, monkeypatch):
    np.save(tmp_path / "u.npy", step(0))

    def replaced_then_failed(dataset, *args, **kwargs):
        # Another writer made the dataset again over the one this ingest created (and has
        # stored nothing in it yet), and the ingest then failed: its cleanup must not delete
        # the other's dataset.
        turbdb.create_dataset(tmp_path / "db", "run", grid=(4, 4, 4), times=[0.0], overwrite=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "_append", replaced_then_failed)
    with pytest.raises(KeyboardInterrupt):
        ingest_inputs(tmp_path / "db", "run", "velocity", [tmp_path / "u.npy"], quiet=True)
    assert turbdb.open(tmp_path / "db")["run"].info.grid == (4, 4, 4)


def ingested_project(tmp_path, monkeypatch):
    """A project folder with two inputs, ``in/u_0.npy`` and ``in/u_1.npy``, ingested into
    its database ``db`` (dataset ``run``) by paths relative to it."""
    project = tmp_path / "project"
    (project / "in").mkdir(parents=True)
    for i in range(2):
        np.save(project / "in" / f"u_{i}.npy", step(i))
    monkeypatch.chdir(project)
    ingest_inputs("db", "run", "velocity", ["in/u_0.npy", "in/u_1.npy"], dt=0.1, quiet=True)
    return project


def test_a_moved_project_ingested_again_stores_only_its_new_steps(tmp_path, monkeypatch):
    project = ingested_project(tmp_path, monkeypatch)

    moved = tmp_path / "moved"
    project.rename(moved)
    monkeypatch.chdir(moved)
    np.save(moved / "in" / "u_2.npy", step(2))
    # Another file with the values of u_0, which is still in place: the same data twice, stored.
    shutil.copy(moved / "in" / "u_0.npy", moved / "in" / "v_0.npy")
    ingest_inputs("db", "run", "velocity", ["in/u_0.npy", "in/u_1.npy", "in/u_2.npy", "in/v_0.npy"], dt=0.1,
                  quiet=True)

    ds = turbdb.open(moved / "db")["run"]
    assert ds.info.nt == 4
    for t, expected in zip(ds.info.times, [step(0), step(1), step(2), step(0)]):
        stored = ds.cutout("velocity", time=t).values
        np.testing.assert_array_equal(np.sort(stored, axis=None), np.sort(expected, axis=None))
    journal = json.loads((moved / "db" / "run" / "zarr.json").read_text())["attributes"]["turbdb"]["ingest"]
    stored_from = sorted(json.loads(key)[0] for key in journal["velocity"]["steps"])
    assert stored_from == sorted(str(moved / "in" / f) for f in ("u_0.npy", "u_1.npy", "u_2.npy", "v_0.npy"))
    # Run once more: nothing new.
    ingest_inputs("db", "run", "velocity", ["in/u_0.npy", "in/u_1.npy", "in/u_2.npy", "in/v_0.npy"], dt=0.1,
                  quiet=True)
    assert turbdb.open(moved / "db")["run"].info.nt == 4


def test_a_project_copied_elsewhere_and_ingested_again_stores_nothing_twice(tmp_path, monkeypatch):
    # cp -r gives the files new modification times: the copy's steps were all stored again.
    project = ingested_project(tmp_path, monkeypatch)
    shutil.copytree(project, tmp_path / "copy", copy_function=shutil.copy)  # new times, as cp -r
    shutil.rmtree(project)
    monkeypatch.chdir(tmp_path / "copy")
    ingest_inputs("db", "run", "velocity", ["in/u_0.npy", "in/u_1.npy"], dt=0.1, quiet=True)
    assert turbdb.open(tmp_path / "copy" / "db")["run"].info.nt == 2


def test_a_new_file_with_the_values_of_a_deleted_one_is_stored(tmp_path, monkeypatch):
    # The review: raw files deleted after their ingest to save space, then a new file
    # holding the same values (an all-zero step) was taken for one of them moved, and
    # skipped: every later step landed one time index early.
    monkeypatch.chdir(tmp_path)
    np.save("snap_000.npy", np.zeros_like(step(0)))
    ingest_inputs("db", "run", "velocity", ["snap_000.npy"], dt=0.1, quiet=True)
    os.remove("snap_000.npy")
    np.save("snap_001.npy", np.zeros_like(step(0)))
    ingest_inputs("db", "run", "velocity", ["snap_001.npy"], dt=0.1, quiet=True)
    assert turbdb.open(tmp_path / "db")["run"].info.nt == 2


def test_verify_notes_a_dataset_whose_metadata_names_it_otherwise(tmp_path):
    small_dataset(tmp_path / "db", "first")
    (tmp_path / "db" / "first").rename(tmp_path / "db" / "renamed")
    result = run("verify", tmp_path / "db")
    assert "renamed: note: its metadata names it 'first'" in result.stdout


def test_the_info_of_a_dataset_read_under_a_directory_name_has_that_name(tmp_path):
    ds = small_dataset(tmp_path / "db", "first")
    attrs = json.loads((ds.path / "zarr.json").read_text())["attributes"]["turbdb"]
    assert DatasetInfo.from_attrs(attrs, name="renamed").name == "renamed"
    assert DatasetInfo.from_attrs(attrs).name == "first"


def test_a_renamed_dataset_is_listed_by_the_name_that_opens_it(tmp_path):
    small_dataset(tmp_path / "db", "first")
    (tmp_path / "db" / "first").rename(tmp_path / "db" / "renamed")
    ds = turbdb.open(tmp_path / "db")["renamed"]
    assert (ds.info.name, ds.metadata.name) == ("renamed", "renamed")
    assert run("info", tmp_path / "db").stdout.startswith("dataset renamed")


def test_paths_beginning_with_a_tilde_are_in_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    small_dataset("~/data")
    assert (tmp_path / "home" / "data" / "flow" / "zarr.json").is_file()
    assert not (tmp_path / "~").exists()
    assert turbdb.open("~/data").datasets == ["flow"]
    assert turbdb.open("~/data/flow").datasets == ["flow"]
