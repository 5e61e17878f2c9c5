"""Workload traces: shaped as the JHTDB log says (most jobs on one step, a few over every
step, most queries small and concentrated), written and read back exactly, and replayed
from the command line through a node engine with every query answered."""

import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import turbdb
from turbdb.cli import main
from turbdb.workload import draw_points, generate, read_trace, write_trace


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("workload")
    ds = turbdb.create_dataset(path, "box", grid=(32, 32, 32), times=[0.0, 0.1, 0.2, 0.3, 0.4],
                               fields={"velocity": 3}, atom=8, partition=16)
    rng = np.random.default_rng(0)
    for t in range(5):
        ds.write("velocity", t, rng.standard_normal((32, 32, 32, 3), dtype=np.float32))
    return path


def test_a_trace_has_the_shape_of_the_jhtdb_log(small_db):
    info = turbdb.open(small_db)["box"].info
    trace = generate(info, dataset="box", jobs=2000, duration=100.0, seed=3)
    steps_per_job: dict[int, set] = {}
    for q in trace:
        steps_per_job.setdefault(q.job, set()).add(q.time)
    single = np.mean([len(s) == 1 for s in steps_per_job.values()])
    every = np.mean([len(s) == info.nt for s in steps_per_job.values()])
    assert 0.85 <= single <= 0.91 and 0.02 <= every <= 0.07, (single, every)
    assert np.mean([q.count <= 1000 for q in trace]) > 0.9
    arrivals = np.array(sorted({q.arrival for q in trace if q.index == 0}))
    gaps = np.diff(arrivals)
    assert np.median(gaps) < 0.5 * np.mean(gaps), "arrivals come in bursts"
    for q in trace[:50]:
        points = draw_points(q, info)
        assert points.shape == (q.count, 3) and np.array_equal(points, draw_points(q, info))
        assert np.all(points >= 0) and np.all(points < 2 * np.pi)


def test_on_a_long_dataset_a_few_per_cent_of_jobs_track_particles_over_100_steps_or_more():
    from types import SimpleNamespace

    info = SimpleNamespace(origin=(0.0, 0.0, 0.0), spacing=(0.1, 0.1, 0.1), grid=(64, 64, 64),
                           periodic=(True, True, True), times=np.arange(300) * 0.01,
                           fields={"velocity": SimpleNamespace(steps_present=tuple(range(300)))})
    trace = generate(info, dataset="long", jobs=1000, duration=100.0, seed=5)
    steps: dict[int, list[float]] = {}
    for q in trace:
        steps.setdefault(q.job, []).append(q.time)
    long = [s for s in steps.values() if len(s) >= 100]
    assert 0.02 <= len(long) / len(steps) <= 0.07, len(long)
    for s in long:  # consecutive stored steps, one query each, at most 200
        indices = np.rint(np.asarray(s) / 0.01).astype(int)
        assert len(s) <= 200 and np.array_equal(np.diff(indices), np.ones(len(s) - 1, int))
    tracking = [q for q in trace if len(steps[q.job]) >= 100]
    assert {(q.method, q.operator) for q in tracking} == {("lag6", "field")}


def test_a_written_trace_reads_back_the_same_and_a_bad_line_is_named(small_db, tmp_path):
    info = turbdb.open(small_db)["box"].info
    trace = generate(info, dataset="box", jobs=30, seed=1)
    path = tmp_path / "t.jsonl"
    write_trace(path, trace)
    assert read_trace(path) == sorted(trace, key=lambda q: (q.arrival, q.job, q.index))
    path.write_text(path.read_text() + '{"arrival": 1}\n')
    with pytest.raises(turbdb.FormatError, match=f"line {len(trace) + 1}"):
        read_trace(path)


def test_the_cli_generates_and_replays_a_trace_through_an_engine(small_db, tmp_path):
    from click.testing import CliRunner

    trace = tmp_path / "trace.jsonl"
    runner = CliRunner()
    made = runner.invoke(main, ["workload", "generate", str(small_db), "box", "--out", str(trace), "--jobs", "40",
                                "--duration", "2"])
    assert made.exit_code == 0, made.output
    count = len(trace.read_text().splitlines())
    ran = runner.invoke(main, ["workload", "replay", str(trace), str(small_db), "--clients", "8", "--scheduler",
                               "jaws", "--cache-bytes", "1MiB", "--io", "direct", "--json", "--progress"])
    assert ran.exit_code == 0, ran.output
    report = json.loads(ran.stdout)
    assert report["queries"] == count and report["failed"] == 0
    assert report["engine"]["atoms_read"] > 0 and 0 <= report["engine"]["hit_ratio"] <= 1
    # The job that ended last is one of the trace's, whole, and ended with the replay's last answer.
    completion, jobs = report["completion"], Counter(q.job for q in read_trace(trace))
    assert completion["last_job"]["queries"] == jobs[completion["last_job"]["job"]]
    by = completion["answered_by"]
    assert 0 < by["50%"] <= by["90%"] <= by["100%"] == completion["last_job"]["ended"] <= report["seconds"]
    # The bar goes to stderr and counts every query answered.
    assert f"{count}/{count}" in ran.stderr
    text = runner.invoke(main, ["workload", "replay", str(trace), str(small_db), "--clients", "8"])
    assert text.exit_code == 0 and "90 % by" in text.output and "the last job to end" in text.output


