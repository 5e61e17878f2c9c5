"""Creating, writing and opening datasets through the public API."""

import copy
import math
import os

import numpy as np
import pytest

import turbdb


def make(tmp_path, **kwargs):
    args = dict(grid=(20, 18, 16), times=np.arange(4) * 0.25, fields={"velocity": 3, "pressure": 1})
    args.update(kwargs)
    return turbdb.create_dataset(tmp_path / "db", "flow", **args)


def test_info_describes_grid_times_fields_and_written_steps(tmp_path):
    ds = make(tmp_path, attrs={"Re": 100}, provenance={"code": "test"})
    ds.write("velocity", 1, np.ones((16, 18, 20, 3)))
    ds.write("pressure", 1, np.ones((16, 18, 20)))
    ds.write("velocity", 3, np.ones((16, 18, 20, 3), dtype=np.float16))
    info = turbdb.open(tmp_path / "db")["flow"].info
    assert info.grid == (20, 18, 16)
    assert info.spacing == pytest.approx((2 * math.pi / 20, 2 * math.pi / 18, 2 * math.pi / 16))
    assert info.periodic == (True, True, True)
    assert info.dt == 0.25 and info.nt == 4
    assert info.fields["velocity"].steps_present == (1, 3)
    assert info.steps_present() == [1]
    assert info.fields["velocity"].components == ["ux", "uy", "uz"]
    assert info.attrs == {"Re": 100} and info.provenance["code"] == "test"
    assert "velocity" in info.describe()


def test_database_lists_datasets_and_names_the_valid_ones_on_a_miss(tmp_path):
    make(tmp_path)
    db = turbdb.open(tmp_path / "db")
    assert db.datasets == ["flow"] and list(db) == ["flow"] and len(db) == 1
    with pytest.raises(KeyError, match="available: flow"):
        db["nope"]
    # Only what the listing would show is found: no path, no other Zarr group, no file.
    (tmp_path / "db" / "group").mkdir()
    (tmp_path / "db" / "group" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    (tmp_path / "db" / "file").write_text("")
    for name in ["../flow", "..", ".", "", "flow/velocity", "group", "file", 3]:
        with pytest.raises(turbdb.UnknownNameError, match="available: flow"):
            db[name]
    assert db.datasets == ["flow"]
    # A dataset whose metadata is damaged is found, and says so.
    (tmp_path / "db" / "flow" / "zarr.json").write_text("{not json")
    with pytest.raises(turbdb.DamagedMetadataError, match="not valid JSON"):
        db["flow"]


def test_declaring_jobs_reads_a_datasets_metadata_once(tmp_path, monkeypatch):
    # Each declaration reopened its dataset (every dataset's metadata, then the field's):
    # half a millisecond a job. The datasets planned on are kept.
    import turbdb.dataset

    make(tmp_path)
    db = turbdb.open(tmp_path / "db")
    plan = [("flow", "velocity", 0.0), ("flow", "velocity", 0.5)]
    db.job(plan).close()
    reads = []
    real = turbdb.dataset.read_json
    monkeypatch.setattr(turbdb.dataset, "read_json", lambda path: reads.append(path) or real(path))
    for _ in range(3):
        db.job(plan).close()
    assert reads == []
    with pytest.raises(turbdb.UnknownNameError, match="available: flow"):
        db.job([("nope", "velocity", 0.0)])


def test_a_local_database_is_a_context_manager_like_a_remote_or_cluster_one(tmp_path):
    ds = make(tmp_path)
    ds.write("pressure", 0, np.ones((16, 18, 20)))
    with turbdb.open(tmp_path / "db", scheduler="jaws", cache_bytes=1 << 20) as db:
        values = db["flow"].query("pressure", [[0.5, 0.5, 0.5]], time=0.0, method="lag4")
        assert db.engine is not None
    assert values == pytest.approx(1.0)
    assert db.engine is None, "leaving the block lets go of the node engine"


def test_opening_what_is_not_a_database_directory_says_so(tmp_path):
    (tmp_path / "points.csv").write_text("1,2,3\n")
    with pytest.raises(turbdb.StorageError, match="points.csv is a file, not a database directory"):
        turbdb.open(tmp_path / "points.csv")
    with pytest.raises(turbdb.InvalidRequestError, match="give its path, not None"):
        turbdb.open(None)
    with pytest.raises(turbdb.InvalidRequestError, match="a token is a string, not int"):
        turbdb.connect("http://127.0.0.1:1", token=123)
    with pytest.raises(turbdb.InvalidRequestError, match="carries a query"):
        turbdb.connect("http://127.0.0.1:1/?a=1")


def test_opening_a_missing_database_says_how_to_create_one(tmp_path):
    with pytest.raises(turbdb.StorageError, match="turbdb simulate"):
        turbdb.open(tmp_path / "nowhere")


@pytest.mark.parametrize("name", ["../x", "a/b", "", "1abc", "x" * 80, ".hidden"])
def test_unsafe_dataset_names_are_refused(tmp_path, name):
    with pytest.raises(turbdb.InvalidRequestError, match="not allowed"):
        turbdb.create_dataset(tmp_path, name, grid=(8, 8, 8))


def test_creating_twice_needs_overwrite(tmp_path):
    make(tmp_path)
    with pytest.raises(FileExistsError, match="overwrite"):
        make(tmp_path)
    assert make(tmp_path, overwrite=True).info.fields["velocity"].steps_present == ()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(grid=(8, 8)), "three positive integers"),
        (dict(grid=(0, 8, 8)), "three positive integers"),
        (dict(spacing=(1, 0, 1)), "positive"),
        (dict(spacing=(1e-320, 1, 1)), "at least 2.23e-308"),
        (dict(spacing=(1e308, 1, 1), origin=(1e308, 0, 0)), "beyond the largest number"),
        (dict(times=[0, 1, 1]), "strictly increasing"),
        (dict(times=[0, np.nan]), "finite"),
        (dict(fields={}), "at least one field"),
        (dict(fields={"velocity": 0}), "positive number"),
        (dict(atom=6), "power of two"),
        (dict(atom=16, partition=8), "not be larger"),
    ],
)
def test_bad_dataset_parameters_are_explained(tmp_path, kwargs, message):
    with pytest.raises(turbdb.InvalidRequestError, match=message):
        make(tmp_path, **kwargs)
    assert not (tmp_path / "db" / "flow").exists()


