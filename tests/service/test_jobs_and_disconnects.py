"""Jobs and disconnections on a real server with a node engine (`turbdb serve --scheduler
jaws`): jobs declared with POST /v1/jobs are gated together and get the answers of the
engine-less local dataset; bad job requests get 4xx with a message; a client that drops its
connection cancels its query in the engine while the server goes on serving; a replayed
trace declares its multi-query jobs."""

import json
import threading
import time

import httpx
import numpy as np
import pytest

import turbdb
from click.testing import CliRunner
from servicekit import FULL, SMALL, TIMES, running_server
from turbdb.cli import main
from turbdb.exceptions import EngineBusyError, LimitExceededError, UnknownNameError
from turbdb.jobs import Job
from turbdb.service.jobs import MAX_PLANNED_PER_OWNER, JobRegistry, PlannedRead
from turbdb.service.transport import encode_npy
from turbdb.workload import generate, replay, write_trace

AUTH = {"Authorization": f"Bearer {FULL}"}
#: What a planned query reads, for the registry on its own (a server works it out from the dataset).
READ = PlannedRead("trig", "velocity", 0.5, "none", (1,))


@pytest.fixture(scope="module")
def engine_server(service_db, tokens_file, tmp_path_factory):
    log = tmp_path_factory.mktemp("jobs") / "server.log"
    with running_server(service_db, log, "--tokens", str(tokens_file), "--scheduler", "jaws",
                        "--cache-bytes", str(4 << 20)) as server:
        yield server
        assert server.process.poll() is None, f"the server died:\n{server.log.read_text()}"


def engine_state(server):
    return httpx.get(server.url + "/v1/engine", timeout=10).json()


