"""Workload traces and replays as the eleventh probe found them: every field of a trace
line is checked and named; each query's points are drawn when it is sent, not all at
once; a speed-up that puts arrivals past a week, or more clients than a server takes
connections from one address, is a usage error; a client that fails unexpectedly fails
the replay; and every 503 a server gives is told apart by its cause."""

import asyncio
import dataclasses
import json
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner

import turbdb
from turbdb.busy_causes import BUSY_CAUSES, busy_cause
from turbdb.cli import main
from turbdb.cli.workload import throttling_lines
from turbdb.exceptions import EngineBusyError, FormatError, InvalidRequestError
from turbdb.service import connections, errors
from turbdb.service.admission import BusyError, PointsLimiter
from turbdb.service.jobs import JobRegistry
from turbdb.workload import Query, read_trace, replay, write_trace
from turbdb.workload.replay import SERVER_CONNECTIONS_PER_ADDRESS

GOOD = Query(arrival=0.5, job=0, index=0, dataset="box", field="velocity", time=0.1, method="lag4", operator="field",
             temporal="none", count=10, seed=7, region=(1.0, 2.0, 3.0), spread=0.2)


@pytest.fixture(scope="module")
def box_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe11_workload")
    ds = turbdb.create_dataset(path, "box", grid=(16, 16, 16), times=[0.0, 0.1, 0.2], fields={"velocity": 3}, atom=8,
                               partition=16)
    rng = np.random.default_rng(0)
    for t in range(3):
        ds.write("velocity", t, rng.standard_normal((16, 16, 16, 3), dtype=np.float32))
    return path


