"""A time series through turbdb.connect goes in as few requests as the token's point limit
allows (time=0.1,0.2,… on the v1 query endpoint): a 200-time series of a few points is one
request, not 200 (43 s under the anonymous rate of 60 a minute), and equals the local answer
bit for bit, with and without a node engine. Single-time requests answer as before; a job's
queries and a server that does not take several times go one request per time."""

import dataclasses

import numpy as np
import pytest

import turbdb
from turbdb.exceptions import InvalidRequestError
from turbdb.service.transport import encode_npy

from servicekit import FULL, SMALL, npy_body, random_points, running_server

QUERIES = {"endpoint": "/v1/datasets/{name}/query", "status": "200"}
SERIES = [float(t) for t in np.linspace(0.01, 1.49, 200)]


def queries_answered(server) -> int:
    return int(server.metric("turbdb_requests_total", **QUERIES))


@pytest.fixture()
def anonymous(server, monkeypatch):
    monkeypatch.delenv("TURBDB_TOKEN", raising=False)
    with turbdb.connect(server.url, progress=False) as db:
        yield db


@pytest.fixture(scope="module")
def engine_server(service_db, tokens_file):
    with running_server(service_db, service_db.parent / "engine-series.log", "--tokens", str(tokens_file),
                        "--scheduler", "jaws") as s:
        yield s


def test_a_200_time_series_of_a_few_points_is_one_request_equal_to_the_local_answer(server, anonymous, local):
    points = random_points(3, seed=4)
    before = queries_answered(server)
    answer = anonymous["trig"].query("velocity", points, time=SERIES, temporal="pchip")
    assert queries_answered(server) - before == 1
    expected = local["trig"].query("velocity", points, time=SERIES, temporal="pchip")
    assert answer.shape == (200, 3, 3) and answer.dtype == expected.dtype
    np.testing.assert_array_equal(answer, expected)


def test_through_a_node_engine_the_series_is_one_request_and_the_same(engine_server, service_db):
    # The engine sums float32 rows in float32, in the order its batches take: equal to
    # float32's rounding (bit for bit without an engine, above).
    points = random_points(5, seed=5)
    with turbdb.connect(engine_server.url, token=FULL, progress=False) as db, \
            turbdb.open(service_db, scheduler="jaws") as local:
        before = queries_answered(engine_server)
        for operator, temporal in (("field", "pchip"), ("gradient", "none")):
            answer = db["trig"].query("velocity", points, time=SERIES, operator=operator, temporal=temporal,
                                      method="lag4")
            expected = local["trig"].query("velocity", points, time=SERIES, operator=operator, temporal=temporal,
                                           method="lag4")
            assert answer.shape == expected.shape and answer.dtype == expected.dtype
            np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())
        assert queries_answered(engine_server) - before == 2


def test_points_times_times_are_batched_within_the_tokens_limit(server, local):
    with turbdb.connect(server.url, token=SMALL, progress=False) as db:  # 100 points per request
        for count, times, requests in ((30, SERIES[:10], 4),     # 3 times of 30 points a request
                                       (150, SERIES[:3], 6),     # more points than fit: per time, 2 batches
                                       (100, SERIES[:3], 3)):
            points = random_points(count, seed=count)
            before = queries_answered(server)
            answer = db["trig"].query("pressure", points, time=times, operator="gradient")
            assert queries_answered(server) - before == requests, (count, len(times))
            np.testing.assert_array_equal(answer, local["trig"].query("pressure", points, time=times,
                                                                      operator="gradient"))


def test_a_long_series_is_split_to_keep_the_request_line_short(server, anonymous, local):
    times = [float(t) for t in np.linspace(0.0, 1.5, 1000)]
    before = queries_answered(server)
    answer = anonymous["trig"].query("velocity", [[1.0, 2.0, 3.0]], time=times, dtype="float64")
    assert 3 <= queries_answered(server) - before <= 6  # about 270 times of 21 digits a request
    np.testing.assert_array_equal(answer, local["trig"].query("velocity", [[1.0, 2.0, 3.0]], time=times,
                                                              dtype="float64"))


