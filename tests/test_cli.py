"""The turbdb command line as a user runs it: a real subprocess, real files."""

import json
import subprocess
import sys

import numpy as np
import pytest

import turbdb


def run(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "turbdb.cli", *map(str, args)], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture
def db(tmp_path):
    ds = turbdb.create_dataset(tmp_path / "db", "flow", grid=(16, 16, 16), times=[0, 1], atom=4, partition=8)
    rng = np.random.default_rng(3)
    for t in range(2):
        ds.write("velocity", t, rng.standard_normal((16, 16, 16, 3)))
        ds.write("pressure", t, rng.standard_normal((16, 16, 16)))
    return tmp_path / "db"


def test_help_explains_every_command():
    out = run("--help").stdout
    for command in ("simulate", "ingest", "info", "verify", "demo"):
        assert command in out
        assert "Usage" in run(command, "--help").stdout


def test_query_help_names_every_method_operator_and_temporal_method():
    # The CLI lists them literally (its --help must not import numpy): they must not drift.
    from click.testing import CliRunner

    from turbdb.arguments import METHODS, OPERATORS, TEMPORALS
    from turbdb.cli import main

    out = " ".join(CliRunner().invoke(main, ["query", "--help"], terminal_width=400).output.split())
    for name in (*METHODS, *OPERATORS, *TEMPORALS):
        assert name in out, f"turbdb query --help does not name {name!r}"


def test_info_prints_the_metadata_and_json(db):
    out = run("info", db).stdout
    assert "16 x 16 x 16" in out and "2/2 steps written" in out
    assert '"grid": [' in run("info", db, "flow", "--json").stdout


def test_verify_passes_clean_data(db):
    result = run("verify", db)
    assert "flow/velocity: 16 shards" in result.stdout and "ok" in result.stdout


def test_verify_names_the_shard_with_a_flipped_byte_and_exits_non_zero(db):
    shard = db / "flow" / "velocity" / "c" / "1" / "1" / "0" / "1" / "0"
    raw = bytearray(shard.read_bytes())
    raw[777] ^= 0x40
    shard.write_bytes(bytes(raw))
    result = run("verify", db, "flow", check=False)
    assert result.returncode == 1
    assert str(shard) in result.stdout and "checksum" in result.stdout
    assert "Traceback" not in result.stderr
    # One damaged shard of the step is that, not "every shard of this step is missing".
    assert "every shard" not in result.stdout and "1 problem(s)" in result.stdout


def test_verify_names_a_truncated_and_a_missing_shard(db):
    truncated = db / "flow" / "pressure" / "c" / "0" / "0" / "0" / "0" / "0"
    truncated.write_bytes(truncated.read_bytes()[:100])
    missing = db / "flow" / "pressure" / "c" / "1" / "1" / "1" / "1" / "0"
    missing.unlink()
    result = run("verify", db, check=False)
    assert result.returncode == 1
    assert str(truncated) in result.stdout and "shorter than its index" in result.stdout
    assert str(missing) in result.stdout and "missing" in result.stdout


