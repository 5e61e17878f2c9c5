"""A turbdb cluster on Dask (issue 11) on this machine: point-query throughput in-process
against a LocalCluster of 1, 2 and 3 worker processes (each single-threaded, as is the
in-process baseline), one of 2 workers slowed to half speed (SIGSTOP/SIGCONT on a 50 %
duty cycle from outside) under graduated declustering and under static placement, and a
60 s replay of the JAWS workload trace during which a worker is killed with SIGKILL
(every answer checked against the single-node engine). All ratios are measured in the
same run; every configuration runs REPEATS times after a warm-up and is reported as a
median with its quartiles and extremes.

    python bench/cluster.py [--data /tmp/turbdb-bench-cluster] [--points 1000000] [--replay 60] [--seed 0]
    python bench/cluster.py --route-only [--label after]
    python bench/cluster.py --overhead-only [--label after]

Writes bench/results/cluster.json and cluster.png. ``--route-only`` times only the
mediator's route of the query for 3 and 16 slots (no cluster) and recomputes the
16-worker prediction from the parts committed in cluster.json with the route just timed
(a recomputation, not a new run); it adds its figures under ``--label`` to
bench/results/cluster_route.json. ``--overhead-only`` measures only the 1-worker overhead
(REPEATS adjacent pairs of in-process and 1-worker queries, and the 1-worker query's
seconds outside the worker's engine) and adds it under ``--label`` to
bench/results/cluster_overhead.json, for A/B runs of a change.

Graduated against static: the two policies run alternately on one cluster (which goes
first alternates), and at each repetition both meet the duty cycle at the same phase
(drawn with the seed); the JSON gives each policy's rate, the slowed worker's share, and
the paired ratio graduated/static per repetition, with spreads.

The scaling model (``model`` in the JSON). A query's time is split into parts measured
independently in the same run: the mediator's route (its timer), the mediator's CPU after
routing (this process's CPU: submits, transfers, merges, the Dask client and the
LocalCluster's scheduler; timers for submit and merge), each worker's CPU (psutil) and
engine seconds (the node's counters), the CPU other processes took meanwhile, and, apart
from any query, Dask's CPU per unit call (bursts of 16–256 empty calls on the workers'
actors, as units are sent) and the transfer of a unit with no engine over the network
path. :func:`predict` composes them — a serial route, then a pipeline of
the mediator feeding the workers, as slow as its slower stage or the machine's cores,
plus one unit that cannot overlap. Checked here: T(1), T(2), T(3) predicted from their
parts against the measured medians (3 workers and the mediator oversubscribe 2 cores),
and the 10⁶-point T(3) extrapolated from a quarter-size query and from the 2-worker run.
The 16-worker figure is the same extrapolation from the 3-worker run, with the route,
units and points sent computed exactly for 16 slots in-process; it assumes a core per
process, Dask's per-call CPU as measured for that many calls on this machine, and the
loopback for a network. Nothing above 3 workers or 2 cores has been measured. The old
T = a + b/N fitted to N = 1, 2 is kept with its error at N = 3.
"""

from __future__ import annotations

import os

# The in-process baseline and every worker run their engine on one thread, so that N
# workers are N cores and the comparison is like for like.
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
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
import psutil  # noqa: E402

import turbdb  # noqa: E402
from turbdb._core import FieldStore  # noqa: E402
from turbdb.arguments import axes_of  # noqa: E402
from turbdb.cluster import plugin  # noqa: E402
from turbdb.cluster.catalogue import Catalogue  # noqa: E402
from turbdb.cluster.launch import start_local  # noqa: E402
from turbdb.cluster.routing import Groups, Reach, split_query  # noqa: E402
from turbdb.simulate import synthetic_snapshots  # noqa: E402
from turbdb.workload.replay import replay  # noqa: E402
from turbdb.workload.trace import draw_points, generate  # noqa: E402

RESULTS = Path(__file__).parent / "results"
NAME, FIELD, GRID, STEPS, PARTITION = "syn64", "velocity", 64, 2, 16
METHOD = "lag4"
#: Timed repetitions of each configuration (after one warm-up): figures are medians, with
#: quartiles and extremes as their spread.
REPEATS = 15
#: The half-speed worker: stopped for STOPPED of every PERIOD seconds, from outside.
PERIOD, STOPPED = 0.1, 0.05
#: Cores of this machine that the model's capacity term shares out.
CORES = os.cpu_count() or 1
#: The cluster the model extrapolates to.
BIG = 16
TARGET_OVERHEAD, TARGET_SLOW_LOSS = 0.05, 0.10


def ensure_data(data: Path, seed: int) -> None:
    if (data / NAME).is_dir():
        return
    ds = turbdb.create_dataset(data, NAME, grid=(GRID,) * 3, times=[0.0, 0.01], atom=8, partition=PARTITION,
                               fields={"velocity": 3})
    for s in synthetic_snapshots(GRID, n_steps=STEPS, dt=0.01, seed=seed):
        ds.write(FIELD, s.step, s.velocity)


