"""The web service against the engine in-process (issue "The web service and the remote
client"): latency p50/p99 of a point query over HTTP for 1, 100 and 10⁴ points, and the
throughput of 10⁶-point queries over HTTP as a ratio to the same queries in-process, all
measured in one run on the same dataset, points and method.

    python bench/service.py [--data /tmp/turbdb-bench-data] [--quick] [--seed 0]

The server is `turbdb serve` in a subprocess on loopback (the client and server share the
machine's cores, as the in-process run has them all); the client is turbdb.connect with
.npy bodies over a keep-alive connection. JSON transport is timed too, for reference. The
variants take turns, repetition by repetition, so a shared machine's drifting load weighs
on each alike.
Targets: 100-point p50 ≤ 5 ms; 10⁶-point throughput ≥ 60 % of in-process. Writes
bench/results/service.json and service.png (--quick: service_quick.*, about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

import turbdb

sys.path.insert(0, str(Path(__file__).parent))
from query import FIELD, GRID, NAME, STEPS, ensure_data  # noqa: E402  (bench/query.py: the same dataset)

RESULTS = Path(__file__).parent / "results"
METHOD = "lag6"
TOKEN = "bench-token"
TARGET_P50_100_MS, TARGET_THROUGHPUT_RATIO = 5.0, 0.60


def start_server(data: Path, workdir: Path, options: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """`turbdb serve DATA OPTIONS…` on a free port with a token (TOKEN) whose rate limit the
    benchmarks never reach; returns the process and its address once /healthz answers."""
    tokens = workdir / "tokens.toml"
    tokens.write_text(f'[[token]]\ntoken = "{TOKEN}"\nname = "bench"\nmax_points = 2000000\n'
                      "requests_per_minute = 10000000\n")
    log = workdir / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "turbdb.cli", "serve", str(data), "--port", "0", "--tokens",
                                    str(tokens), "--log-level", "warning", *options],
                                   stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"at (http://\S+)", log.read_text())
        if found:
            try:
                if httpx.get(found.group(1) + "/healthz", timeout=2).status_code == 200:
                    return process, found.group(1)
            except httpx.TransportError:
                pass
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the server did not start:\n{log.read_text()}")


def points(info, n: int, seed: int) -> np.ndarray:
    box = np.asarray(info.spacing) * np.asarray(info.grid)
    return np.asarray(info.origin) + np.random.default_rng([seed, n]).uniform(0.0, 1.0, (n, 3)) * box


def timed(fn, repeats: int) -> np.ndarray:
    seconds = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter()
        fn()
        seconds[i] = time.perf_counter() - start
    return seconds


def interleaved(fns: dict, repeats: int, every: dict) -> dict[str, np.ndarray]:
    """Times each function ``repeats // every[name]`` times, taking turns, so that the load
    of a shared machine drifting during the run weighs on every variant alike."""
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(repeats):
        for name, fn in fns.items():
            if i % every.get(name, 1) == 0:
                seconds[name].append(timed(fn, 1)[0])
    return {name: np.array(values) for name, values in seconds.items()}


def summary(seconds: np.ndarray) -> dict:
    return {"p50_ms": float(np.percentile(seconds, 50) * 1e3), "p99_ms": float(np.percentile(seconds, 99) * 1e3),
            "mean_ms": float(seconds.mean() * 1e3), "repeats": len(seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "turbdb-bench-data")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (about a minute)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    ensure_data(args.data)
    local = turbdb.open(args.data)[NAME]
    info = local.info
    t = float(info.times[len(info.times) // 2])
    repeats = {1: 200, 100: 200, 10_000: 30} if args.quick else {1: 1000, 100: 1000, 10_000: 100}
    big_runs = 3 if args.quick else 7
    load_start = os.getloadavg()
    began = time.perf_counter()
    print(f"service benchmark: {NAME} ({GRID}³ synthetic), {FIELD} {METHOD} at t = {t:g}, {os.cpu_count()} cores, "
          f"load average {load_start[0]:.2f}{' (quick)' if args.quick else ''}", flush=True)

    with tempfile.TemporaryDirectory() as workdir:
        process, url = start_server(args.data, Path(workdir))
        try:
            with turbdb.connect(url, token=TOKEN) as db, httpx.Client(base_url=url, timeout=300) as raw:
                remote = db[NAME]
                latency = []
                for n, r in repeats.items():
                    pts = points(info, n, args.seed)
                    body = json.dumps({"points": pts.tolist()})

                    def query_local(pts=pts):
                        return local.query(FIELD, pts, time=t, method=METHOD)

                    def query_http(pts=pts):
                        return remote.query(FIELD, pts, time=t, method=METHOD)

                    def query_json(body=body):
                        response = raw.post(f"/v1/datasets/{NAME}/query", params={"field": FIELD, "time": t,
                                            "method": METHOD}, content=body,
                                            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
                        response.raise_for_status()
                        np.asarray(response.json()["values"], dtype=np.float32)

                    np.testing.assert_allclose(query_http(), query_local(), rtol=1e-6, atol=1e-6)
                    for fn in (query_local, query_http, query_json):  # warm caches and connections
                        timed(fn, 5)
                    runs = interleaved({"in_process": query_local, "http_npy": query_http, "http_json": query_json}, r,
                                       every={"http_json": 5 if r >= 50 else 1})
                    row = {"n": n, **{name: summary(seconds) for name, seconds in runs.items()}}
                    row["overhead_p50_ms"] = row["http_npy"]["p50_ms"] - row["in_process"]["p50_ms"]
                    latency.append(row)
                    print(f"  N={n:<6} p50/p99 ms: in-process {row['in_process']['p50_ms']:7.2f} /"
                          f"{row['in_process']['p99_ms']:7.2f}   HTTP .npy {row['http_npy']['p50_ms']:7.2f} /"
                          f"{row['http_npy']['p99_ms']:7.2f}   HTTP JSON {row['http_json']['p50_ms']:7.2f} /"
                          f"{row['http_json']['p99_ms']:7.2f}", flush=True)

                n = 1_000_000
                pts = points(info, n, args.seed)
                local.query(FIELD, pts, time=t, method=METHOD)
                remote.query(FIELD, pts, time=t, method=METHOD)
                runs_local, runs_http = [], []
                for _ in range(big_runs):  # interleaved, so drifting load hits both alike
                    runs_local.append(timed(lambda: local.query(FIELD, pts, time=t, method=METHOD), 1)[0])
                    runs_http.append(timed(lambda: remote.query(FIELD, pts, time=t, method=METHOD), 1)[0])
                throughput = {
                    "n": n, "runs": big_runs,
                    "in_process_seconds": float(np.median(runs_local)), "http_seconds": float(np.median(runs_http)),
                    "in_process_points_per_s": n / float(np.median(runs_local)),
                    "http_points_per_s": n / float(np.median(runs_http)),
                    "all_in_process_seconds": runs_local, "all_http_seconds": runs_http,
                    "bytes_up": n * 24, "bytes_down": n * 3 * 4,
                }
                throughput["ratio"] = throughput["http_points_per_s"] / throughput["in_process_points_per_s"]
                print(f"  N=1e6  median of {big_runs}: in-process {throughput['in_process_seconds']:.3f} s "
                      f"({throughput['in_process_points_per_s'] / 1e6:.2f} M points/s), HTTP "
                      f"{throughput['http_seconds']:.3f} s ({throughput['http_points_per_s'] / 1e6:.2f} M points/s): "
                      f"ratio {throughput['ratio']:.2f}", flush=True)
                server_metrics = raw.get("/metrics").text
        finally:
            process.terminate()
            process.wait(30)

    p50_100 = next(r for r in latency if r["n"] == 100)["http_npy"]["p50_ms"]
    targets = {
        "p50_100_points_ms": {"value": p50_100, "target": TARGET_P50_100_MS, "met": p50_100 <= TARGET_P50_100_MS},
        "throughput_ratio_1e6": {"value": throughput["ratio"], "target": TARGET_THROUGHPUT_RATIO,
                                 "met": throughput["ratio"] >= TARGET_THROUGHPUT_RATIO},
    }
    load_end = os.getloadavg()
    for name, target in targets.items():
        print(f"  target {name}: {target['value']:.3g} (target {target['target']}) "
              f"{'met' if target['met'] else 'NOT met'}")
    print(f"  load average {load_end[0]:.2f} at the end; {time.perf_counter() - began:.0f} s")

    requests = sum(float(v) for v in re.findall(r'^turbdb_requests_total\{[^}]*status="200"\} (\S+)', server_metrics, re.M))
    result = {
        "benchmark": "service", "quick": args.quick, "seed": args.seed,
        "dataset": {"name": NAME, "grid": GRID, "steps": STEPS, "kind": "synthetic", "field": FIELD, "method": METHOD,
                    "time": t},
        "machine": {"platform": platform.platform(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "turbdb": turbdb.__version__, "git": _git()},
        "load_average_start": load_start, "load_average_end": load_end,
        "latency": latency, "throughput": throughput, "targets": targets, "server_requests_ok": requests,
    }
    RESULTS.mkdir(exist_ok=True)
    stem = "service_quick" if args.quick else "service"
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, RESULTS / f"{stem}.png")
    print(f"wrote {RESULTS / (stem + '.json')} and {stem}.png")


def _git() -> str | None:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent,
                              capture_output=True, text=True).stdout.strip() or None
    except OSError:
        return None


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    rows = result["latency"]
    x = np.arange(len(rows))
    kinds = (("in_process", "in-process", "C0"), ("http_npy", "HTTP .npy", "C1"), ("http_json", "HTTP JSON", "C2"))
    for k, (key, label, color) in enumerate(kinds):
        p50 = [r[key]["p50_ms"] for r in rows]
        p99 = [r[key]["p99_ms"] for r in rows]
        left.bar(x + (k - 1) * 0.27, p50, 0.27, color=color, label=f"{label} p50")
        left.scatter(x + (k - 1) * 0.27, p99, color=color, marker="_", s=200, label=f"{label} p99")
    left.axhline(TARGET_P50_100_MS, color="C3", linewidth=0.8, label="target: 100-point p50 ≤ 5 ms")
    left.set_yscale("log")
    left.set_xticks(x, [f"N = {r['n']:,}" for r in rows])
    left.set_ylabel("latency per query (ms)")
    left.set_title("point-query latency")
    left.legend(fontsize=7, ncol=2)
    left.grid(True, axis="y", alpha=0.3)
    tp = result["throughput"]
    right.bar([0, 1], [tp["in_process_points_per_s"] / 1e6, tp["http_points_per_s"] / 1e6], color=["C0", "C1"])
    right.axhline(TARGET_THROUGHPUT_RATIO * tp["in_process_points_per_s"] / 1e6, color="C3", linewidth=0.8,
                  label="target: 60 % of in-process")
    right.set_xticks([0, 1], ["in-process", "HTTP .npy"])
    right.set_ylabel("M points/s")
    right.set_title(f"10⁶-point queries: HTTP / in-process = {tp['ratio']:.2f}")
    right.legend(fontsize=7)
    fig.suptitle(f"turbdb service, {result['dataset']['name']} {result['dataset']['method']}, "
                 f"{result['machine']['cores']} cores (load {result['load_average_start'][0]:.1f})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
