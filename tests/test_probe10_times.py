"""Ingest times and options that must agree with the dataset, float64 values that float32
loses, fields written at some steps only, `info` of a served dataset, and tracks and
`repr` that do not count every shard. Real files on disk, small grids."""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import turbdb
from turbdb.cli import main
from turbdb import Float32PrecisionWarning
from turbdb.dataset import Dataset

sys.path.insert(0, str(Path(__file__).parent / "service"))
from servicekit import running_server  # noqa: E402


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def steps(tmp_path, prefix, count, ncomp=1, value=None):
    """``count`` single-step .npy files of a 16³ field, step i holding i (or ``value(i)``)."""
    shape = (16, 16, 16) + ((ncomp,) if ncomp > 1 else ())
    paths = []
    for i in range(count):
        path = tmp_path / f"{prefix}_{i}.npy"
        np.save(path, np.full(shape, float(i), np.float32) if value is None else value(i))
        paths.append(path)
    return paths


def times(db, name):
    return [float(t) for t in turbdb.open(db)[name].metadata.times]


def test_a_dt_that_disagrees_with_the_times_the_new_steps_take_is_refused_naming_them(tmp_path):
    db = tmp_path / "db"
    assert cli("ingest", db, *steps(tmp_path, "p", 4), "--name", "d", "--field", "pressure", "--t0", "10",
               "--dt", "0.5", "--quiet").exit_code == 0
    u = steps(tmp_path, "u", 4, ncomp=3)
    refused = cli("ingest", db, *u, "--name", "d", "--field", "velocity", "--dt", "0.1", "--quiet")
    assert refused.exit_code == 1
    assert "10, 10.5, 11, 11.5" in refused.stderr and "leave --dt out (or give --dt 0.5)" in refused.stderr
    assert "non-uniform" not in refused.stderr  # the note that said the opposite of what happened
    assert times(db, "d") == [10, 10.5, 11, 11.5]
    assert "velocity" not in turbdb.open(db)["d"].metadata.fields  # nothing left behind
    # The agreeing --dt stores them at the dataset's times, and steps on past them.
    assert cli("ingest", db, *u, *steps(tmp_path, "v", 2, ncomp=3), "--sort", "given", "--name", "d",
               "--field", "velocity", "--dt", "0.5", "--quiet").exit_code == 0
    assert times(db, "d") == [10, 10.5, 11, 11.5, 12, 12.5]

    # Uneven times: no --dt can fit them; leaving it out stores the steps at them.
    ds = turbdb.create_dataset(db, "nu", grid=(16, 16, 16), times=[0.0, 0.01, 0.03], fields={"pressure": 1})
    for i in range(3):
        ds.write("pressure", i, np.full((16, 16, 16), float(i), np.float32))
    refused = cli("ingest", db, *u[:3], "--name", "nu", "--field", "velocity", "--dt", "0.01", "--quiet")
    assert refused.exit_code == 1 and "0, 0.01, 0.03" in refused.stderr and "(or give" not in refused.stderr
    assert cli("ingest", db, *u[:3], "--name", "nu", "--field", "velocity", "--quiet").exit_code == 0
    assert times(db, "nu") == [0, 0.01, 0.03]


def test_appending_to_non_uniform_times_needs_a_dt(tmp_path):
    db = tmp_path / "db"
    ds = turbdb.create_dataset(db, "nu", grid=(16, 16, 16), times=[0.0, 0.01, 0.03], fields={"pressure": 1})
    for i in range(3):
        ds.write("pressure", i, np.full((16, 16, 16), float(i), np.float32))
    p3 = steps(tmp_path, "p", 4)[3]
    refused = cli("ingest", db, p3, "--name", "nu", "--field", "pressure")
    assert refused.exit_code == 1 and "non-uniform times" in refused.stderr and "give --dt" in refused.stderr
    assert times(db, "nu") == [0, 0.01, 0.03]  # not 1.03
    assert cli("ingest", db, p3, "--name", "nu", "--field", "pressure", "--dt", "0.02", "--quiet").exit_code == 0
    assert times(db, "nu") == [0, 0.01, 0.03, 0.05]