def test_a_replays_completion_names_the_job_whose_chain_ended_last():
    from turbdb.workload.replay import Answered, ReplayReport, completion_text

    log = [
        Answered(0.0, 1.0, 10, "small", job=1, index=0),
        Answered(1.0, 1.0, 10, "small", job=1, index=1),  # answered at 2.0: the last
        Answered(0.0, 0.5, 5, "small", job=2, index=0),
        Answered(0.1, 0.2, 5, "small", job=3, index=0),
        Answered(0.0, 3.0, 5, "small", "EngineBusyError: full", job=4, index=0),  # failed: not an answer
    ]
    completion = ReplayReport(log=log, seconds=3.0, engine={}).completion()
    assert completion["answered_by"] == {"50%": 0.5, "90%": 2.0, "100%": 2.0}
    assert completion["last_job"] == {"job": 1, "queries": 2, "first_sent": 0.0, "ended": 2.0}
    assert completion_text(completion) == ("answered: half by 0.50 s, 90 % by 2.00 s, all by 2.00 s; the last job "
                                           "to end (2 queries, its first sent at 0.00 s) ended at 2.00 s")
    assert ReplayReport(log=[], seconds=0.0, engine={}).completion() == {}
    assert completion_text({}) == ""


def test_the_replay_command_says_what_is_wrong_with_its_arguments(small_db, tmp_path):
    from click.testing import CliRunner

    trace = tmp_path / "trace.jsonl"
    write_trace(trace, generate(turbdb.open(small_db)["box"].info, dataset="box", jobs=3, duration=1.0, seed=1))
    runner = CliRunner()
    neither = runner.invoke(main, ["workload", "replay", str(trace)])
    both = runner.invoke(main, ["workload", "replay", str(trace), str(small_db), "--url", "http://127.0.0.1:1"])
    assert neither.exit_code == both.exit_code == 2 and "--url (one of them)" in neither.output + both.output
    not_an_address = runner.invoke(main, ["workload", "replay", str(trace), "--url", str(small_db)])
    assert not_an_address.exit_code == 2 and "expected an address such as http://" in not_an_address.output
    bad_size = runner.invoke(main, ["workload", "replay", str(trace), str(small_db), "--cache-bytes", "4 parsecs"])
    assert bad_size.exit_code == 2 and "4GiB" in bad_size.output and "'4 parsecs'" in bad_size.output
    for option, value in [("--speedup", "nan"), ("--speedup", "0")]:
        refused = runner.invoke(main, ["workload", "replay", str(trace), str(small_db), option, value])
        assert refused.exit_code == 2 and "--speedup" in refused.output, refused.output
    for value in ("nan", "inf"):
        refused = runner.invoke(main, ["workload", "generate", str(small_db), "box", "--out", str(tmp_path / "t"),
                                       "--duration", value])
        assert refused.exit_code == 2 and "not a finite number" in refused.output, refused.output


def test_a_replay_whose_queries_fail_says_why_and_exits_non_zero(small_db, tmp_path):
    from click.testing import CliRunner

    trace = tmp_path / "trace.jsonl"
    queries = generate(turbdb.open(small_db)["box"].info, dataset="box", jobs=4, duration=1.0, seed=2)
    write_trace(trace, [dataclasses.replace(q, field="magnetic") for q in queries])
    ran = CliRunner().invoke(main, ["workload", "replay", str(trace), str(small_db)])
    assert ran.exit_code == 1, ran.output
    assert "failed: " in ran.stderr and "UnknownNameError" in ran.stderr and "magnetic" in ran.stderr
    report = json.loads(CliRunner().invoke(main, ["workload", "replay", str(trace), str(small_db), "--json"]).stdout)
    assert report["failed"] == sum(report["failures"].values()) > 0


