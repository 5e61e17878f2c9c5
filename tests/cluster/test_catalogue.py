"""The catalogue read back: a damaged one is refused at load (not left to fail queries
with IndexError or read from a root no slot names), a data root inside the database is
refused, and what a placement recorded tells a database changed since from one that did
not."""

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

import turbdb
from turbdb.cli import main
from turbdb.cluster.catalogue import Catalogue
from turbdb.cluster.contents import check_current, differences, record
from turbdb.exceptions import ServiceError


@pytest.fixture()
def database(tmp_path, make_trig):
    return make_trig(tmp_path / "db")


def _damage(database, change) -> None:
    catalogue = Catalogue.create(database, ["0", "1", "2"])
    catalogue.save()
    path = Catalogue.path_of(database)
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("change", [
    lambda d: d.update(holders=d["holders"][:-3]),                       # fewer holder lists
    lambda d: d.update(virtual_partitions=d["virtual_partitions"] + 5),  # virtual partitions changed
    lambda d: d["holders"][4].__setitem__(0, "7"),                       # a holder that is no slot
    lambda d: d["holders"].__setitem__(2, []),                           # a partition held by nobody
    lambda d: d["holders"].__setitem__(2, ["1", "1"]),                   # one worker twice
    lambda d: d.update(layout="cloud"),
], ids=["short", "virtual", "stranger", "empty", "twice", "layout"])
def test_a_damaged_catalogue_is_refused_when_loaded(database, change):
    _damage(database, change)
    with pytest.raises(turbdb.FormatError, match="damaged.*place the cluster again"):
        Catalogue.load(database)


def test_an_intact_catalogue_loads_as_saved(database):
    catalogue = Catalogue.create(database, ["0", "1", "2"], data_root=database.parent / "nodes")
    catalogue.contents = record(turbdb.open(database))
    catalogue.save()
    again = Catalogue.load(database)
    assert again.holders == catalogue.holders and again.contents == catalogue.contents


def test_a_data_root_inside_the_database_is_refused(database):
    for inside in (database, database / "nodes"):
        with pytest.raises(turbdb.InvalidRequestError, match="inside the database"):
            Catalogue.create(database, ["0", "1"], data_root=inside)
    placed = CliRunner().invoke(main, ["cluster", "place", str(database), "--workers", "2", "--data-root",
                                       str(database)])
    assert placed.exit_code != 0 and "inside the database" in placed.output, placed.output
    assert not Catalogue.exists(database) and sorted(p.name for p in database.iterdir() if p.is_dir()) == ["trig"]


def test_what_was_placed_tells_a_changed_database_from_an_unchanged_one(database):
    db = turbdb.open(database)
    placed = json.loads(json.dumps(record(db)))  # as the catalogue stores it
    assert differences(placed, db) == []
    ds = db["trig"]
    ds.write("velocity", 1, np.zeros((16, 16, 16, 3), np.float32))  # a step written again
    assert differences(placed, turbdb.open(database)) == ["dataset 'trig': steps were written again"]
    placed = json.loads(json.dumps(record(turbdb.open(database))))
    ds.append_times([2.0])
    assert "3 now (0 to 2)" in differences(placed, turbdb.open(database))[0]
    placed = json.loads(json.dumps(record(turbdb.open(database))))
    ds.write("velocity", 2, np.zeros((16, 16, 16, 3), np.float32))  # a step that had no shards
    assert differences(placed, turbdb.open(database)) == ["dataset 'trig': steps were written"]
    assert differences(None, db)  # a catalogue from before contents were recorded


def test_a_dataset_created_again_with_the_same_sizes_is_told_from_the_one_placed(database):
    # Same grid, times and fields, no rewrite counted: its copies were served as current.
    db = turbdb.open(database)
    placed = json.loads(json.dumps(record(db)))
    info = db["trig"].info
    again = turbdb.create_dataset(database, "trig", grid=info.grid, times=list(info.times), atom=info.atom,
                                  partition=info.partition,
                                  fields={name: f.ncomp for name, f in info.fields.items()}, overwrite=True)
    for name, f in info.fields.items():
        for t in f.steps_present:
            again.write(name, t, np.full((16, 16, 16, f.ncomp), 5.0, np.float32))
    assert differences(placed, turbdb.open(database)) == ["dataset 'trig': it was created again"]
    with pytest.raises(ServiceError, match="it was created again"):
        check_current(placed, turbdb.open(database)["trig"], str(database))
    # The catalogue holds a summary of the times, not every one of them.
    assert set(placed["trig"]["times"]) == {"count", "first", "last", "sha256"}


def test_a_change_that_leaves_the_metadata_stats_as_they_were_is_seen(database, monkeypatch):
    # Two renames of a zarr.json within one clock tick, the inode reused, leave its stat as
    # it was; the check that a placed dataset is current kept trusting its first look.
    db = turbdb.open(database)
    placed = json.loads(json.dumps(record(db)))
    files = {str(p): os.stat(p) for p in (database / "trig").rglob("zarr.json")}
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: files.get(os.fspath(p)) or real_stat(p, *a, **k))
    check_current(placed, turbdb.open(database)["trig"], str(database))  # current, just written
    db["trig"].write("velocity", 1, np.zeros((16, 16, 16, 3), np.float32))  # the stats stay as they were
    with pytest.raises(ServiceError, match="written again"):
        check_current(placed, turbdb.open(database)["trig"], str(database))
