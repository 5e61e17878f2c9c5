"""Commands stopped while they work (Ctrl-C, SIGTERM): an output is whole or not there, an
earlier one at the same path survives, cleanup runs, and the program ends with one line."""

import dataclasses
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import turbdb
from turbdb.cli import main

TEMPORARY = ".turbdb-tmp-"


from test_cli import db  # noqa: E402,F401  (the CLI tests' two-step 16³ database)


def contents(*paths: Path) -> dict[str, bytes]:
    """Every byte of the files and directory trees at ``paths``, by path."""
    found = {}
    for path in paths:
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                found[str(file)] = file.read_bytes()
    return found


def temporaries(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob(f"{TEMPORARY}*")]


def interrupting(original):
    """``original``, which then raises KeyboardInterrupt as Ctrl-C would at that moment."""
    def call(*args, **kwargs):
        original(*args, **kwargs)
        raise KeyboardInterrupt
    return call


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("suffix", [".npy", ".nc", ".zarr", ".h5"])
def test_an_interrupted_cutout_leaves_the_earlier_output_as_it_was(db, tmp_path, monkeypatch, suffix):
    import xarray

    from turbdb import export

    out = tmp_path / "out" / f"box{suffix}"
    written = [out, out.with_suffix(".xmf")] if suffix == ".h5" else [out]
    assert invoke("cutout", db, "flow", "--field", "velocity", "--time", 0, "--out", out).exit_code == 0
    before = contents(*written)
    # Ctrl-C once the new values are written, before the command ends: they went in place
    # (a truncated .npy or CSV read without error; a Zarr store read NaN for missing chunks).
    if suffix == ".npy":
        monkeypatch.setattr(np, "save", interrupting(np.save))
    elif suffix == ".nc":
        monkeypatch.setattr(xarray.DataArray, "to_netcdf", interrupting(xarray.DataArray.to_netcdf))
    elif suffix == ".zarr":
        monkeypatch.setattr(xarray.Dataset, "to_zarr", interrupting(xarray.Dataset.to_zarr))
    else:  # the .h5 is written, its .xmf not yet
        monkeypatch.setattr(export, "xdmf_text", interrupting(export.xdmf_text))
    result = invoke("cutout", db, "flow", "--field", "velocity", "--time", 1, "--out", out)
    assert result.exit_code == 1 and "Aborted!" in result.output and "wrote" not in result.output
    assert contents(*written) == before and temporaries(tmp_path) == []
    monkeypatch.undo()
    # Uninterrupted, the new values replace the old (a Zarr store too), leaving nothing behind.
    assert invoke("cutout", db, "flow", "--field", "velocity", "--time", 1, "--out", out).exit_code == 0
    assert contents(*written) != before and temporaries(tmp_path) == []
    if suffix in (".npy", ".zarr"):
        values = np.load(out) if suffix == ".npy" else xarray.open_zarr(out)["velocity"].values
        np.testing.assert_array_equal(values, turbdb.open(db)["flow"].cutout("velocity", time=1).values)


def test_an_interrupted_query_or_track_leaves_the_earlier_files_as_they_were(db, tmp_path, monkeypatch):
    (tmp_path / "p.csv").write_text("0.1,0.2,0.3\n1,2,3\n")
    query = ("query", db, "flow", "--field", "velocity", "--points", tmp_path / "p.csv", "--out", tmp_path / "q.csv")
    track = ("track", db, "flow", "--points", 4, "--dt", 0.5, "--velocity", "--out", tmp_path / "t.npy", "--quiet")
    assert invoke(*query, "--time", 0).exit_code == 0
    assert invoke(*track, "--start", 0, "--end", 1).exit_code == 0
    before = contents(tmp_path / "q.csv", tmp_path / "t.npy", tmp_path / "t.velocity.npy")

    def half_then_interrupted(path, *args, **kwargs):  # Ctrl-C halfway through the rows
        Path(path).write_text("u_x,u_y,u_z\n0.5,")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savetxt", half_then_interrupted)
    assert invoke(*query, "--time", 1).exit_code == 1
    saved = []

    def second_interrupted(path, values):  # the positions written, the velocities not
        saved.append(path)
        if len(saved) == 2:
            raise KeyboardInterrupt
        Path(path).write_bytes(b"positions")

    monkeypatch.setattr(np, "save", second_interrupted)
    assert invoke(*track, "--start", 1, "--end", 0).exit_code == 1
    assert contents(tmp_path / "q.csv", tmp_path / "t.npy", tmp_path / "t.velocity.npy") == before
    assert temporaries(tmp_path) == []


