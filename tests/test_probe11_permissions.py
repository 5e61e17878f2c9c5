"""Datasets shared between accounts (eleventh probe): a group member with umask 077 who
appended one step locked the group, the owner included, out of a shared dataset; what an
account may not read was reported as missing ("no datasets yet", "every shard of this step
is missing"), and what it may not write as "No such file or directory". The tests that act
as other accounts run as root (as CI does): each such account is a child process that drops
to its uid and groups after importing turbdb. Real files, grids of 8-16 nodes."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import turbdb

#: The accounts the tests act as: two members of a group sharing a database, and one outside it.
SHARED_GROUP, ALICE, BOB, OTHER = 64100, 64101, 64102, 64103

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as other accounts needs root (CI runs as root)")

#: Run as root, then as the account: the modules a command loads are imported first, while
#: they are readable (an interpreter under /root is not, to other accounts).
_CHILD = """
import json, mmap, os, sys  # mmap: numpy loads it on first use (np.load with mmap_mode)
import encodings.utf_8_sig  # points files are read with it
import numpy as np
import zarr  # verify reads the metadata as zarr does
from click.testing import CliRunner
import turbdb
import turbdb.ingest.pipeline, turbdb.simulation_run, turbdb.export  # export: xml.sax, for cutouts
from turbdb.cli import main

uid, gid, umask = (int(v) for v in sys.argv[1:4])
os.setgroups([int(g) for g in sys.argv[4].split(",") if g])
os.setgid(gid)
os.setuid(uid)
os.umask(umask)


def cli(*args):
    result = CliRunner().invoke(main, list(args), terminal_width=400)
    crash = result.exception if not isinstance(result.exception, SystemExit) else None
    return [result.exit_code, result.output + (f"crashed: {crash!r}" if crash else "")]


def error_of(call):
    try:
        call()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