def test_verify_finds_a_whole_step_lost_and_says_when_it_checked_nothing(tmp_path, db):
    import shutil

    # Every shard of velocity's step 1 gone, while pressure has it: a hole, not "not written yet".
    shutil.rmtree(db / "flow" / "velocity" / "c" / "1")
    ds = turbdb.open(db)["flow"]
    ds.append_times([2.0, 3.0])
    rng = np.random.default_rng(0)
    for t in (2, 3):
        ds.write("velocity", t, rng.standard_normal((16, 16, 16, 3)))
    result = run("verify", db, check=False)
    assert result.returncode == 1 and "velocity/c/1 (time step 1): every shard of this step is missing" in result.stdout
    # pressure's steps 2 and 3 were never written: at the end, not a hole, and nothing says otherwise.
    assert "flow/pressure: 16 shards, 128 atoms, 2 complete steps: ok" in result.stdout
    # A stray file outside the grid's shards is not counted as one.
    stray = db / "flow" / "pressure" / "c" / "1" / "9" / "9" / "9"
    stray.mkdir(parents=True)
    (stray / "0").write_text("hi")
    assert turbdb.open(db)["flow"].info.fields["pressure"].steps_present == (0, 1)
    # An array whose own shape disagrees with the dataset: other Zarr readers would misread it.
    array = db / "flow" / "pressure" / "zarr.json"
    document = json.loads(array.read_text())
    document["shape"][0] = 1
    array.write_text(json.dumps(document))
    result = run("verify", db, check=False)
    assert "pressure/zarr.json: the array's shape is [1, 16, 16, 16, 1], but the dataset holds [4," in result.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("verify", empty, check=False)
    assert result.returncode == 1 and "nothing was checked" in result.stderr
    (db / "flow" / "zarr.json").unlink()
    result = run("verify", db, check=False)
    assert result.returncode == 1 and "flow: damaged: it holds field arrays but no zarr.json" in result.stdout


def test_a_shard_copied_from_another_dataset_of_the_same_grid_is_refused(tmp_path, db):
    twin = turbdb.create_dataset(tmp_path / "db", "twin", grid=(16, 16, 16), times=[0, 1], atom=4, partition=8)
    twin.write("velocity", 1, np.zeros((16, 16, 16, 3)))
    shard = ("velocity", "c", "1", "1", "0", "1", "0")
    (db / "flow").joinpath(*shard).write_bytes((db / "twin").joinpath(*shard).read_bytes())
    with pytest.raises(turbdb.CorruptDataError, match="copied from another dataset"):
        turbdb.open(db)["flow"].query("velocity", np.full((1, 3), 2.0), time=1.0)
    result = run("verify", db, "flow", check=False)
    assert result.returncode == 1 and "copied from another dataset" in result.stdout
    # A field made before ids existed (no turbdb_field_id) keeps the first header layout.
    array = db / "twin" / "pressure" / "zarr.json"
    document = json.loads(array.read_text())
    del document["attributes"]["turbdb_field_id"]
    array.write_text(json.dumps(document))
    old = turbdb.open(db)["twin"]
    old.update_attrs(lambda attrs: None)  # the consolidated copy follows the array's zarr.json
    old.write("pressure", 0, np.ones((16, 16, 16)))
    assert (db / "twin" / "pressure" / "c" / "0" / "0" / "0" / "0" / "0").read_bytes()[8] == 1
    assert old.query("pressure", np.full((1, 3), 2.0), time=0.0, method="lag4")[0] == pytest.approx(1.0)
    assert "twin/pressure: 8 shards" in run("verify", db, "twin").stdout