def test_bad_writes_are_refused_and_lose_nothing(tmp_path):
    ds = make(tmp_path)
    good = np.random.default_rng(1).standard_normal((16, 18, 20, 3)).astype(np.float32)
    ds.write("velocity", 0, good)
    before = sorted(p.read_bytes() for p in (ds.path / "velocity").rglob("0") if p.is_file())
    with pytest.raises(turbdb.FormatError, match=r"expected \(nz, ny, nx, ncomp\)"):
        ds.write("velocity", 0, good[:, :, :10])
    with pytest.raises(turbdb.FormatError, match="floating-point"):
        ds.write("velocity", 0, good.astype(np.int32))
    with pytest.raises(turbdb.InvalidRequestError, match="outside"):
        ds.write("velocity", 4, good)
    with pytest.raises(KeyError, match="has no field 'vorticity'"):
        ds.write("vorticity", 0, good)
    bad = good.copy()
    bad[3, 4, 5, 1] = np.inf
    with pytest.raises(ValueError, match="z=3, y=4, x=5, component 1; nothing was written"):
        ds.write("velocity", 0, bad)
    after = sorted(p.read_bytes() for p in (ds.path / "velocity").rglob("0") if p.is_file())
    assert before == after


def test_append_times_grows_every_field_and_add_field_adds_one(tmp_path):
    ds = make(tmp_path)
    assert list(ds.append_times([1.0, 1.25])) == [4, 5]
    with pytest.raises(ValueError, match="after the last stored time"):
        ds.append_times([1.0])
    ds.add_field("magneticfield", 3, units="T")
    info = ds.info
    assert info.nt == 6 and info.fields["magneticfield"].units == "T"
    ds.write("magneticfield", 5, np.zeros((16, 18, 20, 3)))
    assert ds.info.fields["magneticfield"].steps_present == (5,)


def test_copies_of_a_dataset_share_its_parsed_metadata_until_it_changes(tmp_path, monkeypatch):
    # The service queries a shallow copy per request: each parsed zarr.json again.
    import turbdb.dataset

    ds = turbdb.open(make(tmp_path).path.parent)["flow"]
    reads = []
    real = turbdb.dataset.parse_json
    monkeypatch.setattr(turbdb.dataset, "parse_json", lambda data, path: reads.append(path) or real(data, path))
    assert ds.metadata.nt == 4 and reads == []  # parsed once, when it was opened
    copies = [copy.copy(ds) for _ in range(3)]
    assert all(c.metadata.nt == 4 for c in copies) and reads == []
    copies[0].append_times([1.0])  # rewrites zarr.json: every copy sees it, parsed once more
    reads.clear()
    assert [c.metadata.nt for c in (ds, *copies)] == [5] * 4
    assert len(reads) == 1