def test_a_trace_asks_only_for_written_steps_and_its_records_are_bounded(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "gappy", grid=(16, 16, 16), times=[0.0, 0.1, 0.2], fields={"velocity": 3})
    with pytest.raises(turbdb.InvalidRequestError, match="no written step of 'velocity'"):
        generate(ds.info, dataset="gappy", jobs=5, seed=0)
    ds.write("velocity", 1, np.ones((16, 16, 16, 3), np.float32))
    assert {q.time for q in generate(ds.info, dataset="gappy", jobs=50, seed=0)} == {0.1}
    path = tmp_path / "t.jsonl"
    good = generate(ds.info, dataset="gappy", jobs=1, seed=0)[0]
    for bad, words in [({"count": 10**11}, "count must be"), ({"count": -5}, "count must be"),
                       ({"arrival": float("nan")}, "arrival must be")]:
        write_trace(path, [dataclasses.replace(good, **bad)])
        with pytest.raises(turbdb.FormatError, match=words):
            read_trace(path)


def test_a_replay_checks_every_answer_and_stops_a_job_at_a_wrong_one(small_db):
    from turbdb.workload.replay import replay

    db = turbdb.open(small_db)
    trace = generate(db["box"].info, dataset="box", jobs=30, duration=1.0, seed=3)
    local = db["box"]

    def right(q, points, values):
        return np.array_equal(values, local.query(q.field, points, time=q.time, method=q.method,
                                                   operator=q.operator))

    checked = replay(db, trace, clients=4, check=right)
    assert checked.queries == len(trace) and checked.failed == 0
    assert all(a.correct for a in checked.log)

    multi = next(q.job for q in trace if q.index == 1)
    wrong = replay(db, trace, clients=4, check=lambda q, *_: q.job != multi)
    assert wrong.failed == 1, "the job's first answer is wrong, and its later queries are not sent"
    assert len(wrong.log) == len(trace) - sum(q.job == multi for q in trace) + 1
    assert wrong.not_sent == sum(q.job == multi for q in trace) - 1 > 0
    assert wrong.summary()["not_sent"] == wrong.not_sent and wrong.summary()["traced"] == len(trace)
    assert sum(len(v) for v in wrong.response.values()) == wrong.queries


@pytest.mark.parametrize("scheduler", [None, "jaws"])
def test_a_replay_driven_by_futures_answers_every_query_in_job_order(small_db, scheduler):
    from turbdb.workload.replay import replay

    db = turbdb.open(small_db) if scheduler is None else turbdb.open(small_db, scheduler=scheduler, cache_bytes=1 << 20)
    trace = generate(db["box"].info, dataset="box", jobs=40, duration=1.0, seed=5)
    local = turbdb.open(small_db)["box"]

    answered: dict[int, list[int]] = {}

    def right(q, points, values):
        answered.setdefault(q.job, []).append(q.index)
        return np.allclose(values, local.query(q.field, points, time=q.time, method=q.method, operator=q.operator),
                           rtol=1e-6, atol=1e-6)

    report = replay(db, trace, clients=3, check=right, driver="futures")
    assert report.queries == len(trace) and report.failed == 0 and all(a.correct for a in report.log)
    # A job's queries one after another, each sent once the previous one was answered.
    assert all(indices == list(range(len(indices))) for indices in answered.values())
    assert sum(map(len, answered.values())) == len(trace)
    paced = replay(db, trace[:12], speedup=20.0, clients=2, driver="futures")
    assert paced.queries == 12 and paced.seconds >= max(q.arrival for q in trace[:12]) / 20.0
    with pytest.raises(ValueError, match="driver"):
        replay(db, trace, driver="coroutines")


def test_the_benchmark_judges_urc_against_lruk_on_alternating_pairs_with_a_sign_test(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "bench"))
    import workload as bench

    assert bench.sign_test_p(7, 7) == 1 / 128
    assert bench.sign_test_p(0, 5) == 1.0
    assert bench.sign_test_p(4, 6) == pytest.approx(22 / 64)

    def run(policy: str, hit: float) -> dict:
        return {"engine": {"hit_ratio": hit}, "queries_per_second": 100.0 if policy == "urc" else 90.0}

    hits = iter([(0.10, 0.12), (0.13, 0.11), (0.10, 0.14)])  # (lruk, urc) of the pairs after the first
    pending: list[float] = []

    def saturated(policy: str) -> dict:
        if not pending:
            pending.extend(next(hits))
        return run(policy, pending.pop(0))

    out = bench.repeated_cache_pairs((run("lruk", 0.11), run("urc", 0.15)), saturated, count=4)
    assert [(p["lruk_hit_ratio"], p["urc_hit_ratio"]) for p in out["pairs"]] == [
        (0.11, 0.15), (0.10, 0.12), (0.13, 0.11), (0.10, 0.14)]
    assert out["urc_above_in"] == 3
    assert out["sign_test_p"] == 5 / 16
    assert out["median"]["urc_hit_ratio"] == pytest.approx(0.13)


