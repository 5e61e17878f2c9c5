"""Outputs written to a full disk: the command ends with one line that says so and what to
do (exit 2), leaves no temporary beside the target and prints no traceback, whatever the
format (Zarr's chunk writes run on their own threads; numpy's .npy writer drops the errno)."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from turbdb.cli import main

from test_cli import db  # noqa: F401  (the CLI tests' two-step 16³ database)

TEMPORARY = ".turbdb-tmp-"
ADVICE = "No space left on device"
TRACEBACK_SIGNS = ("Traceback", "Task exception", "was never retrieved", "was destroyed but it is pending")


def assert_failed_cleanly(returncode: int, stderr: str, out: Path) -> None:
    assert returncode == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {ADVICE}") and "free space on that disk or write somewhere else" in lines[0]
    assert not any(sign in stderr for sign in TRACEBACK_SIGNS), stderr
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(TEMPORARY)] == []


def run_program(tmp_path: Path, script: str, *args) -> subprocess.CompletedProcess:
    """The ``turbdb`` program, with ``script`` run first; its stderr whole, to the exit
    (asyncio reports a task's lost exception as it is collected, after the command's line)."""
    driver = tmp_path / "driver.py"
    driver.write_text(script + "\nimport sys\nfrom turbdb.cli import main\nsys.argv = ['turbdb', *sys.argv[1:]]\nmain()\n")
    return subprocess.run([sys.executable, str(driver), *map(str, args)], capture_output=True, text=True, timeout=120)


# The disk fills at the third file of the store; the writes already under way finish later
# (as a full disk's do, each failing or not), after the failure was reported.
DISK_FILLS_AT_THIRD_FILE = """
import errno, os, threading, time
from zarr.storage import _local
put, lock, calls = _local._put, threading.Lock(), []
def full_disk_put(path, value, exclusive=False):
    with lock:
        calls.append(path)
        n = len(calls)
    if n == 3:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    time.sleep(0.3)
    return put(path, value, exclusive=exclusive)
_local._put = full_disk_put
"""


def test_a_zarr_cutout_on_a_full_disk_stops_its_writes_and_leaves_nothing(db, tmp_path):  # noqa: F811
    out = tmp_path / "out" / "c.zarr"
    out.parent.mkdir()
    result = run_program(tmp_path, DISK_FILLS_AT_THIRD_FILE, "cutout", db, "flow", "--field", "velocity",
                         "--ts", 0, "--te", 1, "--out", out)
    assert_failed_cleanly(result.returncode, result.stderr, out)


def short_write(fp, array, *args, **kwargs):
    """numpy's writer on a full disk: part of the file, then an OSError without an errno."""
    fp.write(b"\x93NUMPY" + bytes(100))
    raise OSError(f"{array.nbytes} requested and 106 written")


@pytest.mark.parametrize("command", ["cutout", "query"])
def test_an_npy_output_on_a_full_disk_says_so_and_names_its_path(db, tmp_path, monkeypatch, command):  # noqa: F811
    out = tmp_path / "out" / f"{command}.npy"
    out.parent.mkdir()
    if command == "cutout":
        args = ["cutout", db, "flow", "--field", "velocity", "--time", 0, "--out", out]
    else:
        points = tmp_path / "points.npy"
        np.save(points, np.random.default_rng(1).uniform(0, 6, (100, 3)))
        args = ["query", db, "flow", "--field", "velocity", "--time", 0, "--points", points, "--out", out]
    monkeypatch.setattr(np.lib.format, "write_array", short_write)
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert_failed_cleanly(result.exit_code, result.stderr, out)
    assert f"({out})" in result.stderr


def test_numpy_errors_of_other_kinds_keep_their_own_message():
    from turbdb.cli.group import os_error_message

    assert os_error_message(OSError("not a short write")) == "not a short write"
    assert os_error_message(OSError("786432 requested and 262112 written")) == \
        f"{ADVICE}: free space on that disk or write somewhere else"


@contextlib.contextmanager
def full_tmpfs(directory: Path, size: str) -> object:
    """A real small file system at ``directory`` (root only), unmounted afterwards."""
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=True)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounting a small tmpfs needs root")
@pytest.mark.parametrize("suffix", [".zarr", ".npy", ".nc", ".h5"])
def test_a_cutout_to_a_really_full_tmpfs_fails_cleanly(db, tmp_path, suffix):  # noqa: F811
    # 16³ × 3 components × 2 steps of float32 is 96 KiB: a 48 KiB disk cannot hold it. NetCDF
    # printed 80 lines of traceback and died of a segmentation fault (status 139); HDF5 named
    # its hidden temporary.
    with full_tmpfs(tmp_path / "full", "48k") as full:
        out = full / f"c{suffix}"
        result = subprocess.run([sys.executable, "-m", "turbdb.cli", "cutout", str(db), "flow", "--field", "velocity",
                                 "--ts", "0", "--te", "1", "--out", str(out)], capture_output=True, text=True,
                                timeout=120)
        assert_failed_cleanly(result.returncode, result.stderr, out)
        assert f"({out})" in result.stderr and list(full.iterdir()) == []


def test_a_zarr_export_that_fails_leaves_another_one_running_in_the_same_process_alone(db, tmp_path, monkeypatch):  # noqa: F811
    # The first fix cancelled every task zarr had started since the failing write began, and
    # replaced zarr's thread pool: an export running in another thread failed with a raw
    # CancelledError, and zarr's max_workers setting was lost.
    import threading
    import time

    import turbdb
    import xarray
    from turbdb.export import write
    from zarr.storage import _local

    put = _local._put

    def slow_or_full(path, value, exclusive=False):
        if "bad" in str(path) and path.name != ".zgroup":
            raise OSError(28, os.strerror(28))
        time.sleep(0.02)
        return put(path, value, exclusive=exclusive)

    monkeypatch.setattr(_local, "_put", slow_or_full)
    cut = turbdb.open(db)["flow"].cutout("velocity", time=0.0)
    outcomes = {}

    def export(name):
        try:
            write(cut, tmp_path / f"{name}.zarr")
            outcomes[name] = "written"
        except BaseException as e:  # a CancelledError is a BaseException
            outcomes[name] = type(e).__name__

    good = threading.Thread(target=export, args=("good",))
    good.start()
    time.sleep(0.05)
    export("bad")
    good.join(60)
    assert outcomes == {"good": "written", "bad": "OSError"}
    np.testing.assert_array_equal(xarray.open_zarr(tmp_path / "good.zarr")[cut.name].values, cut.values)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".zarr")) == ["good.zarr"]
