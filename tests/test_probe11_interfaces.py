"""The Python API, the command line and the remote client (`turbdb.connect`) refuse and
answer alike: the result size limit before anything is sent, a server that needs a token
answered in the command line's words, `query --time` series, exit status 2 for option
values malformed in themselves, one `TypeError` for a misspelt `submit` option, and what
`--help` and the summary line say. Real files, a real server on loopback, small grids."""

import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

import turbdb
from turbdb.cli import main

sys.path.insert(0, str(Path(__file__).parent / "service"))
from servicekit import running_server  # noqa: E402

SECRET = "probe11-interfaces-secret"
TOKENS = f"""
[anonymous]
allowed = false

[[token]]
token = "{SECRET}"
name = "probe"
max_points = 10_000_000
requests_per_minute = 1_000_000
"""
#: Points of every query: 500 × 3 float32 values are 5.9 KiB, over the 1000 bytes set below.
POINTS = np.random.default_rng(0).uniform(0, 6, (500, 3))


def cli(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    root = tmp_path_factory.mktemp("interfaces") / "db"
    flow = turbdb.create_dataset(root, "flow", grid=(16, 16, 16), times=[0.0, 0.5, 1.0], atom=4, partition=8)
    walled = turbdb.create_dataset(root, "walled", grid=(16, 16, 16), times=[0.0], periodic=(False,) * 3,
                                   fields={"pressure": 1}, atom=4, partition=8)
    rng = np.random.default_rng(3)
    for t in range(3):
        flow.write("velocity", t, rng.standard_normal((16, 16, 16, 3)))
    walled.write("pressure", 0, rng.standard_normal((16, 16, 16)))
    return root


@pytest.fixture(scope="module")
def server(db):
    tokens = db.parent / "tokens.toml"
    tokens.write_text(TOKENS)
    tokens.chmod(0o600)
    with running_server(db, db.parent / "server.log", "--tokens", str(tokens)) as s:
        yield s


@pytest.fixture
def small_limit():
    turbdb.set_max_result_bytes(1000)
    yield
    turbdb.set_max_result_bytes(None)


class CountingTransport(httpx.HTTPTransport):
    """A real transport that counts the requests it sends."""

    def __init__(self):
        super().__init__()
        self.sent = 0

    def handle_request(self, request):
        self.sent += 1
        return super().handle_request(request)


# --- A: the result size limit, local and remote alike --------------------------------------


def test_the_remote_client_checks_the_size_limit_before_it_sends_as_the_local_api_does(db, server, small_limit):
    transport = CountingTransport()
    with turbdb.connect(server.url, token=SECRET, transport=transport) as remote:
        served = remote["flow"]
        remote.limits  # noqa: B018 - asked once, as any call asks them first; no work
        sent = transport.sent
        local = turbdb.open(db)["flow"]
        calls = {
            "query": lambda ds: ds.query("velocity", POINTS, time=0.0),
            "float64": lambda ds: ds.query("velocity", POINTS, time=0.0, dtype=np.float64),
            "series": lambda ds: ds.query("velocity", POINTS[:30], time=[0.0, 0.5, 1.0]),
            "track": lambda ds: ds.track(POINTS, start=0.0, end=1.0, dt=0.5),
            "cutout": lambda ds: ds.cutout("velocity", time=0.0),
        }
        for name, call in calls.items():
            for where, ds in (("local", local), ("remote", served)):
                with pytest.raises(turbdb.LimitExceededError, match=r"\(turbdb\.set_max_result_bytes\)"):
                    call(ds)
        assert transport.sent == sent  # refused before anything was sent
        # A float32 answer is sized as float32 (5.9 KiB), and what the local engine sums in float64 said as such.
        with pytest.raises(turbdb.LimitExceededError) as remote_error:
            served.query("velocity", POINTS, time=0.0)
    assert "the answer for 500 points would take 5.9 KiB of float32" in str(remote_error.value)
    assert "at most 83 points" in str(remote_error.value)
    with pytest.raises(turbdb.LimitExceededError) as local_error:
        local.query("velocity", POINTS, time=0.0)
    assert "5.9 KiB of float32, and the engine sums it in float64 (11.7 KiB)" in str(local_error.value)
    assert "(turbdb.set_max_result_bytes): send batches of at most 41 points" in str(local_error.value)
    # A series is sized whole: each of its three times alone would fit.
    with pytest.raises(turbdb.LimitExceededError, match="30 points at 3 times would take 2.1 KiB of float64; .* "
                                                        "at most 13 points, or fewer times"):
        local.query("velocity", POINTS[:30], time=[0.0, 0.5, 1.0], dtype=np.float64)
    assert local.query("velocity", POINTS[:41], time=0.0).shape == (41, 3)  # as the message says


def test_a_node_engine_checks_the_size_limit_too(db, small_limit):
    engine = turbdb.open(db, scheduler="jaws")["flow"]
    with pytest.raises(turbdb.LimitExceededError, match="set_max_result_bytes"):
        engine.query("velocity", POINTS, time=0.0)  # it answered: the engine's path had no check
    with pytest.raises(turbdb.LimitExceededError, match="at most 41 points"):
        engine.submit("velocity", POINTS, time=0.0).result()


def test_every_command_names_the_environment_variable_for_the_size_limit(db, server):
    np.save(db.parent / "big.npy", POINTS)
    limited = {"TURBDB_MAX_RESULT_BYTES": "1000", "TURBDB_TOKEN": SECRET}
    for where in (server.url, db):
        for command in (["query", where, "flow", "--field", "velocity", "--points", db.parent / "big.npy",
                         "--time", 0, "--out", db.parent / "q.npy"],
                        ["track", where, "flow", "--points", db.parent / "big.npy", "--start", 0, "--end", 1,
                         "--dt", 0.5, "--out", db.parent / "t.npy"]):
            result = cli(*command, env=limited)
            assert result.exit_code == 1, (where, command[0], result.output)
            assert "$TURBDB_MAX_RESULT_BYTES" in result.stderr and "set_max_result_bytes" not in result.stderr


# --- B: a server that needs a token -------------------------------------------------------


def test_a_command_without_a_token_is_told_to_pass_its_token_option(db, server):
    for command in (["query", server.url, "flow", "--field", "velocity", "--points", db.parent / "p.csv",
                     "--time", 0, "--out", db.parent / "q.npy"], ["info", server.url]):
        (db.parent / "p.csv").write_text("1,2,3\n")
        result = cli(*command, env={"TURBDB_TOKEN": ""})
        assert result.exit_code == 1, result.output
        assert "this server needs a token: pass --token TOKEN, or set $TURBDB_TOKEN" in result.stderr
        assert "turbdb.connect" not in result.stderr and "token=" not in result.stderr


# --- C: a time series from the command line -----------------------------------------------


def test_query_takes_a_comma_list_of_times_and_writes_the_series(db, server, tmp_path):
    (tmp_path / "p.csv").write_text("1,2,3\n3,2,1\n")
    expected = turbdb.open(db)["flow"].query("velocity", [[1, 2, 3], [3, 2, 1]], time=[0.0, 0.25, 1.0],
                                             operator="gradient")
    for where in (db, server.url):
        for suffix in ("npy", "csv"):
            result = cli("query", where, "flow", "--field", "velocity", "--points", tmp_path / "p.csv",
                         "--time", "0,0.25,1", "--operator", "gradient", "--token", SECRET,
                         "--out", tmp_path / f"s.{suffix}")
            assert result.exit_code == 0, result.output
            assert "3 times, t = 0, 0.25, 1 (the nearest stored steps, t = 0, 0.5, 1)" in result.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), expected)  # (T, N, 3, 3)
    lines = (tmp_path / "s.csv").read_text().splitlines()
    assert lines[0].startswith("time,duxdx,duxdy,duxdz,") and len(lines) == 1 + 3 * 2
    rows = np.loadtxt(tmp_path / "s.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(rows[:, 0], [0, 0, 0.25, 0.25, 1, 1])
    np.testing.assert_array_equal(rows[:, 1:].astype(np.float32), expected.reshape(6, -1))


# --- D: exit status 2 for option values malformed in themselves ---------------------------


@pytest.mark.parametrize("command, bad, words", [
    ("cutout", ["--stride", "0"], "strides are positive"),
    ("cutout", ["--stride", "-1"], "strides are positive"),
    ("cutout", ["--x", "4,0"], "holds no node"),
    ("cutout", ["--time", "nan"], "not a finite number"),
    ("query", ["--method", "bogus"], "unknown method 'bogus'; valid methods: none, lag4"),
    ("query", ["--operator", "bogus"], "valid operators"),
    ("query", ["--temporal", "bogus"], "valid temporal methods"),
    ("query", ["--time", "nan"], "not a finite time"),
    ("query", ["--time", "0,,1"], "holds an empty item"),
    ("track", ["--dt", "0"], "the direction comes from --start and --end"),
    ("track", ["--start", "nan"], "not a finite number"),
    ("track", ["--method", "bogus"], "unknown method"),
    ("stats", ["--method", "bogus"], "unknown method"),
])
def test_an_option_value_malformed_in_itself_is_a_usage_error_naming_its_flag(db, tmp_path, command, bad, words):
    (tmp_path / "p.csv").write_text("1,2,3\n")
    good = {  # a command that works; the bad value, given last, replaces its option's
        "cutout": ["cutout", db, "flow", "--field", "velocity", "--time", 0, "--out", tmp_path / "c.npy"],
        "query": ["query", db, "flow", "--field", "velocity", "--points", tmp_path / "p.csv", "--time", 0,
                  "--out", tmp_path / "q.npy"],
        "track": ["track", db, "flow", "--points", 2, "--start", 0, "--end", 1, "--dt", 0.5,
                  "--out", tmp_path / "t.npy"],
        "stats": ["stats", "rq", db, "flow", "--time", 0, "--points", 10, "--out", tmp_path / "rq"],
    }[command]
    result = cli(*good, *bad)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{bad[0]}'" in result.stderr or f"Invalid value for {bad[0]}" in result.stderr
    assert words in result.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "p.csv"]  # refused before any work


