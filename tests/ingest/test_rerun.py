"""Running an ingest again: after an input was read the wrong way, after a file grew or was
touched, after a failed first step of a new field, and with numbered inputs out of order.
Each case once stored wrong data without a word (the journal knew a step by its file's size
and modification time only)."""

import json
import os

import numpy as np
import pytest
import zarr

import turbdb
from turbdb.ingest.pipeline import ingest_inputs


def stored(db, field="velocity"):
    return zarr.open_array(db / "run" / field, mode="r")


def test_a_step_read_the_wrong_way_is_refused_again_then_replaced_in_place(tmp_path):
    # A cubic input whose axes were given wrong: every value finite, the ingest succeeds.
    data = np.random.default_rng(0).standard_normal((16, 16, 16, 3)).astype(np.float32)
    np.save(tmp_path / "u.npy", data)
    db = tmp_path / "db"
    ingest_inputs(db, "run", "velocity", [tmp_path / "u.npy"], source_options={"axes": "xyzc"}, quiet=True)
    assert not np.array_equal(stored(db)[0], data)
    with pytest.raises(turbdb.InvalidRequestError, match=r"u.npy \(step 0\).*--axes xyzc.*--replace"):
        ingest_inputs(db, "run", "velocity", [tmp_path / "u.npy"], source_options={"axes": "zyxc"}, quiet=True)
    ingest_inputs(db, "run", "velocity", [tmp_path / "u.npy"], source_options={"axes": "zyxc"}, replace=True,
                  quiet=True)
    info = turbdb.open(db)["run"].info
    assert info.nt == 1, "replaced in place, not appended"
    np.testing.assert_array_equal(stored(db)[0], data)


def test_a_file_that_grew_has_only_its_new_steps_appended(tmp_path):
    rng = np.random.default_rng(1)
    steps = rng.standard_normal((5, 8, 8, 8)).astype(np.float32)
    path, db = tmp_path / "p.npy", tmp_path / "db"
    np.save(path, steps[:3])
    ingest_inputs(db, "run", "pressure", [path], source_options={"axes": "tzyx"}, dt=0.5, quiet=True)
    np.save(path, steps)  # the simulation wrote two more
    ingest_inputs(db, "run", "pressure", [path], source_options={"axes": "tzyx"}, quiet=True)
    info = turbdb.open(db)["run"].info
    np.testing.assert_allclose(info.times, [0, 0.5, 1.0, 1.5, 2.0])
    np.testing.assert_array_equal(stored(db, "pressure")[:, ..., 0], steps)


def test_a_touched_file_is_not_stored_again_and_a_changed_one_is_refused(tmp_path):
    data = np.random.default_rng(2).standard_normal((8, 8, 8)).astype(np.float32)
    path, db = tmp_path / "p.npy", tmp_path / "db"
    np.save(path, data)
    ingest_inputs(db, "run", "pressure", [path], quiet=True)
    os.utime(path, ns=(0, 10**18))
    ingest_inputs(db, "run", "pressure", [path], quiet=True)
    assert turbdb.open(db)["run"].info.nt == 1
    np.save(path, data + 1)
    with pytest.raises(turbdb.InvalidRequestError, match="now read as other values"):
        ingest_inputs(db, "run", "pressure", [path], quiet=True)
    assert turbdb.open(db)["run"].info.nt == 1


def test_a_copy_of_a_stored_input_is_named_as_the_same_data(tmp_path, capsys):
    data = np.random.default_rng(3).standard_normal((8, 8, 8)).astype(np.float32)
    np.save(tmp_path / "a.npy", data)
    np.save(tmp_path / "b.npy", data)
    ingest_inputs(tmp_path / "db", "run", "pressure", [tmp_path / "a.npy"], quiet=True)
    ingest_inputs(tmp_path / "db", "run", "pressure", [tmp_path / "b.npy"], quiet=True)
    assert "b.npy (step 0) holds exactly the values stored at time index 0" in capsys.readouterr().err


def test_a_new_field_whose_first_step_fails_is_removed_and_the_corrected_command_works(tmp_path):
    rng = np.random.default_rng(4)
    np.save(tmp_path / "u.npy", rng.standard_normal((8, 8, 8, 3)).astype(np.float32))
    db = tmp_path / "db"
    ingest_inputs(db, "run", "velocity", [tmp_path / "u.npy"], quiet=True)
    broken = rng.standard_normal((8, 8, 8)).astype(np.float32)
    broken[1, 2, 3] = np.nan
    np.save(tmp_path / "p.npy", broken)
    with pytest.raises(turbdb.InvalidRequestError, match="NaN"):
        ingest_inputs(db, "run", "pressure", [tmp_path / "p.npy"], units="kPa", given={"units"}, quiet=True)
    assert "pressure" not in turbdb.open(db)["run"].info.fields
    np.save(tmp_path / "p.npy", np.nan_to_num(broken))
    ingest_inputs(db, "run", "pressure", [tmp_path / "p.npy"], units="Pa", given={"units"}, quiet=True)
    info = turbdb.open(db)["run"].info
    assert info.fields["pressure"].units == "Pa" and info.steps_present("pressure") == [0]


