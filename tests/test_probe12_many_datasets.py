"""A database of many datasets, and directories in it that are not plain datasets (twelfth
probe): a server's first listing of N datasets read N² + N zarr.json files on its event loop
(20-47 s at 300-500, /healthz frozen); a dataset deleted while open stayed mapped for good;
one directory this account may not enter broke info, verify and listing for the whole
database; a dataset directory renamed to what is no dataset name was listed by the server
and then refused as unknown; a half-copied dataset was left out of info without a word.
Real files: one tiny dataset written, the others copies of its directory (as `cp -a`)."""

import os
import pathlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import turbdb
from turbdb import file_snapshots
from turbdb.exceptions import UnknownNameError
from turbdb.service.backend import Backend
from turbdb.service.metrics import Metrics
from turbdb.service.tokens import Tokens

MANY = 200

#: Runs a command as this account, unable to enter what its permission bits keep it out of:
#: as root, without the capabilities that pass over them (as the probe ran it).
AS_READER = (["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]
             if os.geteuid() == 0 else [])
needs_reader = pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                                  reason="as root, keeping a directory out of reach needs setpriv")


def copies_of_one(root: Path, count: int) -> list[str]:
    """A database of ``count`` tiny datasets: one made and written, the others copies of
    its directory under other names, as `cp -a` makes them."""
    first = "case_000"
    ds = turbdb.create_dataset(root, first, grid=(8, 8, 8), times=[0.0], fields={"velocity": 3}, atom=4, partition=8)
    ds.write("velocity", 0, np.ones((8, 8, 8, 3), np.float32))
    names = [first]
    for i in range(1, count):
        names.append(f"case_{i:03d}")
        shutil.copytree(root / first, root / names[-1], symlinks=True)
    return names


def out_of_reach(directory: Path) -> None:
    """Makes ``directory`` one this account (run through :data:`AS_READER`) may not enter."""
    directory.chmod(0)


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("many") / "db"
    copies_of_one(root, MANY)
    time.sleep(file_snapshots.SETTLED_SECONDS)  # a zarr.json changed since is read again at every look
    return root


class ZarrJsonReads:
    """Counts the zarr.json files read (listing reads them with read_json, a dataset's
    opening through file_snapshots)."""

    def __init__(self, monkeypatch):
        self.count = 0
        read_path, read_file = pathlib.Path.read_bytes, file_snapshots.read_bytes

        def path_read(path):
            self.count += path.name == "zarr.json"
            return read_path(path)

        def file_read(path):
            self.count += os.path.basename(path) == "zarr.json"
            return read_file(path)

        monkeypatch.setattr(pathlib.Path, "read_bytes", path_read)
        monkeypatch.setattr(file_snapshots, "read_bytes", file_read)


def test_a_copy_of_a_dataset_under_another_name_is_a_valid_dataset(many):
    db = turbdb.open(many)
    assert len(db.datasets) == MANY
    copy = db[f"case_{MANY - 1:03d}"]
    assert copy.name == f"case_{MANY - 1:03d}"
    assert copy.query("velocity", [[0.1, 0.2, 0.3]], time=0.0, method="none").tolist() == [[1.0, 1.0, 1.0]]


def test_listing_many_datasets_reads_each_ones_metadata_once_and_a_look_up_only_its_own(many, monkeypatch):
    reads = ZarrJsonReads(monkeypatch)
    backend = Backend(many, Tokens(), Metrics(), workers=2, max_points_in_flight=10**6, cutout_chunk_bytes=1 << 20,
                      queue_timeout=60)
    reads.count = 0
    # What GET /v1/datasets does: every dataset's metadata (it read N² + N files).
    listed = [backend.dataset(name).metadata for name in backend.names()]
    assert len(listed) == MANY
    assert reads.count <= 2 * MANY, f"{reads.count} zarr.json reads to list {MANY} datasets"
    reads.count = 0
    assert len(backend.names()) == MANY
    assert reads.count == 0  # listed again: a stat each, nothing read

    fresh = turbdb.open(many)
    reads.count = 0
    assert fresh["case_150"].metadata.grid == (8, 8, 8)
    assert reads.count <= 1, f"{reads.count} zarr.json reads to open one dataset of {MANY}"


def test_an_unknown_name_lists_the_first_few_datasets_and_how_many(many):
    with pytest.raises(UnknownNameError) as refused:
        turbdb.open(many)["nope"]
    message = str(refused.value)
    assert "case_000, case_001" in message and f"and {MANY - 20} more ({MANY} in all)" in message
    assert f"case_{MANY - 1:03d}" not in message and len(message) < 600


def _deleted_mappings(under: Path) -> list[str]:
    return [line for line in Path("/proc/self/maps").read_text().splitlines()
            if str(under) in line and "(deleted)" in line]


def _mappings(of: Path) -> list[str]:
    return [line for line in Path("/proc/self/maps").read_text().splitlines() if str(of) + "/" in line]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's mappings from /proc")