def test_what_only_the_data_can_refuse_still_exits_1(db, tmp_path):
    (tmp_path / "p.csv").write_text("1,2,3\n")
    outside = cli("query", db, "flow", "--field", "velocity", "--points", tmp_path / "p.csv", "--time", 5,
                  "--out", tmp_path / "q.npy")
    assert outside.exit_code == 1 and "outside the stored range" in outside.stderr
    past_wall = cli("cutout", db, "walled", "--field", "pressure", "--time", 0, "--x", "10,20",
                    "--out", tmp_path / "c.npy")
    assert past_wall.exit_code == 1 and "outside the non-periodic axis" in past_wall.stderr


# --- E: a misspelt submit option ----------------------------------------------------------


def test_a_misspelt_submit_option_names_submit_on_every_path(db, server):
    points = [[1.0, 2.0, 3.0]]
    with turbdb.connect(server.url, token=SECRET) as remote:
        paths = {
            "engine": (turbdb.open(db, scheduler="jaws")["flow"], 0.0),
            "plain": (turbdb.open(db)["flow"], 0.0),
            "series": (turbdb.open(db, scheduler="jaws")["flow"], [0.0, 0.5]),
            "remote": (remote["flow"], 0.0),
        }
        messages = {}
        for name, (ds, time) in paths.items():
            with pytest.raises(TypeError) as error:
                ds.submit("velocity", points, time=time, metod="lag4").result()
            messages[name] = str(error.value)
    for name, message in messages.items():
        owner = "RemoteDataset" if name == "remote" else "Dataset"
        assert message == (f"{owner}.submit() got an unexpected keyword argument 'metod': did you mean 'method'? "
                           f"it takes the options of {owner}.query(): time, method, operator, temporal, dtype, "
                           "strategy, job, cancel"), name
    with pytest.raises(TypeError, match=r"Dataset.submit\(\) missing required keyword argument\(s\) 'time'"):
        turbdb.open(db, scheduler="jaws")["flow"].submit("velocity", points).result()