def spread(values: list[float]) -> dict:
    """Median, quartiles and extremes of repeated measurements."""
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(median), "q1": float(q1), "q3": float(q3), "min": float(min(values)),
            "max": float(max(values)), "n": len(values)}


def timed(fn, repeats: int = REPEATS) -> list[float]:
    fn()  # warm: page cache, worker caches, connections
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return times


def worker_pids(client) -> dict[str, int]:
    by_address = client.run(os.getpid)
    names = {a: str(w["name"]) for a, w in client.scheduler_info()["workers"].items()}
    return {names[a]: pid for a, pid in by_address.items()}


class DutyCycle:
    """Stops a process for ``stopped`` of every ``period`` seconds, from outside, the first
    stop ``phase`` seconds after entering (so that two runs can meet the same perturbation)."""

    def __init__(self, pid: int, period: float = PERIOD, stopped: float = STOPPED, phase: float = 0.0):
        self.pid, self.period, self.stopped, self.phase = pid, period, stopped, phase
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self._stop.wait(self.phase):
            return
        while not self._stop.is_set():
            os.kill(self.pid, signal.SIGSTOP)
            time.sleep(self.stopped)
            os.kill(self.pid, signal.SIGCONT)
            if self._stop.wait(self.period - self.stopped):
                return

    def __enter__(self) -> DutyCycle:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()
        os.kill(self.pid, signal.SIGCONT)


class Probe:
    """The parts of a query's time on a running cluster, each from its own counter: the
    mediator process's CPU seconds (this process: the mediator, the Dask client and the
    LocalCluster's scheduler), the mediator's own timers (route, submit, merge), each
    worker process's CPU seconds (psutil) and its engine's seconds (the node's counters),
    and the CPU seconds the rest of the machine took meanwhile (other engineers' jobs on
    this shared machine: all cores' busy time less ours)."""

    def __init__(self, run):
        self.client = run.client
        self.plugin = run.catalogue.plugin_name
        names = {a: str(w["name"]) for a, w in self.client.scheduler_info()["workers"].items()}
        self.address = {slot: a for a, slot in names.items()}
        self.procs = {slot: psutil.Process(pid) for slot, pid in worker_pids(self.client).items()}

    def workers_cpu(self) -> dict[str, float]:
        return {slot: sum(p.cpu_times()[:2]) for slot, p in self.procs.items()}

    def engine(self) -> dict[str, float]:
        out = {}
        for slot, address in self.address.items():
            done = self.client.submit(plugin.work_done, self.plugin, workers=[address], allow_other_workers=False,
                                      pure=False).result()
            out[slot] = done.get("work", {}).get("query", {}).get("seconds", 0.0)
        return out

    def query(self, ds, points: np.ndarray) -> dict:
        engine0, cpu0, machine0, mediator0 = self.engine(), self.workers_cpu(), _busy(), time.process_time()
        began = time.perf_counter()
        ds.query(FIELD, points, time=0.0, method=METHOD)
        wall = time.perf_counter() - began
        mediator, machine, cpu = time.process_time() - mediator0, _busy() - machine0, self.workers_cpu()
        engine = self.engine()
        stats = ds.last_query_stats
        ours = mediator + sum(cpu[s] - cpu0[s] for s in cpu)
        return {"wall": wall, "mediator_cpu": mediator, "others_cpu": max(0.0, machine - ours),
                "worker_cpu": {s: cpu[s] - cpu0[s] for s in cpu}, "engine": {s: engine[s] - engine0[s] for s in engine},
                "units": int(stats["units"]), "entries": int(stats["entries"]),
                "units_per_worker": {s: int(stats.get(f"worker.{s}.units", 0)) for s in cpu},
                **{k: stats[f"{k}_seconds"] for k in ("route", "submit", "merge", "dispatch", "total")}}