def test_interrupted_statistics_leave_the_earlier_plot_and_data_as_they_were(db, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    rq = ("stats", "rq", db, "flow", "--points", 2000, "--out", tmp_path / "stats")
    assert invoke(*rq, "--time", 0).exit_code == 0
    before = contents(tmp_path / "stats")
    assert len(before) == 3

    def drawn_halfway(self, path, **kwargs):  # an interrupt left a 0-byte PNG
        Path(path).write_bytes(b"")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", drawn_halfway)
    assert invoke(*rq, "--time", 1).exit_code == 1
    assert contents(tmp_path / "stats") == before and temporaries(tmp_path) == []


def test_an_interrupted_trace_leaves_the_earlier_one_as_it_was(tmp_path, monkeypatch):
    from turbdb.workload import trace as traces

    query = traces.Query(0.0, 0, 0, "flow", "velocity", 0.0, "lag4", "field", "none", 3, 1, None, 0.1)
    path = tmp_path / "trace.jsonl"
    traces.write_trace(path, [query])
    before = path.read_bytes()

    def interrupted():
        yield dataclasses.replace(query, job=1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        traces.write_trace(path, interrupted())
    assert path.read_bytes() == before and temporaries(tmp_path) == []


def run_script(tmp_path: Path, script: str, *args) -> subprocess.CompletedProcess:
    """Runs the ``turbdb`` program with ``script`` run first (to stop it at a known moment)."""
    driver = tmp_path / "driver.py"
    driver.write_text(script + "\nimport sys\nfrom turbdb.cli import main\nsys.argv = ['turbdb', *sys.argv[1:]]\nmain()\n")
    return subprocess.run([sys.executable, str(driver), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_sigterm_runs_the_cleanup_ctrl_c_runs_and_exits_143_with_one_line(tmp_path):
    # SIGTERM while the first step is being stored: the program died at once (-15), leaving
    # an empty dataset with every time declared, which blocked the rerun and verified "ok".
    stopped = run_script(tmp_path, """
import os, signal, time
import turbdb.simulation_run as run
def store(*args):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)
run._store = store
""", "simulate", tmp_path / "sims", "--name", "s", "--grid", 16, "--steps", 3, "--kind", "synthetic", "--quiet")
    assert stopped.returncode == 143, stopped.stderr
    assert stopped.stderr.strip() == "Terminated (SIGTERM)."
    assert not (tmp_path / "sims" / "s").exists()
    again = subprocess.run([sys.executable, "-m", "turbdb.cli", "simulate", tmp_path / "sims", "--name", "s", "--grid",
                            "16", "--steps", "3", "--kind", "synthetic", "--quiet"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr


def test_a_rerun_over_an_interrupted_simulation_names_if_missing(tmp_path):
    import shutil

    simulate = ("simulate", tmp_path, "--name", "s", "--grid", 16, "--steps", 3, "--kind", "synthetic", "--quiet")
    assert invoke(*simulate).exit_code == 0
    for field in ("velocity", "pressure"):  # as if stopped after its first step
        for step in ("1", "2"):
            shutil.rmtree(tmp_path / "s" / field / "c" / step)
    refused = invoke(*simulate)
    assert refused.exit_code == 1
    assert "it holds 1 of its 3 steps (an interrupted run?): pass --if-missing to complete it, or --overwrite" \
        in refused.output
    assert invoke(*simulate, "--if-missing").exit_code == 0
    assert turbdb.open(tmp_path)["s"].info.steps_present() == [0, 1, 2]
    complete = invoke(*simulate)
    assert complete.exit_code == 1 and "--if-missing" not in complete.output and "--overwrite" in complete.output


def test_ctrl_c_while_a_zarr_cutout_is_written_ends_with_aborted_only(db, tmp_path):
    # Zarr's tasks, left running on its own thread, printed 68–294 lines of tracebacks at exit.
    result = run_script(tmp_path, """
import asyncio, os, signal
from zarr.codecs import _v2
encode = _v2.V2Codec._encode_single
async def interrupted(self, chunk, spec):
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.sleep(0.2)
    return await encode(self, chunk, spec)
_v2.V2Codec._encode_single = interrupted
""", "cutout", db, "flow", "--field", "velocity", "--ts", 0, "--te", 1, "--out", tmp_path / "c.zarr")
    assert result.returncode == 1 and result.stderr.strip() == "Aborted!", result.stderr
    assert not (tmp_path / "c.zarr").exists() and temporaries(tmp_path) == []


@pytest.mark.parametrize("command", ["cutout", "track"])
def test_ctrl_c_once_the_output_is_written_does_not_report_a_failure(db, tmp_path, command):
    # The output was complete, and the program still ended "Aborted!" or killed by SIGINT.
    args = (("cutout", db, "flow", "--field", "velocity", "--time", 0, "--out", tmp_path / "c.npy") if command == "cutout"
            else ("track", db, "flow", "--points", 4, "--start", 0, "--end", 1, "--dt", 0.5, "--out", tmp_path / "t.npy",
                  "--quiet"))
    result = run_script(tmp_path, """
import os, signal, time
import click
echo = click.echo
def echo_then_interrupted(message=None, *args, **kwargs):
    echo(message, *args, **kwargs)
    if "wrote" in str(message):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
click.echo = echo_then_interrupted
""", *args)
    assert result.returncode == 0 and "wrote" in result.stdout and result.stderr == "", result.stderr
    assert np.load(tmp_path / ("c.npy" if command == "cutout" else "t.npy")).size


def test_an_interrupted_replay_stops_its_client_threads_quietly(monkeypatch):
    # Ctrl-C, then the connection closed under the client threads: each printed a traceback
    # from its query, and another from closing its job.
    import importlib

    from turbdb.workload import trace as traces

    replaying = importlib.import_module("turbdb.workload.replay")  # the package names its function so
    asking = threading.Semaphore(0)
    closed = threading.Event()

    class Closing:
        """A server's dataset whose queries wait until the connection is closed, then fail
        as http_clients' do."""

        info = None

        def query(self, *args, **kwargs):
            asking.release()
            closed.wait(10)
            raise RuntimeError("the connection to the server was closed")

    class Declared:
        def close(self):
            if closed.is_set():
                raise RuntimeError("the connection to the server was closed")

    class Server:
        def __getitem__(self, name):
            return Closing()

        def job(self, steps):
            return Declared()

    monkeypatch.setattr(replaying, "draw_points", lambda q, info: np.zeros((q.count, 3)))
    queries = [traces.Query(0.0, job, index, "flow", "velocity", 0.0, "lag4", "field", "none", 3, 1, None, 0.1)
               for job in range(6) for index in range(2)]
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)

    def interrupt_once_all_ask():
        for _ in range(3):
            asking.acquire()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    # Ctrl-C as Python handles it (a test runner's worker may have its own handler).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_once_all_ask).start()
        with pytest.raises(KeyboardInterrupt):
            replaying.replay(Server(), queries, clients=3)
    finally:
        signal.signal(signal.SIGINT, previous)
    closed.set()  # as the command closes its connection on the way out
    for thread in threading.enumerate():
        if thread.name.startswith("replay-client-"):
            thread.join(10)
    assert failures == []


def test_an_interrupt_while_outputs_are_put_in_place_waits_until_all_are(tmp_path, monkeypatch):
    # An .h5 renamed into place, then Ctrl-C: its .xmf (or a Zarr store) stayed the old one.
    import os

    from turbdb.output_files import replacing

    h5, store = tmp_path / "c.h5", tmp_path / "c.zarr"
    h5.write_text("old")
    store.mkdir()
    (store / "old").write_text("old")
    rename = os.rename

    def rename_then_interrupted(source, target):
        rename(source, target)
        signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        monkeypatch.setattr(os, "rename", rename_then_interrupted)
        with pytest.raises(KeyboardInterrupt), replacing(h5, store) as (new_h5, new_store):
            new_h5.write_text("new")
            new_store.mkdir()
            (new_store / "new").write_text("new")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert h5.read_text() == "new" and [p.name for p in store.iterdir()] == ["new"]
    assert temporaries(tmp_path) == []
