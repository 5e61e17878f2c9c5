"""A query or cutout that `turbdb.connect` splits into several requests, a stored step
rewritten between them: each request read one version, but joined they mixed the two
(row 75's left). The server sends the versions each answer read (X-Turbdb-Versions) and the
client asks again the pieces that read an older one."""

import numpy as np
import pytest

import turbdb
from turbdb import remote_batches
from turbdb.remote import RemoteDatabase
from turbdb.step_versions import VERSIONS_HEADER

from servicekit import running_server

TOKEN = "split-secret"
N = 16
POINT = {"points": [[1.0, 2.0, 3.0]]}


def database_and_tokens(tmp_path):
    """A dataset of one value, 1.0, at both steps, and a token of 2 048 points a request."""
    db = tmp_path / "db"
    ds = turbdb.create_dataset(db, "r", grid=(N, N, N), times=[0.0, 1.0], fields={"s": 1}, atom=4, partition=8)
    for t in range(2):
        ds.write("s", t, np.full((N, N, N), 1.0))
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[[token]]\ntoken = "{TOKEN}"\nname = "split"\nmax_points = 2048\n'
                      "requests_per_minute = 100000\n")
    tokens.chmod(0o600)
    return db, tokens


@pytest.fixture
def served(tmp_path):
    db, tokens = database_and_tokens(tmp_path)
    with running_server(db, tmp_path / "server.log", "--tokens", str(tokens)) as server:
        yield db, server


def rewritten_after_the_first(client: RemoteDatabase, db, endpoint: str):
    """Has ``client`` rewrite step 0 of ``s`` (to 2.0) once its first request to
    ``endpoint`` is answered, as another user's rewrite between two requests would."""
    send, done = client.request, []

    def request(method, path, **kwargs):
        response = send(method, path, **kwargs)
        if path.endswith(endpoint) and not done:
            done.append(response.headers.get(VERSIONS_HEADER))
            turbdb.open(db)["r"].write("s", 0, np.full((N, N, N), 2.0))
        return response

    client.request = request
    return done


@pytest.mark.parametrize("scheduler", [None, "jaws"])
def test_a_split_query_with_a_step_rewritten_between_its_requests_answers_one_version(tmp_path, scheduler):
    db, tokens = database_and_tokens(tmp_path)
    options = ("--scheduler", scheduler) if scheduler else ()
    with running_server(db, tmp_path / "server.log", "--tokens", str(tokens), *options) as server:
        with turbdb.connect(server.url, token=TOKEN, concurrency=1, progress=False) as client:
            first = rewritten_after_the_first(client, db, "/query")
            points = np.random.default_rng(1).uniform(0, 2 * np.pi, (5000, 3))
            values = client["r"].query("s", points, time=0.0, method="none")
            assert first and first[0].endswith(":0=0")
            # Without the versions compared: the first 2 048 answers 1.0, the rest 2.0.
            assert np.unique(values).tolist() == [2.0]
            # Several times in one request, each time's versions sent.
            series = client["r"].query("s", points, time=[0.0, 1.0], method="none")
            assert np.unique(series[0]).tolist() == [2.0] and np.unique(series[1]).tolist() == [1.0]


def test_a_split_cutout_with_a_step_rewritten_between_its_requests_reads_one_version(served):
    db, server = served
    with turbdb.connect(server.url, token=TOKEN, concurrency=1, progress=False) as client:
        rewritten_after_the_first(client, db, "/cutout")
        box = client["r"].cutout("s", time=0.0)
        assert box.shape[:3] == (N, N, N)
        assert np.unique(np.asarray(box)).tolist() == [2.0]


def test_answers_carry_the_versions_of_the_steps_they_read(served):
    db, server = served
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    answer = server.post("/v1/datasets/r/query?field=s&time=0.5&temporal=pchip", json=POINT, headers=bearer)
    assert answer.status_code == 200
    made, _, steps = answer.headers[VERSIONS_HEADER].partition(":")
    assert made != "-" and steps == "0=0,1=0"
    turbdb.open(db)["r"].write("s", 1, np.full((N, N, N), 3.0))
    again = server.post("/v1/datasets/r/query?field=s&time=0.5&temporal=pchip", json=POINT, headers=bearer)
    rewritten = again.headers[VERSIONS_HEADER]
    assert rewritten.startswith(f"{made}:0=0,1=") and int(rewritten.rpartition("=")[2]) > 0
    count = rewritten.rpartition("=")[2]
    series = server.post("/v1/datasets/r/query?field=s&time=0,1", json=POINT, headers=bearer)
    assert series.headers[VERSIONS_HEADER] == f"{made}:0=0;{made}:1={count}"
    cut = server.post("/v1/datasets/r/cutout?field=s&time=1&x=0,2&y=0,2&z=0,2", headers=bearer)
    assert cut.status_code == 200 and cut.headers[VERSIONS_HEADER] == f"{made}:1={count}"


@pytest.mark.parametrize("tags, stale", [
    (["7:0=1", "7:0=1", None], []),
    (["7:0=0", "7:0=1", "7:0=1"], [0]),
    (["7:0=0,1=2", "7:1=3,2=0", "7:2=0"], [0]),  # compared over the steps they share
    (["7:0=0;7:1=0", "7:1=0"], []),
    (["7:0=0;7:0=1", "7:0=1"], [0]),  # one step at two versions within one answer
    (["7:0=0", "8:0=0", None], [0, 1]),  # another dataset: which is newer is not known
    (["-:0=0", "-:0=0"], []),
])
def test_the_stale_pieces_are_those_that_read_an_older_version(tags, stale):
    assert remote_batches.stale_pieces(tags) == stale


def test_pieces_that_never_agree_end_in_a_busy_error():
    calls = []

    def ask_again(indices):
        calls.append(indices)
        return [("again", f"7:0={len(calls) * 2 + i}") for i in indices]

    with pytest.raises(turbdb.DatasetBusyError, match="rewritten while its 2 requests were answered"):
        remote_batches.resent_until_one_version([("a", "7:0=0"), ("b", "7:0=1")], ask_again, "the query of s")
    assert len(calls) == remote_batches.RESEND_ROUNDS