def test_several_times_over_http_answer_times_by_points(server, local):
    points = random_points(4, seed=6)
    answer = server.post("/v1/datasets/trig/query?field=velocity&time=0.5,1.25,0.5&operator=hessian",
                         json={"points": points.tolist()})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = local["trig"].query("velocity", points, time=[0.5, 1.25, 0.5], operator="hessian")
    assert body["shape"] == list(expected.shape) == [3, 4, 3, 6]
    np.testing.assert_array_equal(np.asarray(body["values"], dtype=np.float32).reshape(expected.shape), expected)


def test_a_single_time_is_answered_as_before(server, local):
    points = random_points(7, seed=7)
    answer = server.post("/v1/datasets/trig/query?field=velocity&time=0.75", content=npy_body(points),
                         headers={"Content-Type": "application/x-npy", "Accept": "application/x-npy"})
    assert answer.content == encode_npy(local["trig"].query("velocity", points, time=0.75))


def test_the_limits_say_so_and_count_points_times_times(server):
    limits = server.get("/v1/limits", headers={"Authorization": f"Bearer {SMALL}"}).json()
    assert limits["time_series_queries"] is True and "× times" in limits["counts"]
    small = {"Authorization": f"Bearer {SMALL}"}
    times = ",".join(["0.5"] * 3)
    over = server.post(f"/v1/datasets/trig/query?field=velocity&time={times}", json={"points": [[1, 2, 3]] * 40},
                       headers=small)
    assert over.status_code == 413 and "points × times" in over.json()["description"]
    many = ",".join(["0.5"] * 101)  # more times than the limit: refused before the body is read
    assert server.post(f"/v1/datasets/trig/query?field=velocity&time={many}", json={"points": [[1, 2, 3]]},
                       headers=small).status_code == 413
    for bad in ("0.5,", "0.5,,1", "0.5,x", "1_0,1", "0.5,nan"):
        refused = server.post(f"/v1/datasets/trig/query?field=velocity&time={bad}", json={"points": [[1, 2, 3]]})
        assert refused.status_code == 400, (bad, refused.text)


def test_a_jobs_queries_go_one_time_per_request(server, remote, local):
    points = random_points(3, seed=8)
    times = list(local["trig"].info.times[:3])
    with remote.job([("trig", "velocity", t) for t in times]) as job:
        refused = server.post(f"/v1/datasets/trig/query?field=velocity&time=0.5,1.0&job={job.id}",
                              json={"points": points.tolist()}, headers={"Authorization": f"Bearer {FULL}"})
        assert refused.status_code == 400 and "one request per time" in refused.json()["description"]
        before = queries_answered(server)
        answer = remote["trig"].query("velocity", points, time=times, job=job)
        assert queries_answered(server) - before == len(times)
    np.testing.assert_array_equal(answer, local["trig"].query("velocity", points, time=times))


def test_a_server_that_takes_one_time_gets_one_request_per_time(server, local):
    with turbdb.connect(server.url, token=FULL, progress=False) as db:
        db._limits = dataclasses.replace(db.limits, time_series_queries=False)  # as an older server's /v1/limits
        before = queries_answered(server)
        answer = db["trig"].query("velocity", [[1.0, 2.0, 3.0]], time=SERIES[:5])
        assert queries_answered(server) - before == 5
    np.testing.assert_array_equal(answer, local["trig"].query("velocity", [[1.0, 2.0, 3.0]], time=SERIES[:5]))


def test_jhtdb_getdata_over_a_url_sends_the_series_at_once(server, local, tmp_path):
    from turbdb.jhtdb import getData, turb_dataset

    cube = turb_dataset(dataset_title="trig", output_path=str(tmp_path), auth_token=FULL, url=server.url)
    points = random_points(2, seed=9).astype(np.float32)
    before = queries_answered(server)
    frames = getData(cube, "velocity", 0.1, "pchip", "lag6", "field", points, option=[1.3, 0.01], verbose=False)
    assert queries_answered(server) - before == 1 and len(frames) == 121
    expected = local["trig"].query("velocity", points, time=[float(t) for t in np.arange(0.1, 1.3, 0.01)] + [1.3],
                                   temporal="pchip")
    np.testing.assert_array_equal(np.stack([f.to_numpy() for f in frames]), expected)


def test_a_time_that_is_not_finite_is_refused_before_sending(server, anonymous):
    before = queries_answered(server)
    with pytest.raises(InvalidRequestError, match="time"):
        anonymous["trig"].query("velocity", [[1.0, 2.0, 3.0]], time=[0.5, float("nan")])
    assert queries_answered(server) == before
