"""Point-query throughput (issue "Query engine: batch evaluation by partial sums"): points/s of
velocity interpolation and gradients on a 256³ synthetic dataset, for the streaming partial-sum
engine against the sorted and direct baselines and scipy.ndimage.map_coordinates, warm (second
run in one process) and cold (page cache dropped, fresh process), plus the peak memory of a
1e6-point query. All ratios are measured in the same run.

    python bench/query.py [--data /tmp/turbdb-bench-data] [--quick] [--seed 0]
    python bench/query.py --threads 1,2 [--data …]   # the kernel per thread count and SIMD path
    python bench/query.py --threads 1,16 --repeats 5  # medians of 5 fresh processes each, with ranges
    python bench/query.py --threads 1,16 --repeats 12 --paths avx2  # one path: more rounds in the time
    python bench/query.py --threads 1,2 --operators field,hessian  # other operators (default field,gradient)

Workloads: "3D" = points uniform in the box [0, 2π)³; "128" = points uniform in a 128³-node
sub-box at a random origin (wrapped). Cold runs need root (sync; echo 3 > drop_caches); if
that fails they are reported as unavailable. Writes bench/results/query.json and query.png
(--quick: query_quick.json/.png, about a minute, N ≤ 1e5).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import kernel_scaling
import turbdb

RESULTS = Path(__file__).parent / "results"
NAME, FIELD, GRID, STEPS = "syn256", "velocity", 256, 4
WORKLOADS = {"3D": "uniform in the box", "128": "uniform in a random 128³-node sub-box"}
TARGET_WARM_PPS, TARGET_COLD_RATIO, TARGET_MEMORY_MB = 5e6, 10.0, 500.0


# -- the measurement plan ---------------------------------------------------------------------


def plan(quick: bool) -> dict:
    """What is measured. Direct and sorted read one atom per point and stencil contribution,
    so they stop at 1e5 warm and run at the largest N only cold, for lag8 field on the 3D
    workload: the case the issue's "streaming ≥ 10× direct cold" target names."""
    if quick:
        ns, methods, big = [1_000, 10_000, 100_000], ["lag4", "lag8"], 100_000
        baseline_warm_max, cold_workloads = 10_000, ["3D"]
    else:
        ns, methods, big = [1_000, 10_000, 100_000, 1_000_000], ["lag4", "lag6", "lag8"], 1_000_000
        baseline_warm_max, cold_workloads = 100_000, list(WORKLOADS)
    ops = ["field", "gradient"]
    warm, cold = [], []
    for w in WORKLOADS:
        for n in ns:
            warm += [case(w, n, m, op, "streaming") for m in methods for op in ops]
            if n <= baseline_warm_max:
                warm += [case(w, n, "lag8", op, s) for s in ("sorted", "direct") for op in ops]
    for w in cold_workloads:
        for n in ns:
            cold += [case(w, n, "lag8", op, "streaming") for op in ops]
            if n <= baseline_warm_max or (n == big and w == "3D"):
                cold += [case(w, n, "lag8", "field", s) for s in ("sorted", "direct")]
    return {"ns": ns, "methods": methods, "operators": ops, "big": big, "warm": warm, "cold": cold,
            "baseline_warm_max": baseline_warm_max, "memory": case("3D", big, "lag8", "field", "streaming")}


def case(workload: str, n: int, method: str, operator: str, strategy: str) -> dict:
    return {"workload": workload, "n": n, "method": method, "operator": operator, "strategy": strategy}


def key(c: dict) -> tuple:
    return (c["workload"], c["n"], c["method"], c["operator"], c["strategy"])


# -- points and data ----------------------------------------------------------------------------


def make_points(info, workload: str, n: int, seed: int) -> np.ndarray:
    """Fixed points for (workload, n): the same in every process, strategy and method. The
    128 sub-box origin depends on the seed only, so every N samples the same sub-box."""
    box = np.asarray(info.spacing) * np.asarray(info.grid)
    origin = np.asarray(info.origin)
    rng = np.random.default_rng([seed, n, 0 if workload == "3D" else 1])
    if workload == "3D":
        return origin + rng.uniform(0.0, 1.0, (n, 3)) * box
    corner = np.random.default_rng([seed, 128]).uniform(0.0, 1.0, 3) * box
    side = 128 * np.asarray(info.spacing)
    return origin + np.mod(corner + rng.uniform(0.0, 1.0, (n, 3)) * side, box)