# --- F: --quiet, argument names, help and the summary -------------------------------------


def test_query_help_and_summary_say_what_the_command_does(db, server, tmp_path):
    (tmp_path / "p.csv").write_text("1,2,3\n")
    for command in (["track"], ["stats", "rq"], ["stats", "spectrum"], ["query"], ["cutout"]):
        usage = cli(*command, "--help").stdout
        assert "DB_OR_URL NAME" in usage, command
    query_help = " ".join(cli("query", "--help").stdout.split())
    assert "Points in physical coordinates x, y, z (not grid indices" in query_help
    assert "none (alias nearest)" in query_help and "field (alias value)" in query_help
    assert "pchip (alias pchipint)" in query_help and "--quiet" in query_help
    assert "(T, N, …) for T times" in query_help
    result = cli("query", server.url, "flow", "--field", "velocity", "--points", tmp_path / "p.csv", "--time", 0.25,
                 "--method", "LAG4", "--operator", "value", "--temporal", "pchipint", "--token", SECRET, "--quiet",
                 "--out", tmp_path / "q.npy")
    assert result.exit_code == 0, result.output
    assert "flow: field of velocity at 1 points, t = 0.25, lag4 in space, pchip in time: wrote" in result.stdout
    nearest = cli("query", db, "flow", "--field", "velocity", "--points", tmp_path / "p.csv", "--time", 0.25,
                  "--temporal", "NEAREST", "--out", tmp_path / "n.npy")
    assert "t = 0.25 (the nearest stored step, t = 0.5), lag6 in space, none in time" in nearest.stdout
