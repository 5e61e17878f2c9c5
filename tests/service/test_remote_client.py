"""turbdb.connect against a real server: the same answers, the same metadata, the same
exception types as turbdb.open, for every method and operator, for cutouts and tracking."""

import os
import subprocess
import sys
import threading

import httpx
import numpy as np
import pytest
import xarray

import turbdb
from turbdb.arguments import METHODS, OPERATORS

from servicekit import FULL, TIMES, random_points


def test_the_remote_database_lists_and_describes_what_the_local_one_does(remote, local):
    assert remote.datasets == local.datasets == ["other", "trig"]
    assert list(remote) == list(local) and len(remote) == 2 and "trig" in remote
    here, there = local["trig"].info, remote["trig"].info
    assert there.grid == here.grid and there.spacing == here.spacing and there.periodic == here.periodic
    np.testing.assert_array_equal(there.times, here.times)
    assert there.fields == here.fields and there.steps_present() == [0, 1, 2, 3]
    assert there.describe() == here.describe()


@pytest.mark.parametrize("operator", OPERATORS)
def test_remote_answers_equal_local_ones_for_every_method_and_operator(remote, local, operator):
    pts = random_points(300, seed=1, low=-2, high=9)
    compared = 0
    for method in METHODS:
        for temporal, time in (("none", 0.5), ("pchip", 0.7)):
            try:
                expected = local["trig"].query("velocity", pts, time=time, method=method, operator=operator,
                                               temporal=temporal, dtype=np.float64)
            except turbdb.InvalidRequestError as e:  # this method does not offer the operator: same refusal
                with pytest.raises(turbdb.InvalidRequestError, match="offers"):
                    remote["trig"].query("velocity", pts, time=time, method=method, operator=operator,
                                         temporal=temporal, dtype=np.float64)
                assert "offers" in str(e)
                continue
            got = remote["trig"].query("velocity", pts, time=time, method=method, operator=operator,
                                       temporal=temporal, dtype=np.float64)
            assert got.shape == expected.shape and got.dtype == np.float64
            # Partial sums may add in another order between two runs: equal to round-off.
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
            compared += 1
    assert compared >= 12


def test_scalar_fields_float32_and_empty_batches_match_too(remote, local):
    pts = random_points(50, seed=2)
    got = remote["trig"].query("pressure", pts, time=1.0, method="m2q8", operator="hessian")
    expected = local["trig"].query("pressure", pts, time=1.0, method="m2q8", operator="hessian")
    assert got.dtype == np.float32 and got.shape == (50, 1, 6)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert remote["trig"].query("velocity", np.zeros((0, 3)), time=0).shape == (0, 3)
    bounded = np.array([[0.0, 0.0, 0.0], [7.5, 5.5, 3.5], [3.2, 1.1, 2.7]])
    np.testing.assert_allclose(remote["other"].query("pressure", bounded, time=0.25, temporal="pchip", dtype=np.float64),
                               local["other"].query("pressure", bounded, time=0.25, temporal="pchip", dtype=np.float64),
                               rtol=1e-12)


def test_a_remote_dataset_pickles_and_answers_the_same(remote):
    # A spawn-based multiprocessing Pool sends it so; it failed on a local closure.
    import pickle

    pts = random_points(20, seed=3)
    expected = remote["trig"].query("pressure", pts, time=1.0)
    copy = pickle.loads(pickle.dumps(remote["trig"]))
    np.testing.assert_array_equal(copy.query("pressure", pts, time=1.0), expected)
    assert copy.database.url == remote.url
    copy.database.close()


def test_submitted_remote_queries_return_futures_of_the_local_answers(remote, local):
    times = (0.5, 0.6, 0.7)
    pts = random_points(200, seed=3)
    futures = [remote["trig"].submit("velocity", pts, time=t, method="lag4", dtype=np.float64) for t in times]
    for future, t in zip(futures, times):
        np.testing.assert_allclose(future.result(timeout=60),
                                   local["trig"].query("velocity", pts, time=t, method="lag4", dtype=np.float64),
                                   rtol=1e-12, atol=1e-12)
    with pytest.raises(turbdb.UnknownNameError):
        remote["trig"].submit("nonesuch", pts, time=0.5).result(timeout=60)