def lines(path, *records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


@pytest.mark.parametrize("field, value, words", [
    ("seed", -1, "seed must be a whole number from 0, not -1"),
    ("seed", 1.5, "seed must be a whole number from 0, not 1.5"),
    ("spread", -1.0, "spread must be a finite number from 0, not -1.0"),
    ("region", [1, 2], "region must be null or [x, y, z], three finite numbers, not [1, 2]"),
    ("region", ["a", "b", "c"], "region must be null or [x, y, z]"),
    ("count", True, "count must be a whole number of points from 1 to 10,000,000, not True"),
    ("time", "0.01", "time must be a finite number, not '0.01'"),
    ("method", "lag99", "method must be one of none, lag4"),
    ("job", -2, "job must be a whole number from 0, not -2"),
    ("dataset", 5, "dataset must be a name (a string), not 5"),
])
def test_every_field_of_a_trace_line_is_checked_and_named_with_the_line(tmp_path, field, value, words):
    # Each gave a numpy traceback from inside the replay's clients (or none at all).
    good = dataclasses.asdict(GOOD)
    path = lines(tmp_path / "bad.jsonl", good, {**good, "index": 1, field: value})
    with pytest.raises(FormatError) as refused:
        read_trace(path)
    assert f"bad.jsonl, line 2: not a trace record ({words}" in str(refused.value)
    ran = CliRunner().invoke(main, ["workload", "replay", str(path), "--url", "http://127.0.0.1:9"])
    assert ran.exit_code == 1 and "line 2" in ran.output and field in ran.output and "Traceback" not in ran.output


def test_a_jobs_query_index_may_appear_once_and_an_empty_trace_is_refused(tmp_path):
    good = dataclasses.asdict(GOOD)
    with pytest.raises(FormatError, match="line 2: .*job 0's query 0 is on line 1 already"):
        read_trace(lines(tmp_path / "twice.jsonl", good, good))
    empty = lines(tmp_path / "empty.jsonl")
    ran = CliRunner().invoke(main, ["workload", "replay", str(empty), "--url", "http://127.0.0.1:9"])
    assert ran.exit_code == 2 and "holds no queries" in ran.output


def test_each_querys_points_are_drawn_when_it_is_sent(box_db):
    # Every query's points were drawn before the first was sent: 100 lines of 10⁷ points
    # wanted 27 GB. Ten queries of 200 000 points (4.8 MB each, drawn) through one client
    # now hold one query's at a time.
    trace = [dataclasses.replace(GOOD, job=k, arrival=0.0, count=200_000, method="none", region=None)
             for k in range(10)]
    db = turbdb.open(box_db)
    tracemalloc.start()
    try:
        report = replay(db, trace, clients=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.queries == 10 and report.failed == 0
    assert peak < 30e6, f"{peak / 1e6:.0f} MB at the peak: the points were drawn ahead (48 MB in all)"


@pytest.mark.parametrize("speedup", ["1e-300", "1e-11"])
@pytest.mark.parametrize("driver", ["threads", "futures"])
def test_a_speedup_that_puts_arrivals_past_a_week_is_a_usage_error(box_db, tmp_path, speedup, driver):
    # time.sleep raised OverflowError in every client thread; the replay said "0 queries" and exited 0.
    path = tmp_path / "trace.jsonl"
    write_trace(path, [dataclasses.replace(GOOD, arrival=60.0)])
    ran = CliRunner().invoke(main, ["workload", "replay", str(path), str(box_db), "--speedup", speedup,
                                    "--driver", driver])
    assert ran.exit_code == 2 and "--speedup" in ran.output and "at least 9.92e-05" in ran.output, ran.output
    with pytest.raises(InvalidRequestError, match="past the 7 days a replay may take"):
        replay(turbdb.open(box_db), read_trace(path), speedup=float(speedup), driver=driver)


def test_a_client_that_fails_unexpectedly_fails_the_replay(box_db):
    # A client thread that raised printed a traceback and left its jobs unsent; the replay
    # went on as if nothing had happened (exit status 0 with queries left out).
    trace = [dataclasses.replace(GOOD, job=k) for k in range(6)]

    def broken(query, points, values):
        raise ZeroDivisionError("a bug in the check")

    with pytest.raises(ZeroDivisionError, match="a bug in the check"):
        replay(turbdb.open(box_db), trace, clients=3, check=broken)


def test_a_replay_against_a_server_keeps_within_its_connections_from_one_address(tmp_path):
    assert SERVER_CONNECTIONS_PER_ADDRESS == connections.MAX_CONNECTIONS_PER_CLIENT
    path = tmp_path / "trace.jsonl"
    write_trace(path, [GOOD])
    ran = CliRunner().invoke(main, ["workload", "replay", str(path), "--url", "http://127.0.0.1:9",
                                    "--clients", str(SERVER_CONNECTIONS_PER_ADDRESS + 1)])
    assert ran.exit_code == 2 and "--clients" in ran.output and "at most 128 connections from one" in ran.output


def test_every_503_a_server_gives_is_told_apart_by_its_cause():
    def body(error):
        return json.loads(errors.turbdb_error_response(error).body)

    async def points_in_flight():
        limiter = PointsLimiter(10, timeout=0.01)
        async with limiter.admit(10):
            async with limiter.admit(10):
                pass

    with pytest.raises(BusyError) as waited:
        asyncio.run(points_in_flight())
    registry = JobRegistry(max_jobs=1)
    registry.reserve("a", 1)
    with pytest.raises(EngineBusyError) as jobs_full:
        registry.reserve("b", 1)
    answers = {
        "client_connections": [connections._body(503, connections._BUSY), connections._body(503, connections._BUSY_PROXIED)],
        "server_connections": [connections._body(503, connections._SERVER_BUSY)],
        "shutting_down": [connections._body(503, connections._SHUTTING_DOWN), errors.shutdown_response().body],
        "points_in_flight": [errors.turbdb_error_response(waited.value).body],
        "open_jobs": [errors.turbdb_error_response(jobs_full.value).body],
        "engine_queue": [json.dumps(body(EngineBusyError("the engine holds 9 pending points, its limit is 8"))).encode()],
    }
    for cause, bodies in answers.items():
        for answer in bodies:
            assert busy_cause(json.loads(answer)) == cause, answer
    assert busy_cause(None) == busy_cause({"description": "Service Unavailable"}) == "other"
    assert set(answers) | {"step_rewritten", "other"} == set(BUSY_CAUSES)
    # The report says what each was; the connection cap's with what to do about it.
    waits = {"busy": 5, "busy_seconds": 5.0, "busy_causes": {"client_connections": 4, "engine_queue": 1}}
    said = throttling_lines(waits, seconds=10.0, clients=8)
    assert said[0] == (f"  server busy: 5 answers of 503 retried, 5.0 s waited in all (4 × "
                       f"{BUSY_CAUSES['client_connections']}; 1 × {BUSY_CAUSES['engine_queue']})")
    assert "fewer --clients" in said[1]
