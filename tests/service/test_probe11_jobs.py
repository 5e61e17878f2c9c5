"""Jobs over HTTP as the eleventh probe used them: one token may not hold every open job
of the server; a job ends with its last planned query; a query with ``job=`` must be the
plan's next one (not another dataset or field, not past the plan's end, and its number
written as digits); a plan's unknown names answer as a query's do."""

import time

import httpx
import numpy as np
import pytest

import turbdb
from servicekit import FULL, SMALL, TIMES, running_server
from turbdb.exceptions import EngineBusyError, InvalidRequestError, LimitExceededError
from turbdb.jobs import Job
from turbdb.service.jobs import MAX_OPEN_JOBS_PER_OWNER, JobRegistry, PlannedRead

AUTH = {"Authorization": f"Bearer {FULL}"}
OTHER = {"Authorization": f"Bearer {SMALL}"}
READ = PlannedRead("trig", "velocity", 0.5, "none", (1,))


@pytest.fixture(scope="module")
def jaws_server(service_db, tokens_file, tmp_path_factory):
    log = tmp_path_factory.mktemp("probe11_jobs") / "server.log"
    with running_server(service_db, log, "--tokens", str(tokens_file), "--scheduler", "jaws") as server:
        yield server
        assert server.process.poll() is None, f"the server died:\n{server.log.read_text()}"


def plan(*times, field="velocity", dataset="trig"):
    return {"queries": [{"dataset": dataset, "field": field, "time": t} for t in times]}


def query(server, job, *, time=0.5, field="velocity", dataset="trig", headers=AUTH):
    return httpx.post(server.url + f"/v1/datasets/{dataset}/query", params={"field": field, "time": time, "job": job},
                      json={"points": [[1, 2, 3]]}, headers=headers, timeout=30)


def open_jobs(server, headers=AUTH):
    return httpx.get(server.url + "/v1/jobs", headers=headers, timeout=10).json()


def test_one_token_cannot_take_every_open_job_of_the_server(server):
    # 4 096 one-query jobs of one token left every other user 503 "retry shortly" for 600 s.
    one = plan(0.5)
    # The shared server: jobs other tests of this token left open count too.
    already = len(open_jobs(server)["jobs"])
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as mine:
        declared = [mine.post("/v1/jobs", json=one) for _ in range(MAX_OPEN_JOBS_PER_OWNER - already)]
        try:
            assert {a.status_code for a in declared} == {200}
            refused = mine.post("/v1/jobs", json=one)
            theirs = httpx.post(server.url + "/v1/jobs", json=one, headers=OTHER, timeout=30)
        finally:
            for answer in declared:
                if answer.status_code == 200:
                    mine.delete(f"/v1/jobs/{answer.json()['job']}")
    assert refused.status_code == 429, refused.text
    words = refused.json()["description"]
    assert f"you hold {MAX_OPEN_JOBS_PER_OWNER} open jobs" in words and "DELETE /v1/jobs/{id}" in words
    assert "unused for 600 s is forgotten" in words and "shortly" not in words
    assert 500 < int(refused.headers["retry-after"]) <= 600  # when the first of them would be forgotten
    assert theirs.status_code == 200, theirs.text
    httpx.delete(server.url + f"/v1/jobs/{theirs.json()['job']}", headers=OTHER, timeout=10)


def test_the_servers_full_job_table_says_when_a_place_frees_and_how_to_go_on():
    registry = JobRegistry(max_jobs=2, max_jobs_per_owner=1, idle_seconds=300)
    for owner in "ab":
        registry.reserve(owner, 1)
        registry.add(owner, Job(None, None, 1), [READ])
    with pytest.raises(LimitExceededError, match="you hold 1 open jobs") as mine:
        registry.reserve("a", 1)
    assert 290 < mine.value.retry_after <= 300
    with pytest.raises(EngineBusyError) as full:
        registry.reserve("c", 1)
    words = str(full.value)
    assert "DELETE /v1/jobs/{id}" in words and "after 300 s unused" in words and "without job=" in words
    assert "shortly" not in words and 290 < full.value.retry_after <= 300