def test_numbered_inputs_in_the_shells_text_order_are_refused_or_sorted_as_asked(tmp_path):
    for i in range(1, 13):
        np.save(tmp_path / f"p_{i}.npy", np.full((8, 8, 8), float(i), dtype=np.float32))
    as_the_shell_lists = sorted(tmp_path.glob("p_*.npy"))  # p_1, p_10, p_11, p_12, p_2, …
    with pytest.raises(turbdb.InvalidRequestError, match="--sort numbers"):
        ingest_inputs(tmp_path / "db", "run", "pressure", as_the_shell_lists, quiet=True)
    ingest_inputs(tmp_path / "db", "run", "pressure", as_the_shell_lists, sort="numbers", quiet=True)
    np.testing.assert_array_equal(stored(tmp_path / "db", "pressure")[:, 0, 0, 0, 0], np.arange(1, 13))
    ingest_inputs(tmp_path / "db2", "run", "pressure", as_the_shell_lists, sort="given", quiet=True)
    np.testing.assert_array_equal(stored(tmp_path / "db2", "pressure")[:, 0, 0, 0, 0],
                                  [1, 10, 11, 12, 2, 3, 4, 5, 6, 7, 8, 9])


def test_steps_stored_before_digests_were_kept_are_compared_with_the_stored_values(tmp_path):
    # A dataset ingested by a version whose journal knew steps by file size and time only.
    rng = np.random.default_rng(5)
    paths = []
    for i in range(2):
        np.save(tmp_path / f"u_{i}.npy", rng.standard_normal((8, 8, 8)).astype(np.float32))
        paths.append(tmp_path / f"u_{i}.npy")
    db = tmp_path / "db"
    ingest_inputs(db, "run", "pressure", paths, quiet=True)
    dataset = turbdb.open(db)["run"]

    def forget_digests(attrs):  # the journal of then: identities with size and time
        journal = attrs["ingest"]["pressure"]
        journal["done"] = {json.dumps([*json.loads(key), int(entry.split()[3]), int(entry.split()[4])], separators=(",", ":")):
                           int(entry.split()[0]) for key, entry in journal.pop("steps").items()}
        journal.pop("hows")

    dataset.update_attrs(forget_digests)
    for path in paths:
        os.utime(path, ns=(0, 10**18))  # touched: another identity
    ingest_inputs(db, "run", "pressure", paths, quiet=True)
    assert turbdb.open(db)["run"].info.nt == 2, "not stored again"
    np.save(paths[1], np.ones((8, 8, 8), np.float32))
    with pytest.raises(turbdb.InvalidRequestError, match=r"u_1.npy \(step 0\) \(time index 1"):
        ingest_inputs(db, "run", "pressure", paths, quiet=True)


def test_a_file_with_fewer_steps_replaced_says_which_stored_steps_stay(tmp_path, capsys):
    path, db = tmp_path / "p.npy", tmp_path / "db"
    np.save(path, np.arange(3, dtype=np.float32)[:, None, None, None] * np.ones((3, 8, 8, 8), np.float32))
    ingest_inputs(db, "run", "pressure", [path], source_options={"axes": "tzyx"}, quiet=True)
    np.save(path, 100 + np.arange(2, dtype=np.float32)[:, None, None, None] * np.ones((2, 8, 8, 8), np.float32))
    ingest_inputs(db, "run", "pressure", [path], source_options={"axes": "tzyx"}, replace=True)
    assert "now holds 2 step(s); time indices 2 stored from its later steps before stay" in capsys.readouterr().err
    np.testing.assert_array_equal(stored(db, "pressure")[:, 0, 0, 0, 0], [100, 101, 2])


def test_decimal_times_and_numbered_folders_sort_by_their_numbers(tmp_path):
    decimals = [tmp_path / f"t_{t}.npy" for t in ("0.1", "0.15", "0.2")]
    for i, path in enumerate(decimals):
        np.save(path, np.full((8, 8, 8), float(i), np.float32))
    ingest_inputs(tmp_path / "db", "run", "pressure", decimals, quiet=True)  # in order already
    np.testing.assert_array_equal(stored(tmp_path / "db", "pressure")[:, 0, 0, 0, 0], [0, 1, 2])
    folders = []
    for i in (1, 10, 11, 2, 3):  # as the shell lists step_*/u.npy
        (tmp_path / f"step_{i}").mkdir()
        np.save(tmp_path / f"step_{i}" / "u.npy", np.full((8, 8, 8), float(i), np.float32))
        folders.append(tmp_path / f"step_{i}" / "u.npy")
    with pytest.raises(turbdb.InvalidRequestError, match="--sort numbers"):
        ingest_inputs(tmp_path / "db2", "run", "pressure", folders, quiet=True)
    ingest_inputs(tmp_path / "db2", "run", "pressure", folders, sort="numbers", quiet=True)
    np.testing.assert_array_equal(stored(tmp_path / "db2", "pressure")[:, 0, 0, 0, 0], [1, 2, 3, 10, 11])