@pytest.mark.parametrize("wrong", [("--spacing", "1,1,1"), ("--t0", "5")])
def test_a_refused_option_leaves_no_new_field_behind(tmp_path, wrong):
    db = tmp_path / "db"
    assert cli("ingest", db, *steps(tmp_path, "p", 1), "--name", "d", "--field", "pressure", "--quiet").exit_code == 0
    u = steps(tmp_path, "u", 1, ncomp=3)
    refused = cli("ingest", db, *u, "--name", "d", "--field", "velocity", "--units", "cm/s", *wrong)
    assert refused.exit_code == 1 and f"{wrong[0]} {wrong[1]}" in refused.stderr
    assert list(turbdb.open(db)["d"].metadata.fields) == ["pressure"]
    assert not (db / "d" / "velocity").exists()
    # The corrected command, with other units, is not refused for the units the failed one gave.
    assert cli("ingest", db, *u, "--name", "d", "--field", "velocity", "--units", "m/s", "--quiet").exit_code == 0
    assert turbdb.open(db)["d"].info.fields["velocity"].units == "m/s"


def sine(offset, scale):
    n = 16
    x = np.arange(n) * 2 * np.pi / n
    return lambda i: np.broadcast_to(offset + scale * np.sin(x + 0.1 * i), (n, n, n)).copy()


def test_float64_values_that_float32_loses_are_noted_on_ingest(tmp_path):
    db = tmp_path / "db"
    absolute = cli("ingest", db, *steps(tmp_path, "p", 3, value=sine(101325.0, 1e-3)), "--name", "d",
                   "--field", "pressure", "--dt", "0.1", "--quiet")
    assert absolute.exit_code == 0
    assert "p_0.npy" in absolute.stderr and "Subtract a mean or reference value" in absolute.stderr
    # Their float32 casts are equal, their float64 values are not: no guess of data stored twice.
    assert "stored twice" not in absolute.stderr and "the same as float32" in absolute.stderr
    tiny = cli("ingest", db, *steps(tmp_path, "q", 2, value=sine(2e-46, 1e-46)), "--name", "d", "--field", "q",
               "--dt", "0.1", "--quiet")
    assert tiny.exit_code == 0 and "smallest normal number" in tiny.stderr and "other units" in tiny.stderr
    # Float64 values float32 holds well say nothing; a real copy (values float32 holds
    # exactly) is still named as one.
    copy = sine(0.0, 1.0)(0).astype(np.float32).astype(np.float64)
    fine = cli("ingest", db, *steps(tmp_path, "w", 2, value=lambda i: copy), "--name", "d",
               "--field", "w", "--dt", "0.1", "--quiet")
    assert fine.exit_code == 0 and "float32" not in fine.stderr and "stored twice?" in fine.stderr


def test_dataset_write_warns_when_float32_loses_float64_values(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "d", grid=(16, 16, 16), times=[0.0, 1.0],
                               fields={"pressure": 1, "q": 1, "r": 1, "s": 1})
    with pytest.warns(Float32PrecisionWarning, match="Subtract a mean"):
        ds.write("pressure", 0, sine(101325.0, 1e-3)(0))
    ds.write("pressure", 1, sine(101325.0, 1e-3)(1))  # once per field: a loop over steps says it once
    with pytest.warns(Float32PrecisionWarning, match="smallest normal"):
        ds.write("q", 0, np.full((16, 16, 16), 1e-50))
    with pytest.warns(UserWarning, match="smallest normal"):
        ds.write("r", 0, np.full((16, 16, 16), 1e-40))
    # Warnings are errors in this suite: these must say nothing.
    ds.write("s", 0, sine(0.0, 1.0)(0))
    ds.write("s", 1, np.full((16, 16, 16), 1e-40, np.float32))  # float32 already: nothing is lost
    ds.write("r", 1, np.zeros((16, 16, 16)))


def sparse_dataset(db, **pressure):
    ds = turbdb.create_dataset(db, "s", grid=(16, 16, 16), times=np.arange(6) * 0.1,
                               fields={"velocity": 3, "pressure": {"ncomp": 1, **pressure}})
    for i in range(6):
        ds.write("velocity", i, np.zeros((16, 16, 16, 3), np.float32))
        if i % 2 == 0:
            ds.write("pressure", i, np.zeros((16, 16, 16), np.float32))
    return ds