results = {}
exec(sys.argv[5])
print(json.dumps(results))
"""


def as_account(where: Path, uid: int, code: str, *, umask: int = 0o022, groups: tuple[int, ...] = ()) -> dict:
    """Runs ``code`` (which fills ``results``; ``cli``, ``error_of``, ``turbdb`` and ``np`` at
    hand) as account ``uid`` (its own group, and ``groups``) in ``where``; returns ``results``."""
    done = subprocess.run([sys.executable, "-c", _CHILD, str(uid), str(uid), str(umask), ",".join(map(str, groups)),
                           code], cwd=where, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(where), "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture()
def shared():
    """A directory every account may enter (pytest's own temporary directories are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="turbdb-permissions-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def made(db: Path, name: str, *, umask: int, steps: int = 2, grid: int = 8) -> turbdb.Dataset:
    """A dataset of ``steps`` steps made under ``umask``, its lock files left for the next writer to make."""
    previous = os.umask(umask)
    try:
        ds = turbdb.create_dataset(db, name, grid=(grid,) * 3, times=[0.01 * t for t in range(steps)], atom=4,
                                   partition=4)
        for t in range(steps):
            ds.write("velocity", t, np.full((grid,) * 3 + (3,), float(t), np.float32))
            ds.write("pressure", t, np.full((grid,) * 3, float(t), np.float32))
    finally:
        os.umask(previous)
    for lock in (".turbdb.lock", ".turbdb-writer.lock"):
        (ds.path / lock).unlink(missing_ok=True)
    return ds


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_writer_with_a_narrow_umask_keeps_the_permissions_a_dataset_has(tmp_path):
    ds = made(tmp_path, "s", umask=0o002)
    previous = os.umask(0o077)
    try:
        ds.append_times(0.02 + 0.01 * np.arange(1100))  # into a second chunk of the time coordinate
        ds.write("velocity", 2, np.ones((8, 8, 8, 3), np.float32))  # a new step
        ds.write("velocity", 0, np.ones((8, 8, 8, 3), np.float32))  # a step written again
        ds.add_field("temperature", 1)
        ds.write("temperature", 0, np.ones((8, 8, 8), np.float32))
        fresh = turbdb.create_dataset(tmp_path, "mine", grid=(8, 8, 8), times=[0.0], atom=4, partition=4)
    finally:
        os.umask(previous)
    rewritten = [ds.path / "zarr.json", ds.path / "velocity" / "zarr.json", ds.path / "time" / "zarr.json",
                 ds.path / "time" / "c" / "0"]
    added = [ds.path / "time" / "c" / "1", ds.path / ".turbdb.lock", ds.path / ".turbdb-writer.lock",
             ds.path / "temperature" / "zarr.json"]
    shards = [p for step in ("velocity/c/0", "velocity/c/2", "temperature/c/0") for p in (ds.path / step).rglob("*")]
    assert {str(p.relative_to(ds.path)): oct(mode(p)) for p in rewritten + added + shards if p.is_file()} == {
        str(p.relative_to(ds.path)): "0o664" for p in rewritten + added + shards if p.is_file()}
    directories = [ds.path / "temperature", ds.path / "temperature" / "c"] + [p for p in shards if p.is_dir()]
    assert {oct(mode(p)) for p in directories} == {"0o775"}
    # A new dataset is still made with the umask (docs/reliability.md row 12).
    assert {oct(mode(p)) for p in fresh.path.rglob("*") if p.is_file()} == {"0o600"}


@as_root
def test_a_group_members_append_with_umask_077_leaves_a_shared_dataset_readable_to_the_group(shared):
    os.chown(shared, 0, SHARED_GROUP)
    shared.chmod(0o2775)  # a group's directory: what is made in it is the group's
    made(shared / "db", "s", umask=0o002, grid=16)
    np.save(shared / "u.npy", np.full((16, 16, 16, 3), 7.0, np.float32))
    bob = as_account(shared, BOB, umask=0o077, groups=(SHARED_GROUP,), code="""
results["ingest"] = cli("ingest", "db", "u.npy", "--name", "s", "--field", "velocity", "--dt", "0.01", "--quiet")
ds = turbdb.open("db")["s"]
ds.add_field("temperature", 1)
ds.write("temperature", 2, np.full((16, 16, 16), 5.0, np.float32))
""")
    assert bob["ingest"][0] == 0, bob["ingest"][1]
    closed = [str(p.relative_to(shared)) for p in (shared / "db").rglob("*")
              if mode(p) & (0o050 if p.is_dir() else 0o040) != (0o050 if p.is_dir() else 0o040)
              or p.stat().st_gid != SHARED_GROUP]
    assert closed == []
    alice = as_account(shared, ALICE, groups=(SHARED_GROUP,), code="""
results["info"] = cli("info", "db")
ds = turbdb.open("db")["s"]
results["values"] = [ds.query(f, [[0.1, 0.2, 0.3]], time=0.02, method="none").ravel().tolist()
                     for f in ("velocity", "temperature")]
results["append"] = error_of(lambda: ds.append_times([0.03]))
""")
    assert alice["info"][0] == 0, alice["info"][1]
    assert "3/3 steps written" in alice["info"][1] and "temperature" in alice["info"][1]
    assert alice["values"] == [[7.0, 7.0, 7.0], [5.0]]
    assert alice["append"] is None  # the lock files bob made are the group's too


@as_root
def test_metadata_an_account_may_not_read_is_named_unreadable_never_absent(shared):
    made(shared / "db", "a", umask=0o022)
    (shared / "db" / "a" / "zarr.json").chmod(0o600)
    other = as_account(shared, OTHER, code="""
results["info"] = cli("info", "db")
results["verify"] = cli("verify", "db")
results["listed"] = turbdb.open("db").datasets
results["open"] = error_of(lambda: turbdb.open("db")["a"])
""")
    for command in ("info", "verify"):
        status, output = other[command]
        assert status == 1, output
        assert "permission denied" in output and str(shared / "db" / "a" / "zarr.json") in output, output
        assert "no datasets" not in output and "nothing was checked" not in output, output
    assert other["listed"] == ["a"]
    assert other["open"].startswith("StorageError: cannot read") and "permission denied" in other["open"]
    assert "available" not in other["open"]


@as_root
def test_verify_and_info_name_a_directory_they_may_not_read_as_unreadable_never_lost(shared):
    ds = made(shared / "db", "a", umask=0o022, steps=3)
    (ds.path / "velocity" / "c" / "1").chmod(0o700)  # a whole step out of reach
    (ds.path / "velocity" / "c" / "2" / "0").chmod(0o700)  # part of one
    other = as_account(shared, OTHER, code="""
results["verify"] = cli("verify", "db")
""")
    (ds.path / "pressure" / "c").chmod(0o700)  # every step of a field
    other.update(as_account(shared, OTHER, code="""
results["info"] = cli("info", "db")
results["verify field"] = cli("verify", "db")
"""))
    status, output = other["verify"]
    assert status == 1
    assert "missing" not in output and "re-ingest" not in output, output
    assert "velocity/c/1 (time step 1): cannot be read by account" in output, output
    assert "velocity/c/2/0 (time step 2): cannot be read by account" in output, output
    assert "2 part(s) could not be read (permission denied) and were not checked" in output, output
    status, output = other["verify field"]
    assert "pressure/c: cannot be read" in output and "missing" not in output, output
    status, output = other["info"]
    assert status == 1
    assert "a: UNREADABLE: cannot read dataset 'a'" in output and "permission denied" in output, output
    assert "you can write" not in output, output


@as_root
def test_writing_a_dataset_one_may_not_write_says_permission_denied_naming_it(shared):
    ds = made(shared / "db", "a", umask=0o022)
    np.save(shared / "u.npy", np.zeros((8, 8, 8, 3), np.float32))
    other = as_account(shared, OTHER, code="""
results["ingest"] = cli("ingest", "db", "u.npy", "--name", "a", "--field", "velocity", "--dt", "0.01", "--quiet")
ds = turbdb.open("db")["a"]
results["write"] = error_of(lambda: ds.write("velocity", 0, np.zeros((8, 8, 8, 3), np.float32)))
results["append_times"] = error_of(lambda: ds.append_times([1.0]))
""")
    assert other["ingest"][0] == 1
    for what in ("ingest", "write", "append_times"):
        said = other[what][1] if what == "ingest" else other[what]
        assert f"cannot write dataset {ds.path}: permission denied" in said, said
        assert "No such file" not in said, said


def test_the_result_size_limit_is_read_by_the_name_it_is_set_by():
    assert "get_max_result_bytes" in turbdb.__all__
    before = turbdb.get_max_result_bytes()
    try:
        turbdb.set_max_result_bytes(12345)
        assert turbdb.get_max_result_bytes() == turbdb.max_result_bytes() == 12345
    finally:
        turbdb.set_max_result_bytes(None)
    assert turbdb.get_max_result_bytes() == before


@as_root
def test_an_output_in_a_folder_one_may_not_write_is_refused_before_the_work_naming_it(shared):
    turbdb.create_dataset(shared / "db", "a", grid=(8, 8, 8), times=[0.0], fields={"p": 1}).write(
        "p", 0, np.ones((8, 8, 8)))
    (shared / "points.csv").write_text("1,2,3\n")
    locked = shared / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    results = as_account(shared, OTHER, f"""
results["query"] = cli("query", "db", "a", "--field", "p", "--points", "points.csv", "--time", "0",
                       "--out", "locked/q.csv")
results["cutout"] = cli("cutout", "db", "a", "--field", "p", "--time", "0", "--out", "locked/c.nc")
""")
    for command, (status, output) in results.items():
        assert status != 0 and "locked" in output and ".turbdb-tmp" not in output, (command, output)
        assert "permission denied" in output.lower(), (command, output)
        assert "wrote" not in output, (command, output)
