"""What every command does alike (docs/cli.md): exit status, streams whose reader leaves,
progress bars, colours, ``~`` in paths, points from files and pipes, names checked first,
messages in the command line's own words."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading

import numpy as np
import pytest
from click.testing import CliRunner

import turbdb
from turbdb.cli import main


def run(*args, env=None, cwd=None, check=True, **kwargs):
    result = subprocess.run([sys.executable, "-m", "turbdb.cli", *map(str, args)], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, cwd=cwd, timeout=120, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def invoke(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


from test_cli import db  # noqa: E402,F401  (the CLI tests' two-step 16³ database)


@pytest.fixture
def points(tmp_path):
    path = tmp_path / "pts.csv"
    path.write_text("x,y,z\n0.5,1,2\n3,2,1\n")
    return path


# --- ~ in paths ---------------------------------------------------------------------------


def test_a_tilde_in_any_path_is_the_home_directory(tmp_path, db, points):
    # The shell leaves --out=~/q.csv and quoted paths alone: a folder named ~ was made here.
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir(), here.mkdir()
    (home / "pts.csv").write_text(points.read_text())
    env = {"HOME": str(home)}
    run("query", db, "flow", "--field", "pressure", "--time", 0, "--points=~/pts.csv", "--out=~/q.csv", env=env, cwd=here)
    run("cutout", db, "flow", "--field", "pressure", "--time", 0, "--out=~/c.nc", env=env, cwd=here)
    run("track", db, "flow", "--points=~/pts.csv", "--start", 0, "--end", 1, "--dt", 0.5, "--out=~/t.npy", env=env,
        cwd=here)
    os.rename(db, home / "db")
    run("stats", "spectrum", "~/db", "flow", "--time", 0, env=env, cwd=here)
    assert {"q.csv", "c.nc", "t.npy"} <= {p.name for p in home.iterdir()}
    assert (home / "db" / "flow-stats" / "spectrum_t0.json").is_file()
    assert list(here.iterdir()) == [] and not any(p.name.startswith(".turbdb-tmp") for p in home.iterdir())


def test_outputs_and_points_files_expand_a_tilde_from_python_too(tmp_path, monkeypatch):
    from turbdb.cli.inputs import read_points
    from turbdb.output_files import replacing

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "p.txt").write_text("1 2 3\n")
    np.testing.assert_array_equal(read_points("~/p.txt"), [[1, 2, 3]])
    monkeypatch.chdir(tmp_path)
    with replacing("~/out.txt") as (temporary,):
        temporary.write_text("done")
    assert (tmp_path / "out.txt").read_text() == "done" and not (tmp_path / "~").exists()


# --- a reader that leaves early ---------------------------------------------------------


def _without_reader(*args, both=False, env=None):
    """Runs turbdb with stdout (and with ``both`` stderr too) a pipe nobody reads: every
    write to it fails with EPIPE, as after ``| true``."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "turbdb.cli", *map(str, args)], stdout=write_end,
                              stderr=write_end if both else subprocess.PIPE, text=True, timeout=120,
                              env={**os.environ, **(env or {})})
    finally:
        os.close(write_end)