def _busy() -> float:
    """CPU seconds all cores of the machine have been busy (anything but idle and I/O wait)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def parts_of(samples: list[dict]) -> dict:
    """Each part of a query over the repetitions: the wall time's median and spread; the
    mediator's timers and the CPU and engine seconds as means (CPU counters of other
    processes tick every 10 ms, which a mean over repetitions resolves)."""
    slots = sorted(samples[0]["worker_cpu"])
    mean = lambda f: float(np.mean([f(s) for s in samples]))  # noqa: E731
    return {"wall": spread([s["wall"] for s in samples]),
            **{k: mean(lambda s, k=k: s[k]) for k in ("route", "submit", "merge", "dispatch", "total", "mediator_cpu",
                                                     "others_cpu")},
            "worker_cpu": {w: mean(lambda s, w=w: s["worker_cpu"][w]) for w in slots},
            "engine": {w: mean(lambda s, w=w: s["engine"][w]) for w in slots},
            "units": samples[0]["units"], "entries": samples[0]["entries"],
            "units_per_worker": max(max(s["units_per_worker"].values()) for s in samples)}


def predict(route: float, mediator: float, workers: list[float], units_per_worker: int, cores: float,
            others: float = 0.0) -> float:
    """The model's query seconds: the route (serial, before any unit leaves), then a
    two-stage pipeline — the mediator's dispatch (its CPU after routing: submits,
    transfers, the scheduler, merges; one process, serial under the GIL) feeding the
    workers (each its own CPU: engine, transfers, call handling) — as slow as its slower
    stage, the busiest worker, or the machine's ``cores`` shared by all of them and by
    ``others`` (CPU seconds other processes took meanwhile), plus one
    unit's worth of the faster stage that cannot overlap (the first unit in, the last out;
    all of it when a worker gets one unit)."""
    dispatch, busiest = mediator - route, max(workers)
    return (route + max(dispatch, busiest, (dispatch + sum(workers) + others) / cores)
            + min(dispatch, busiest) / max(units_per_worker, 1))


def call_costs(servers, probe: Probe, counts: tuple[int, ...]) -> dict:
    """Dask's own costs per unit call, apart from any query: bursts of ``counts`` empty
    calls on the workers' actors (as units are sent) started at once over the workers (the
    client's CPU per call, in this process, and the workers' CPU per call, for growing
    numbers of calls), and 100 round trips one at a time (a call's latency)."""
    addresses = list(probe.address.values())

    def measure(count: int, one_at_a_time: bool) -> dict:
        cpu0, med0, began = probe.workers_cpu(), time.process_time(), time.perf_counter()
        calls = []
        for i in range(count):
            calls.append(servers.call(addresses[i % len(addresses)], "ping", i))
            if one_at_a_time:
                calls[-1].result()
        for call in calls:
            call.result()
        wall, mediator = time.perf_counter() - began, time.process_time() - med0
        worker = sum(probe.workers_cpu().values()) - sum(cpu0.values())
        return {"calls": count, "wall": wall, "mediator_cpu": mediator, "worker_cpu": worker,
                "mediator_cpu_per_call": mediator / count, "worker_cpu_per_call": worker / count}

    measure(16, False)  # warm
    return {"bursts": {str(c): measure(c, False) for c in counts}, "one_at_a_time": measure(100, True)}


def transfer_costs(servers, probe: Probe, points: int, repeats: int = REPEATS) -> dict:
    """Moving ``points`` points to a worker and as many float64 3-vectors back, with no
    engine, as a unit does over the network (a worker on another machine: the array rides
    in the call and its answer in the reply; on this machine units go through shared memory)."""
    address = probe.address[sorted(probe.address)[0]]
    array = np.random.default_rng(0).uniform(0, 1, (points, 3))
    samples = []
    for _ in range(repeats + 1):
        cpu0, med0, began = probe.workers_cpu(), time.process_time(), time.perf_counter()
        servers.call(address, "ping", array).result()
        samples.append((time.perf_counter() - began, time.process_time() - med0,
                        sum(probe.workers_cpu().values()) - sum(cpu0.values())))
    samples = samples[1:]
    return {"points": points, "bytes_each_way": array.nbytes,
            "wall": statistics.median(s[0] for s in samples), "mediator_cpu": statistics.median(s[1] for s in samples),
            "worker_cpu": statistics.median(s[2] for s in samples)}


def split_of(data: Path, workers: int, points: np.ndarray, repeats: int = REPEATS) -> dict:
    """The mediator's routing for a cluster of ``workers`` slots (2 copies), computed in
    this process without any worker: the route's seconds (splitting by partition, as the
    mediator does), the units, and the points sent in all and per worker (each unit to its
    primary: the static share; graduated declustering evens it out between the copies)."""
    ds = turbdb.open(data)[NAME]
    info = ds.metadata
    catalogue = Catalogue.create(data, [str(i) for i in range(workers)], replicas=2)  # not saved
    pmap = catalogue.partition_map(info)
    levels = FieldStore.time_levels(np.asarray(info.times, dtype=np.float64), 0.0, "none")

    def route():
        reach = Reach.of(info, points, method=METHOD, operator="field", axes=axes_of(info))
        groups = Groups.of(pmap, levels, catalogue.holders)
        return split_query(pmap, reach, levels, groups, lambda g: True)

    units = route()
    seconds = timed(route, repeats)
    reach = timed(lambda: Reach.of(info, points, method=METHOD, operator="field", axes=axes_of(info)), repeats)
    primary: dict[str, int] = {}
    for u in units:
        primary[u.holders[0]] = primary.get(u.holders[0], 0) + u.cost
    return {"workers": workers, "route_seconds": statistics.median(seconds),
            "of_which_reach_seconds": statistics.median(reach), "units": len(units),
            "entries": sum(u.cost for u in units), "entries_per_point": sum(u.cost for u in units) / len(points),
            "entries_static_busiest": max(primary.values()), "groups": len({u.holders for u in units})}


def model_runs(data: Path, points: np.ndarray, expected: np.ndarray, many_calls: int) -> dict:
    """1, 2 and 3 workers (graduated): each query's measured seconds and its parts, and on
    the 3-worker cluster, apart from any query, Dask's per-call costs (for 64 calls and for
    ``many_calls``, the 16-worker query's count of units) and the transfer of one
    125 000-point unit."""
    out: dict = {}
    for workers in (1, 2, 3):
        run = start_local(data, workers, threads=1, dashboard_address=":0")
        try:
            db = turbdb.open(data, cluster=run.client, declustering="graduated", balance=False)
            ds = db[NAME]
            got = ds.query(FIELD, points, time=0.0, method=METHOD)
            # Routed (3 workers) the partial sums are added in another order: float rounding.
            assert np.allclose(got, expected, rtol=1e-5, atol=1e-6), "cluster answer differs from the single node"
            probe = Probe(run)
            probe.query(ds, points)  # warm
            out[workers] = parts_of([probe.query(ds, points) for _ in range(REPEATS)])
            if workers == 1:
                out["1_paired"] = paired_overhead(ds, turbdb.open(data)[NAME], points)
            if workers == 3:  # a quarter of the query: do the costs scale with entries and units?
                quarter = points[:len(points) // 4]
                probe.query(ds, quarter)
                out["3_quarter"] = parts_of([probe.query(ds, quarter) for _ in range(REPEATS)])
                out["dask"] = {"calls": call_costs(db.servers, probe, tuple(sorted({16, 64, 256, many_calls}))),
                               "many_calls": many_calls, "transfer": transfer_costs(db.servers, probe, 125_000)}
            db.close()
        finally:
            run.close()
    return out


def paired_overhead(cluster_ds, local_ds, points: np.ndarray, engine=None) -> dict:
    """One worker against in-process, query by query: REPEATS pairs of adjacent queries
    (which goes first alternates), so that drift of this shared machine's load falls on
    both alike; the overhead is each pair's cluster/in-process seconds − 1. ``engine``:
    the worker engine's seconds so far (its node's counter), read around each cluster
    query to give the seconds that query spent outside the engine."""
    seconds: dict[str, list[float]] = {"cluster": [], "in_process": []}
    outside: list[float] = []
    for i in range(REPEATS):
        order = (("cluster", cluster_ds), ("in_process", local_ds))
        for name, ds in order if i % 2 == 0 else order[::-1]:
            before = engine() if engine and name == "cluster" else 0.0
            began = time.perf_counter()
            ds.query(FIELD, points, time=0.0, method=METHOD)
            seconds[name].append(time.perf_counter() - began)
            if engine and name == "cluster":
                outside.append(seconds[name][-1] - (engine() - before))
    out = {"overhead": spread([c / p - 1 for c, p in zip(seconds["cluster"], seconds["in_process"])]),
           "seconds": {k: spread(v) for k, v in seconds.items()}}
    if outside:
        out["outside_engine_seconds"] = spread(outside)
    return out


def policy_runs(data: Path, points: np.ndarray, expected: np.ndarray, seed: int) -> dict:
    """2 workers, graduated against static declustering, unperturbed and with worker "0" at
    half speed. The two policies run alternately (which goes first alternates too) on the
    same cluster, and at each repetition both meet the duty cycle at the same phase (drawn
    with the seed), so drift of the machine's load and the phase of the perturbation fall
    on both alike; each figure is the median of REPEATS with its spread."""
    n = len(points)
    phases = np.random.default_rng(seed).uniform(0, PERIOD, REPEATS)
    run = start_local(data, 2, threads=1, dashboard_address=":0")
    out: dict = {}
    try:
        dbs = {p: turbdb.open(data, cluster=run.client, declustering=p, balance=False) for p in ("graduated", "static")}
        slow = worker_pids(run.client)["0"]
        for condition in ("unperturbed", "one_half_speed"):
            seconds: dict[str, list[float]] = {p: [] for p in dbs}
            shares: dict[str, list[float]] = {p: [] for p in dbs}
            second_over_first: list[float] = []
            for p, db in dbs.items():  # warm, and check the answer under this condition
                with DutyCycle(slow) if condition == "one_half_speed" else contextlib.nullcontext():
                    got = db[NAME].query(FIELD, points, time=0.0, method=METHOD)
                assert np.array_equal(got, expected), f"{p} answer differs ({condition})"
            for i, phase in enumerate(phases):
                order = ("graduated", "static") if i % 2 == 0 else ("static", "graduated")
                for p in order:
                    ds = dbs[p][NAME]
                    with DutyCycle(slow, phase=phase) if condition == "one_half_speed" else contextlib.nullcontext():
                        began = time.perf_counter()
                        ds.query(FIELD, points, time=0.0, method=METHOD)
                        seconds[p].append(time.perf_counter() - began)
                    work = dbs[p].last_report.work
                    shares[p].append(work.get("0", {}).get("points", 0) / n)
                second_over_first.append(seconds[order[1]][-1] / seconds[order[0]][-1])
            out[condition] = {p: {"points_per_second": spread([n / s for s in seconds[p]]),
                                  "slowed_worker_share": spread(shares[p]),
                                  "seconds": seconds[p]} for p in dbs}
            # Rate of graduated over static, repetition by repetition (same phase, adjacent in time).
            out[condition]["graduated_over_static"] = spread([s / g for g, s in zip(seconds["graduated"],
                                                                                   seconds["static"])])
            # Whichever policy ran second, over the first: does running order matter?
            out[condition]["second_over_first_seconds"] = spread(second_over_first)
        for db in dbs.values():
            db.close()
    finally:
        run.close()
    out["phases"] = [float(p) for p in phases]
    return out


def in_process(data: Path, points: np.ndarray) -> dict:
    local = turbdb.open(data)[NAME]
    seconds = timed(lambda: local.query(FIELD, points, time=0.0, method=METHOD))
    return {"seconds": spread(seconds), "points_per_second": spread([len(points) / s for s in seconds])}


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
    # The CPU's level is not the path that ran: fields may run on AVX2 on an AVX-512 CPU.
    simd += f" CPU; kernel paths: field {turbdb.kernel_path('field')}, gradient {turbdb.kernel_path('gradient')}"
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent,
                            capture_output=True, text=True).stdout.strip()
    return {"platform": platform.platform(), "cpu": cpu, "simd": simd, "cores": os.cpu_count(),
            "python": platform.python_version(), "turbdb": turbdb.__version__, "git": commit,
            "engine_threads_per_worker": 1}


def build_model(runs: dict, splits: dict, points: int) -> dict:
    """The model (:func:`predict`) against the measured times, and its 16-worker figure.

    Check 1 (composition): T(1), T(2), T(3) predicted from the parts measured in the same
    runs (route timer, mediator CPU, each worker's CPU, units per worker, the rest of the
    machine's CPU) on this machine's cores; the error says whether the parts and the
    pipeline rule account for the wall time. Check 2 (extrapolation): the 10⁶-point T(3)
    predicted without that run's parts, as the 16-worker figure is — the route, units and
    entries computed in-process, Dask's per-call costs measured apart, and per-entry costs
    from a quarter of the query on 3 workers (do costs scale with entries and units?) and
    from the 2-worker run (do they carry over from an unrouted to a routed query?). And
    the old T = a + b/N fitted to N = 1, 2, extrapolated to N = 3."""
    dask = runs["dask"]
    bursts = dask["calls"]["bursts"]
    # The costs of a burst of 64 calls (a query's order of magnitude here) for the runs on
    # this machine; of a burst of the 16-worker query's units for its figure.
    d_call, w_call = bursts["64"]["mediator_cpu_per_call"], bursts["64"]["worker_cpu_per_call"]
    per_n = {}
    for n in (1, 2, 3):
        r = runs[n]
        workers = list(r["worker_cpu"].values())
        predicted = predict(r["route"], r["mediator_cpu"], workers, r["units_per_worker"], CORES, r["others_cpu"])
        measured = r["wall"]["median"]
        per_n[str(n)] = {"measured_seconds": measured, "measured_spread": r["wall"], "predicted_seconds": predicted,
                         "error": predicted / measured - 1,
                         "parts": {"route": r["route"], "mediator_dispatch_cpu": r["mediator_cpu"] - r["route"],
                                   "mediator_dispatch_wall": r["dispatch"], "others_cpu": r["others_cpu"],
                                   "of_which_submit": r["submit"], "of_which_merge": r["merge"],
                                   "workers_cpu": r["worker_cpu"], "workers_engine_wall": r["engine"],
                                   "units": r["units"], "entries": r["entries"],
                                   "units_per_worker": r["units_per_worker"]},
                         "cores": CORES, "processes": n + 1}

    def per_entry(r: dict, call_cost: float) -> tuple[float, float]:
        """Mediator dispatch CPU and workers' CPU per point sent, per-call costs taken off."""
        return ((r["mediator_cpu"] - r["route"] - r["units"] * call_cost) / r["entries"],
                (sum(r["worker_cpu"].values()) - r["units"] * w_call) / r["entries"])

    def extrapolate(split: dict, base: dict, call_cost: float, cores: float, others: float = 0.0) -> dict:
        n = split["workers"]
        d_entry, w_entry = per_entry(base, call_cost)
        dispatch = split["units"] * call_cost + split["entries"] * d_entry
        worker = (split["entries"] * w_entry + split["units"] * w_call) / n
        seconds = predict(split["route_seconds"], split["route_seconds"] + dispatch, [worker] * n,
                          -(-split["units"] // n), cores, others)
        return {"predicted_seconds": seconds, "points_per_second": points / seconds,
                "route": split["route_seconds"], "mediator_dispatch_cpu": dispatch, "worker_cpu_each": worker,
                "units": split["units"], "entries": split["entries"], "mediator_cpu_per_call": call_cost,
                "mediator_cpu_per_entry": d_entry, "worker_cpu_per_entry": w_entry, "worker_cpu_per_call": w_call}

    extrapolated = {}
    for name, base in (("from_3_workers_quarter_query", runs["3_quarter"]), ("from_2_workers", runs[2])):
        e = extrapolate(splits["3"], base, d_call, CORES, runs[3]["others_cpu"])
        e["measured_seconds"] = runs[3]["wall"]["median"]
        e["error"] = e["predicted_seconds"] / e["measured_seconds"] - 1
        extrapolated[name] = e
    t1, t2 = runs[1]["wall"]["median"], runs[2]["wall"]["median"]
    b = 2 * (t1 - t2)
    a = t1 - b
    old = {"a_seconds": a, "b_seconds": b, "predicted_3_workers_seconds": a + b / 3,
           "measured_3_workers_seconds": runs[3]["wall"]["median"],
           "error_at_3": (a + b / 3) / runs[3]["wall"]["median"] - 1,
           "predicted_16_workers_points_per_second": points / (a + b / BIG) if a + b / BIG > 0 else None}
    many = bursts[str(dask["many_calls"])]["mediator_cpu_per_call"]
    big = extrapolate(splits[str(BIG)], runs[3], many, float(BIG + 1))
    # A real network: every point and every partial sum crosses the mediator's link.
    link = 10e9 / 8
    wire = splits[str(BIG)]["entries"] * 2 * 3 * 8 / link
    big_10gbe = max(big["predicted_seconds"], big["route"] + wire)
    r3, transfer = runs[3], dask["transfer"]
    breakdown_3 = {"mediator_cpu_per_entry": per_entry(r3, d_call)[0],
                   "of_which_merge_timer": r3["merge"] / r3["entries"],
                   "of_which_submit_timer": r3["submit"] / r3["entries"],
                   "transfer_alone_mediator_cpu_per_point": transfer["mediator_cpu"] / transfer["points"],
                   "transfer_alone_worker_cpu_per_point": transfer["worker_cpu"] / transfer["points"],
                   "transfer_alone_wall_per_point": transfer["wall"] / transfer["points"]}
    return {
        "form": "T = route + max(D, P_max, (D + ΣP) / cores) + min(D, P_max) / units_per_worker; D: the "
                "mediator's CPU after routing (calls, transfers, Dask client and scheduler, merges), P: each "
                "worker's CPU (engine, transfers, call handling)",
        "check_composition": per_n,
        "check_extrapolation_to_3": extrapolated,
        "two_point_fit_a_plus_b_over_n": old,
        "dask_costs": dask,
        "mediator_per_entry_at_3": breakdown_3,
        "splits": splits,
        "predicted_16_workers": {**big, "points_per_second_10gbe": points / big_10gbe, "wire_seconds_10gbe": wire},
        "assumptions_16": [
            f"{BIG} workers, each its own core (a node or a core of a {BIG}-core machine, no oversubscription), "
            "the mediator on its own core; 2 copies of every partition; graduated declustering shares each group's "
            "entries evenly between its copies",
            "route, units and entries: the mediator's own split of this query for 16 slots, computed and timed "
            "in-process (exact for this dataset and these points)",
            "mediator CPU per unit: Dask's per actor call, measured for a burst of as many calls as the 16-worker "
            f"query has units ({dask['many_calls']}) over 3 workers on this machine (dask_costs.calls.bursts: "
            "per-call CPU for 16 to 256 calls); the scheduler shares the mediator's process, as in a LocalCluster, "
            "but units do not pass through it; per point sent: "
            "the 3-worker query's",
            "workers' CPU per point sent and per unit: the 3-worker query's and the empty calls'",
            "the network is this machine's loopback; points_per_second_10gbe adds the mediator's 10 Gb/s link as "
            "a stage of its own (not measured)",
        ],
        "checked": "composition: T(1), T(2), T(3) from their measured parts (errors in check_composition); "
                   "extrapolation: the 10⁶-point T(3) from the costs of a ¼ query on 3 workers and from the "
                   "2-worker run's (check_extrapolation_to_3). "
                   "Not checked: anything above 3 workers, on more than 2 cores, or over a real network",
    }


def overhead_only(data: Path, points: np.ndarray) -> dict:
    """The 1-worker overhead alone: REPEATS adjacent pairs of in-process and 1-worker
    queries (:func:`paired_overhead`), each 1-worker query's seconds outside the worker's
    engine (its node's counter) and the last query's mediator timers."""
    load_start = os.getloadavg()
    expected = turbdb.open(data)[NAME].query(FIELD, points, time=0.0, method=METHOD)
    run = start_local(data, 1, threads=1, dashboard_address=":0")
    try:
        with turbdb.open(data, cluster=run.client, declustering="graduated", balance=False) as db:
            ds = db[NAME]
            assert np.array_equal(ds.query(FIELD, points, time=0.0, method=METHOD), expected), \
                "1-worker answer differs from the single node"
            probe = Probe(run)
            paired = paired_overhead(ds, turbdb.open(data)[NAME], points, engine=lambda: probe.engine()["0"])
            stats = ds.last_query_stats
    finally:
        run.close()
    cluster = paired["seconds"]["cluster"]["median"]
    return {"machine": machine_info(), "load_average_start": load_start, "load_average_end": os.getloadavg(),
            "points": len(points), "method": METHOD, "repeats": REPEATS, **paired,
            "overhead_from_medians": cluster / paired["seconds"]["in_process"]["median"] - 1,
            "last_query_mediator_seconds": {k: stats[f"{k}_seconds"] for k in ("route", "submit", "merge",
                                                                                "dispatch", "total")}}


def route_only(data: Path, points: np.ndarray) -> dict:
    """The route alone, for 3 and 16 slots, and the model's 16-worker figure recomputed
    with it: every other part (mediator dispatch, workers' CPU, units) is the committed
    run's (cluster.json, model.predicted_16_workers)."""
    load_start = os.getloadavg()
    splits = {str(n): split_of(data, n, points) for n in (3, BIG)}
    committed = json.loads((RESULTS / "cluster.json").read_text())["model"]["predicted_16_workers"]
    route = splits[str(BIG)]["route_seconds"]
    seconds = predict(route, route + committed["mediator_dispatch_cpu"], [committed["worker_cpu_each"]] * BIG,
                      -(-committed["units"] // BIG), float(BIG + 1))
    return {"machine": machine_info(), "load_average_start": load_start, "load_average_end": os.getloadavg(),
            "points": len(points), "method": METHOD, "repeats": REPEATS, "splits": splits,
            "recomputed_16_workers": {
                "note": "recomputation, not a new run: the committed cluster.json parts "
                        "(model.predicted_16_workers: mediator_dispatch_cpu, worker_cpu_each, units) with this route",
                "route": route, "committed_route": committed["route"],
                "mediator_dispatch_cpu": committed["mediator_dispatch_cpu"],
                "worker_cpu_each": committed["worker_cpu_each"], "predicted_seconds": seconds,
                "points_per_second": len(points) / seconds,
                "committed_points_per_second": committed["points_per_second"]}}


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, m, b) = plt.subplots(1, 3, figsize=(17, 4.8))
    pol = out["declustering"]
    bars = [("in-process", out["in_process"]["points_per_second"], "grey")]
    bars += [(f"{n} worker{'s' * (n > 1)}", {k: out["points"] / v for k, v in out["model"]["check_composition"][str(n)]
                                              ["measured_spread"].items() if k != "n"}, "C0") for n in (1, 2, 3)]
    for cond, label in (("unperturbed", "2 workers"), ("one_half_speed", "2 workers,\n1 at ½ speed")):
        for p, c in (("graduated", "C1"), ("static", "C2")):
            bars.append((f"{label}\n{p}", pol[cond][p]["points_per_second"], c))
    med = [x["median"] / 1e6 for _, x, _ in bars]
    lo = [x["median"] / 1e6 - min(x["min"], x["max"]) / 1e6 for _, x, _ in bars]
    hi = [max(x["min"], x["max"]) / 1e6 - x["median"] / 1e6 for _, x, _ in bars]
    a.bar(range(len(bars)), med, yerr=[lo, hi], capsize=3, color=[c for *_, c in bars])
    a.set_xticks(range(len(bars)), [lbl for lbl, *_ in bars], fontsize=6.5)
    a.set_ylabel("Mpoints/s (median, whiskers min–max)")
    a.set_title(f"{out['points']:.0e} points, {METHOD}, 1 engine thread per process, {REPEATS} runs each", fontsize=9)
    mod = out["model"]
    ns = [1, 2, 3]
    m.plot(ns, [mod["check_composition"][str(n)]["measured_seconds"] for n in ns], "o-", label="measured (median)")
    m.plot(ns, [mod["check_composition"][str(n)]["predicted_seconds"] for n in ns], "s--",
           label="model from measured parts")
    m.plot([3], [mod["check_extrapolation_to_3"]["from_3_workers_quarter_query"]["predicted_seconds"]], "^",
           label="model from a ¼ query")
    m.plot([3], [mod["check_extrapolation_to_3"]["from_2_workers"]["predicted_seconds"]], "v",
           label="model from the 2-worker run")
    m.plot([3], [mod["two_point_fit_a_plus_b_over_n"]["predicted_3_workers_seconds"]], "x", label="a + b/N fit")
    m.plot([BIG], [mod["predicted_16_workers"]["predicted_seconds"]], "D", label=f"{BIG} workers (model only)")
    m.set_xscale("log", base=2)
    m.set_xticks(ns + [BIG], [str(n) for n in ns + [BIG]])
    m.set_xlabel("workers")
    m.set_ylabel("seconds per query")
    m.set_title(f"model check ({CORES} cores: 3 workers oversubscribe)", fontsize=9)
    m.legend(fontsize=7)
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
    mach = out["machine"]
    fig.suptitle(f"turbdb cluster on one machine: {mach['cpu']} ({mach['simd']}), {mach['cores']} cores, "
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
    parser.add_argument("--route-only", action="store_true",
                        help="time only the mediator's route (3 and 16 slots, no cluster) and recompute the "
                             "16-worker prediction from the committed cluster.json with it")
    parser.add_argument("--overhead-only", action="store_true",
                        help="measure only the 1-worker overhead against in-process (adjacent pairs) and add it "
                             "to bench/results/cluster_overhead.json")
    parser.add_argument("--label", default="current",
                        help="key of the --route-only / --overhead-only figures in their JSON")
    args = parser.parse_args()
    ensure_data(args.data, args.seed)
    for only, measure, name in ((args.route_only, route_only, "cluster_route.json"),
                                (args.overhead_only, overhead_only, "cluster_overhead.json")):
        if only:
            points = np.random.default_rng(args.seed).uniform(0, 2 * np.pi, (args.points, 3))
            path = RESULTS / name
            runs = json.loads(path.read_text()) if path.exists() else {}
            runs[args.label] = measure(args.data, points)
            path.write_text(json.dumps(runs, indent=1))
            print(json.dumps(runs[args.label], indent=1))
            return
    load_start = os.getloadavg()
    points = np.random.default_rng(args.seed).uniform(0, 2 * np.pi, (args.points, 3))
    expected = turbdb.open(args.data)[NAME].query(FIELD, points, time=0.0, method=METHOD)
    local = in_process(args.data, points)
    splits = {str(n): split_of(args.data, n, points) for n in (3, BIG)}
    runs = model_runs(args.data, points, expected, splits[str(BIG)]["units"])
    policies = policy_runs(args.data, points, expected, args.seed)
    replay = kill_replay(args.data, args.replay, args.seed)
    model = build_model(runs, splits, args.points)
    rate = lambda n: args.points / runs[n]["wall"]["median"]  # noqa: E731
    pu, ph = policies["unperturbed"], policies["one_half_speed"]
    g = lambda cond, p: cond[p]["points_per_second"]["median"]  # noqa: E731
    out = {
        "machine": machine_info(), "load_average_start": load_start, "load_average_end": os.getloadavg(),
        "points": args.points, "method": METHOD, "seed": args.seed, "repeats": REPEATS,
        "dataset": f"{GRID}³ synthetic, {PARTITION}³ partitions",
        "in_process": local,
        "one_worker_paired": runs["1_paired"],
        "ratios": {
            "overhead_1_worker_vs_in_process": 1 - rate(1) / local["points_per_second"]["median"],
            # Adjacent pairs of queries (paired_overhead): the median pair's overhead.
            "overhead_1_worker_paired": runs["1_paired"]["overhead"]["median"],
            # Seconds of a 1-worker query outside the worker's engine (transfers, calls, merge).
            "overhead_1_worker_outside_engine": (runs[1]["wall"]["median"] - runs[1]["engine"]["0"])
            / local["seconds"]["median"],
            "overhead_target": TARGET_OVERHEAD,
            "speedup_2_workers_vs_1": rate(2) / rate(1),
            "speedup_3_workers_vs_1": rate(3) / rate(1),
            "graduated_half_speed_vs_unperturbed": g(ph, "graduated") / g(pu, "graduated"),
            # One worker at half speed leaves 1.5 of 2 workers' rate, if the workers are the bottleneck.
            "graduated_half_speed_vs_aggregate_rate": g(ph, "graduated") / (0.75 * g(pu, "graduated")),
            "static_half_speed_vs_unperturbed": g(ph, "static") / g(pu, "static"),
            "graduated_over_static_unperturbed": pu["graduated_over_static"]["median"],
            "graduated_over_static_half_speed": ph["graduated_over_static"]["median"],
            "slow_loss_target": TARGET_SLOW_LOSS,
        },
        "declustering": policies,
        "model": model,
        "kill_replay": replay,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(out, indent=1))
    plot(out, RESULTS / "cluster.png")
    summary = {k: v for k, v in out.items() if k not in ("kill_replay", "declustering")}
    summary["declustering"] = {c: {p: {k: v for k, v in x.items() if k != "seconds"} if isinstance(x, dict) else x
                                   for p, x in d.items()} if isinstance(d, dict) else d for c, d in policies.items()}
    summary["kill_replay"] = {k: v for k, v in replay.items() if k != "log"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