def test_a_field_written_at_some_steps_on_purpose_can_be_marked_and_verifies_clean(tmp_path):
    ds = sparse_dataset(tmp_path / "db")
    problems = ds.verify()["pressure"]["problems"]
    assert [t for _, t, _ in problems] == [1, 3]
    assert "set_every_step('pressure', False)" in problems[0][2]
    said = cli("verify", tmp_path / "db", "s")
    assert said.exit_code == 1 and "running the same ingest again, or the same Dataset.write calls" in said.stdout

    ds.set_every_step("pressure", False)
    assert all(not r["problems"] for r in ds.verify().values())
    assert turbdb.open(tmp_path / "db")["s"].info.fields["pressure"].every_step is False
    said = cli("verify", tmp_path / "db", "s")
    assert said.exit_code == 0 and "note" not in said.stdout
    assert "at some steps only" in cli("info", tmp_path / "db", "s").stdout
    # Made so from the start: by create_dataset, or by add_field.
    assert all(not r["problems"] for r in sparse_dataset(tmp_path / "db2", every_step=False).verify().values())
    ds.add_field("vorticity", 3, every_step=False)
    ds.write("vorticity", 2, np.zeros((16, 16, 16, 3), np.float32))
    ds.write("vorticity", 4, np.zeros((16, 16, 16, 3), np.float32))
    assert all(not r["problems"] for r in ds.verify().values())
    # Marked back: the cross-field rules apply again.
    ds.set_every_step("pressure", True)
    assert [t for _, t, _ in ds.verify()["pressure"]["problems"]] == [1, 3]
    with pytest.raises(turbdb.exceptions.InvalidRequestError, match="True or False"):
        ds.set_every_step("pressure", "no")


def test_info_describes_a_served_dataset_and_verify_refuses_an_address(tmp_path):
    sparse_dataset(tmp_path / "db", every_step=False)
    with running_server(tmp_path / "db", tmp_path / "server.log") as server:
        described = cli("info", server.url, "s")
        listed = cli("info", server.url)
    assert described.exit_code == 0, described.output
    assert "dataset s" in described.stdout and "3/6 steps written (0, 2, 4), at some steps only" in described.stdout
    assert listed.exit_code == 0 and "dataset s" in listed.stdout
    refused = cli("verify", server.url, "s")
    assert refused.exit_code == 2 and "server's address" in refused.stderr and "http:/1" not in refused.stderr


def test_repr_and_track_do_not_count_every_shard(tmp_path, monkeypatch):
    for name in ("t", "u"):
        ds = turbdb.create_dataset(tmp_path, name, grid=(16, 16, 16), times=[0.0, 0.1, 0.2, 0.3],
                                   fields={"velocity": 3}, atom=4, partition=8)
        for i in range(4):
            ds.write("velocity", i, np.ones((16, 16, 16, 3), np.float32))
    ds = turbdb.open(tmp_path)["t"]
    counted = []
    original = Dataset._steps_written
    monkeypatch.setattr(Dataset, "_steps_written", lambda *a: counted.append(a) or original(*a))
    assert re.fullmatch(r"<turbdb.Dataset 't' 16x16x16, 4 times, fields \['velocity'\]>", repr(ds))
    ds.track([[1.0, 1.0, 1.0]], start=0.1, end=0.2, dt=0.05)
    assert counted == []
    # A step gone is still refused before any work, by its number.
    shutil.rmtree(tmp_path / "t" / "velocity" / "c" / "3")
    with pytest.raises(turbdb.exceptions.InvalidRequestError, match=r"time index 3 \(t = 0.3\) is not stored"):
        ds.track([[1.0, 1.0, 1.0]], start=0.1, end=0.2, dt=0.05)
    # One shard of a step gone: the engine finds it when it reads it, and the track names
    # the step as queries do (it said "time step 2 is not stored", an index alone).
    (tmp_path / "u" / "velocity" / "c" / "2" / "0" / "0" / "0" / "0").unlink()
    for options in ({}, {"scheduler": "jaws"}):
        with pytest.raises(turbdb.exceptions.TurbdbError,
                           match=r"time index 2 \(t = 0\.2\) of velocity is not stored: .*does not exist"):
            turbdb.open(tmp_path, **options)["u"].track([[1.0, 1.0, 1.0]], start=0.1, end=0.2, dt=0.05)


def test_uniform_times_far_from_zero_are_uniform_for_dt_checks(tmp_path):
    # 86400 + k·0.001: the times' own rounding (1.5e-11) is above 1e-9 of the spacing, and
    # such a dataset was taken for non-uniform: a second field with the same --dt, and an
    # append without --dt, were refused.
    from turbdb.ingest.pipeline import ingest_inputs

    files = []
    for k in range(4):
        files.append(tmp_path / f"u_{k}.npy")
        np.save(files[-1], np.full((8, 8, 8), float(k), np.float32))
    db = tmp_path / "db"
    ingest_inputs(db, "a", "u", files[:3], dt=0.001, t0=86400.0, quiet=True)
    ds = turbdb.open(db)["a"]
    assert ds.metadata.dt == pytest.approx(0.001)
    ingest_inputs(db, "a", "p", files[:3], dt=0.001, quiet=True)
    ingest_inputs(db, "a", "u", files[3:], quiet=True)
    assert turbdb.open(db)["a"].metadata.nt == 4