def wait_for(condition, seconds=15.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def points(seed, count=300):
    return np.random.default_rng(seed).uniform(0.3, 6.0, (count, 3))


def test_two_concurrent_jobs_over_the_same_steps_are_gated_and_get_the_local_answers(engine_server, local):
    before = engine_state(engine_server)["gating"]
    plan = [("trig", "velocity", t, "pchip") for t in TIMES[1:3]] + [("trig", "velocity", t) for t in TIMES]
    times = [(t, "pchip") for t in TIMES[1:3]] + [(t, "none") for t in TIMES]
    answers = {}
    with turbdb.connect(engine_server.url, FULL) as remote:
        jobs = [remote.job(plan), remote.job(plan)]
        assert all(job.scheduled for job in jobs)

        def client(k):
            with turbdb.connect(engine_server.url, FULL) as mine, jobs[k]:
                for i, (t, temporal) in enumerate(times):
                    answers[k, i] = mine["trig"].query("velocity", points(7 * k + i), time=t, temporal=temporal,
                                                       method="lag6", dtype=np.float64, job=jobs[k].id)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "the jobs deadlocked"
    assert len(answers) == 2 * len(times)
    for (k, i), values in answers.items():
        t, temporal = times[i]
        expected = local["trig"].query("velocity", points(7 * k + i), time=t, temporal=temporal, method="lag6",
                                       dtype=np.float64)
        np.testing.assert_allclose(values, expected, rtol=1e-6, atol=1e-6)
    after = engine_state(engine_server)
    # Every planned query of the second job shares a step with one of the first: one edge each.
    assert after["gating"]["edges"] - before["edges"] == len(plan)
    assert after["gating"]["co_scheduled"] > before["co_scheduled"]
    assert after["jobs"] == 0 and after["pending"] == 0


def test_bad_job_requests_get_4xx_with_a_message(engine_server):
    url = engine_server.url
    query = {"field": "velocity", "time": 0.5}
    unknown = httpx.post(url + "/v1/datasets/trig/query", params={**query, "job": 987654}, json={"points": [[1, 2, 3]]},
                         headers=AUTH, timeout=10)
    assert unknown.status_code == 404 and "no job 987654" in unknown.json()["description"]
    assert httpx.delete(url + "/v1/jobs/987654", headers=AUTH, timeout=10).status_code == 404
    declared = httpx.post(url + "/v1/jobs", json={"queries": [{"dataset": "trig", "field": "velocity", "time": 0.5}]},
                          headers=AUTH, timeout=10).json()
    # Another token's job is as unknown as a job never declared.
    theirs = httpx.post(url + "/v1/datasets/trig/query", params={**query, "job": declared["job"]},
                        json={"points": [[1, 2, 3]]}, headers={"Authorization": f"Bearer {SMALL}"}, timeout=10)
    assert theirs.status_code == 404
    bad_bodies = [
        ({"queries": []}, 400, "at least one"),
        ({"queries": [{"dataset": "trig", "field": "velocity"}]}, 400, "keys dataset, field, time"),
        ({"queries": [{"dataset": "trig", "field": "nope", "time": 0.0}]}, 400, "no field 'nope'"),
        ({"queries": [{"dataset": "trig", "field": "velocity", "time": 0.0, "temporal": "cubic"}]}, 400, "temporal"),
        ({"queries": [{"dataset": "trig", "field": "velocity", "time": "soon"}]}, 400, "finite number"),
        ({"queries": [{"dataset": "nowhere", "field": "velocity", "time": 0.0}]}, 404, "no dataset 'nowhere'"),
        ({"plan": []}, 400, "\"queries\" list"),
        ({"queries": [{"dataset": "trig", "field": "velocity", "time": 0.0}] * 10_001}, 413, "at most"),
    ]
    for body, status, message in bad_bodies:
        answer = httpx.post(url + "/v1/jobs", json=body, headers=AUTH, timeout=30)
        assert answer.status_code == status, (body if len(str(body)) < 200 else "long plan", answer.text[:300])
        assert message in answer.json()["description"]
    not_json = httpx.post(url + "/v1/jobs", content=b"{", headers={**AUTH, "Content-Type": "application/json"},
                          timeout=10)
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["description"]
    assert httpx.delete(url + f"/v1/jobs/{declared['job']}", headers=AUTH, timeout=10).json()["closed"]
    assert engine_server.alive()


def test_a_tokens_open_jobs_plan_a_bounded_number_of_queries_and_closing_one_makes_room(engine_server):
    url, other = engine_server.url, {"Authorization": f"Bearer {SMALL}"}
    full_plan = [{"dataset": "trig", "field": "velocity", "time": TIMES[i % len(TIMES)]}
                 for i in range(MAX_PLANNED_PER_OWNER // 3)]

    def declare(plan, headers=AUTH):
        return httpx.post(url + "/v1/jobs", json={"queries": plan}, headers=headers, timeout=60)

    # A declaration refused for its plan gives back what it was admitted for.
    assert declare(full_plan[:-1] + [{**full_plan[-1], "time": 1e308}]).status_code == 400
    declared = [declare(full_plan).json()["job"] for _ in range(3)]
    refused = declare(full_plan[:1])
    assert refused.status_code == 429 and refused.headers["retry-after"]
    assert f"your open jobs plan {MAX_PLANNED_PER_OWNER:,} queries" in refused.json()["description"]
    # Another token is not held to this one's jobs.
    theirs = declare(full_plan[:1], other).json()["job"]
    started = time.monotonic()
    answer = httpx.post(url + "/v1/datasets/trig/query", params={"field": "velocity", "time": TIMES[0]},
                        json={"points": [[1, 2, 3]]}, headers=AUTH, timeout=30)
    assert answer.status_code == 200 and time.monotonic() - started < 5, "the declarations held the engine up"
    assert httpx.delete(url + f"/v1/jobs/{declared.pop()}", headers=AUTH, timeout=10).json()["closed"]
    declared.append(declare(full_plan[:1]).json()["job"])
    for job in declared:
        httpx.delete(url + f"/v1/jobs/{job}", headers=AUTH, timeout=10)
    httpx.delete(url + f"/v1/jobs/{theirs}", headers=other, timeout=10)
    assert wait_for(lambda: engine_state(engine_server)["jobs"] == 0)


def test_the_servers_open_jobs_and_their_planned_queries_are_bounded():
    registry = JobRegistry(max_jobs=3, max_planned=10, max_planned_per_owner=8)
    registry.reserve("a", 8)
    with pytest.raises(LimitExceededError, match="your open jobs plan 8 queries and this one 1"):
        registry.reserve("a", 1)
    with pytest.raises(EngineBusyError, match="plan 8 queries, and it gates at most 10"):
        registry.reserve("b", 3)
    registry.cancel("a", 8)
    numbers = []
    for owner in "abc":
        registry.reserve(owner, 2)
        numbers.append(registry.add(owner, Job(None, None, 2), [READ] * 2))
    with pytest.raises(EngineBusyError, match="holds 3 open jobs"):
        registry.reserve("d", 1)
    registry.remove(numbers[0], "a")
    assert registry.planned("a") == 0 and registry.planned("b") == 2
    registry.reserve("d", 1)


def test_an_idle_job_is_forgotten_even_if_nobody_declares_another():
    # It was expired only by a new declaration: a query revived it, and its plan kept counting.
    registry = JobRegistry(idle_seconds=0.05)
    registry.reserve("a", 2)
    number = registry.add("a", Job(None, None, 2), [READ] * 2)
    assert registry.engine_job(number, "a", READ) is None and registry.planned("a") == 2  # no engine: no engine job
    time.sleep(0.1)
    with pytest.raises(UnknownNameError, match=f"no job {number} .* unused for 0 s"):
        registry.engine_job(number, "a", READ)
    assert registry.planned("a") == 0
    registry.reserve("a", 1)
    other = registry.add("a", Job(None, None, 1), [READ])
    time.sleep(0.1)
    assert registry.planned("a") == 0 and len(registry) == 0  # counted as forgotten when asked, too
    with pytest.raises(UnknownNameError):
        registry.engine_job(other, "a", READ)


def test_job_numbers_are_not_reused_after_a_restart_and_a_stale_one_is_said_to_be(server):
    # Numbered from 1 in each server process: after a restart a script's job=1 was unknown with
    # no word of the restart, or was silently taken as another new job's.
    before = JobRegistry()  # the server's registry before a restart...
    before.reserve("a", 1)
    stale = before.add("a", Job(None, None, 1), [READ])
    time.sleep(0.01)
    after = JobRegistry()  # ...and after it
    after.reserve("a", 1)
    assert after.add("a", Job(None, None, 1), [READ]) > stale
    with pytest.raises(UnknownNameError, match=f"no job {stale} on this server: .* before the server restarted"):
        after.engine_job(stale, "a", READ)
    answer = httpx.post(server.url + "/v1/datasets/trig/query", params={"field": "velocity", "time": 0.5, "job": 1},
                        json={"points": [[1, 2, 3]]}, headers=AUTH, timeout=10)
    assert answer.status_code == 404 and "restarted" in answer.json()["description"]
    # Servers started in the same millisecond got the same numbers (the review): random low bits.
    assert len({JobRegistry().first for _ in range(20)}) > 1
    assert JobRegistry().first < 2**53  # exact as a JavaScript number


def test_a_server_without_an_engine_accepts_jobs_and_says_they_are_not_scheduled(server, local):
    with turbdb.connect(server.url, FULL) as remote:
        with remote.job([("trig", "pressure", 0.5), ("trig", "pressure", 1.0)]) as job:
            assert not job.scheduled
            values = remote["trig"].query("pressure", points(1), time=0.5, job=job, dtype=np.float64)
    np.testing.assert_allclose(values, local["trig"].query("pressure", points(1), time=0.5, dtype=np.float64),
                               rtol=1e-6, atol=1e-6)
    answer = httpx.post(server.url + "/v1/jobs", json={"queries": [{"dataset": "trig", "field": "pressure",
                                                                    "time": 0.0}]}, headers=AUTH, timeout=10).json()
    assert answer["scheduled"] is False and "without a node engine" in answer["note"]
    # Its plan is checked as an engine's is: a time outside the stored range is refused.
    refused = httpx.post(server.url + "/v1/jobs", json={"queries": [{"dataset": "trig", "field": "pressure",
                                                                     "time": 1e308}]}, headers=AUTH, timeout=10)
    assert refused.status_code == 400 and "time 1e308 is outside the stored range" in refused.json()["description"]


@pytest.fixture(scope="module")
def uncached_server(service_db, tokens_file, tmp_path_factory):
    """A jaws server with no atom cache: a job's query whose atoms are all cached is answered
    at once, never held at its gate, and the tiny test dataset fits any cache."""
    log = tmp_path_factory.mktemp("uncached") / "server.log"
    with running_server(service_db, log, "--tokens", str(tokens_file), "--scheduler", "jaws",
                        "--cache-bytes", "0") as server:
        yield server


def test_a_client_that_disconnects_cancels_its_query_and_the_server_goes_on(uncached_server, local):
    url = uncached_server.url
    cancelled = engine_state(uncached_server)["cancelled"]
    plan = {"queries": [{"dataset": "trig", "field": "velocity", "time": 1.5, "temporal": "pchip"}]}
    # Two jobs over the same step: the first one's query is held at its gate (for up to the
    # gate's timeout) until the second's comes — which never does: it stays pending.
    first, second = (httpx.post(url + "/v1/jobs", json=plan, headers=AUTH, timeout=10).json()["job"] for _ in range(2))
    body = encode_npy(points(3, 200_000))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/datasets/trig/query", params={"field": "velocity", "time": 1.5, "temporal": "pchip",
                                                            "method": "lag8", "job": first},
                   content=body, headers={**AUTH, "Content-Type": "application/x-npy"}, timeout=httpx.Timeout(
                       30, read=0.3))
    log = uncached_server.log
    assert wait_for(lambda: engine_state(uncached_server)["cancelled"] > cancelled), log.read_text()[-3000:]
    state = engine_state(uncached_server)
    assert state["pending"] == 0 and state["pending_points"] == 0
    # The server goes on serving, with the right answers.
    with turbdb.connect(url, FULL) as remote:
        values = remote["trig"].query("velocity", points(4), time=1.5, temporal="pchip", dtype=np.float64)
    np.testing.assert_allclose(values, local["trig"].query("velocity", points(4), time=1.5, temporal="pchip",
                                                           dtype=np.float64), rtol=1e-6, atol=1e-6)
    for job in (first, second):
        httpx.delete(url + f"/v1/jobs/{job}", headers=AUTH, timeout=10)
    assert uncached_server.alive()


def test_a_replayed_trace_declares_its_jobs_of_several_queries(engine_server, local, tmp_path, monkeypatch):
    trace = generate(local["trig"].info, dataset="trig", jobs=40, duration=1.0, seed=11)
    path = tmp_path / "trace.jsonl"
    write_trace(path, trace)
    sizes: dict[int, int] = {}
    for q in trace:
        sizes[q.job] = sizes.get(q.job, 0) + 1
    several = sum(n >= 2 for n in sizes.values())
    assert several > 0 and any(n == len(TIMES) for n in sizes.values())
    declared = engine_server.metric("turbdb_requests_total", endpoint="/v1/jobs", status="200")
    closed = engine_server.metric("turbdb_requests_total", endpoint="/v1/jobs/{job}", status="200")
    monkeypatch.setenv("TURBDB_TOKEN", FULL)
    ran = CliRunner().invoke(main, ["workload", "replay", str(path), engine_server.url, "--clients", "6", "--json"])
    assert ran.exit_code == 0, ran.output
    report = json.loads(ran.output)
    assert report["failed"] == 0 and report["queries"] == len(trace)
    assert engine_server.metric("turbdb_requests_total", endpoint="/v1/jobs", status="200") - declared == several
    assert engine_server.metric("turbdb_requests_total", endpoint="/v1/jobs/{job}", status="200") - closed == several
    assert report["server_engine"]["jobs"] == 0


def test_a_client_that_disconnects_from_a_track_stops_it(engine_server):
    url = engine_server.url
    body = encode_npy(points(9, 2000))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/datasets/trig/track", params={"start": 0.0, "end": 1.5, "dt": 0.0005, "method": "lag4"},
                   content=body, headers={**AUTH, "Content-Type": "application/x-npy"},
                   timeout=httpx.Timeout(30, read=0.5))
    # 3000 rk2 steps would take minutes; the server stops within a few evaluations.
    def settled():
        first = engine_state(engine_server)["completed"]
        time.sleep(0.3)
        state = engine_state(engine_server)
        return state["completed"] == first and state["jobs"] == 0 and state["pending"] == 0

    assert wait_for(settled, 10)
    assert engine_server.alive()