def test_a_job_ends_with_its_last_planned_query(jaws_server):
    # All its queries answered, it was still listed, counted against the token's planned
    # queries, and took a 7th to 12th query of a 6-query plan as its own.
    url = jaws_server.url
    job = httpx.post(url + "/v1/jobs", json=plan(*TIMES), headers=AUTH, timeout=10).json()["job"]
    for k, t in enumerate(TIMES):
        assert open_jobs(jaws_server)["planned"] == len(TIMES) - k  # only the queries still to come count
        assert query(jaws_server, job, time=t).status_code == 200
    assert open_jobs(jaws_server)["jobs"] == [] and open_jobs(jaws_server)["planned"] == 0
    deadline = time.monotonic() + 10
    while httpx.get(url + "/v1/engine", timeout=10).json()["jobs"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert httpx.get(url + "/v1/engine", timeout=10).json()["jobs"] == 0
    past = query(jaws_server, job, time=TIMES[0])
    assert past.status_code == 400 and f"job {job} has ended" in past.json()["description"]
    # `with db.job(...)` closes it at its end: no error for a job that ended by itself.
    closed = httpx.delete(url + f"/v1/jobs/{job}", headers=AUTH, timeout=10)
    assert closed.status_code == 200 and "ended already" in closed.json()["note"]
    assert httpx.delete(url + f"/v1/jobs/{job}", headers=OTHER, timeout=10).status_code == 404


def test_a_query_off_its_jobs_plan_is_refused_naming_the_next_planned_one(jaws_server):
    job = httpx.post(jaws_server.url + "/v1/jobs", json=plan(0.5, 1.0), headers=AUTH, timeout=10).json()["job"]
    for wrong in [dict(field="pressure"), dict(time=1.0), dict(dataset="other", field="pressure", time=0.0)]:
        refused = query(jaws_server, job, **wrong)
        assert refused.status_code == 400, refused.text
        words = refused.json()["description"]
        assert "next planned query (query 1 of 2) reads velocity of trig at time 0.5" in words, words
        assert f"DELETE /v1/jobs/{job}" in words
    # A time that reads the planned step is the planned query (the engine gates by steps).
    assert query(jaws_server, job, time=0.5000001).status_code == 200
    # The query answered last, sent again (its answer lost on the way), is answered again.
    assert query(jaws_server, job, time=0.5).status_code == 200
    refused = query(jaws_server, job, field="pressure", time=1.0)
    assert refused.json()["description"].startswith(f"job {job}'s next planned query (query 2 of 2)"), refused.text
    # The number as POST /v1/jobs wrote it: job=N.0 was taken for job N.
    for spelled in (f"{job}.0", f"+{job}", f"{job}e0"):
        answer = query(jaws_server, spelled, time=1.0)
        assert answer.status_code == 400 and "job" in answer.json()["description"], answer.text
    assert "digits only" in query(jaws_server, f"{job}.0", time=1.0).json()["description"]
    assert httpx.delete(jaws_server.url + f"/v1/jobs/{job}.0", headers=AUTH, timeout=10).status_code == 400
    assert query(jaws_server, job, time=1.0).status_code == 200
    assert open_jobs(jaws_server)["jobs"] == []
    assert query(jaws_server, job, time=1.0).status_code == 200  # the last one again, after the end
    assert "has ended" in query(jaws_server, job, time=0.5).json()["description"]


def test_a_plans_unknown_names_answer_as_a_querys_do_and_name_the_planned_query(server):
    url = server.url
    before = open_jobs(server)["jobs"]  # the shared server: other tests' jobs of this token
    for dataset, field in [("nowhere", "velocity"), ("trig", "nope")]:
        declared = httpx.post(url + "/v1/jobs", json={"queries": [
            {"dataset": "trig", "field": "velocity", "time": 0.5}, {"dataset": dataset, "field": field, "time": 0.5}]},
            headers=AUTH, timeout=10)
        asked = httpx.post(url + f"/v1/datasets/{dataset}/query", params={"field": field, "time": 0.5},
                           json={"points": [[1, 2, 3]]}, headers=AUTH, timeout=10)
        assert declared.status_code == asked.status_code and declared.json()["error"] == asked.json()["error"]
        assert declared.json()["description"] == "planned query 2: " + asked.json()["description"]
    # A refused plan opens no job (the others' unused seconds go on: compared by number).
    assert [job["job"] for job in open_jobs(server)["jobs"]] == [job["job"] for job in before]


def test_a_jobs_planned_queries_count_until_each_is_answered():
    registry = JobRegistry(max_planned_per_owner=4)
    registry.reserve("a", 3)
    number = registry.add("a", Job(None, None, 3), [READ] * 3)
    registry.engine_job(number, "a", READ)
    registry.answered(number, "a", READ)
    registry.reserve("a", 2)  # 2 left of the first job, and 2 of this one
    with pytest.raises(InvalidRequestError, match="next planned query"):
        registry.engine_job(number, "a", READ._replace(steps=(2,)))
    registry.answered(number, "a", READ._replace(steps=(2,)))  # not the planned one: not counted
    assert registry.planned("a") == 4
    registry.answered(number, "a", READ)
    registry.answered(number, "a", READ)
    assert [n for n, *_ in registry.owned("a")] == [] and registry.planned("a") == 2
    assert registry.remove(number, "a") is False  # ended by its last query


def test_the_client_sends_a_jobs_queries_in_its_planned_order(jaws_server, local):
    # One query of several times with job= went as concurrent requests, one per time, which
    # reached the server in any order; it now takes only the plan's next query.
    times = [t for t in TIMES for _ in range(3)][::-1]
    points = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    with turbdb.connect(jaws_server.url, FULL) as remote, remote.job([("trig", "velocity", t) for t in times]) as job:
        values = remote["trig"].query("velocity", points, time=times, job=job)
        assert job.id not in [j.id for j in remote.open_jobs()]  # ended with its last query
    np.testing.assert_array_equal(values, local["trig"].query("velocity", points, time=times))
