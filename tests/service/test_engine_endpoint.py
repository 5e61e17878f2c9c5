"""A real server with a node engine (`turbdb serve --scheduler …`): under every scheduler,
eight concurrent clients get the answers of the engine-less local dataset and replay a
short trace with every query answered, and GET /v1/engine and /metrics report what the engine did."""

import json
import threading

import httpx
import numpy as np
import pytest

import turbdb
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from servicekit import FULL, running_server
from turbdb.cli import main
from turbdb.workload import generate, write_trace

SCHEDULERS = ("noshare", "liferaft", "jaws")


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_eight_clients_through_the_engine_get_the_local_answers_and_replay_a_trace(
        service_db, local, tokens_file, scheduler, tmp_path, monkeypatch):
    name = local.datasets[0]
    ds = local[name]
    field = next(iter(ds.info.fields))
    rng = np.random.default_rng(5)
    lo, hi = np.asarray(ds.info.origin), np.asarray(ds.info.origin) + np.asarray(ds.info.spacing) * (
        np.asarray(ds.info.grid) - 1)
    asks = [dict(points=lo + rng.uniform(0.2, 0.4, (int(rng.integers(1, 300)), 3)) * (hi - lo),
                 time=float(ds.info.times[0]), method=["lag4", "lag6", "fd4lag4"][i % 3],
                 operator=["field", "gradient", "laplacian"][i % 3]) for i in range(24)]
    with running_server(service_db, tmp_path / "server.log", "--tokens", str(tokens_file), "--scheduler", scheduler,
                        "--cache-bytes", "1MiB", "--cache-policy", "urc", "--io", "direct") as server:
        # The server says at start which engine the queries go through.
        assert f"node engine: {scheduler} scheduler, 1 MiB urc atom cache, direct reads" in server.log.read_text()
        answers = {}

        def client(k):
            with turbdb.connect(server.url, FULL) as remote:
                rds = remote[name]
                for i in range(k, len(asks), 8):
                    answers[i] = rds.query(field, dtype=np.float64, **asks[i])

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, ask in enumerate(asks):
            np.testing.assert_allclose(answers[i], ds.query(field, dtype=np.float64, **ask), rtol=1e-6, atol=1e-6)
        state = httpx.get(server.url + "/v1/engine", timeout=10).json()
        assert state["enabled"] and state["scheduler"] == scheduler
        # Only JAWS gates jobs: the others accept one and say so.
        declared = httpx.post(server.url + "/v1/jobs", json={"queries": [{"dataset": name, "field": field, "time": float(
            ds.info.times[0])}]}, headers={"Authorization": f"Bearer {FULL}"}, timeout=10).json()
        assert declared["scheduled"] is (scheduler == "jaws"), declared
        assert ("does not gate jobs" in declared.get("note", "")) is (scheduler != "jaws")
        with turbdb.connect(server.url, FULL) as remote:  # the same figures as a local engine_stats()
            assert remote.engine_stats().keys() == turbdb.open(service_db, scheduler="jaws").engine_stats().keys()
        assert state["completed"] >= len(asks) and state["pending"] == 0 and state["atoms_read"] > 0
        # A short JHTDB-shaped trace replayed by 8 clients over HTTP: every query answered.
        trace = tmp_path / "trace.jsonl"
        write_trace(trace, generate(local["trig"].info, dataset="trig", jobs=12, duration=1.0, seed=4))
        monkeypatch.setenv("TURBDB_TOKEN", FULL)
        ran = CliRunner().invoke(main, ["workload", "replay", str(trace), "--url", server.url, "--clients", "8",
                                        "--json"])
        assert ran.exit_code == 0, ran.output
        report = json.loads(ran.output)
        assert report["failed"] == 0 and report["queries"] == len(trace.read_text().splitlines())
        assert report["server_engine"]["completed"] >= len(asks) + report["queries"]
        # The replay's own figures: what the engine did while it ran (no other client here).
        assert 0 < report["engine"]["atoms_read"] <= report["server_engine"]["atoms_read"]
        assert 0 <= report["engine"]["hit_ratio"] <= 1
        check_metrics_match_the_engine_endpoint(server.url)


def check_metrics_match_the_engine_endpoint(url):
    """/metrics carries the engine's figures, the same as GET /v1/engine once it is idle."""
    state = httpx.get(url + "/v1/engine", timeout=10).json()
    samples = [s for f in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text)
               for s in f.samples]

    def value(name, **labels):
        return next(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    assert value("turbdb_engine_queue_depth") == state["pending"] == 0
    assert value("turbdb_engine_atoms_read_total") == state["atoms_read"] > 0
    assert value("turbdb_engine_bytes_read_total") == state["bytes_read"] > 0
    assert value("turbdb_engine_cache_hit_ratio") == pytest.approx(state["hit_ratio"])
    assert value("turbdb_engine_alpha") == pytest.approx(state["alpha"])
    assert value("turbdb_engine_queries_finished_total", outcome="completed") == state["completed"]
    assert value("turbdb_engine_served_alone_total") == state["served_alone"]
    assert value("turbdb_engine_served_from_cache_total") == state["served_from_cache"]
    # Histograms: cumulative buckets ending in +Inf at the total count.
    assert value("turbdb_engine_batch_atoms_bucket", le="+Inf") == state["batches"] == sum(state["batch_sizes"])
    assert value("turbdb_engine_batch_atoms_bucket", le="1.0") == state["batch_sizes"][0]
    # With its sum and count, so that Prometheus can give the mean atoms a batch.
    assert value("turbdb_engine_batch_atoms_count") == state["batches"]
    assert value("turbdb_engine_batch_atoms_sum") == state["batch_atoms_sum"] >= state["batches"]
    answered = 0
    for size, h in state["response"].items():
        assert value("turbdb_engine_response_seconds_count", size=size) == h["count"]
        assert value("turbdb_engine_response_seconds_sum", size=size) == pytest.approx(h["sum_seconds"])
        below_a_second = sum(h["counts"][:state["response_bounds_seconds"].index(1.0) + 1])
        assert value("turbdb_engine_response_seconds_bucket", size=size, le="1.0") == below_a_second
        answered += h["count"]
    assert answered == state["completed"] + state["failed"] + state["cancelled"] > 0


def test_without_engine_options_the_engine_endpoint_says_so(server):
    assert "no node engine: each request runs alone" in server.log.read_text()
    assert "--scheduler jaws" in server.log.read_text()
    assert httpx.get(server.url + "/v1/engine", timeout=10).json() == {"enabled": False}
    assert "turbdb_engine_" not in httpx.get(server.url + "/metrics", timeout=10).text
    with turbdb.connect(server.url, FULL) as remote, pytest.raises(turbdb.InvalidRequestError, match="--scheduler"):
        remote.engine_stats()
