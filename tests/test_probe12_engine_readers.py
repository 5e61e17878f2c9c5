"""A dataset created again over itself under a node engine (twelfth probe): the engine kept
every old field's reader, and with it the mappings of its deleted shard files — 20 more per
re-creation of 10 fields × 2 steps, and the memory they hold, for the life of the process
(a server recreating a nightly dataset grew without bound). The engine now lets go of a
field's reader once a field made again in its directory is read, and what it remembers of
each field's rewrites holds one entry per directory."""

import shutil
from pathlib import Path

import numpy as np
import pytest

import turbdb
from turbdb import rewrites

FIELDS = 5
TIMES = [0.0, 0.1]
ROUNDS = 10
POINT = [[0.3, 0.2, 0.1]]


def make(db_path, version):
    """The dataset ``nightly`` created again, every step of every field holding ``version``."""
    ds = turbdb.create_dataset(db_path, "nightly", grid=(16, 16, 16), times=TIMES,
                               fields={f"f{j}": 3 for j in range(FIELDS)}, overwrite=True)
    for j in range(FIELDS):
        for t in range(len(TIMES)):
            ds.write(f"f{j}", t, np.full((16, 16, 16, 3), float(version), np.float32))


def deleted_mappings(under: Path) -> int:
    """Files under ``under`` deleted from disk and still mapped by this process."""
    maps = Path("/proc/self/maps").read_text().splitlines()
    return sum(str(under) in line and line.endswith("(deleted)") for line in maps)


def ask_everything(db, version):
    """Queries every field at every step, each answer checked against ``version``."""
    ds = db["nightly"]
    for j in range(FIELDS):
        for time in TIMES:
            values = np.asarray(ds.query(f"f{j}", POINT, time=time, method="lag4"))
            assert values == pytest.approx(version), (j, time, values)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's mappings from /proc")
@pytest.mark.parametrize("scheduler", ["jaws", "noshare"])
def test_a_dataset_created_again_under_an_engine_leaves_no_deleted_shard_mapped(tmp_path, scheduler):
    db_path = tmp_path / "db"
    make(db_path, 0)
    with turbdb.open(db_path, scheduler=scheduler) as db:
        ask_everything(db, 0)
        counts = []
        for version in range(1, ROUNDS + 1):
            make(db_path, version)
            ask_everything(db, version)
            counts.append(deleted_mappings(db_path))
        # Without the fix: FIELDS × 2 more at every re-creation, none ever let go.
        assert max(counts) == 0, counts


def test_what_an_engine_saw_of_rewrites_holds_one_entry_per_field_directory(tmp_path):
    db_path = tmp_path / "db"
    make(db_path, 0)
    with turbdb.open(db_path, scheduler="jaws") as db:
        for version in range(1, 6):
            make(db_path, version)
            ask_everything(db, version)
            # A step rewritten after the re-creation is still dropped from the engine's cache.
            db["nightly"].write("f0", 0, np.full((16, 16, 16, 3), version + 0.5, np.float32))
            values = np.asarray(db["nightly"].query("f0", POINT, time=0.0, method="lag4"))
            assert values == pytest.approx(version + 0.5)
        seen = rewrites._ENGINE_SEEN[db.engine]
        assert sorted(seen) == sorted(str(db_path / "nightly" / f"f{j}") for j in range(FIELDS)), seen


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's mappings from /proc")
@pytest.mark.parametrize("scheduler", ["jaws", "noshare"])
def test_a_dataset_deleted_under_an_engine_is_let_go_once_found_gone(tmp_path, scheduler):
    # Deleted and never made again, it kept one engine reader per field, and their deleted
    # shard files mapped, until the engine went.
    db_path = tmp_path / "db"
    make(db_path, 0)
    kept = turbdb.create_dataset(db_path, "kept", grid=(16, 16, 16), times=TIMES, fields={"u": 3})
    kept.write("u", 0, np.ones((16, 16, 16, 3), np.float32))
    with turbdb.open(db_path, scheduler=scheduler) as db:
        ask_everything(db, 0)
        assert np.asarray(db["kept"].query("u", POINT, time=0.0, method="lag4")) == pytest.approx(1.0)
        shutil.rmtree(db_path / "nightly")
        assert deleted_mappings(db_path) > 0
        assert db.datasets == ["kept"]  # the listing finds it gone
        assert deleted_mappings(db_path) == 0
        assert np.asarray(db["kept"].query("u", POINT, time=0.0, method="lag4")) == pytest.approx(1.0)
        with pytest.raises(turbdb.UnknownNameError):
            db["nightly"]
        # Made again under the same name: read afresh.
        make(db_path, 7)
        ask_everything(db, 7)


def test_a_dataset_let_go_while_a_copy_is_held_still_sees_rewrites(tmp_path):
    # (review) Forgetting what the engine saw of its rewrites with its fields made the copy
    # still held cache atoms no later rewrite dropped: 1.0 answered after a rewrite to 2.0.
    db_path = tmp_path / "db"
    ds = turbdb.create_dataset(db_path, "a", grid=(16, 16, 16), times=TIMES, fields={"u": 1})
    ds.write("u", 0, np.full((16, 16, 16), 1.0))
    with turbdb.open(db_path, scheduler="jaws") as db:
        held = db["a"]
        assert held.query("u", POINT, time=0.0, method="lag4")[0, 0] == pytest.approx(1.0)
        db._let_go("a")  # as a listing that missed it would
        assert held.query("u", POINT, time=0.0, method="lag4")[0, 0] == pytest.approx(1.0)
        turbdb.open(db_path)["a"].write("u", 0, np.full((16, 16, 16), 2.0))
        assert held.query("u", POINT, time=0.0, method="lag4")[0, 0] == pytest.approx(2.0)
