"""A turbdb cluster on Dask (issue 11) on this machine: point-query throughput in-process
against a LocalCluster of 1 and 2 worker processes (each single-threaded, as is the
in-process baseline), one of 2 workers slowed to half speed (SIGSTOP/SIGCONT on a 50 %
duty cycle from outside) under graduated declustering and under static placement, and a
60 s replay of the JAWS workload trace during which a worker is killed with SIGKILL
(every answer checked against the single-node engine). All ratios are measured in the same run.

    python bench/cluster.py [--data /tmp/turbdb-bench-cluster] [--points 1000000] [--replay 60] [--seed 0]

Writes bench/results/cluster.json and cluster.png. On a 2-core machine 2 workers are all
the cores; multi-node scaling (16 cores and more) is not measured here: the JSON carries
a two-parameter model T(N) = a + b/N fitted to N = 1, 2, which nothing has checked.
"""

from __future__ import annotations

import os

# The in-process baseline and every worker run their engine on one thread, so that N
# workers are N cores and the comparison is like for like.
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import turbdb  # noqa: E402
from turbdb.cluster.launch import start_local  # noqa: E402
from turbdb.simulate import synthetic_snapshots  # noqa: E402
from turbdb.workload.replay import replay  # noqa: E402
from turbdb.workload.trace import draw_points, generate  # noqa: E402

RESULTS = Path(__file__).parent / "results"
NAME, FIELD, GRID, STEPS, PARTITION = "syn64", "velocity", 64, 2, 16
METHOD = "lag4"
REPEATS = 3
TARGET_OVERHEAD, TARGET_SLOW_LOSS = 0.05, 0.10


def ensure_data(data: Path, seed: int) -> None:
    if (data / NAME).is_dir():
        return
    ds = turbdb.create_dataset(data, NAME, grid=(GRID,) * 3, times=[0.0, 0.01], atom=8, partition=PARTITION,
                               fields={"velocity": 3})
    for s in synthetic_snapshots(GRID, n_steps=STEPS, dt=0.01, seed=seed):
        ds.write(FIELD, s.step, s.velocity)


def best_seconds(fn, repeats: int = REPEATS) -> float:
    fn()  # warm: page cache, worker caches, connections
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def worker_pids(client) -> dict[str, int]:
    by_address = client.run(os.getpid)
    names = {a: str(w["name"]) for a, w in client.scheduler_info()["workers"].items()}
    return {names[a]: pid for a, pid in by_address.items()}


class DutyCycle:
    """Stops a process for ``stopped`` of every ``period`` seconds, from outside."""

    def __init__(self, pid: int, period: float = 0.1, stopped: float = 0.05):
        self.pid, self.period, self.stopped = pid, period, stopped
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            os.kill(self.pid, signal.SIGSTOP)
            time.sleep(self.stopped)
            os.kill(self.pid, signal.SIGCONT)
            time.sleep(self.period - self.stopped)

    def __enter__(self) -> DutyCycle:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()
        os.kill(self.pid, signal.SIGCONT)


def throughput_runs(data: Path, points: np.ndarray, expected: np.ndarray) -> dict:
    n = len(points)
    local = turbdb.open(data)[NAME]
    out: dict = {"in_process": n / best_seconds(lambda: local.query(FIELD, points, time=0.0, method=METHOD))}
    for workers in (1, 2):
        run = start_local(data, workers, threads=1, dashboard_address=":0")
        try:
            for policy in (("graduated", "static") if workers == 2 else ("graduated",)):
                db = turbdb.open(data, cluster=run.client, declustering=policy, balance=False)
                ds = db[NAME]
                got = ds.query(FIELD, points, time=0.0, method=METHOD)
                assert np.array_equal(got, expected), "cluster answer differs from the single node"
                key = f"workers{workers}_{policy}"
                out[key] = n / best_seconds(lambda: ds.query(FIELD, points, time=0.0, method=METHOD))
                if workers == 2:
                    slot = "0"
                    with DutyCycle(worker_pids(run.client)[slot]):
                        seconds = best_seconds(lambda: ds.query(FIELD, points, time=0.0, method=METHOD))
                        got = ds.query(FIELD, points, time=0.0, method=METHOD)
                        share = {s: w["points"] for s, w in db.last_report.work.items()}
                    assert np.array_equal(got, expected), "answer under a slowed worker differs"
                    out[f"{key}_one_half_speed"] = n / seconds
                    out[f"{key}_one_half_speed_work"] = share
                db.close()
        finally:
            run.close()
    return out


def kill_replay(data: Path, seconds: float, seed: int, clients: int = 8) -> dict:
    """The JAWS workload (``turbdb workload generate``: bursty jobs, mostly small queries on
    shared regions, some large uniform batches, jobs over both steps) replayed at its own
    pace for ``seconds`` by ``clients`` threads against a LocalCluster of 3 workers; worker
    "1" is killed with SIGKILL a third of the way in (its nanny restarts it). Every answer
    is checked against the single-node engine's, computed beforehand."""
    local = turbdb.open(data)[NAME]
    trace = generate(local.info, dataset=NAME, field=FIELD, jobs=max(8, int(8 * seconds)), duration=seconds,
                     seed=seed)
    answers = {(q.job, q.index): local.query(FIELD, draw_points(q, local.info), time=q.time, method=q.method,
                                             operator=q.operator) for q in trace}

    def check(q, _points, got) -> bool:
        want = answers[(q.job, q.index)]
        return bool(np.allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(want).max()))))

    run = start_local(data, 3, threads=1, dashboard_address=":0")
    try:
        with turbdb.open(data, cluster=run.client) as db:
            killer = threading.Timer(seconds / 3, os.kill, (worker_pids(run.client)["1"], signal.SIGKILL))
            killer.start()
            report = replay(db, trace, speedup=1.0, clients=clients, check=check)
            killer.join()
    finally:
        run.close()
    log = [dataclasses.asdict(a) for a in report.log]
    small = report.response.get("small", [])
    return {"seconds": seconds, "workload": f"turbdb workload generate: {len({q.job for q in trace})} jobs, "
                                            f"{len(trace)} queries over {seconds:.0f} s, {clients} clients",
            "took_seconds": report.seconds, "killed_at": seconds / 3, "queries": len(log),
            "trace_queries": len(trace), "wrong_or_lost": len(trace) - report.queries,
            "errors": sorted({a["error"] for a in log if a["error"]})[:5],
            "max_query_seconds": max(a["seconds"] for a in log),
            "median_query_seconds": statistics.median(a["seconds"] for a in log),
            "small_p99_seconds": float(np.percentile(small, 99)) if small else None, "log": log}


