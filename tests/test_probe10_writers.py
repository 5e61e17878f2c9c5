"""Writers and readers at once (tenth probe): a rewrite killed halfway, verify while a
dataset grows, a dataset replaced under a server, a replacement killed halfway, and
Python writes while another process holds the writer lock."""

import asyncio
import signal
import subprocess
import sys
import textwrap

import httpx
import numpy as np
import pytest

import turbdb
from turbdb.dataset import Dataset

GRID = 16


def flat(value):
    return np.full((GRID, GRID, GRID, 3), value, np.float32)


def small(db, name="a", times=(0.0, 1.0)):
    ds = turbdb.create_dataset(db, name, grid=(GRID,) * 3, times=list(times), fields={"velocity": 3}, atom=4,
                               partition=8)
    ds.write("velocity", 0, flat(1.0))
    return ds


def python(script, check=True):
    """Runs ``script`` in another process (the writer that is killed, or holds the lock)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def cli(*args, check=True):
    return python(f"import sys; from turbdb.cli import main; sys.argv = ['turbdb', *{list(map(str, args))!r}]; main()",
                  check=check)


def problems(ds, field="velocity"):
    return [message for _, _, message in ds.verify()[field]["problems"]]


# D2: a rewrite killed after its shards changed, before it said so.
KILLED_REWRITE = """
    import os, signal, numpy as np, turbdb
    from turbdb.dataset import Dataset

    opened = Dataset.field_store

    class DiesAfterWriting:  # SIGKILL once the shards are written, before anything after
        def __init__(self, store):
            self.store = store
        def write_step(self, *args):
            self.store.write_step(*args)
            os.kill(os.getpid(), signal.SIGKILL)
        def __getattr__(self, name):
            return getattr(self.store, name)

    Dataset.field_store = lambda self, field: DiesAfterWriting(opened(self, field))
    turbdb.open({db!r})["a"].write("velocity", 0, np.full(({n}, {n}, {n}, 3), 2.0, np.float32))
"""


def test_a_rewrite_killed_halfway_is_read_anew_and_named_by_verify(tmp_path):
    ds = small(tmp_path / "db")
    reader = turbdb.open(tmp_path / "db")["a"]
    assert float(reader.cutout("velocity", time=0).values.max()) == 1.0  # its shards are open now

    killed = python(KILLED_REWRITE.format(db=str(tmp_path / "db"), n=GRID), check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    # Announced before the shards changed: an open dataset drops what it cached at once.
    assert np.unique(reader.cutout("velocity", time=0).values).tolist() == [2.0]
    found = problems(turbdb.open(tmp_path / "db")["a"])
    assert len(found) == 1 and "the rewrite of step 0 of velocity was interrupted" in found[0], found
    assert "write it again" in found[0]
    verify = cli("verify", tmp_path / "db", check=False)
    assert verify.returncode == 1 and "was interrupted" in verify.stdout, verify.stdout

    ds.write("velocity", 0, flat(3.0))  # written again, whole: no longer a problem
    assert problems(turbdb.open(tmp_path / "db")["a"]) == []


def test_a_first_write_costs_no_metadata_update_and_a_rewrite_two(tmp_path, monkeypatch):
    ds = small(tmp_path / "db")
    updates = []
    update = Dataset.update_attrs
    monkeypatch.setattr(Dataset, "update_attrs", lambda self, change: (updates.append(1), update(self, change)))
    ds.write("velocity", 1, flat(1.0))
    assert updates == []
    ds.write("velocity", 1, flat(2.0))
    assert len(updates) == 2  # one before the shards, one after
    assert problems(ds) == []


def test_verify_names_a_temporary_a_killed_write_left(tmp_path):
    ds = small(tmp_path / "db")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    left = ds.path / "velocity" / "c" / "0" / "0" / "0" / "0" / f".turbdb-tmp-0-{gone.pid}"
    left.write_bytes(b"half a shard")
    running = left.with_name(f".turbdb-tmp-0-{__import__('os').getpid()}")  # a write under way: no problem
    running.write_bytes(b"")
    found = ds.verify()["velocity"]["problems"]
    assert [(path, t) for path, t, _ in found] == [(f"velocity/c/0/0/0/0/{left.name}", 0)], found
    assert f"process {gone.pid} is gone" in found[0][2] and "delete it" in found[0][2]


# D4: verify while steps are appended.
def test_verify_takes_a_dataset_that_grew_during_its_scan_for_whole(tmp_path):
    ds = small(tmp_path / "db")
    scanning = turbdb.open(tmp_path / "db")["a"]
    opened = scanning.field_store

    class GrowsWhileScanned:  # another writer appends a time while verify reads the shards
        def __init__(self, store):
            self.store = store

        def verify(self, nt):
            ds.append_times([2.0])
            return self.store.verify(nt)

    scanning.field_store = lambda field: GrowsWhileScanned(opened(field))
    assert [message for _, _, message in scanning.verify()["velocity"]["problems"]] == []
    assert turbdb.open(tmp_path / "db")["a"].metadata.nt == 3


# D5: a dataset replaced between the look-up and the read.
def test_a_dataset_whose_metadata_vanished_after_it_was_found_is_an_unknown_name(tmp_path, monkeypatch):
    from turbdb.service import backend
    from turbdb.service.app import create_app

    small(tmp_path / "db")
    ds = turbdb.open(tmp_path / "db")["a"]
    app = create_app(tmp_path / "db")

    async def ask():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            query = {"params": {"field": "velocity", "time": 0, "method": "none"}, "json": {"points": [[0.5] * 3]}}
            first = await client.post("/v1/datasets/a/query", **query)
            # Replaced now (create_dataset(overwrite=True), rm -r + cp -r): the metadata is
            # gone after the server found the dataset on disk.
            (tmp_path / "db" / "a" / "zarr.json").rename(tmp_path / "replaced.json")
            monkeypatch.setattr(backend, "_still_on_disk", lambda dataset: True)
            return first, await client.post("/v1/datasets/a/query", **query)

    first, second = asyncio.run(ask())
    assert first.status_code == 200
    assert (second.status_code, second.json()["error"]) == (404, "UnknownNameError"), second.text
    with pytest.raises(turbdb.UnknownNameError, match="no longer in"):
        ds.metadata


# D6: replacing a dataset, killed halfway.
KILLED_REPLACEMENT = """
    import os, shutil, signal
    from pathlib import Path
    from turbdb.simulation_run import run_simulation

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    target = Path({db!r}) / "s"
    if {where!r} == "deleting the old":
        shutil.rmtree = die
    else:  # between moving the old one aside and the new one into place
        rename = os.rename
        os.rename = lambda src, dst: die() if Path(dst) == target else rename(src, dst)
    run_simulation(Path({db!r}), "s", grid=16, steps=2, kind="synthetic", overwrite=True, quiet=True)