def test_the_benchmark_gives_each_pairs_ratio_over_the_whole_replay_and_to_90_per_cent(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "bench"))
    import workload as bench

    def run(seconds: float, at_90: float) -> dict:
        return {"seconds": seconds, "queries_per_second": 1000.0 / seconds, "cores_busy": 1.0,
                "completion": {"answered_by": {"50%": at_90 / 2, "90%": at_90, "100%": seconds}}}

    # (noshare, jaws) of the pairs after the first: jaws's tail is long in the first.
    later = iter([(run(4.0, 3.8), run(2.0, 1.2)), (run(3.0, 2.7), run(1.5, 1.0))])
    pending: list[dict] = []

    def saturated(scheduler: str) -> dict:
        if not pending:
            pending.extend(next(later))
        return pending.pop(0)

    out = bench.repeated_pairs((run(4.4, 4.0), run(2.2, 1.6)), saturated, count=3)
    assert [p["ratio"] for p in out["pairs"]] == pytest.approx([2.0, 2.0, 2.0])
    assert [p["ratio_to_90"] for p in out["pairs"]] == pytest.approx([2.5, 3.8 / 1.2, 2.7])
    assert out["median"] == pytest.approx(2.0)
    assert out["to_90"] == pytest.approx({"median": 2.7, "min": 2.5, "max": 3.8 / 1.2})
    line = next(x for x in bench.compute_ratios([], [], (), pairs=out)["lines"] if "alternating pairs" in x)
    assert "median 2.00×" in line and "2.70× sooner (2.50–3.17×)" in line


def test_a_replay_paced_by_the_servers_rate_limit_says_so():
    from turbdb.cli.workload import throttling_lines

    # 8 clients for 10 s waited 30 s on the limit in all (more than a tenth of their 80 s).
    waits = {"paced": 40, "paced_seconds": 29.0, "rate_limited": 1, "rate_limited_seconds": 1.0,
             "busy": 2, "busy_seconds": 0.5}
    lines = throttling_lines(waits, seconds=10.0, clients=8)
    assert lines[0] == "  rate limit: 40 requests held back by the client and 1 answered 429, 30.0 s waited in all"
    assert lines[1] == "  server busy: 2 answers of 503 retried, 0.5 s waited in all"  # causes not known
    assert "set the pace of this replay" in lines[2] and "--requests-per-minute" in lines[2]
    # A few short waits are reported without the warning; none, nothing.
    assert len(throttling_lines({**waits, "paced_seconds": 2.0, "rate_limited_seconds": 0.0}, 10.0, 8)) == 2
    assert throttling_lines({}, 10.0, 8) == []


def test_the_cpu_timeline_counts_only_the_window_asked_for(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "bench"))
    from cpu_timeline import CpuTimeline

    def spin(seconds: float) -> None:
        # CPU seconds, not wall: on a loaded machine 0.3 s of wall time got 0.05 s of CPU.
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass

    with CpuTimeline(interval=0.02) as timeline:
        spin(0.3)  # before the window: CPU of the same process that must not count
        quiet_start = time.perf_counter()
        time.sleep(0.3)
        busy_start = time.perf_counter()
        spin(0.3)
        busy_end = time.perf_counter()
    quiet_cpu, busy_cpu = timeline.cpu_between(quiet_start, busy_start), timeline.cpu_between(busy_start, busy_end)
    assert quiet_cpu < 0.1 and max(timeline.intervals(quiet_start, busy_start)) < 0.5
    assert 0.1 < busy_cpu < 0.45
    assert timeline.cores_busy(busy_start, busy_end) == pytest.approx(busy_cpu / (busy_end - busy_start))
    busy = timeline.intervals(busy_start, busy_end)
    assert len(busy) >= 5 and all(0 <= b < (os.cpu_count() or 1) + 0.5 for b in busy)
    # Windows that meet add up: the first spin is counted before the quiet window only.
    first = timeline.samples[0][0]
    before_cpu = timeline.cpu_between(first, quiet_start)
    assert before_cpu > 0.1
    assert timeline.cpu_between(first, busy_end) == pytest.approx(before_cpu + quiet_cpu + busy_cpu, abs=1e-9)