def test_look_ups_share_the_opened_stores_and_follow_a_dataset_made_again(tmp_path):
    # `db[name].query(...)` opened, checked and unmapped every shard it touched on each
    # call: 12-28x the query on a dataset of many shards.
    ds = make(tmp_path)
    ds.write("pressure", 0, np.ones((16, 18, 20)))
    db = turbdb.open(ds.path.parent)
    points = np.random.default_rng(1).uniform(0, 1, (20, 3))
    first = db["flow"]
    first.query("pressure", points, time=0.0, method="lag4")
    second = db["flow"]
    assert second is not first and second._stores is first._stores and "pressure" in second._stores
    second.query("pressure", points[:5], time=0.0, method="lag4")
    assert first.last_query_stats is not second.last_query_stats  # each copy its own
    # Made again under the same name (another grid, other values): the next look-up reads it.
    again = turbdb.create_dataset(tmp_path / "db", "flow", grid=(8, 8, 8), times=[0.0], fields={"pressure": 1},
                                  overwrite=True)
    again.write("pressure", 0, np.full((8, 8, 8), 3.0))
    assert db["flow"].info.grid == (8, 8, 8)
    np.testing.assert_allclose(db["flow"].query("pressure", points, time=0.0, method="lag4"), 3.0, rtol=1e-6)
    np.testing.assert_allclose(first.query("pressure", points, time=0.0, method="lag4"), 3.0, rtol=1e-6)


def test_errors_are_turbdb_errors_and_builtin_errors():
    for cls, builtin in [
        (turbdb.InvalidRequestError, ValueError),
        (turbdb.UnknownNameError, KeyError),
        (turbdb.CorruptDataError, OSError),
        (turbdb.StorageError, OSError),
        (turbdb.FormatError, ValueError),
        (turbdb.DatasetExistsError, FileExistsError),
    ]:
        assert issubclass(cls, turbdb.TurbdbError) and issubclass(cls, builtin)


def test_a_dataset_directory_opens_as_a_database_of_that_dataset(tmp_path):
    make(tmp_path)
    turbdb.create_dataset(tmp_path / "db", "second", grid=(8, 8, 8), times=[0.0])
    whole = turbdb.open(tmp_path / "db")
    assert whole.datasets == ["flow", "second"]
    one = turbdb.open(tmp_path / "db" / "flow")
    assert one.datasets == ["flow"] and list(one) == ["flow"] and one.path == tmp_path / "db"
    assert one["flow"].info.grid == (20, 18, 16)
    with pytest.raises(turbdb.UnknownNameError, match="available: flow"):
        one["second"]
    with pytest.raises(turbdb.StorageError, match="array of field 'velocity' of dataset 'flow'"):
        turbdb.open(tmp_path / "db" / "flow" / "velocity")


@pytest.mark.parametrize("scheduler", [None, "jaws"])
def test_a_step_rewritten_by_another_process_is_read_anew(tmp_path, scheduler):
    # Readers keep shard indexes, mappings and (with an engine) atoms; a rewrite of a
    # stored step is announced in the metadata, which every query looks at.
    import subprocess
    import sys

    ds = turbdb.create_dataset(tmp_path, "flow", grid=(16, 16, 16), times=[0.0, 1.0], fields={"p": 1})
    ds.write("p", 0, np.ones((16, 16, 16)))
    reader = turbdb.open(tmp_path, scheduler=scheduler)["flow"]
    points = np.random.default_rng(0).uniform(0, 2 * np.pi, (50, 3))
    np.testing.assert_allclose(reader.query("p", points, time=0.0, method="lag4"), 1.0, rtol=1e-6)
    np.testing.assert_allclose(reader.cutout("p", time=0.0, x=(0, 4), y=(0, 4), z=(0, 4)).values, 1.0)
    rewrite = f"import numpy as np, turbdb; turbdb.open({str(tmp_path)!r})['flow'].write('p', 0, np.full((16,) * 3, 5.0))"
    subprocess.run([sys.executable, "-c", rewrite], check=True)
    np.testing.assert_allclose(reader.query("p", points, time=0.0, method="lag4"), 5.0, rtol=1e-6)
    np.testing.assert_allclose(reader.cutout("p", time=0.0, x=(0, 4), y=(0, 4), z=(0, 4)).values, 5.0)
    # In this process too, through the engine's cache.
    reader.write("p", 0, np.full((16, 16, 16), 7.0))
    np.testing.assert_allclose(reader.query("p", points, time=0.0, method="lag4"), 7.0, rtol=1e-6)
    # A dataset opened after a rewrite shares the engine that cached the old atoms.
    subprocess.run([sys.executable, "-c", rewrite.replace("5.0", "9.0")], check=True)
    fresh = turbdb.open(tmp_path, scheduler=scheduler)["flow"]
    np.testing.assert_allclose(fresh.query("p", points, time=0.0, method="lag4"), 9.0, rtol=1e-6)
    np.testing.assert_allclose(reader.query("p", points, time=0.0, method="lag4"), 9.0, rtol=1e-6)


