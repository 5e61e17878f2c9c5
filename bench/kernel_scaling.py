"""The interpolation kernel per thread count and SIMD path (issue "The interpolation kernel at
the machine's limit"): `python bench/query.py --threads 1,2` runs this instead of the strategy
comparison.

For each thread count T and each SIMD path P this CPU has, a fresh process with
RAYON_NUM_THREADS=T and TURBDB_KERNEL=P times warm 1e6-point queries (lag4/lag6/lag8, field
and gradient, or the operators ``--operators`` names; best of two after a warm-up) and reports
the seconds per phase. The baseline is a
plain direct gather compiled with numba (bench/numba_gather.py: the whole field in RAM, every
point gathers its 8³ nodes and sums them with its weights, lag8 field) on the same T threads,
timed in the same process; without numba, a numpy gather on one thread, and the report says
which. A numpy gather (one thread) is also the float64 reference the kernel's answers (float64, and
the float32 answers the timed queries ask for, whose z sums run in float32) and the numba
gather's are checked against (max |difference| / max |reference| ≤ 1e-6), and the
arithmetic bound is the multiply-adds a point needs at the FMA peak of the cores used, at
the clock a core runs at (measured: a chain of dependent additions, one a cycle).
Writes bench/results/query_threads.json, query_threads.png and query_threads.svg (the same plot as text,
which the README shows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import numba_gather
import turbdb

METHODS = ("lag8", "lag6", "lag4")
#: The operators the kernel benchmark can time, and those it times unless told otherwise.
OPERATORS = ("field", "gradient", "laplacian", "hessian")
DEFAULT_OPERATORS = ("field", "gradient")
PHASES = ("plan", "read", "weights", "accumulate", "scatter")
#: Float64 multiply-adds a core can issue per cycle on each path (two FMA pipes; the portable
#: path has SSE2's two lanes and separate multiply and add).
FMA_PER_CYCLE = {"avx512": 16, "avx2": 8, "neon": 4, "portable": 2}
GATHER_N, ACCURACY_N = 100_000, 20_000


def fmas_per_point(method: str, operator: str, ncomp: int) -> int:
    """Multiply-adds of one point in the kernel's row sums: a field sums w² rows of w·ncomp
    values once; a gradient (or Laplacian) sums each row along z for two z orders, then adds
    the columns into its three (y, z) derivative pairs; a Hessian sums each row along z for
    three z orders, then into its six (y, z) pairs."""
    w = int(method[3:])
    if operator == "field":
        return w**3 * ncomp
    if operator == "hessian":
        return 3 * w**3 * ncomp + 6 * w**2 * ncomp
    return 2 * w**3 * ncomp + 3 * w**2 * ncomp


def measured_clock_ghz() -> float | None:
    """The clock of the core this runs on, timed by a chain of dependent additions (one a
    cycle): the figure the bound uses. /proc/cpuinfo's clock is nominal — 2.6 GHz on a Xeon
    whose core ran at 3.9 — and made the bound look 1.5× lower than the core's."""
    from turbdb import _core

    return _core.measured_clock_ghz()


def clock_ghz() -> float | None:
    """The cores' nominal clock (the highest 'cpu MHz' in /proc/cpuinfo), for the record."""
    try:
        mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("cpu MHz")]
    except OSError:
        return None
    return max(mhz) / 1e3 if mhz else None


def bound_pps(method: str, operator: str, ncomp: int, path: str, threads: int, ghz: float | None) -> float | None:
    if ghz is None:
        return None
    return threads * ghz * 1e9 * FMA_PER_CYCLE[path] / fmas_per_point(method, operator, ncomp)


# -- the plain gather: baseline and float64 reference -------------------------------------------