def test_verify_names_metadata_that_misleads_other_zarr_readers(db):
    assert "metadata" not in run("verify", db).stdout
    flow = db / "flow"
    group = json.loads((flow / "zarr.json").read_text())
    group["consolidated_metadata"]["metadata"]["velocity"]["shape"][0] = 1  # stale copy
    (flow / "zarr.json").write_text(json.dumps(group))
    times = bytearray((flow / "time" / "c" / "0").read_bytes())
    times[9] ^= 0x01  # the second time, 1.0, now slightly off
    (flow / "time" / "c" / "0").write_bytes(bytes(times))
    array = json.loads((flow / "pressure" / "zarr.json").read_text())
    array["dimension_names"][1:4] = ["x", "y", "z"]
    array["fill_value"] = 0.0
    (flow / "pressure" / "zarr.json").write_text(json.dumps(array))
    (flow / "notes").mkdir()
    (flow / "notes" / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    result = run("verify", db, check=False)
    assert result.returncode == 1 and "flow: metadata:" in result.stdout, result.stdout
    for expected in ("velocity/zarr.json: the group's consolidated metadata is stale: it differs",
                     "pressure/zarr.json: the group's consolidated metadata is stale",
                     "time/: the time coordinate holds", "dimension_names are", "fill_value is 0.0",
                     "notes/zarr.json: an array the dataset's attributes do not list"):
        assert expected in result.stdout, (expected, result.stdout)
    assert "Traceback" not in result.stderr
    (flow / "x" / "c" / "0").write_bytes(b"short")
    assert "x/: the x coordinate cannot be read" in run("verify", db, check=False).stdout


def test_verify_names_a_lost_or_damaged_database_zarr_json_and_how_to_restore_it(db):
    # turbdb reads its datasets without it, Zarr readers (zarr.open_group(DB)) do not.
    for damage in (lambda p: p.unlink(), lambda p: p.write_text("[1]"), lambda p: p.write_text('{"zarr_format": 2}')):
        damage(db / "zarr.json")
        result = run("verify", db, check=False)
        assert result.returncode == 1 and "Zarr readers cannot open the database" in result.stdout, result.stdout
        restore = result.stdout.split("restore it with: ")[1].splitlines()[0]
        subprocess.run(restore, shell=True, check=True)
        assert run("verify", db).returncode == 0
        zarr = pytest.importorskip("zarr")
        assert zarr.open_group(str(db), mode="r").attrs["turbdb_database"]["format_version"] == turbdb.info.FORMAT_VERSION


def test_verify_finds_a_simulated_field_that_lost_its_last_step(tmp_path):
    made = {"generator": "turbdb simulate --kind synthetic"}
    ds = turbdb.create_dataset(tmp_path / "db", "sim", grid=(8, 8, 8), times=[0, 1, 2], provenance=made)
    for t in range(3):
        ds.write("velocity", t, np.ones((8, 8, 8, 3)))
        ds.write("pressure", t, np.ones((8, 8, 8)))
    import shutil

    shutil.rmtree(ds.path / "velocity" / "c" / "2")
    result = run("verify", tmp_path / "db", check=False)
    assert result.returncode == 1 and "velocity/c/2 (time step 2): every shard of this step is missing" in result.stdout
    # Not while it runs (its last time not yet reached): the newest step may lack a field
    # for a moment; and not for a field added later for some steps only.
    ds.write("velocity", 2, np.ones((8, 8, 8, 3)))
    ds.append_times([3.0, 4.0])
    ds.write("velocity", 3, np.ones((8, 8, 8, 3)))
    ds.add_field("tracer", 1)
    ds.write("tracer", 0, np.ones((8, 8, 8)))
    result = run("verify", tmp_path / "db")
    assert "every shard" not in result.stdout, result.stdout


def test_verify_notes_declared_steps_that_hold_no_data_yet(tmp_path):
    # What a simulate stopped by SIGKILL leaves: every time declared, no step written. It
    # verified "ok" without a word.
    turbdb.create_dataset(tmp_path / "db", "sim", grid=(8, 8, 8), times=[0, 1, 2, 3],
                          provenance={"generator": "turbdb simulate --kind synthetic"})
    result = run("verify", tmp_path / "db")
    assert "time step(s) 0-3 of 4 are declared but hold no data yet" in result.stdout, result.stdout
    assert "--if-missing" in result.stdout
    # Not for an ingested dataset: simulate would refuse it, and --overwrite lose the data.
    turbdb.create_dataset(tmp_path / "db2", "run", grid=(8, 8, 8), times=[0, 1],
                          provenance={"generator": "turbdb ingest"})
    result = run("verify", tmp_path / "db2")
    assert "--if-missing" not in result.stdout and "running the same ingest again" in result.stdout


def test_verify_metadata_agrees_with_a_dataset_growing_meanwhile(tmp_path):
    import threading

    ds = turbdb.create_dataset(tmp_path, "grow", grid=(8, 8, 8), times=[0.0], fields={"p": 1})
    stop = threading.Event()

    def grow():
        t = 1
        while not stop.is_set():
            ds.append_times([float(t)])
            t += 1

    grower = threading.Thread(target=grow)
    grower.start()
    try:
        seen = [turbdb.open(tmp_path)["grow"].verify_metadata() for _ in range(40)]
    finally:
        stop.set()
        grower.join()
    assert seen == [[]] * 40 and len(ds.info.times) > 1


def test_verify_finds_a_step_the_ingest_journal_stored_and_whose_shards_are_gone(tmp_path):
    import shutil

    from turbdb.ingest.pipeline import ingest_inputs

    paths = []
    for t in range(2):
        paths.append(tmp_path / f"u{t}.npy")
        np.save(paths[-1], np.full((16, 16, 16, 3), float(t), np.float32))
    ingest_inputs(tmp_path / "db", "run", "velocity", paths, quiet=True)
    shutil.rmtree(tmp_path / "db" / "run" / "velocity" / "c" / "1")  # the last step: no hole to see
    result = run("verify", tmp_path / "db", check=False)
    assert result.returncode == 1 and "the ingest journal says it was stored" in result.stdout


def test_errors_are_one_line_without_traceback(tmp_path, db):
    result = run("info", tmp_path / "nothing", check=False)
    assert result.returncode == 1 and "error: no database" in result.stderr and "Traceback" not in result.stderr
    result = run("info", db, "nosuch", check=False)
    assert result.returncode == 1 and "available: flow" in result.stderr
    (db / "flow" / "zarr.json").write_text("{not json")
    result = run("verify", db, "flow", check=False)
    assert result.returncode == 1 and "not valid JSON" in result.stderr and "Traceback" not in result.stderr


def test_an_operating_system_error_is_one_line_that_says_what_to_do(tmp_path, db):
    (tmp_path / "afile").write_text("in the way")
    result = run("cutout", db, "flow", "--field", "pressure", "--time", 0, "--out", tmp_path / "afile" / "box.npy",
                 check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "afile" in result.stderr and "choose another path" in result.stderr
    assert result.stderr.count("\n") == 1


def test_simulate_synthetic_writes_a_dataset_and_skips_it_if_present(tmp_path):
    run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 3, "--kind", "synthetic", "--quiet")
    info = turbdb.open(tmp_path)["syn"].info
    assert info.grid == (16, 16, 16) and info.steps_present() == [0, 1, 2]
    again = run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 3, "--kind", "synthetic", "--if-missing")
    assert "nothing to do" in again.stderr + again.stdout
    refused = run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 3, "--kind", "synthetic", check=False)
    assert refused.returncode == 1 and "--overwrite" in refused.stderr
    # --if-missing does not take a dataset of other sizes for the one asked for.
    other = run("simulate", tmp_path, "--name", "syn", "--grid", 32, "--steps", 3, "--kind", "synthetic", "--if-missing",
                check=False)
    assert other.returncode == 1 and "is a grid of 16 x 16 x 16 with 3 steps, not the run asked for" in other.stderr
    # ... nor one of another seed or kind (its data is not what was asked for).
    seeded = run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 3, "--kind", "synthetic", "--seed", 5,
                 "--if-missing", check=False)
    assert seeded.returncode == 1 and "other settings (seed)" in seeded.stderr, seeded.stderr
    # A run refused (odd grid: a usage error; too large for memory) creates nothing, so the corrected one runs.
    for grid, status in ((9, 2), (4096, 1)):
        failed = run("simulate", tmp_path, "--name", "bad", "--grid", grid, "--steps", 2, "--kind", "synthetic",
                     check=False)
        assert failed.returncode == status and "Traceback" not in failed.stderr and not (tmp_path / "bad").exists()
    run("simulate", tmp_path, "--name", "bad", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--quiet")


def test_simulate_if_missing_replaces_only_an_interrupted_run_of_its_own(tmp_path):
    # It deleted a folder of the user's files, or a dataset made otherwise, taken for "incomplete".
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    mine = run("simulate", tmp_path, "--name", "mine", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--if-missing",
               check=False)
    assert mine.returncode == 1 and "is not a dataset" in mine.stderr and (tmp_path / "mine" / "notes.txt").exists()
    other = turbdb.create_dataset(tmp_path, "other", grid=(16, 16, 16), times=[0.0, 0.01], provenance={"source": "lab"})
    other.write("pressure", 0, np.ones((16, 16, 16)))
    other.write("velocity", 0, np.ones((16, 16, 16, 3)))
    refused = run("simulate", tmp_path, "--name", "other", "--grid", 16, "--steps", 2, "--kind", "synthetic",
                  "--if-missing", check=False)
    assert refused.returncode == 1 and "made by something else than turbdb simulate" in refused.stderr, refused.stderr
    assert turbdb.open(tmp_path)["other"].info.steps_present() == [0]
    # An interrupted run of its own is run again.
    run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--quiet")
    for step in (tmp_path / "syn" / "pressure" / "c").iterdir():
        if step.name == "1":
            import shutil
            shutil.rmtree(step)
    again = run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--if-missing")
    assert "simulating it again" in again.stderr + again.stdout
    assert turbdb.open(tmp_path)["syn"].info.steps_present() == [0, 1]


def test_simulate_refuses_to_replace_a_dataset_another_process_is_writing(tmp_path):
    # make demo started twice: the second run deleted the steps the first was storing.
    run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--quiet")
    import shutil
    shutil.rmtree(tmp_path / "syn" / "pressure" / "c" / "1")  # as if the first run were still storing it
    dataset = turbdb.open(tmp_path)["syn"]
    with dataset.writer_lock():
        for flags in (["--if-missing"], ["--overwrite"]):
            busy = run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 2, "--kind", "synthetic", *flags,
                       check=False)
            assert busy.returncode != 0 and "another process is writing dataset 'syn'" in busy.stderr, busy.stderr
    assert turbdb.open(tmp_path)["syn"].info.steps_present() == [0]
    # Created again over, a dataset keeps its writer lock file: a lock held on it still holds.
    with dataset.writer_lock():
        turbdb.create_dataset(tmp_path, "syn", grid=(16, 16, 16), times=[0.0], overwrite=True)
        with pytest.raises(turbdb.DatasetBusyError), turbdb.open(tmp_path)["syn"].writer_lock():
            pass