def copy_as_rsync_does(source, target, between=lambda: None):
    """Each file copied to a temporary beside its target and renamed over it; the
    directories are kept (``rsync -a source/ target/``), a folder's own files before its
    subfolders'. ``between`` is called after the first folder's files."""
    import shutil

    for k, (folder, _, files) in enumerate(os.walk(source)):
        if k == 1:
            between()
        into = target / os.path.relpath(folder, source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            shutil.copy2(os.path.join(folder, name), into / f".{name}.sync")
            os.replace(into / f".{name}.sync", into / name)


@pytest.mark.parametrize("scheduler", [None, "jaws"])
@pytest.mark.parametrize("upstream_grid, query_midway", [(16, False), (24, False), (16, True)])
def test_a_dataset_synced_over_file_by_file_is_read_anew(tmp_path, scheduler, upstream_grid, query_midway):
    # Only the directories' identity was compared: an open dataset, a server and a fresh
    # handle on the same engine kept answering the old values (NaNs and old values mixed,
    # on another grid), or refused the new shards as copied from another dataset. A query
    # made when only the dataset's own zarr.json was new kept the old store for good.
    for db, n, value in (("served", 16, 1.0), ("upstream", upstream_grid, 2.0)):
        ds = turbdb.create_dataset(tmp_path / db, "run", grid=(n, n, n), times=[0.0, 1.0], fields={"p": 1})
        for t in range(2):
            ds.write("p", t, np.full((n, n, n), value + t))
    served = turbdb.open(tmp_path / "served", scheduler=scheduler)
    reader = served["run"]
    points = np.random.default_rng(0).uniform(0, 2 * np.pi, (50, 3))
    np.testing.assert_allclose(reader.query("p", points, time=0.0, method="lag4"), 1.0, rtol=1e-6)
    between = (lambda: reader.query("p", points, time=0.0, method="lag4")) if query_midway else (lambda: None)
    copy_as_rsync_does(tmp_path / "upstream" / "run", tmp_path / "served" / "run", between)
    for handle in (reader, served["run"]):
        np.testing.assert_allclose(handle.query("p", points, time=0.0, method="lag4"), 2.0, rtol=1e-6)
        np.testing.assert_allclose(handle.query("p", points, time=1.0, method="lag4"), 3.0, rtol=1e-6)
        cut = handle.cutout("p", time=0.0)
        assert cut.shape[:3] == (upstream_grid,) * 3 and (cut.values == 2.0).all()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="gives a folder to another account: root only")
def test_verify_by_another_account_leaves_no_lock_file_the_owner_cannot_write(tmp_path):
    # verify made .turbdb.lock when there was none, owned by whoever ran it (root): the
    # dataset's owner could no longer append.
    ds = turbdb.create_dataset(tmp_path, "flow", grid=(8, 8, 8), times=[0.0], fields={"p": 1})
    lock = tmp_path / "flow" / ".turbdb.lock"
    lock.unlink(missing_ok=True)
    os.chown(tmp_path / "flow", os.geteuid() + 1, -1)  # another account's dataset
    try:
        assert turbdb.open(tmp_path)["flow"].verify_metadata() == []
        assert not lock.exists()
    finally:
        os.chown(tmp_path / "flow", os.geteuid(), -1)
    assert turbdb.open(tmp_path)["flow"].verify_metadata() == [] and lock.exists()  # its owner's: made
    ds.append_times([1.0])
    assert turbdb.open(tmp_path)["flow"].metadata.nt == 2


def test_a_misshapen_rewrites_attribute_is_named_and_a_rewrite_refused_before_writing(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "flow", grid=(8, 8, 8), times=[0.0], fields={"p": 1})
    ds.write("p", 0, np.ones((8, 8, 8)))
    ds.update_attrs(lambda attrs: attrs.__setitem__("rewrites", {"p": [3]}))
    with pytest.raises(turbdb.DamagedMetadataError, match="'rewrites' attribute"):
        ds.write("p", 0, np.zeros((8, 8, 8)))
    with pytest.raises(turbdb.DamagedMetadataError, match="'rewrites' attribute"):
        turbdb.open(tmp_path)["flow"].query("p", np.zeros((1, 3)), time=0.0)
    ds.update_attrs(lambda attrs: attrs.pop("rewrites"))
    assert ds.cutout("p", time=0.0, x=(0, 1), y=(0, 1), z=(0, 1)).values.item() == 1.0


def test_dataset_infos_compare_by_what_they_describe(tmp_path):
    # The generated comparison raised "the truth value of an array is ambiguous" (times).
    ds = turbdb.create_dataset(tmp_path, "a", grid=(8, 8, 8), times=[0.0, 1.0], fields={"p": 1})
    assert ds.info == turbdb.open(tmp_path)["a"].info and ds.info != "a"
    ds.write("p", 0, np.zeros((8, 8, 8)))
    assert ds.info != turbdb.create_dataset(tmp_path, "b", grid=(8, 8, 8), times=[0.0, 1.0], fields={"p": 1}).info