def test_a_reader_that_leaves_early_stops_the_output_not_the_work(tmp_path, db, points):
    # Before: "error: Broken pipe", status 2, and a simulation stopped at its first log line.
    helped = _without_reader("--help")
    assert helped.returncode == 0 and helped.stderr == ""
    simulated = _without_reader("simulate", tmp_path / "s", "--name", "syn", "--grid", 16, "--steps", 3, "--kind",
                                "synthetic")
    assert simulated.returncode == 0 and "Broken pipe" not in simulated.stderr, simulated.stderr
    assert turbdb.open(tmp_path / "s")["syn"].info.steps_present() == [0, 1, 2]
    queried = _without_reader("query", db, "flow", "--field", "velocity", "--time", 0, "--points", points,
                              "--out", tmp_path / "q.csv")
    assert queried.returncode == 0 and queried.stderr == ""
    assert np.loadtxt(tmp_path / "q.csv", delimiter=",", skiprows=1).shape == (2, 3)
    # 2>&1 | head: stderr has no reader either.
    both = _without_reader("simulate", tmp_path / "s", "--name", "syn2", "--grid", 16, "--steps", 2, "--kind",
                           "synthetic", both=True)
    assert both.returncode == 0 and turbdb.open(tmp_path / "s")["syn2"].info.steps_present() == [0, 1]
    # A failure still exits 1, whatever became of its output.
    failed = _without_reader("info", tmp_path / "nothing", both=True)
    assert failed.returncode == 1
    # An ASCII stdout, which click writes through its binary buffer (the review found it unguarded).
    ascii_out = _without_reader("info", db, env={"PYTHONIOENCODING": "ascii"})
    assert ascii_out.returncode == 0 and "Broken pipe" not in ascii_out.stderr, ascii_out.stderr


# --- progress bars ----------------------------------------------------------------------