def test_a_remote_cutout_is_the_local_dataarray(remote, local):
    kwargs = dict(time=0.9, x=(-3, 5), y=(2, 9), z=(14, 40), stride=2)
    xarray.testing.assert_identical(remote["trig"].cutout("velocity", **kwargs), local["trig"].cutout("velocity", **kwargs))
    xarray.testing.assert_identical(remote["trig"].cutout("pressure", time=1.5), local["trig"].cutout("pressure", time=1.5))


def test_remote_tracking_equals_local_tracking(remote, local):
    pts = random_points(40, seed=3)
    kwargs = dict(start=0.2, end=1.3, dt=0.25, method="lag4")
    got, expected = remote["trig"].track(pts, **kwargs), local["trig"].track(pts, **kwargs)
    assert got.shape == expected.shape == (6, 40, 3) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    (p, u), (lp, lu) = (ds["trig"].track(pts, start=1.4, end=0.5, dt=0.3, return_velocity=True) for ds in (remote, local))
    np.testing.assert_allclose(p, lp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(u, lu, rtol=1e-12, atol=1e-12)
    # Past the server's steps a request: refused before anything is sent, the steps counted, not listed.
    with pytest.raises(turbdb.LimitExceededError, match="one request to this server may take 100,000"):
        remote["trig"].track(pts[:1], start=0.0, end=1.0, dt=1e-9)


@pytest.mark.parametrize(
    "call",
    [
        lambda db: db["nosuch"],
        lambda db: db["../x"],
        lambda db: db["trig"].query("magnetic", [[0, 0, 0]], time=0),
        lambda db: db["trig"].query("velocity", [[0, 0, 0]], time=0, method="lag5"),
        lambda db: db["trig"].query("velocity", [[0, 0, 0]], time=0, operator="curl"),
        lambda db: db["trig"].query("velocity", [[0, 0, 0]], time=9.0),
        lambda db: db["trig"].query("velocity", [[0, 0, 0]], time=float("nan")),
        lambda db: db["trig"].query("velocity", [[0, 0, 0], [1, np.nan, 0]], time=0),
        lambda db: db["trig"].query("velocity", np.zeros((4, 2)), time=0),
        lambda db: db["trig"].query("velocity", [[0, 0, 0]], time=0, method="none", operator="gradient"),
        lambda db: db["trig"].query("velocity", [[0, 0, 0]], time=0, dtype=np.int32),
        lambda db: db["other"].query("pressure", [[0, 1, 2], [-3.0, 1, 2]], time=0),
        lambda db: db["other"].cutout("pressure", time=0, x=(-1, 4)),
        lambda db: db["trig"].cutout("velocity", time=0, x=(4, 4)),
        # Past the bounded y axis (12 nodes), though the nodes kept (9, 11) are inside it.
        lambda db: db["other"].cutout("pressure", time=0, y=(9, 13), stride=2),
        # 192 TiB: refused before any request (the client's list of boxes filled its memory).
        lambda db: db["trig"].cutout("velocity", time=0, x=(0, 2**40), y=(0, 4), z=(0, 4)),
        lambda db: db["trig"].track([[0, 0, 0]], start=0, end=1, dt=-0.1),
        lambda db: db["trig"].track([[0, 0, 0]], start=0, end=1, dt=0.1, method="lag5"),
    ],
)
def test_remote_errors_are_the_local_exception_with_the_local_message(remote, local, call):
    with pytest.raises(turbdb.TurbdbError) as here:
        call(local)
    with pytest.raises(turbdb.TurbdbError) as there:
        call(remote)
    assert type(there.value) is type(here.value)
    if "on this server" not in str(there.value) and " at http" not in str(there.value):  # names the place
        assert str(there.value) == str(here.value)


def test_threads_sharing_one_client_each_get_a_connection_and_the_local_answers(server, local):
    # A bounded pool made threads queue for connections, where httpcore 1.0.9 can close one
    # it has given to a queued request (encode/httpcore#1110): a replay hung for 300 s.
    threads, rounds = 24, 4
    start = threading.Barrier(threads)
    answers: dict[int, list[np.ndarray]] = {}

    def client(db, k):
        start.wait()
        answers[k] = [db["trig"].query("velocity", random_points(50, seed=k * rounds + r), time=0.5,
                                       dtype=np.float64) for r in range(rounds)]

    with turbdb.connect(server.url, token=FULL) as db:
        workers = [threading.Thread(target=client, args=(db, k)) for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
        assert not any(w.is_alive() for w in workers), "a client thread hung"
        opened = sum(len(c._transport._pool.connections) for c in db._clients.made())
    assert opened > 10, f"{opened} connections for {threads} threads asking at once: they queued for the pool"
    for k in range(threads):
        for r in range(rounds):
            expected = local["trig"].query("velocity", random_points(50, seed=k * rounds + r), time=0.5,
                                           dtype=np.float64)
            np.testing.assert_allclose(answers[k][r], expected, rtol=1e-6, atol=1e-6)


def test_connection_failures_are_retried_with_backoff(server, monkeypatch):
    calls = []
    real = httpx.HTTPTransport()

    def flaky(request):
        calls.append(request.url.path)
        if len(calls) <= 2:
            raise httpx.ConnectError("connection refused", request=request)
        return real.handle_request(request)

    with real, turbdb.connect(server.url, token=FULL, backoff=0.01, transport=httpx.MockTransport(flaky)) as db:
        # The client's first request (the token's limits) fails twice and is retried, then the rest go through.
        assert db.datasets == ["other", "trig"]
        assert calls == ["/v1/limits", "/v1/limits", "/v1/limits", "/v1/datasets"]
    with turbdb.connect("http://127.0.0.1:9", retries=2, backoff=0.01, restart_seconds=0) as db, \
            pytest.raises(turbdb.ServiceError, match="after 3 attempts"):
        db.datasets
    # A request that never reached the server took nothing of its rate: its retries are not
    # paced again (under a low rate, a client took 105 s to say its server had gone).
    calls.clear()
    with real, turbdb.connect(server.url, token=FULL, backoff=0.01, transport=httpx.MockTransport(flaky)) as db:
        db.limits  # noqa: B018 - fetched (after two failures), and the pacer made
        calls.clear()
        paced = []
        wait = db._pacer.wait
        monkeypatch.setattr(db._pacer, "wait", lambda: paced.append(1) or wait())
        assert db.datasets == ["other", "trig"]
        assert calls == ["/v1/datasets"] * 3 and len(paced) == 1


def test_the_query_command_reads_points_and_writes_the_same_answer_locally_and_remotely(server, service_db, tmp_path):
    pts = random_points(20, seed=4)
    np.save(tmp_path / "pts.npy", pts)
    np.savetxt(tmp_path / "pts.csv", pts, delimiter=",")
    common = ["trig", "--field", "velocity", "--time", "0.5", "--operator", "gradient", "--dtype", "float64"]
    run = [sys.executable, "-m", "turbdb.cli", "query"]
    subprocess.run([*run, str(service_db), *common, "--points", tmp_path / "pts.npy", "--out", tmp_path / "local.npy"],
                   check=True, capture_output=True)
    out = subprocess.run([*run, server.url, *common, "--points", tmp_path / "pts.csv", "--out", tmp_path / "remote.csv",
                          "--token", FULL], check=True, capture_output=True, text=True).stdout
    assert "20 points" in out
    expected = np.load(tmp_path / "local.npy")
    header = (tmp_path / "remote.csv").read_text().splitlines()[0]
    assert header.split(",")[:4] == ["duxdx", "duxdy", "duxdz", "duydx"]
    np.testing.assert_allclose(np.loadtxt(tmp_path / "remote.csv", delimiter=",", skiprows=1),
                               expected.reshape(20, 9), rtol=1e-8, atol=1e-8)
    failed = subprocess.run([*run, server.url, "nosuch", "--field", "velocity", "--time", "0", "--points",
                             tmp_path / "pts.npy", "--out", tmp_path / "x.npy"], capture_output=True, text=True)
    assert failed.returncode == 1 and "error: no dataset 'nosuch'" in failed.stderr and "Traceback" not in failed.stderr


def test_stored_times_are_what_the_tests_assume(local):
    np.testing.assert_array_equal(local["trig"].info.times, TIMES)


def test_serve_and_query_explain_themselves():
    expected = {"serve": ["--tokens", "--workers", "threads", "/docs"], "query": ["DB_OR_URL", "--points", ".csv"]}
    for command, words in expected.items():
        out = subprocess.run([sys.executable, "-m", "turbdb.cli", command, "--help"], capture_output=True, text=True,
                             check=True).stdout
        assert all(w in out for w in words), out


def test_serve_reports_a_missing_database_a_bad_tokens_file_and_a_busy_port_in_one_line(server, service_db, tmp_path):
    bad = tmp_path / "tokens.toml"
    bad.write_text("[anon]\n")
    port = server.url.rsplit(":", 1)[1]
    for args, words in (([str(tmp_path / "nothing")], "no database"), ([str(service_db), "--tokens", str(bad)], "unknown table"),
                        ([str(service_db), "--port", port], "cannot listen")):
        result = subprocess.run([sys.executable, "-m", "turbdb.cli", "serve", *args], capture_output=True, text=True,
                                timeout=30)
        assert result.returncode == 1 and words in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_serve_to_a_full_disk_says_it_is_standard_output_that_cannot_be_written(service_db):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "turbdb.cli", "serve", str(service_db), "--port", "0"],
                                stdout=full, stderr=subprocess.PIPE, text=True, timeout=30)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == ("error: No space left on device (standard output): free space on that disk or "
                                     "write somewhere else"), result.stderr