def query_time(info) -> float:
    return float(info.times[len(info.times) // 2])


def ensure_data(data: Path) -> None:
    if (data / NAME).exists():
        grid = turbdb.open(data)[NAME].info.grid
        if grid != (GRID, GRID, GRID):  # the figures and plots say 256³: never of other data
            raise SystemExit(f"{data / NAME} is {'×'.join(map(str, grid))}, not the {GRID}³ this benchmark "
                             f"reports; remove it (or give another --data) and it is made again")
        return
    print(f"creating the {GRID}³ synthetic dataset in {data} …", flush=True)
    subprocess.run([sys.executable, "-m", "turbdb.cli", "simulate", str(data), "--name", NAME, "--grid", str(GRID),
                    "--steps", str(STEPS), "--kind", "synthetic", "--quiet"], check=True)


def drop_caches() -> str | None:
    """Empties the OS page cache; returns why it could not, or None."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return None
    except OSError as e:
        return f"cannot drop the page cache ({e}); run as root for cold numbers"


# -- measurements -------------------------------------------------------------------------------


def run_query(ds, pts: np.ndarray, c: dict, t: float) -> tuple[float, dict]:
    start = time.perf_counter()
    ds.query(FIELD, pts, time=t, method=c["method"], operator=c["operator"], dtype=np.float32, strategy=c["strategy"])
    return time.perf_counter() - start, dict(ds.last_query_stats)


def measure_warm(ds, c: dict, seed: int) -> dict:
    pts = make_points(ds.info, c["workload"], c["n"], seed)
    first, _ = run_query(ds, pts, c, query_time(ds.info))
    seconds, stats = run_query(ds, pts, c, query_time(ds.info))
    return {**c, "mode": "warm", "seconds": seconds, "first_run_seconds": first,
            "points_per_s": c["n"] / seconds, "stats": stats}


def measure_fresh(c: dict, data: Path, seed: int, cold: bool) -> dict:
    """One query in a new process (its engine caches empty), after dropping the page cache
    if ``cold``."""
    if cold:
        reason = drop_caches()
        if reason:
            raise RuntimeError(reason)
    payload = json.dumps({"case": c, "data": str(data), "seed": seed})
    out = subprocess.run([sys.executable, __file__, "--one", payload], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {**c, "mode": "cold" if cold else "fresh", **result, "points_per_s": c["n"] / result["seconds"]}


def one(payload: str) -> None:
    """The hidden --one mode: open, make the points, time a single query, and report the peak
    resident memory it added (the engine allocates in Rust, so tracemalloc would not see it)."""
    args = json.loads(payload)
    c, data, seed = args["case"], Path(args["data"]), args["seed"]
    start = time.perf_counter()
    ds = turbdb.open(data)[NAME]
    info = ds.info
    open_seconds = time.perf_counter() - start
    pts = make_points(info, c["workload"], c["n"], seed)
    rss_before, file_before = _status_kb("VmRSS"), _status_kb("RssFile")
    hwm_reset = _reset_peak_rss()
    seconds, stats = run_query(ds, pts, c, query_time(info))
    peak = _status_kb("VmHWM") if hwm_reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # The shard files the reader maps count in RSS as the query touches their pages: page
    # cache the kernel shares and can take back, not memory the query allocated. They stay
    # mapped after it, so RssFile then is their share of the peak.
    mapped = max(0, _status_kb("RssFile") - file_before)
    print(json.dumps({"seconds": seconds, "open_seconds": open_seconds, "stats": stats,
                      "engine_sha256": engine_build()["sha256"],
                      "rss_before_MB": rss_before / 1024, "peak_rss_MB": peak / 1024,
                      "peak_growth_MB": max(0, peak - rss_before) / 1024,
                      "mapped_file_MB": mapped / 1024,
                      "peak_growth_allocated_MB": max(0, peak - rss_before - mapped) / 1024,
                      "peak_source": "VmHWM after clear_refs" if hwm_reset else "ru_maxrss"}))


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak_rss() -> bool:
    """Resets VmHWM to the current RSS (Linux ≥ 4.0), so the peak seen afterwards is the
    query's own and not that of setting up the points."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_kb("VmHWM") <= _status_kb("VmRSS") + 1024
    except OSError:
        return False


def measure_scipy(ds, ns: list[int], seed: int) -> tuple[dict, list[dict]]:
    """The outside peer: cubic B-spline interpolation of all three components with the whole
    field already in RAM. The spline prefilter is done once in the setup (map_coordinates
    would otherwise redo it over 256³ nodes on every call)."""
    from scipy import ndimage

    info = ds.info
    t = query_time(info)
    start = time.perf_counter()
    field = ds.cutout(FIELD, time=t).values  # (z, y, x, component)
    load = time.perf_counter() - start
    start = time.perf_counter()
    coeffs = [ndimage.spline_filter(np.ascontiguousarray(field[..., k]), order=3, mode="grid-wrap", output=np.float64)
              for k in range(field.shape[-1])]
    prefilter = time.perf_counter() - start
    origin, spacing = np.asarray(info.origin), np.asarray(info.spacing)

    def indices(pts: np.ndarray) -> np.ndarray:
        return ((pts - origin) / spacing)[:, ::-1].T.copy()  # rows z, y, x: the array's axis order

    # Same data, same points: the two interpolants should agree to the field's smoothness.
    check = make_points(info, "3D", 1_000, seed)
    ours = ds.query(FIELD, check, time=t, method="lag8", operator="field", dtype=np.float64)
    theirs = np.stack([ndimage.map_coordinates(a, indices(check), order=3, mode="grid-wrap", prefilter=False)
                       for a in coeffs], axis=1)
    setup = {"load_seconds": load, "prefilter_seconds": prefilter, "in_ram_MB": sum(a.nbytes for a in coeffs) / 1e6,
             "rms_difference_vs_lag8_over_rms": float(np.sqrt(np.mean((ours - theirs) ** 2) / np.mean(ours**2)))}
    rows = []
    for w in WORKLOADS:
        for n in ns:
            pts = make_points(info, w, n, seed)
            idx = indices(pts)

            def run():
                start = time.perf_counter()
                for a in coeffs:
                    ndimage.map_coordinates(a, idx, order=3, mode="grid-wrap", prefilter=False, output=np.float64)
                return time.perf_counter() - start

            first = run()
            seconds = run()
            rows.append({**case(w, n, "bspline3", "field", "scipy"), "mode": "warm", "seconds": seconds,
                         "first_run_seconds": first, "points_per_s": n / seconds})
    return setup, rows


# -- the run --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/tmp/turbdb-bench-data"),
                        help="scratch database, created on first use and reused (default /tmp/turbdb-bench-data)")
    parser.add_argument("--quick", action="store_true", help="a ~1-minute subset (N ≤ 1e5, lag4 and lag8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the query points (default 0)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold runs (they drop the OS page cache)")
    parser.add_argument("--threads", type=_thread_counts, metavar="1,2,…",
                        help="instead of the strategy comparison, time the kernel (1e6 points, warm) at these "
                             "RAYON_NUM_THREADS on every SIMD path this CPU has, with per-phase times, the "
                             "arithmetic bound and a plain gather baseline (numba, on as many threads; "
                             "bench/results/query_threads.json)")
    parser.add_argument("--repeats", type=int, default=1, metavar="K",
                        help="with --threads: run every thread count and path K times, each in a fresh process, "
                             "round after round, and report medians with their ranges (default 1)")
    parser.add_argument("--paths", type=_path_names, metavar="avx2,…",
                        help="with --threads: only these SIMD paths (default: every one this CPU has: "
                             f"{', '.join(turbdb.kernel_paths())})")
    parser.add_argument("--operators", type=_operator_names, metavar="field,gradient,…",
                        help="with --threads: the operators to time, of "
                             f"{', '.join(kernel_scaling.OPERATORS)} (default "
                             f"{','.join(kernel_scaling.DEFAULT_OPERATORS)})")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--kernel-one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one)
        return
    if args.kernel_one:
        kernel_scaling.measure_one(args.kernel_one)
        return
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.paths and not args.threads:
        parser.error("--paths goes with --threads")
    if args.operators and not args.threads:
        parser.error("--operators goes with --threads")
    if args.repeats != 1 and not args.threads:
        parser.error("--repeats goes with --threads (the query benchmark measures each case once)")
    if args.quick and args.threads:
        parser.error("--quick does not shorten --threads (the kernel benchmark is 10⁶ points a case); leave one out")
    if args.threads:
        ensure_data(args.data)
        info = turbdb.open(args.data)[NAME].info
        RESULTS.mkdir(exist_ok=True)
        kernel_scaling.run_threads(args.threads, args.data, NAME, FIELD, query_time(info),
                                   make_points(info, "3D", 1_000_000, args.seed), RESULTS, machine_info(),
                                   repeats=args.repeats, paths=args.paths, operators=args.operators)
        return

    began = time.perf_counter()
    engine_start = engine_build()
    ensure_data(args.data)
    p = plan(args.quick)
    cores = os.cpu_count()
    load_start = os.getloadavg()
    print(f"query benchmark: {FIELD} of {NAME} ({GRID}³×3 float32) in {args.data}, {cores} cores, "
          f"load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}{' (quick)' if args.quick else ''}")

    ds = turbdb.open(args.data)[NAME]
    warm = []
    for i, c in enumerate(p["warm"]):
        warm.append(measure_warm(ds, c, args.seed))
        _progress("warm", i + 1, len(p["warm"]), warm[-1])

    scipy_setup, scipy_rows = measure_scipy(ds, p["ns"], args.seed)
    print(f"  scipy setup: load {scipy_setup['load_seconds']:.2f} s + spline prefilter "
          f"{scipy_setup['prefilter_seconds']:.2f} s, {scipy_setup['in_ram_MB']:.0f} MB in RAM; "
          f"rms(scipy − lag8)/rms = {scipy_setup['rms_difference_vs_lag8_over_rms']:.1e}", flush=True)

    cold_reason = "skipped (--no-cold)" if args.no_cold else drop_caches()
    cold = []
    if cold_reason is None:
        for i, c in enumerate(p["cold"]):
            cold.append(measure_fresh(c, args.data, args.seed, cold=True))
            _progress("cold", i + 1, len(p["cold"]), cold[-1])
    else:
        print(f"  cold runs unavailable: {cold_reason}", flush=True)

    memory = measure_fresh(p["memory"], args.data, args.seed, cold=False)
    load_end = os.getloadavg()
    elapsed = time.perf_counter() - began
    engine_end = engine_build()
    other_builds = [r for r in cold + [memory] if r["engine_sha256"] != engine_start["sha256"]]
    if engine_end != engine_start or other_builds:
        print(f"  WARNING: the engine was rebuilt during the run ({engine_start['sha256'][:12]} → "
              f"{engine_end['sha256'][:12]}); {len(other_builds)} fresh-process measurements used another build "
              "than the warm ones: run again", flush=True)

    rows = warm + scipy_rows + cold
    print_table(rows, p["ns"])
    ratios = compute_ratios(rows, p)
    print()
    for label, r in ratios.items():
        print(f"  {label:<58} {_fmt_ratio(r['ratio'])}")
    targets = compute_targets(rows, ratios, memory, p)
    print()
    for label, t in targets.items():
        verdict = "unavailable" if t["met"] is None else ("met" if t["met"] else "NOT met")
        print(f"  target {label:<46} {verdict:<12} ({t['measured']})")
    print(f"\n  peak RSS growth of a {memory['n']:.0e}-point {memory['method']} {memory['operator']} "
          f"query in a fresh process: {memory['peak_growth_MB']:.0f} MB (RSS {memory['rss_before_MB']:.0f} MB before, "
          f"{memory['peak_source']}), of which {memory['mapped_file_MB']:.0f} MB pages of the mapped shard files "
          f"(page cache) and {memory['peak_growth_allocated_MB']:.0f} MB allocated")
    print(f"  load average {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f} at the end; total {elapsed:.0f} s")

    RESULTS.mkdir(exist_ok=True)
    name = "query_quick" if args.quick else "query"
    report = {
        "benchmark": "query", "quick": args.quick, "dataset": {"name": NAME, "grid": GRID, "steps": STEPS,
                                                               "kind": "synthetic", "field": FIELD, "ncomp": 3},
        "seed": args.seed, "query_time": query_time(ds.info), "workloads": WORKLOADS,
        "machine": machine_info(), "cores": cores, "load_average_start": load_start, "load_average_end": load_end,
        "elapsed_seconds": elapsed, "engine_build": engine_start, "engine_rebuilt_during_run": engine_end != engine_start or bool(other_builds),
        "plan": {k: p[k] for k in ("ns", "methods", "operators", "big", "baseline_warm_max")},
        "cold_available": cold_reason is None, "cold_unavailable_reason": cold_reason,
        "results": rows, "scipy_setup": scipy_setup,
        "scipy_note": "scipy.ndimage.map_coordinates(order=3, mode='grid-wrap', prefilter=False) on spline "
                      "coefficients prefiltered in the setup, data already in RAM; points/s count all 3 components",
        "memory": memory, "ratios": ratios, "targets": targets,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    plot(rows, p, cold_reason, RESULTS / f"{name}.png",
         f"{FIELD} queries on {GRID}³ synthetic, {cores} cores (load {load_start[0]:.1f})")
    print(f"wrote {RESULTS / (name + '.json')} and {RESULTS / (name + '.png')}")


def _thread_counts(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give thread counts separated by commas, e.g. 1,2,4") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: thread counts must be at least 1")
    return counts


def _path_names(text: str) -> list[str]:
    names, have = [p.strip() for p in text.split(",") if p.strip()], turbdb.kernel_paths()
    missing = [p for p in names if p not in have]
    if not names or missing:
        raise argparse.ArgumentTypeError(f"{text!r}: this CPU's SIMD paths are {', '.join(have)}")
    return list(dict.fromkeys(names))


def _operator_names(text: str) -> list[str]:
    names = [o.strip() for o in text.split(",") if o.strip()]
    unknown = [o for o in names if o not in kernel_scaling.OPERATORS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: the kernel benchmark times {', '.join(kernel_scaling.OPERATORS)}")
    return list(dict.fromkeys(names))


def _progress(mode: str, i: int, total: int, r: dict) -> None:
    print(f"  {mode} {i:>3}/{total}  {r['workload']:>3} N={r['n']:<8.0e} {r['method']} {r['operator']:<8} "
          f"{r['strategy']:<9} {r['points_per_s'] / 1e6:8.3f} M points/s ({r['seconds']:.3f} s)", flush=True)


def _find(rows: list[dict], mode: str, workload: str, n: int, method: str, operator: str, strategy: str) -> dict | None:
    for r in rows:
        if r["mode"] == mode and key(r) == (workload, n, method, operator, strategy):
            return r
    return None


def _ratio(a: dict | None, b: dict | None, what: str) -> dict:
    if a is None or b is None:
        return {"ratio": None, "what": what}
    return {"ratio": a["points_per_s"] / b["points_per_s"], "what": what,
            "numerator_points_per_s": a["points_per_s"], "denominator_points_per_s": b["points_per_s"]}


def compute_ratios(rows: list[dict], p: dict) -> dict:
    big, mid = p["big"], p["baseline_warm_max"]
    out = {}
    for w in WORKLOADS:
        out[f"streaming/direct cold, N={big:.0e}, lag8 field, {w}"] = _ratio(
            _find(rows, "cold", w, big, "lag8", "field", "streaming"), _find(rows, "cold", w, big, "lag8", "field", "direct"),
            "points/s ratio")
    for op in p["operators"]:
        for w in WORKLOADS:
            out[f"streaming/direct warm, N={mid:.0e}, lag8 {op}, {w}"] = _ratio(
                _find(rows, "warm", w, mid, "lag8", op, "streaming"), _find(rows, "warm", w, mid, "lag8", op, "direct"),
                "points/s ratio")
    for w in WORKLOADS:
        out[f"streaming/sorted warm, N={mid:.0e}, lag8 field, {w}"] = _ratio(
            _find(rows, "warm", w, mid, "lag8", "field", "streaming"), _find(rows, "warm", w, mid, "lag8", "field", "sorted"),
            "points/s ratio")
    for m in p["methods"]:
        for w in WORKLOADS:
            out[f"streaming {m}/scipy cubic warm, N={big:.0e}, field, {w}"] = _ratio(
                _find(rows, "warm", w, big, m, "field", "streaming"), _find(rows, "warm", w, big, "bspline3", "field", "scipy"),
                "points/s ratio, all 3 components for both")
    return {k: v for k, v in out.items() if v["ratio"] is not None}


def compute_targets(rows: list[dict], ratios: dict, memory: dict, p: dict) -> dict:
    big = p["big"]
    warm = _find(rows, "warm", "3D", big, "lag8", "field", "streaming")
    cold = ratios.get(f"streaming/direct cold, N={big:.0e}, lag8 field, 3D")
    note = "" if big == 1_000_000 else f" (quick run: measured at N={big:.0e}, not 1e6)"
    return {
        "lag8 field 1e6 uniform warm ≥ 5 M points/s": {
            "met": warm["points_per_s"] >= TARGET_WARM_PPS, "value": warm["points_per_s"],
            "measured": f"{warm['points_per_s'] / 1e6:.3f} M points/s{note}"},
        "streaming ≥ 10× direct cold at 1e6": {
            "met": None if cold is None else cold["ratio"] >= TARGET_COLD_RATIO,
            "value": None if cold is None else cold["ratio"],
            "measured": ("cold runs unavailable" if cold is None else f"{cold['ratio']:.1f}×") + note},
        "peak memory of a 1e6-point query < 500 MB": {
            "met": memory["peak_growth_MB"] < TARGET_MEMORY_MB, "value": memory["peak_growth_MB"],
            "measured": f"{memory['peak_growth_MB']:.0f} MB ({memory['mapped_file_MB']:.0f} MB of it mapped shard "
                        f"files){note}"},
    }


def _fmt_ratio(r: float) -> str:
    return f"{r:8.2f}×" if r < 100 else f"{r:8.0f}×"


def _fmt_pps(r: dict | None) -> str:
    if r is None:
        return "—"
    v = r["points_per_s"]
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.0f}k" if v >= 1e3 else f"{v:.0f}"


def print_table(rows: list[dict], ns: list[int]) -> None:
    lines = sorted({(r["method"], r["operator"], r["strategy"]) for r in rows},
                   key=lambda k: (k[2] == "scipy", ["streaming", "sorted", "direct", "scipy"].index(k[2]), k[0], k[1]))
    head = "".join(f"{n:>9.0e}" for n in ns)
    for w, desc in WORKLOADS.items():
        print(f"\n  points/s, workload {w} ({desc}); warm | cold")
        print(f"  {'method':<9}{'operator':<10}{'strategy':<11}{head}   |{head}")
        for m, op, s in lines:
            warm = "".join(f"{_fmt_pps(_find(rows, 'warm', w, n, m, op, s)):>9}" for n in ns)
            cold = "".join(f"{_fmt_pps(_find(rows, 'cold', w, n, m, op, s)):>9}" for n in ns)
            print(f"  {m:<9}{op:<10}{s:<11}{warm}   |{cold}")


def engine_build() -> dict:
    """Identifies the compiled extension, since the engine may be rebuilt between (or during) runs."""
    from turbdb import _core

    path = Path(_core.__file__)
    return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "mtime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(path.stat().st_mtime))}


def machine_info() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) / 1024**2 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), None)
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent,
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = None
    import scipy

    return {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)), "memory_GB": mem, "python": platform.python_version(),
            "numpy": np.__version__, "scipy": scipy.__version__, "turbdb": turbdb.__version__, "git": commit,
            "RAYON_NUM_THREADS": os.environ.get("RAYON_NUM_THREADS")}