def test_a_dataset_deleted_or_replaced_while_open_is_let_go_with_its_mappings(tmp_path):
    db_path = tmp_path / "db"
    copies_of_one(db_path, 3)
    db = turbdb.open(db_path)
    for name in ("case_000", "case_001", "case_002"):
        db[name].query("velocity", [[0.1, 0.2, 0.3]], time=0.0, method="none")  # maps its shard
    assert _mappings(db_path / "case_001")

    shutil.rmtree(db_path / "case_001")
    assert _deleted_mappings(db_path / "case_001")  # still mapped, the files' space not freed
    with pytest.raises(UnknownNameError):
        db["case_001"]
    assert not _deleted_mappings(db_path / "case_001")

    # Replaced by another directory under the same name: the old one's mappings go.
    shutil.rmtree(db_path / "case_002")
    shutil.copytree(db_path / "case_000", db_path / "case_002")
    assert db["case_002"].query("velocity", [[0.1, 0.2, 0.3]], time=0.0, method="none").tolist() == [[1.0, 1.0, 1.0]]
    assert not _deleted_mappings(db_path / "case_002")

    # Renamed: mapped again under its new name; listing lets go of the old one.
    os.rename(db_path / "case_000", db_path / "renamed")
    db["renamed"].query("velocity", [[0.1, 0.2, 0.3]], time=0.0, method="none")
    assert len(_mappings(db_path / "renamed")) == 2
    assert "case_000" not in db.datasets
    assert len(_mappings(db_path / "renamed")) == 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AS_READER, sys.executable, "-m", "turbdb.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "400"})


@needs_reader
def test_a_dataset_directory_this_account_may_not_enter_is_named_and_the_rest_still_read(tmp_path):
    db = tmp_path / "db"
    copies_of_one(db, 3)
    out_of_reach(db / "case_001")
    try:
        listed = subprocess.run([*AS_READER, sys.executable, "-c", "import sys, turbdb; print(turbdb.open(sys.argv[1]).datasets)",
                                 str(db)], capture_output=True, text=True, timeout=60)
        info, verify = _cli("info", db), _cli("verify", db)
    finally:
        (db / "case_001").chmod(0o755)
    assert listed.stdout.strip() == "['case_000', 'case_001', 'case_002']", listed.stderr
    for result in (info, verify):
        output = result.stdout + result.stderr
        assert result.returncode == 1, output
        assert "Traceback" not in output and "use one you can write" not in output
        assert "case_001: " in output and "permission denied" in output and "ask its owner" in output
    assert "dataset case_000" in info.stdout and "dataset case_002" in info.stdout
    assert "case_002/velocity: 1 shards" in verify.stdout


def test_a_dataset_directory_renamed_to_no_dataset_name_is_refused_saying_rename_it(tmp_path):
    db_path = tmp_path / "db"
    copies_of_one(db_path, 2)
    for odd in ("run 2", "café", "L" * 100):
        shutil.copytree(db_path / "case_000", db_path / odd)
    db = turbdb.open(db_path)
    assert db.datasets == ["case_000", "case_001"]
    assert db.listing().misnamed == ("L" * 100, "café", "run 2")
    for odd in ("run 2", "café"):
        with pytest.raises(UnknownNameError, match=f"directory name '{odd}' is not a valid dataset name .*: rename "
                                                   "it, e.g. to '(run_2|cafe)'"):
            db[odd]
        assert odd not in db
    with pytest.raises(UnknownNameError) as refused:
        db["nope"]
    assert "café" not in str(refused.value)
    info = _cli("info", db_path)
    assert info.returncode == 1
    assert "café: MISNAMED: directory name 'café' is not a valid dataset name" in info.stdout
    assert "run 2: MISNAMED" in info.stdout and "dataset case_001" in info.stdout
    assert "misnamed: directory name 'run 2'" in _cli("verify", db_path).stdout


def test_info_names_a_half_copied_dataset_as_damaged_and_not_a_stray_folder(tmp_path):
    db_path = tmp_path / "db"
    copies_of_one(db_path, 1)
    shutil.copytree(db_path / "case_000", db_path / "halfcopy")
    (db_path / "halfcopy" / "zarr.json").unlink()  # a copy that stopped before the dataset's own metadata
    (db_path / "notes").mkdir()
    (db_path / "notes" / "todo.txt").write_text("plots\n")
    (db_path / "empty").mkdir()
    info = _cli("info", db_path)
    assert info.returncode == 1
    assert "halfcopy: DAMAGED: it holds field arrays but no zarr.json" in info.stdout
    assert "notes" not in info.stdout and "empty" not in info.stdout
    assert "dataset case_000" in info.stdout


def test_a_lone_dataset_opened_at_its_directory_follows_the_same_naming_rule(tmp_path):
    db_path = tmp_path / "db"
    copies_of_one(db_path, 1)
    shutil.copytree(db_path / "case_000", db_path / "run 2")
    lone = turbdb.open(db_path / "run 2")
    assert lone.datasets == []
    with pytest.raises(UnknownNameError, match="rename it"):
        lone["run 2"]
    assert turbdb.open(db_path / "case_000").datasets == ["case_000"]