def test_errors_of_a_query_sent_in_batches_name_the_callers_row(server, local):
    from servicekit import SMALL

    with turbdb.connect(server.url, token=SMALL) as small:  # 100 points a request
        assert small.limits.batch_points == 100
        points = random_points(250, seed=8)
        points[180, 1] = np.nan
        bounded = np.full((250, 3), 1.0)
        bounded[150] = (-3.0, 1.0, 1.0)
        for call, row in ((lambda db: db["trig"].query("velocity", points, time=0), "point 180"),
                          (lambda db: db["other"].query("pressure", bounded, time=0), "point 150"),
                          (lambda db: db["trig"].track(points, start=0, end=1, dt=0.5), "particle 180")):
            with pytest.raises(turbdb.TurbdbError) as here:
                call(local)
            with pytest.raises(turbdb.TurbdbError) as there:
                call(small)
            assert type(there.value) is type(here.value)
            assert str(there.value) == str(here.value)
            assert row in str(here.value)


def test_a_filter_one_request_cannot_hold_is_refused_before_sending(server):
    from servicekit import SMALL

    with turbdb.connect(server.url, token=SMALL) as small:
        with pytest.raises(turbdb.LimitExceededError, match="at most 4 wide"):
            small["trig"].cutout("velocity", time=0, x=(0, 2), y=(0, 2), z=(0, 2), filter_width=5)