def machine_info() -> dict:
    text = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in text if line.startswith("model name")), platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in text if line.startswith("flags")), [])
    simd = "AVX-512" if "avx512f" in flags else "AVX2+FMA" if {"avx2", "fma"} <= set(flags) else "SSE"
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent,
                            capture_output=True, text=True).stdout.strip()
    return {"platform": platform.platform(), "cpu": cpu, "simd": simd, "cores": os.cpu_count(),
            "python": platform.python_version(), "turbdb": turbdb.__version__, "git": commit,
            "engine_threads_per_worker": 1}


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = out["throughput_points_per_second"]
    labels = ["in-process", "1 worker", "2 workers", "2 workers,\none ½ speed\ngraduated",
              "2 workers\nstatic", "2 workers,\none ½ speed\nstatic"]
    keys = ["in_process", "workers1_graduated", "workers2_graduated", "workers2_graduated_one_half_speed",
            "workers2_static", "workers2_static_one_half_speed"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
    a.bar(range(len(keys)), [t[k] / 1e6 for k in keys], color=["grey", "C0", "C0", "C1", "C2", "C3"])
    a.set_xticks(range(len(keys)), labels, fontsize=8)
    a.set_ylabel("Mpoints/s")
    a.set_title(f"{out['points']:.0e} points, {METHOD}, 1 engine thread per process")
    log = out["kill_replay"]["log"]
    colors = ["C0" if q["error"] is None and q["correct"] else "C3" for q in log]
    b.scatter([q["sent"] for q in log], [q["seconds"] for q in log], c=colors, s=8)
    b.set_yscale("log")
    b.axvline(out["kill_replay"]["killed_at"], color="k", linestyle="--", label="SIGKILL worker 1")
    b.set_xlabel("time (s)")
    b.set_ylabel("query seconds")
    b.set_title(f"JAWS workload: {out['kill_replay']['queries']} queries, "
                f"{out['kill_replay']['wrong_or_lost']} wrong or lost", fontsize=9)
    b.legend()
    m = out["machine"]
    fig.suptitle(f"turbdb cluster on one machine: {m['cpu']} ({m['simd']}), {m['cores']} cores, "
                 f"load {out['load_average_start'][0]:.1f}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/tmp/turbdb-bench-cluster"))
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--replay", type=float, default=60.0,
                        help="seconds of the JAWS workload replayed while a worker is killed with -9")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ensure_data(args.data, args.seed)
    load_start = os.getloadavg()
    points = np.random.default_rng(args.seed).uniform(0, 2 * np.pi, (args.points, 3))
    expected = turbdb.open(args.data)[NAME].query(FIELD, points, time=0.0, method=METHOD)
    t = throughput_runs(args.data, points, expected)
    replay = kill_replay(args.data, args.replay, args.seed)
    # T(N) = a + b/N seconds per point, fitted to 1 and 2 workers (unchecked beyond them).
    t1, t2 = 1 / t["workers1_graduated"], 1 / t["workers2_graduated"]
    b = 2 * (t1 - t2)
    a = t1 - b
    ideal_half = t["workers2_graduated"] * 0.75  # one worker at half speed: 1.5 of 2 workers' rate
    out = {
        "machine": machine_info(), "load_average_start": load_start, "load_average_end": os.getloadavg(),
        "points": args.points, "method": METHOD, "seed": args.seed, "dataset": f"{GRID}³ synthetic, {PARTITION}³ partitions",
        "throughput_points_per_second": t,
        "ratios": {
            "overhead_1_worker_vs_in_process": 1 - t["workers1_graduated"] / t["in_process"],
            "overhead_target": TARGET_OVERHEAD,
            "speedup_2_workers_vs_1": t["workers2_graduated"] / t["workers1_graduated"],
            "graduated_half_speed_vs_unperturbed": t["workers2_graduated_one_half_speed"] / t["workers2_graduated"],
            "graduated_half_speed_vs_aggregate_rate": t["workers2_graduated_one_half_speed"] / ideal_half,
            "static_half_speed_vs_unperturbed": t["workers2_static_one_half_speed"] / t["workers2_static"],
            "slow_loss_target": TARGET_SLOW_LOSS,
        },
        "model": {"seconds_per_point": {"a_serial": a, "b_parallel": b},
                  "predicted_16_workers_points_per_second": 1 / (a + b / 16) if a + b / 16 > 0 else None,
                  "checked": "no: fitted to N = 1, 2 on this 2-core machine only"},
        "kill_replay": replay,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(out, indent=1))
    plot(out, RESULTS / "cluster.png")
    summary = {k: v for k, v in out.items() if k not in ("kill_replay",)}
    summary["kill_replay"] = {k: v for k, v in replay.items() if k != "log"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