def _on_a_terminal(*args, env=None):
    """(status, what the command wrote to stderr) with stderr a terminal (a pty)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # tqdm draws nothing 0 wide
    try:
        process = subprocess.Popen([sys.executable, "-m", "turbdb.cli", *map(str, args)], stdout=subprocess.DEVNULL,
                                   stderr=slave, env={**os.environ, **(env or {})})
    finally:
        os.close(slave)
    written = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        written += chunk
    os.close(master)
    return process.wait(timeout=120), written.decode(errors="replace")


def test_progress_bars_are_drawn_on_a_terminal_only_and_never_with_tqdm_disable(tmp_path, db, points):
    from turbdb.progress_bars import bar_disabled

    assert bar_disabled(quiet=True) is True
    simulate = ["simulate", tmp_path / "s", "--name", "syn", "--grid", 16, "--steps", 2, "--kind", "synthetic",
                "--overwrite"]
    logged = run(*simulate)  # stderr to a file, as 2> run.log
    assert "generate" not in logged.stderr and "\r" not in logged.stderr and "done:" in logged.stdout
    np.save(tmp_path / "u.npy", np.zeros((16, 16, 16, 3), np.float32))
    ingested = run("ingest", tmp_path / "s", tmp_path / "u.npy", "--name", "in", "--field", "velocity")
    tracked = run("track", db, "flow", "--points", points, "--start", 0, "--end", 1, "--dt", 0.5, "--out",
                  tmp_path / "t.npy")
    assert "%|" not in ingested.stderr + tracked.stderr
    status, shown = _on_a_terminal(*simulate)
    assert status == 0 and "generate" in shown and "2/2" in shown
    status, shown = _on_a_terminal(*simulate, env={"TQDM_DISABLE": "1"})  # was ignored: disable=False was passed
    assert status == 0 and "generate" not in shown
    status, shown = _on_a_terminal(*simulate, "--quiet")
    assert status == 0 and shown == ""


# --- tokens -----------------------------------------------------------------------------


@pytest.mark.parametrize("command, options", [
    (["track"], ["--points", "2", "--start", "0", "--end", "1", "--dt", "0.5", "--out", "t.npy"]),
    (["stats", "rq"], ["--time", "0"]),
    (["stats", "spectrum"], ["--time", "0"]),
])
def test_every_command_that_reads_a_server_takes_a_token(monkeypatch, command, options):
    import turbdb.remote

    sent = []

    def connect(url, token=None, **kwargs):
        sent.append(token)
        raise turbdb.ServiceError("not a real server")

    monkeypatch.setattr(turbdb.remote, "connect", connect)
    given = invoke(*command, "http://127.0.0.1:1", "flow", *options, "--token", "secret")
    from_environment = invoke(*command, "http://127.0.0.1:1", "flow", *options, env={"TURBDB_TOKEN": "from-env"})
    assert given.exit_code == from_environment.exit_code == 1 and sent == ["secret", "from-env"]
    assert "$TURBDB_TOKEN" in invoke(*command, "--help").output


# --- points -----------------------------------------------------------------------------


def test_points_come_from_stdin_and_from_pipes(tmp_path, db, points):
    # --points - and /dev/stdin were refused as "neither a number of particles nor a file".
    query = ["query", db, "flow", "--field", "pressure", "--time", 0, "--out", tmp_path / "q.npy"]
    for spec in ("-", "/dev/stdin"):
        assert "at 2 points" in run(*query, "--points", spec, input=points.read_text()).stdout
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    feeder = threading.Thread(target=lambda: fifo.write_text("1;2;3\n"))
    feeder.start()
    assert "at 1 points" in run(*query, "--points", fifo).stdout
    feeder.join()
    run("track", db, "flow", "--points", "-", "--start", 0, "--end", 1, "--dt", 0.5,
        "--out", tmp_path / "t.npy", input="1 2 3\n")
    assert np.load(tmp_path / "t.npy").shape == (3, 1, 3)
    # A missing file: only track, which also takes a number of particles, says so.
    missing_query = run(*query, "--points", tmp_path / "nothing.csv", check=False)
    missing_track = run("track", db, "flow", "--points", tmp_path / "nothing.csv", "--start", 0, "--end", 1, "--dt",
                        0.5, "--out", tmp_path / "t.npy", check=False)
    assert missing_query.returncode == missing_track.returncode == 2
    assert "number of particles" not in missing_query.stderr and "does not exist" in missing_query.stderr
    assert "neither a number of particles nor a file" in missing_track.stderr


def test_points_files_are_read_by_their_content_whatever_their_ending(tmp_path):
    from click import BadParameter

    from turbdb.cli.inputs import read_points

    rows = np.array([[1.0, 2.0, 3.0], [4.0, 5.5, 6.0]])
    files = {
        "commas.txt": "1,2,3\n4,5.5,6\n",  # line 1 was a header, then line 2 refused
        "semicolons.csv": "1;2;3\n4;5.5;6\n",
        "upper.CSV": "x,y,z\n1,2,3\n4,5.5,6\n",  # read as blank-separated
        "tabs.txt": "x\ty\tz\n1\t2\t3\n4\t5.5\t6\n",
        "blanks.csv": "1 2 3\n4  5.5 6\n",
        "list.json": "[[1, 2, 3], [4, 5.5, 6]]",
        "list.txt": "[[1, 2, 3], [4, 5.5, 6]]\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        np.testing.assert_array_equal(read_points(tmp_path / name), rows, err_msg=name)
    with open(tmp_path / "upper.NPY", "wb") as f:  # np.save would add .npy to the name
        np.save(f, rows)
    np.testing.assert_array_equal(read_points(tmp_path / "upper.NPY"), rows)
    np.savez(tmp_path / "p.npz", points=rows)
    (tmp_path / "noise.bin").write_bytes(bytes(range(256)) * 4)
    for name, words in [("p.npz", "is an .npz (zip) archive, not points"), ("noise.bin", "is a binary file")]:
        with pytest.raises(BadParameter) as refused:
            read_points(tmp_path / name)
        message = refused.value.format_message()
        assert words in message and ".json list of [x, y, z]" in message and "\n" not in message
        assert message.isprintable(), message  # the archive's bytes filled the message
    for name, text, words in [("pairs.json", "[[1, 2], [3, 4]]", "item 0 of .* is \\[1, 2\\], not \\[x, y, z\\]"),
                              ("object.json", '{"x": 1}', "holds a JSON dict"),
                              ("broken.json", "[[1, 2, 3]", "is not valid JSON"),
                              # Numbers written two ways: line 1 was taken for a header, a point lost.
                              ("mixed.txt", "1,2,3\n4 5 6\n", "line 1 has 1 value")]:
        (tmp_path / name).write_text(text)
        with pytest.raises(BadParameter, match=words):
            read_points(tmp_path / name)


# --- names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", ".", "..", "./flow", "flow/", "a" * 300])
def test_a_dataset_name_is_checked_before_anything_else(db, name):
    # '' and '.' were "already exists" (the database itself), and allowed only with --overwrite.
    for extra in ([], ["--overwrite"]):
        result = invoke("simulate", db, "--name", name, "--grid", 16, "--steps", 2, "--kind", "synthetic", *extra)
        assert result.exit_code == 2, result.output
        assert "a letter followed by up to 63" in result.output and "already exists" not in result.output
        assert "too long" not in result.output and len(result.output) < 600
    assert turbdb.open(db).datasets == ["flow"]


def test_a_name_no_dataset_can_have_is_refused_at_once(tmp_path, db, points):
    from turbdb.simulation_run import run_simulation

    result = invoke("query", db, "a" * 5000, "--field", "velocity", "--time", 0, "--points", points,
                    "--out", tmp_path / "q.npy")
    assert result.exit_code == 2 and "cannot name a dataset" in result.output and "too long" not in result.output
    assert len(result.output) < 600
    with pytest.raises(turbdb.InvalidRequestError, match="not allowed"):
        run_simulation(db, "", grid=16, steps=2, kind="synthetic", overwrite=True)


# --- messages in the command line's words -----------------------------------------------


def test_messages_name_the_commands_options_not_the_apis_parameters(tmp_path, db):
    (tmp_path / "box.bin").write_bytes(b"\0" * 64)
    raw = invoke("ingest", tmp_path / "new", tmp_path / "box.bin", "--name", "a", "--field", "u")
    assert raw.exit_code == 1
    assert "--dtype float32" in raw.output and "--shape nz,ny,nx,3" in raw.output and "--format" in raw.output
    assert "dtype=" not in raw.output and "format=" not in raw.output
    np.save(tmp_path / "u.npy", np.zeros((8, 8, 8, 3), np.float32))
    other = invoke("ingest", tmp_path / "new", tmp_path / "u.npy", "--name", "a", "--field", "u",
                   "--dataset-path", "x", "--shape", "8,8,8,3")
    assert "does not take --dataset-path, --shape" in other.output and "dataset_path" not in other.output
    wide = invoke("cutout", db, "flow", "--field", "pressure", "--time", 0, "--filter-width", 99,
                  "--out", tmp_path / "c.npy")
    assert wide.exit_code == 1 and "--filter-width 99 is wider" in wide.output
    for option, value, example in [("--stride", "2,2,2,", "e.g. 2 or 1,2,2"), ("--x", "0.5,8", "e.g. 0,64")]:
        bad = invoke("cutout", db, "flow", "--field", "pressure", "--time", 0, option, value, "--out", tmp_path / "c.npy")
        assert bad.exit_code == 2 and example in bad.output and "64,64,64,3" not in bad.output
    limited = invoke("cutout", db, "flow", "--field", "pressure", "--time", 0, "--out", tmp_path / "c.npy",
                     env={"TURBDB_MAX_RESULT_BYTES": "1000"})
    assert "TURBDB_MAX_RESULT_BYTES" in limited.output and "set_max_result_bytes" not in limited.output


def test_the_python_api_keeps_its_own_words(db):
    with pytest.raises(turbdb.InvalidRequestError, match="filter_width 99 is wider"):
        turbdb.open(db)["flow"].cutout("pressure", time=0.0, filter_width=99)


def test_rewording_touches_only_the_commands_own_parameters():
    from turbdb.cli.cutout import cutout
    from turbdb.cli.wording import reworded

    assert reworded("tracking needs time steps 3-5 of velocity", cutout) == "tracking needs time steps 3-5 of velocity"
    assert reworded("filter_width 9 is wider; see u_1.npy", cutout) == "--filter-width 9 is wider; see u_1.npy"
    assert reworded("nu=0.1, dt=0.01", cutout) == "nu=0.1, dt=0.01"
    # The user's own quoted values stay as given (the review: a dataset named 'filter_width').
    assert reworded("no dataset 'filter_width' in db; filter_width 3", cutout) == \
        "no dataset 'filter_width' in db; --filter-width 3"


def test_an_xdmf_file_is_no_input_and_the_message_names_its_data(tmp_path, db):
    invoke("cutout", db, "flow", "--field", "pressure", "--time", 0, "--out", tmp_path / "box.xmf")
    result = invoke("ingest", tmp_path / "new", tmp_path / "box.xmf", "--name", "a", "--field", "p")
    assert result.exit_code == 1 and "XDMF description, not an input format" in result.output
    assert str(tmp_path / "box.h5") in result.output and "raw binary" not in result.output


# --- colours, warnings, notes -----------------------------------------------------------


def test_no_color_turns_every_colour_off(tmp_path, db):
    coloured = invoke("info", tmp_path / "nothing", color=True)
    assert "\x1b[" in coloured.output  # the check below can see a colour
    plain = invoke("info", tmp_path / "nothing", color=True, env={"NO_COLOR": "1"})
    verified = invoke("verify", db, color=True, env={"NO_COLOR": "1"})
    assert plain.exit_code == 1 and "error: no database" in plain.output and "\x1b[" not in plain.output
    assert verified.exit_code == 0 and " ok" in verified.output and "\x1b[" not in verified.output


def test_serve_turns_off_the_colours_of_its_log_under_no_color(monkeypatch):
    from turbdb.service import logs

    monkeypatch.setenv("NO_COLOR", "1")
    formatters = logs.logging_config("info", True)["formatters"].values()
    assert formatters and all(f.get("use_colors") is False for f in formatters)
    monkeypatch.delenv("NO_COLOR")
    assert not all(f.get("use_colors") is False for f in logs.logging_config("info", True)["formatters"].values())


def test_a_bad_result_limit_in_the_environment_is_one_line(tmp_path, db):
    result = run("cutout", db, "flow", "--field", "pressure", "--time", 0, "--out", tmp_path / "c.npy",
                 env={"TURBDB_MAX_RESULT_BYTES": "garbage"})
    assert result.stderr.startswith("warning: TURBDB_MAX_RESULT_BYTES must be a number of bytes")
    assert result.stderr.count("\n") == 1 and "UserWarning" not in result.stderr and "warnings.warn" not in result.stderr
    assert "the default limit" in result.stderr and (tmp_path / "c.npy").is_file()


def test_an_ingest_note_goes_to_stderr_even_when_quiet(tmp_path):
    for t in range(3):
        np.save(tmp_path / f"u{t}.npy", np.full((8, 8, 8, 3), t, np.float32))
    invoke("ingest", tmp_path / "db", tmp_path / "u0.npy", tmp_path / "u1.npy", "--name", "a", "--field", "u",
           "--dt", 1, "--quiet")
    result = invoke("ingest", tmp_path / "db", tmp_path / "u2.npy", "--name", "a", "--field", "u", "--dt", 0.5,
                    "--quiet")
    assert result.exit_code == 0 and result.stdout == ""
    assert "note: --dt 0.5 is not the dataset's dt 1" in result.stderr


# --- options that contradict each other -------------------------------------------------


def test_options_that_contradict_each_other_are_refused(tmp_path, db, points):
    stride = invoke("cutout", db, "flow", "--field", "pressure", "--time", 0, "--stridet", 2, "--out", tmp_path / "c.nc")
    assert stride.exit_code == 2 and "--stridet 2 takes every K-th stored step of a range" in stride.output
    seeded = invoke("track", db, "flow", "--points", points, "--seed", 3, "--start", 0, "--end", 1, "--dt", 0.5,
                    "--out", tmp_path / "t.npy")
    assert seeded.exit_code == 2 and "--seed places random particles" in seeded.output
    trace = tmp_path / "trace.jsonl"
    trace.write_text("")
    for options in (["--scheduler", "jaws"], ["--cache-bytes", "1GiB", "--io", "direct"]):
        replay = invoke("workload", "replay", trace, "http://127.0.0.1:1", *options)
        assert replay.exit_code == 2 and f"{options[0]}" in replay.output and "a server runs its own" in replay.output
    assert not (tmp_path / "c.nc").exists() and not (tmp_path / "t.npy").exists()


# --- exit status ------------------------------------------------------------------------


def test_a_failure_exits_1_a_usage_error_2_and_a_group_alone_prints_its_help(tmp_path, db, points):
    for group in ([], ["stats"], ["cluster"], ["workload"]):
        alone = run(*group)
        assert alone.returncode == 0 and alone.stdout.startswith("Usage:") and alone.stderr == ""
    query = ["query", db, "flow", "--field", "pressure", "--points", points, "--out", tmp_path / "q.npy"]
    assert run(*query, "--time", 99, check=False).returncode == 1  # a time outside the stored ones
    assert run(*query[:2], "nosuch", *query[3:], "--time", 0, check=False).returncode == 1
    assert run(*query, "--time", 0, "--token", "x", "--bogus", check=False).returncode == 2
    assert run("query", "http://127.0.0.1:1", "flow", *query[3:], "--time", 0, check=False).returncode == 1


# --- tokens, cutout summaries -----------------------------------------------------------


@pytest.mark.parametrize("name", ["", "   "])
def test_a_token_needs_a_name(name):
    result = invoke("token", name)
    assert result.exit_code == 2 and "give the token's user a name" in result.output and "[[token]]" not in result.output


def test_a_cutout_summary_writes_times_and_strides_as_the_options_do(tmp_path, db):
    one = invoke("cutout", db, "flow", "--field", "pressure", "--ts", 0, "--te", 0, "--stride", "1,1,2",
                 "--out", tmp_path / "c.npy")
    assert one.exit_code == 0 and "1 time, t = 0," in one.output and "stride 1,1,2," in one.output
    two = invoke("cutout", db, "flow", "--field", "pressure", "--ts", 0, "--te", 1, "--stride", 2,
                 "--out", tmp_path / "c.npy")
    assert "2 times, t = 0 … 1," in two.output and "stride 2," in two.output


# --- endings in any case ----------------------------------------------------------------


def test_output_endings_are_matched_in_any_case_and_kept_as_given(tmp_path, db, points):
    # c.NPY: the whole cutout was made, then "No such file or directory", a temporary left.
    cut = invoke("cutout", db, "flow", "--field", "pressure", "--time", 0, "--out", tmp_path / "c.NPY")
    assert cut.exit_code == 0, cut.output
    assert np.load(tmp_path / "c.NPY").shape == (16, 16, 16, 1)
    turbdb.export.write(turbdb.open(db)["flow"].cutout("pressure", time=0.0), tmp_path / "k.NPY")
    queried = invoke("query", db, "flow", "--field", "pressure", "--time", 0, "--points", points,
                     "--out", tmp_path / "q.NPY")
    tracked = invoke("track", db, "flow", "--points", points, "--start", 0, "--end", 1, "--dt", 0.5,
                     "--out", tmp_path / "t.NPY", "--velocity")
    assert queried.exit_code == tracked.exit_code == 0, queried.output + tracked.output
    assert np.load(tmp_path / "q.NPY").shape == (2, 1)
    assert np.load(tmp_path / "t.NPY").shape == np.load(tmp_path / "t.velocity.NPY").shape == (3, 2, 3)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(
        ["c.NPY", "k.NPY", "pts.csv", "q.NPY", "t.NPY", "t.velocity.NPY"])


def test_docs_describe_the_conventions():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    for words in ("| 1 |", "| 2 |", "NO_COLOR", "TQDM_DISABLE", "TURBDB_MAX_RESULT_BYTES", "--points -", "`~`"):
        assert words in text, words
    assert re.search(r"exits with the status it would have had", text)