def lagrange8(s: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes (wrapped, (N, 8)) and weights ((N, 8)) of the 8-point Lagrange stencil at grid
    positions ``s`` on a periodic axis of ``n`` nodes: nodes floor(s) - 3 … floor(s) + 4."""
    base = np.floor(s).astype(np.int64) - 3
    t = s - base
    k = np.arange(8)
    weights = np.ones((len(s), 8))
    for j in range(8):
        for m in range(8):
            if m != j:
                weights[:, j] *= (t - m) / (j - m)
    return (base[:, None] + k) % n, weights


def gather_lag8(field: np.ndarray, grid_pos: np.ndarray) -> np.ndarray:
    """lag8 field values at ``grid_pos`` ((N, 3): x, y, z in grid units) from ``field``
    ((nz, ny, nx, ncomp)), in float64, 4096 points at a time."""
    nz, ny, nx, nc = field.shape
    out = np.empty((len(grid_pos), nc))
    for lo in range(0, len(grid_pos), 4096):
        p = grid_pos[lo:lo + 4096]
        (ix, wx), (iy, wy), (iz, wz) = lagrange8(p[:, 0], nx), lagrange8(p[:, 1], ny), lagrange8(p[:, 2], nz)
        block = field[iz[:, :, None, None], iy[:, None, :, None], ix[:, None, None, :]].astype(np.float64)
        out[lo:lo + 4096] = np.einsum("nz,ny,nx,nzyxc->nc", wz, wy, wx, block, optimize=True)
    return out


def measure_gather(ds, field_name: str, pts: np.ndarray, t: float) -> tuple[dict, np.ndarray]:
    info = ds.info
    field = ds.cutout(field_name, time=t).values  # (z, y, x, component), float32 as stored
    grid_pos = (pts - np.asarray(info.origin)) / np.asarray(info.spacing)
    gather_lag8(field, grid_pos[:1000])  # warm-up
    start = time.perf_counter()
    reference = gather_lag8(field, grid_pos)
    seconds = time.perf_counter() - start
    return {"what": "numpy gather, lag8 field, 1 thread, field in RAM", "n": len(pts), "seconds": seconds,
            "points_per_s": len(pts) / seconds}, reference


# -- one thread count and path, in its own process --------------------------------------------


def measure_one(payload: str) -> None:
    """The hidden --kernel-one mode: RAYON_NUM_THREADS and TURBDB_KERNEL are set by the parent."""
    args = json.loads(payload)
    ds = turbdb.open(args["data"])[args["dataset"]]
    pts = np.load(args["points"])
    rows = []
    for method, operator in ((m, op) for m in METHODS for op in args["operators"]):
        def once():
            start = time.perf_counter()
            ds.query(args["field"], pts, time=args["time"], method=method, operator=operator, dtype=np.float32)
            return time.perf_counter() - start, dict(ds.last_query_stats)

        once()
        (seconds, stats) = min(once(), once(), key=lambda r: r[0])
        rows.append({"method": method, "operator": operator, "seconds": seconds, "stats": stats})
    accuracy_pts = pts[:ACCURACY_N]
    ours = ds.query(args["field"], accuracy_pts, time=args["time"], method="lag8", dtype=np.float64)
    # The timed answers are float32, whose z sums run in float32: checked too.
    ours32 = ds.query(args["field"], accuracy_pts, time=args["time"], method="lag8", dtype=np.float32)
    out = {"rows": rows, "kernel": turbdb.kernel_path(), "lag8_field_f64": ours.tolist(),
           "lag8_field_f32": ours32.astype(np.float64).tolist()}
    if args["gather"] and numba_gather.available():
        # The baseline on as many threads as the kernel had, in the same process.
        info = ds.info
        field = ds.cutout(args["field"], time=args["time"]).values
        grid_pos = (pts[:GATHER_N] - np.asarray(info.origin)) / np.asarray(info.spacing)
        try:
            gather = numba_gather.measure(field, grid_pos, int(os.environ["RAYON_NUM_THREADS"]))
        except Exception as e:  # a numba that cannot compile here: say so, keep the kernel's figures
            out["gather_error"] = f"{type(e).__name__}: {e}"
        else:
            values = gather.pop("values")
            out["gather"] = {**gather, "lag8_field_f64": values[:ACCURACY_N].tolist()}
    print(json.dumps(out))


def run_threads(threads: list[int], data: Path, dataset: str, field: str, t: float, pts: np.ndarray,
                results: Path, machine: dict, repeats: int = 1, paths: list[str] | None = None,
                operators: list[str] | None = None) -> None:
    """``repeats`` > 1 runs every thread count and path that many times, each in a fresh
    process, one round of all of them after another (so a slow spell of a shared machine
    falls on every thread count alike), and reports each row's median with its range, and
    the speed-up from the fewest threads to the most paired round by round (on a shared
    machine one process's speed moves more than the rounds' medians can smooth). ``paths``:
    the SIMD paths to run (default every one this CPU has); ``operators``: the operators to
    time (default field and gradient)."""
    began = time.perf_counter()
    ds = turbdb.open(data)[dataset]
    ncomp = ds.info.fields[field].ncomp
    paths, ghz, nominal = paths or turbdb.kernel_paths(), measured_clock_ghz(), clock_ghz()
    operators = list(operators or DEFAULT_OPERATORS)
    load_start = os.getloadavg()
    measured = "not measured" if ghz is None else f"{ghz:.2f} GHz measured"
    print(f"kernel benchmark: {field} of {dataset}, N={len(pts):.0e} uniform, warm; threads {threads}, "
          f"paths {paths}, operators {operators}; {machine['cpu']}, clock {measured} ({nominal} GHz in /proc/cpuinfo); "
          f"load average {load_start[0]:.2f}", flush=True)
    numpy_gather, reference = measure_gather(ds, field, pts[:GATHER_N], t)
    print(f"  reference ({numpy_gather['what']}): {numpy_gather['points_per_s'] / 1e6:.3f} M points/s", flush=True)
    if not numba_gather.available():
        print("  numba is not installed (make bench-query installs it): the baseline is the numpy gather", flush=True)
    gathers = {}

    points_file = results / "query_threads_points.npy"
    np.save(points_file, pts)
    rows = []
    try:
        for n_threads, path, repeat in ((n, p, k) for k in range(repeats) for n in threads for p in paths):
            env = {**os.environ, "RAYON_NUM_THREADS": str(n_threads), "TURBDB_KERNEL": path}
            payload = json.dumps({"data": str(data), "dataset": dataset, "field": field, "time": t,
                                  "points": str(points_file), "gather": n_threads not in gathers,
                                  "operators": operators})
            out = subprocess.run([sys.executable, str(Path(__file__).parent / "query.py"), "--kernel-one", payload],
                                 env=env, check=True, capture_output=True, text=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            assert result["kernel"] == path, result["kernel"]
            ours = np.asarray(result["lag8_field_f64"])
            ref = reference[:len(ours)]
            accuracy = {dtype: float(np.abs(np.asarray(result[f"lag8_field_{dtype}"]) - ref).max() / np.abs(ref).max())
                        for dtype in ("f64", "f32")}
            if accuracy["f32"] > 1e-6:
                print(f"  ABOVE 1e-6: the float32 lag8 field on {path} differs from the float64 reference by "
                      f"{accuracy['f32']:.1e} of its largest value", flush=True)
            if "gather" in result:
                gathers[n_threads] = checked_gather(result["gather"], ref)
            elif "gather_error" in result:
                print(f"  the numba gather failed ({result['gather_error']}): the baseline is the numpy gather",
                      flush=True)
            gather = gathers.get(n_threads, numpy_gather)
            for r in result["rows"]:
                rows.append({**row(r, n_threads, path, len(pts), ncomp, ghz, gather, accuracy), "round": repeat})
                print_row(rows[-1], f"round {repeat + 1}/{repeats} " if repeats > 1 else "")
    finally:
        points_file.unlink(missing_ok=True)
    paired = paired_scaling(rows, threads)
    rows = medians(rows)

    for r in rows:
        one = next((o for o in rows if o["threads"] == min(threads) and o["path"] == r["path"]
                    and (o["method"], o["operator"]) == (r["method"], r["operator"])), None)
        r["speedup_vs_fewest_threads"] = one and r["points_per_s"] / one["points_per_s"]
    load_end = os.getloadavg()
    if repeats > 1:
        print_scaling(rows, threads, paired)
    report = {"benchmark": "query --threads", "dataset": dataset, "field": field, "n": len(pts), "time": t,
              "repeats": repeats, "operators": operators, "paired_scaling": paired,
              "machine": machine, "clock_GHz": ghz, "clock_GHz_cpuinfo": nominal, "paths": paths, "threads": threads,
              "fma_per_cycle": FMA_PER_CYCLE, "gather": gathers or numpy_gather, "numpy_gather": numpy_gather,
              "load_average_start": load_start,
              "load_average_end": load_end, "elapsed_seconds": time.perf_counter() - began, "results": rows,
              "notes": "read/weights/accumulate are thread time summed over workers; plan and scatter are wall "
                       "time. bound = threads × clock × FMA/cycle / multiply-adds per point, at the clock one core "
                       "measured alone (a chain of dependent additions; with every core busy it may run slower)."}
    (results / "query_threads.json").write_text(json.dumps(report, indent=2))
    plot(rows, threads, results / "query_threads.png", machine, load_start, gathers)
    print(f"  load average {load_end[0]:.2f} at the end; wrote {results / 'query_threads.json'}, .png and .svg")


def medians(rows: list[dict]) -> list[dict]:
    """One row per (threads, path, method, operator): the run of median time (of an even
    count, the slower of the middle two), with every run's points/s."""
    out = []
    for key in dict.fromkeys((r["threads"], r["path"], r["method"], r["operator"]) for r in rows):
        runs = sorted((r for r in rows if (r["threads"], r["path"], r["method"], r["operator"]) == key),
                      key=lambda r: r["seconds"])
        median = dict(runs[len(runs) // 2])
        median.pop("round", None)  # one run's round; the row stands for all of them
        median["runs_points_per_s"] = [r["points_per_s"] for r in runs]
        out.append(median)
    return out


def lag8_field(rows: list[dict], path: str) -> list[dict]:
    """The rows of the lag8 field on ``path``: the ones the scaling figures are about."""
    return [r for r in rows if r["path"] == path and (r["method"], r["operator"]) == ("lag8", "field")]


def paired_scaling(rows: list[dict], threads: list[int]) -> dict:
    """lag8 field per path: in each round, the points/s of the most threads over that of the
    fewest, and their median and range over the rounds."""
    out = {}
    for path in dict.fromkeys(r["path"] for r in rows):
        mine = lag8_field(rows, path)
        low, high = ({r["round"]: r["points_per_s"] for r in mine if r["threads"] == n}
                     for n in (min(threads), max(threads)))
        ratios = [high[k] / low[k] for k in sorted(low) if k in high]
        if ratios:
            out[path] = {"threads": [min(threads), max(threads)], "ratios": ratios,
                         "median": float(np.median(ratios)), "min": min(ratios), "max": max(ratios)}
    return out


def print_scaling(rows: list[dict], threads: list[int], paired: dict) -> None:
    """lag8 field per path: the median points/s per thread count with its range, the ratio
    of the medians from the fewest threads to the most, and the ratio paired by round."""
    for path in dict.fromkeys(r["path"] for r in rows):
        mine = {r["threads"]: r for r in lag8_field(rows, path)}
        if not mine:  # --operators without the field: no scaling figure
            continue
        cells = ", ".join(f"T={t} {mine[t]['points_per_s'] / 1e6:.2f} ({min(mine[t]['runs_points_per_s']) / 1e6:.2f}–"
                          f"{max(mine[t]['runs_points_per_s']) / 1e6:.2f})" for t in threads)
        lo, hi = mine[min(threads)], mine[max(threads)]
        pair = paired.get(path)
        by_round = "" if pair is None else (f", {pair['median']:.1f}× paired by round ({pair['min']:.1f}–"
                                             f"{pair['max']:.1f}×, {len(pair['ratios'])} rounds)")
        print(f"  {path} lag8 field, medians (ranges) M/s: {cells}; {min(threads)} → {max(threads)} threads "
              f"{hi['points_per_s'] / lo['points_per_s']:.1f}× the medians{by_round}", flush=True)


def checked_gather(gather: dict, reference: np.ndarray) -> dict:
    """The numba gather's timing, once its answers match the numpy reference: a baseline that
    computes something else would make every ratio meaningless."""
    values = np.asarray(gather.pop("lag8_field_f64"))
    ref = reference[:len(values)]
    diff = float(np.abs(values - ref).max() / np.abs(ref).max())
    if not diff < 1e-9:
        raise RuntimeError(f"the numba gather differs from the numpy reference by {diff:.1e}: no baseline")
    print(f"  baseline ({gather['what']}, {gather['threads']} threads): {gather['points_per_s'] / 1e6:.3f} M points/s, "
          f"{diff:.1e} from the reference", flush=True)
    return {**gather, "max_rel_diff_vs_numpy": diff}


def row(r: dict, threads: int, path: str, n: int, ncomp: int, ghz: float | None, gather: dict,
        accuracy: dict[str, float]) -> dict:
    pps = n / r["seconds"]
    bound = bound_pps(r["method"], r["operator"], ncomp, path, threads, ghz)
    return {"threads": threads, "path": path, "method": r["method"], "operator": r["operator"], "n": n,
            "seconds": r["seconds"], "points_per_s": pps, "bound_points_per_s": bound,
            # The gather is lag8's field: only that row is compared with it (lag4 reads an eighth
            # of the nodes, and "198× the gather" for it compared unlike work).
            "fraction_of_bound": bound and pps / bound,
            "vs_gather": pps / gather["points_per_s"] if (r["method"], r["operator"]) == ("lag8", "field") else None,
            "gather": gather["what"], "gather_threads": gather.get("threads", 1),
            "fmas_per_point": fmas_per_point(r["method"], r["operator"], ncomp),
            "ns_per_point": {ph: r["stats"][f"{ph}_seconds"] / n * 1e9 for ph in PHASES},
            "lag8_field_max_rel_diff_vs_f64_gather": accuracy["f64"],
            "lag8_field_f32_max_rel_diff_vs_f64_gather": accuracy["f32"], "stats": r["stats"]}


def print_row(r: dict, prefix: str = "") -> None:
    ns = " ".join(f"{ph} {r['ns_per_point'][ph]:5.0f}" for ph in PHASES)
    bound = "" if r["fraction_of_bound"] is None else f"{100 * r['fraction_of_bound']:4.1f}% of bound"
    print(f"  {prefix}T={r['threads']:<2} {r['path']:<8} {r['method']} {r['operator']:<8} {r['points_per_s'] / 1e6:6.2f} M points/s "
          f"{bound}{_against_gather(r)} | ns/point: {ns} | lag8 field vs f64 "
          f"gather: float64 {r['lag8_field_max_rel_diff_vs_f64_gather']:.1e}, float32 "
          f"{r['lag8_field_f32_max_rel_diff_vs_f64_gather']:.1e}", flush=True)


def _against_gather(r: dict) -> str:
    """The row against the lag8-field gather, saying so when the gather ran on fewer threads."""
    if r["vs_gather"] is None:
        return ""
    fewer = f" on {r['gather_threads']} thread(s)" if r["gather_threads"] != r["threads"] else ""
    return f", {r['vs_gather']:5.1f}× {r['gather'].split()[0]} gather{fewer}"


def plot(rows: list[dict], threads: list[int], path: Path, machine: dict, load: tuple, gathers: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, p in enumerate(sorted({r["path"] for r in rows})):
        for op, style in (("field", "-"), ("gradient", "--"), ("laplacian", "-."), ("hessian", ":")):
            pts = sorted((r["threads"], r["points_per_s"]) for r in rows
                         if r["path"] == p and r["method"] == "lag8" and r["operator"] == op)
            left.plot(*zip(*pts), color=f"C{i}", linestyle=style, marker="o", label=f"{p} lag8 {op}")
    if gathers:
        pts = sorted((t, g["points_per_s"]) for t, g in gathers.items())
        left.plot(*zip(*pts), color="black", linestyle=":", marker="s", label="numba gather, lag8 field")
    left.set_xlabel("threads (RAYON_NUM_THREADS)")
    left.set_ylabel("points/s")
    left.set_xticks(threads)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    # Where the lag8 field's time goes, or the first operator's if the field was not timed.
    shown = "field" if any(r["operator"] == "field" for r in rows) else rows[0]["operator"]
    mine = [r for r in rows if r["method"] == "lag8" and r["operator"] == shown]
    labels = [f"{r['path']}\nT={r['threads']}" for r in mine]
    bottom = np.zeros(len(mine))
    for ph in ("plan", "read", "weights", "accumulate", "scatter"):
        # thread-summed phases per thread, so the bars add up to about the wall time
        v = np.array([r["ns_per_point"][ph] / (1 if ph in ("plan", "scatter") else r["threads"]) for r in mine])
        right.bar(labels, v, bottom=bottom, label=ph)
        bottom += v
    if len(mine) > 6:
        right.tick_params(axis="x", labelsize=7, rotation=90)
    right.set_ylabel("ns per point (wall; worker phases ÷ threads)")
    right.set_title(f"lag8 {shown}, where the time goes", fontsize=10)
    right.legend(fontsize=8)
    fig.suptitle(f"kernel, 1e6 points warm — {machine['cpu']}, load {load[0]:.1f}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    # Text, not an image, for the README: labels stay text, and it diffs like the JSON.
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})