def test_simulate_if_missing_replaces_a_creation_stopped_before_its_metadata(tmp_path):
    run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--quiet")
    (tmp_path / "syn" / "zarr.json").unlink()  # create_dataset writes it last, before any step
    import shutil
    for field in ("velocity", "pressure"):
        shutil.rmtree(tmp_path / "syn" / field / "c")
    again = run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--if-missing")
    assert "simulating it again" in again.stderr + again.stdout
    assert turbdb.open(tmp_path)["syn"].info.steps_present() == [0, 1]
    # One whose steps were stored is no interrupted creation: its zarr.json was lost after.
    (tmp_path / "syn" / "zarr.json").unlink()
    refused = run("simulate", tmp_path, "--name", "syn", "--grid", 16, "--steps", 2, "--kind", "synthetic", "--seed", 3,
                  "--if-missing", check=False)
    assert refused.returncode == 1 and "is not a dataset" in refused.stderr
    assert (tmp_path / "syn" / "velocity" / "c" / "1").exists()


def test_verify_and_info_report_every_dataset_when_one_has_damaged_metadata(db):
    import json as _json

    damaged = turbdb.create_dataset(db, "a_damaged", grid=(8, 8, 8), times=[0], atom=4, partition=8)
    document = _json.loads((damaged.path / "zarr.json").read_text())
    document["attributes"]["turbdb"]["grid"] = [-8, 8, 8]
    (damaged.path / "zarr.json").write_text(_json.dumps(document))
    shard = db / "flow" / "velocity" / "c" / "1" / "1" / "0" / "1" / "0"
    raw = bytearray(shard.read_bytes())
    raw[777] ^= 0x40
    shard.write_bytes(bytes(raw))

    result = run("verify", db, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "a_damaged" in result.stdout and "damaged" in result.stdout
    assert str(shard) in result.stdout, "the corrupt shard of the next dataset must still be found"

    info = run("info", db, check=False)
    assert info.returncode == 1 and "Traceback" not in info.stderr
    assert "a_damaged: DAMAGED" in info.stdout and "16 x 16 x 16" in info.stdout


def test_info_of_a_dataset_directory_describes_that_dataset(db):
    out = run("info", db / "flow").stdout
    assert out.startswith("dataset flow") and "2/2 steps written" in out
    wrong = run("info", db / "flow" / "velocity", check=False)
    assert wrong.returncode == 1 and f"open the database {db}" in wrong.stderr


def test_token_prints_an_entry_the_server_accepts(tmp_path):
    plain = run("token", "alice", "--max-points", "5000", "--datasets", "flow,other").stdout
    hashed = run("token", "bob", "--hashed")
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(plain + hashed.stdout)
    from turbdb.service.tokens import Tokens

    loaded = Tokens.load(tokens)
    secret = next(line.split('"')[1] for line in plain.splitlines() if line.startswith("token ="))
    alice = loaded.identify(secret)
    assert alice.name == "alice" and alice.max_points == 5000 and alice.datasets == ("flow", "other")
    # stderr to a file (2> bob-secret.txt, as docs/service.md shows) holds the secret alone.
    assert loaded.identify(hashed.stderr.strip()).name == "bob"
    assert "sha256 =" in hashed.stdout and hashed.stderr.strip() not in hashed.stdout


def test_points_files_may_have_a_header_and_comments_and_say_what_is_wrong(tmp_path):
    from click import BadParameter

    from turbdb.cli.inputs import read_points

    rows = np.array([[1.0, 2.0, 3.0], [4.0, 5.5, 6.0]])
    files = {
        "pandas.csv": "x,y,z\n1,2,3\n4,5.5,6\n",
        "comment.csv": "# points of run 7\n\n x , y , z \n1,2,3\n4,5.5,6\n",
        "plain.csv": "1,2,3\n4,5.5,6\n",
        "blanks.txt": "x y z\n1 2 3\n4 5.5 6\n",
        "excel.csv": "\ufeffx,y,z\n1,2,3\n4,5.5,6\n",  # a byte-order mark, as spreadsheets write
        "bom.csv": "\ufeff1,2,3\n4,5.5,6\n",
        "quoted.csv": '"x","y","z"\n"1","2","3"\n4,5.5,6\n',
        "semicolons.csv": "x;y;z\n1;2;3\n4;5.5;6\n",  # was taken for a header, then refused
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        np.testing.assert_array_equal(read_points(tmp_path / name), rows, err_msg=name)
    for name, text, words in [
        ("empty.csv", "", "holds no points"),
        ("header_only.csv", "x,y,z\n", "holds no points"),
        ("bad_row.csv", "x,y,z\n1,2,3\n4,five,6\n", "line 3 holds something that is not a number: '4,five,6'"),
        # A typo in the first row is not a header: skipped as one, it lost a point without a word.
        ("typo.csv", "1,2,3e\n4,5,6\n", "line 1 holds something that is not a number"),
        ("short.txt", "1 2 3\n4 5 6 7\n", "line 2 has 4 value"),
    ]:
        (tmp_path / name).write_text(text)
        with pytest.raises(BadParameter, match=words):
            read_points(tmp_path / name)


def test_query_says_which_stored_step_answered_a_time_between_steps(tmp_path, db):
    (tmp_path / "p.csv").write_text("1,2,3\n")
    between = run("query", db, "flow", "--field", "pressure", "--points", tmp_path / "p.csv", "--time", "0.7",
                  "--out", tmp_path / "p.npy").stdout
    assert "t = 0.7 (the nearest stored step, t = 1)" in between
    # Halfway between two steps the later one answers (as the engine reads): it named the earlier.
    tie = run("query", db, "flow", "--field", "pressure", "--points", tmp_path / "p.csv", "--time", "0.5",
              "--out", tmp_path / "tie.npy").stdout
    assert "t = 0.5 (the nearest stored step, t = 1)" in tie
    np.testing.assert_array_equal(np.load(tmp_path / "tie.npy"), np.load(tmp_path / "p.npy"))
    on_a_step = run("query", db, "flow", "--field", "pressure", "--points", tmp_path / "p.csv", "--time", "1",
                    "--out", tmp_path / "p.npy").stdout
    assert "t = 1, " in on_a_step and "nearest" not in on_a_step
    refused = run("track", db, "flow", "--points", "0", "--start", "0", "--end", "1", "--dt", "0.5",
                  "--out", tmp_path / "t.npy", check=False)
    assert refused.returncode == 2 and "track at least one particle" in refused.stderr


def test_query_reads_a_csv_it_wrote_with_its_header(tmp_path, db):
    # The answer's own CSV has a header (ux,uy,uz): fed back as points, it is read, not refused.
    (tmp_path / "p.csv").write_text("x,y,z\n0.5,1,2\n3,2,1\n")
    run("query", db, "flow", "--field", "velocity", "--points", tmp_path / "p.csv", "--time", "0",
        "--out", tmp_path / "u.csv")
    run("query", db, "flow", "--field", "pressure", "--points", tmp_path / "u.csv", "--time", "0",
        "--out", tmp_path / "q.npy")
    assert np.load(tmp_path / "q.npy").shape == (2, 1)
    # A float64 answer keeps every digit in CSV, as in .npy (it kept 9, float32's).
    for suffix in ("csv", "npy"):
        run("query", db, "flow", "--field", "velocity", "--points", tmp_path / "p.csv", "--time", "0",
            "--dtype", "float64", "--out", tmp_path / f"u64.{suffix}")
    written = np.loadtxt(tmp_path / "u64.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(written, np.load(tmp_path / "u64.npy").reshape(written.shape))
    (tmp_path / "none.csv").write_text("x,y,z\n")
    failed = run("query", db, "flow", "--field", "velocity", "--points", tmp_path / "none.csv", "--time", "0",
                 "--out", tmp_path / "v.npy", check=False)
    assert failed.returncode != 0 and "holds no points" in failed.stderr and "Traceback" not in failed.stderr


def test_an_output_name_numpy_would_change_is_refused_before_any_work(tmp_path, db):
    # np.save adds .npy to any other name: "wrote t.npz" was a file named t.npz.npy.
    failed = run("track", db, "flow", "--points", "4", "--start", "0", "--end", "1", "--dt", "0.5",
                 "--out", tmp_path / "t.npz", check=False)
    assert failed.returncode != 0 and "t.npz must end in .npy" in failed.stderr
    (tmp_path / "p.csv").write_text("1,2,3\n")
    failed = run("query", db, "flow", "--field", "velocity", "--points", tmp_path / "p.csv", "--time", "0",
                 "--out", tmp_path / "u.txt", check=False)
    assert failed.returncode != 0 and "u.txt must end in .npy or .csv" in failed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db", "p.csv"]
    run("track", db, "flow", "--points", "4", "--start", "0", "--end", "1", "--dt", "0.5", "--out", tmp_path / "t.npy")
    assert np.load(tmp_path / "t.npy").shape == (3, 4, 3)


def test_cutout_time_ranges_are_matched_relative_to_the_stored_times():
    # An absolute 1e-9 took every step of times 1e-10 apart for --ts 1e-10 --te 1e-10.
    from turbdb.cli.cutout import stored_times

    assert stored_times([0.0, 1e-10, 2e-10, 3e-10], None, 1e-10, 1e-10, 1) == [1e-10]
    assert stored_times([0.0, 0.1, 0.2, 0.30000000000000004], None, 0.1, 0.3, 1) == [0.1, 0.2, 0.30000000000000004]
    assert stored_times([10.0, 10.5, 11.0], None, 10.0, 11.0, 2) == [10.0, 11.0]
    assert stored_times([1e6, 1e6 + 1e-4, 1e6 + 2e-4], None, 1e6 + 1e-4, 1e6 + 1e-4, 1) == [1e6 + 1e-4]