def plot(rows: list[dict], p: dict, cold_reason: str | None, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    colors = {"lag4": "C0", "lag6": "C1", "lag8": "C2", "bspline3": "k"}
    styles = {"streaming": "-", "sorted": "--", "direct": ":", "scipy": "-."}
    markers = {"field": "o", "gradient": "x"}
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True, sharey=True)
    for col, w in enumerate(WORKLOADS):
        for row, mode in enumerate(("warm", "cold")):
            ax = axes[row, col]
            mine = [r for r in rows if r["mode"] == mode and r["workload"] == w]
            for m, op, s in sorted({(r["method"], r["operator"], r["strategy"]) for r in mine}):
                pts = sorted((r["n"], r["points_per_s"]) for r in mine if (r["method"], r["operator"], r["strategy"]) == (m, op, s))
                ax.plot(*zip(*pts), color=colors[m], linestyle=styles[s], marker=markers[op], markersize=5)
            if mode == "warm":
                ax.axhline(TARGET_WARM_PPS, color="C3", linewidth=0.8, alpha=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(f"{mode}, workload {w} ({WORKLOADS[w]})", fontsize=10)
            if mode == "cold" and cold_reason:
                ax.text(0.5, 0.5, f"cold unavailable:\n{cold_reason}", transform=ax.transAxes, ha="center", wrap=True)
            elif not mine:
                ax.text(0.5, 0.5, "not measured in this run", transform=ax.transAxes, ha="center", color="grey")
            if row == 1:
                ax.set_xlabel("points per query N")
            if col == 0:
                ax.set_ylabel("points/s")
    handles = ([Line2D([], [], color=c, label=m if m != "bspline3" else "scipy cubic") for m, c in colors.items()
                if m in p["methods"] or m == "bspline3"]
               + [Line2D([], [], color="grey", linestyle=s, label=k) for k, s in styles.items() if k != "scipy"]
               + [Line2D([], [], color="grey", marker=mk, linestyle="", label=k) for k, mk in markers.items()]
               + [Line2D([], [], color="C3", linewidth=0.8, label="target 5 M points/s (warm, 1e6)")])
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