def test_jhtdb_getdata_through_the_engine_answers_every_time_and_field_and_refuses_bad_times(engine_server, local):
    # Every (time, field) of a getData request is handed to the engine at once.
    pts = np.random.default_rng(4).uniform(0.0, 6.0, (9, 3))
    body = "\n".join("\t".join("%.8f" % c for c in p) for p in pts)
    sent = np.array([[float("%.8f" % c) for c in p] for p in pts])
    params = {"dataset": "trig", "function": "GetVelocityAndPressure", "t": 0.25, "sint": "lag6", "tint": "pchip",
              "timepoint_end": 1.25, "delta_t": 0.5, "authToken": FULL}
    response = httpx.post(engine_server.url + "/turbulence-svc/values", params=params, content=body, timeout=60)
    assert response.status_code == 200, response.text
    cube = np.array(response.json()).reshape(3, len(pts), 4)  # (times, points, u v w p)
    for k, t in enumerate((0.25, 0.75, 1.25)):
        for field, columns in (("velocity", slice(0, 3)), ("pressure", slice(3, 4))):
            expected = local["trig"].query(field, sent, time=t, method="lag6", temporal="pchip", dtype=np.float64)
            np.testing.assert_allclose(cube[k][:, columns], expected.reshape(len(pts), -1), rtol=2e-6, atol=2e-6)
    late = httpx.post(engine_server.url + "/turbulence-svc/values", params={**params, "t": 1e6, "timepoint_end": 1e6},
                      content=body, timeout=60)
    assert 400 <= late.status_code < 500 and "time" in late.text.lower(), late.text
    assert engine_server.alive()


@pytest.mark.parametrize("driver", ["threads", "futures"])
def test_a_replay_whose_server_goes_away_reports_what_it_did(service_db, local, tmp_path, driver):
    # Once the server cannot be reached the jobs left are not sent; the report still comes
    # (no thread tracebacks from closing jobs, no lost report).
    trace = generate(local["trig"].info, dataset="trig", jobs=30, duration=1.0, seed=5)
    with running_server(service_db, tmp_path / "gone.log", "--scheduler", "jaws") as server:
        remote = turbdb.connect(server.url, retries=1, backoff=0.01, restart_seconds=0)

        def stop_after_the_first(done, total):
            if done == 1:
                server.process.terminate()
                server.process.wait(30)

        report = replay(remote, trace, clients=2, progress=stop_after_the_first, driver=driver)
        remote.close()
    assert report.failed >= 1 and report.not_sent > 0
    assert len(report.log) + report.not_sent == len(trace)
    assert all("cannot reach" in a.error for a in report.log if a.error)