"""


@pytest.mark.parametrize("where", ["deleting the old", "renaming the new into place"])
def test_an_overwrite_killed_halfway_leaves_a_dataset_or_none_and_if_missing_completes_it(tmp_path, where):
    db = tmp_path / "db"
    cli("simulate", db, "--name", "s", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--quiet")
    killed = python(KILLED_REPLACEMENT.format(db=str(db), where=where), check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    listed = turbdb.open(db).datasets
    assert listed == (["s"] if where == "deleting the old" else []), listed  # never a hidden leftover
    cli("simulate", db, "--name", "s", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--if-missing", "--quiet")
    assert turbdb.open(db)["s"].info.steps_present() == [0, 1]
    assert sorted(p.name for p in db.iterdir()) == ["s", "zarr.json"]  # the leftovers swept
    assert cli("verify", db).returncode == 0


HOLDS_THE_LOCK = """
    import sys, turbdb
    with turbdb.open({path!r})["{name}"].writer_lock():
        print("locked", flush=True)
        sys.stdin.readline()
"""


def holding_the_writer_lock(path, name):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDS_THE_LOCK.format(path=str(path), name=name))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_simulate_overwrite_refused_by_a_writer_names_it_and_says_what_overwrite_does(tmp_path):
    db = tmp_path / "db"
    cli("simulate", db, "--name", "s", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--quiet")
    holder = holding_the_writer_lock(db, "s")
    try:
        busy = cli("simulate", db, "--name", "s", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--overwrite",
                   check=False)
    finally:
        holder.communicate("\n", timeout=30)
    assert busy.returncode != 0
    assert f"another process is writing dataset 's' (process {holder.pid}:" in busy.stderr, busy.stderr
    assert "run this again to replace it" in busy.stderr and "skipped" not in busy.stderr


# D7: Python writes while another process holds the writer lock.
def test_python_writes_are_refused_while_another_process_holds_the_writer_lock(tmp_path):
    ds = small(tmp_path / "db")
    holder = holding_the_writer_lock(tmp_path / "db", "a")
    try:
        for write in (lambda: ds.write("velocity", 0, flat(0.0)), lambda: ds.write("velocity", 1, flat(0.0)),
                      lambda: ds.append_times([2.0]), lambda: ds.add_field("pressure", 1)):
            with pytest.raises(turbdb.DatasetBusyError, match=f"another process is writing dataset 'a' "
                                                              rf"\(process {holder.pid}:"):
                write()
    finally:
        holder.communicate("\n", timeout=30)
    after = turbdb.open(tmp_path / "db")["a"].info
    assert (after.nt, list(after.fields), after.fields["velocity"].steps_present) == (2, ["velocity"], (0,))
    assert float(ds.cutout("velocity", time=0).values.min()) == 1.0
    ds.write("velocity", 1, flat(1.0))  # once it is let go, the write goes through


def test_threads_of_one_process_write_steps_at_once_and_under_its_held_lock(tmp_path):
    # The lock is the process's: threads writing separate steps (a thread pool, Dask's
    # threaded scheduler) refused each other, naming their own process as "another".
    import concurrent.futures

    ds = turbdb.create_dataset(tmp_path, "a", grid=(8, 8, 8), times=np.arange(6) * 0.1, fields={"p": 1})
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda t: ds.write("p", t, np.full((8, 8, 8), float(t))), range(6)))
    assert ds.info.steps_present("p") == list(range(6))
    with ds.writer_lock(), concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(ds.write, "p", 0, np.full((8, 8, 8), 9.0)).result()
    np.testing.assert_array_equal(ds.cutout("p", time=0.0).values, 9.0)


def test_float64_values_that_float32_holds_exactly_are_not_warned_about():
    from turbdb.dataset import float32_precision_lost

    upcast = (101325 + np.arange(64) / 128).astype(np.float64)  # float32 output saved as float64
    assert float32_precision_lost(upcast) is None
    assert float32_precision_lost(101325 + 1e-3 * np.sin(np.arange(64.0))) is not None