def test_a_wide_filter_on_a_bounded_grid_is_counted_as_the_server_counts_it(server, local):
    # The box is cut at the walls: 101 wide reads 16 × 12 × 8 nodes a node of "other" (all
    # bounded), not 101³; the client refused it (against its own batch size, not the token's).
    from servicekit import FULL

    with turbdb.connect(server.url, token=FULL) as full:
        there = full["other"].cutout("pressure", time=0, x=(0, 2), y=(0, 2), z=(0, 2), filter_width=101)
        # A filter wider than a periodic axis: the local call's error, not a limit.
        with pytest.raises(turbdb.InvalidRequestError, match="wider than the grid's"):
            full["trig"].cutout("velocity", time=0, x=(0, 2), y=(0, 2), z=(0, 2), filter_width=10**6)
    here = local["other"].cutout("pressure", time=0, x=(0, 2), y=(0, 2), z=(0, 2), filter_width=101)
    np.testing.assert_allclose(there.values, here.values, rtol=1e-6)


def test_remote_calls_take_cancel_and_a_progress_callback_as_local_ones(remote, local):
    cancel = threading.Event()
    cancel.set()
    for db in (local, remote):
        with pytest.raises(turbdb.QueryCancelledError):
            db["trig"].query("velocity", [[1.0, 2.0, 3.0]], time=0, cancel=cancel)
        with pytest.raises(turbdb.QueryCancelledError):
            db["trig"].submit("velocity", [[1.0, 2.0, 3.0]], time=0, cancel=cancel).result(30)
        with pytest.raises(turbdb.QueryCancelledError):
            db["trig"].track([[1.0, 2.0, 3.0]], start=0, end=1, dt=0.25, cancel=cancel)
    calls = []
    remote["trig"].track(random_points(10), start=0, end=1, dt=0.25, progress=lambda done, n: calls.append((done, n)))
    assert calls and calls[-1] == (4, 4)


def test_stats_spectrum_reads_from_a_server_as_stats_rq_does(server, tmp_path):
    ran = subprocess.run([sys.executable, "-m", "turbdb.cli", "stats", "spectrum", server.url, "trig", "--time", "0",
                          "--out", str(tmp_path / "spectrum")], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "energy spectrum at t = 0" in ran.stdout and list((tmp_path / "spectrum").glob("*.png"))
