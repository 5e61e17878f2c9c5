"""How far N threads can scale on this machine at all (issue "The interpolation kernel at the
machine's limit", its 1 → 16 threads target).

`bench/query.py --threads 1,16` measures one query on 1 and on 16 threads. On a shared or
virtual machine a thread runs slower when every core is busy (memory bus, caches, turbo, the
neighbours on the host), and no threading design gets that back. This benchmark measures that
ceiling directly, beside the kernel's own scaling, in each round:

1. **alone**: one process, one thread, the CPU to itself;
2. **copies**: N one-thread processes pinned to CPUs 0 … N-1, started at the same instant,
   each timing the same query: nothing is shared between them but the machine, so the sum of
   their rates over the alone rate is the most N threads of this kernel could give here;
3. **threads**: one process with N threads (`RAYON_NUM_THREADS=N`), the kernel's own scaling.

With `--split`, each round also runs k processes of N/k threads (k = 2, 4, … below N), each
pinned to its own N/k CPUs, all at once: where between one process and N copies the loss
appears says whether it grows with the threads a process has.

With `--distinct-steps` each copy queries a time step of its own (of a dataset of N steps, made
beside `--data` on first use). Without it the copies read the same step in the same order at the
same moments, so the host's shared L3 cache serves one copy's reads to the others, which one
process's threads, each on a cell of its own, cannot get: that ceiling flatters the machine.

Each process times a warm lag8 field query (float32 answers) at 10⁶ uniform points of the 256³
benchmark dataset, seven times after a warm-up, and reports its median. The report gives the
ceiling (copies / alone), the kernel's scaling (threads / alone) and the share of the ceiling
the kernel reaches (threads / copies), each paired within its round, then their medians.

    python bench/independent_copies.py                 # N = every CPU, 3 rounds
    python bench/independent_copies.py --copies 16 --rounds 5 --path avx2
    python bench/independent_copies.py --copies 16 --rounds 3 --path avx2 --distinct-steps
    python bench/independent_copies.py --copies 16 --rounds 2 --path avx2 --split

Writes bench/results/independent_copies.json and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from query import FIELD, GRID, NAME, ensure_data, machine_info, make_points, query_time
import turbdb

RESULTS = Path(__file__).parent / "results"
TIMED_QUERIES = 7
#: Seconds the copies get to start, import and warm up before they all begin timing.
START_DELAY_S = 8.0


def measure_one(payload: str) -> None:
    """The hidden --one mode: pins itself to its CPUs if given some, waits for the common start,
    times the query and prints its rates as JSON."""
    args = json.loads(payload)
    if args["cpus"] is not None:
        os.sched_setaffinity(0, set(args["cpus"]))
    ds = turbdb.open(args["data"])[NAME]
    pts = make_points(ds.info, "3D", args["n"], 0)
    t = query_time(ds.info) if args["step"] is None else float(ds.info.times[args["step"]])

    def query() -> float:
        start = time.perf_counter()
        ds.query(FIELD, pts, time=t, method=args["method"], dtype=np.float32)
        return args["n"] / (time.perf_counter() - start)

    query()
    while time.time() < args["start_at"]:
        time.sleep(0.001)
    rates = [query() for _ in range(TIMED_QUERIES)]
    print(json.dumps({"cpus": args["cpus"], "median": statistics.median(rates), "best": max(rates),
                      "kernel": turbdb.kernel_path()}))


def ensure_steps(data: Path, steps: int) -> Path:
    """The benchmark's 256³ dataset with at least `steps` time steps, in `data` (made there
    on first use)."""
    if (data / NAME).exists() and len(turbdb.open(data)[NAME].info.times) >= steps:
        return data
    print(f"creating a {GRID}³ synthetic dataset of {steps} steps in {data} …", flush=True)
    subprocess.run([sys.executable, "-m", "turbdb.cli", "simulate", str(data), "--name", NAME, "--grid", str(GRID),
                    "--steps", str(steps), "--kind", "synthetic", "--quiet", "--overwrite"], check=True)
    return data


def launch(data: Path, method: str, n: int, threads: int, cpus: list[int] | None, start_at: float,
           path: str | None, step: int | None) -> subprocess.Popen:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
    if path:
        env["TURBDB_KERNEL"] = path
    payload = json.dumps({"data": str(data), "method": method, "n": n, "cpus": cpus, "start_at": start_at,
                          "step": step})
    return subprocess.Popen([sys.executable, __file__, "--one", payload], env=env, stdout=subprocess.PIPE, text=True)


def collect(procs: list[subprocess.Popen]) -> list[dict]:
    out = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a timed process failed (exit {p.returncode}); its error is above")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def splits(copies: int) -> list[int]:
    """The k of `--split`: powers of two from 2 that divide N, below N."""
    return [k for k in (2 ** i for i in range(1, copies.bit_length())) if k < copies and copies % k == 0]


def run_round(data: Path, method: str, n: int, copies: int, path: str | None, distinct: bool,
              split: bool) -> dict:
    """One round: alone, the copies at once, then one process on `copies` threads (and, with
    `split`, k processes of copies/k threads). With `distinct`, process i queries step i and
    the others step 0; else all the middle step."""
    def at_once(threads: int, cpus: list[list[int] | None]) -> list[dict]:
        start_at = time.time() + START_DELAY_S
        steps = [i if distinct else None for i in range(len(cpus))]
        return collect([launch(data, method, n, threads, c, start_at, path, step)
                        for c, step in zip(cpus, steps)])

    (alone,) = at_once(1, [[0]])
    each = at_once(1, [[c] for c in range(copies)])
    (threads,) = at_once(copies, [None])
    out = {"alone": alone["median"], "copies": sum(c["median"] for c in each),
           "copies_each": sorted(c["median"] for c in each), "threads": threads["median"],
           "kernel": threads["kernel"]}
    if split:
        out["split"] = {}
        for k in splits(copies):
            per = copies // k
            parts = at_once(per, [list(range(i * per, (i + 1) * per)) for i in range(k)])
            out["split"][f"{k}x{per}"] = sum(p["median"] for p in parts)
    return out


def summarize(rounds: list[dict], copies: int) -> dict:
    """Each round's ceiling (copies / alone), scaling (threads / alone) and share of the
    ceiling reached (threads / copies), paired within the round, and their medians."""
    ratios = {
        "ceiling": [r["copies"] / r["alone"] for r in rounds],
        "scaling": [r["threads"] / r["alone"] for r in rounds],
        "share_of_ceiling": [r["threads"] / r["copies"] for r in rounds],
    }
    return {"copies": copies, "rounds": len(rounds),
            **{k: {"per_round": v, "median": statistics.median(v), "min": min(v), "max": max(v)}
               for k, v in ratios.items()},
            "slowdown_each_copy": statistics.median(
                r["alone"] / statistics.median(r["copies_each"]) for r in rounds)}


def print_summary(s: dict) -> None:
    n = s["copies"]
    for key, what in (("ceiling", f"{n} one-thread copies at once / one alone (the machine's ceiling)"),
                      ("scaling", f"one process on {n} threads / one thread alone (the kernel)"),
                      ("share_of_ceiling", f"{n} threads / {n} copies")):
        r = s[key]
        unit = "" if key == "share_of_ceiling" else "×"
        print(f"  {what}: {r['median']:.2f}{unit} median ({r['min']:.2f}–{r['max']:.2f}, "
              f"{s['rounds']} rounds)")
    print(f"  each copy runs {s['slowdown_each_copy']:.2f}× slower than the process alone (median copy, median round)")


def plot(rounds: list[dict], copies: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(rounds))
    width = 0.27
    for k, (key, label) in enumerate((("alone", f"{copies} × one thread alone (ideal)"),
                                      ("copies", f"{copies} one-thread copies at once"),
                                      ("threads", f"one process, {copies} threads"))):
        values = [r[key] * (copies if key == "alone" else 1) / 1e6 for r in rounds]
        ax.bar(x + (k - 1) * width, values, width, label=label)
    ax.set_xticks(x, [f"round {i + 1}" for i in x])
    ax.set_ylabel("lag8 field, M points/s")
    ax.set_title(f"The kernel on {copies} threads against {copies} independent copies")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/tmp/turbdb-bench-data"),
                        help="where the 256³ benchmark dataset is (made there on first use)")
    parser.add_argument("--copies", type=int, default=len(os.sched_getaffinity(0)),
                        help="N: one-thread copies at once, and the threads of the one process (default: every CPU)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of alone, copies and threads (default 3)")
    parser.add_argument("--method", default="lag8", help="interpolation method timed (default lag8)")
    parser.add_argument("--points", type=int, default=1_000_000, help="points a query (default 10⁶)")
    parser.add_argument("--path", choices=turbdb.kernel_paths(), help="SIMD path (default: the kernel's own choice)")
    parser.add_argument("--distinct-steps", action="store_true",
                        help="each copy queries a time step of its own (a dataset of N steps in DATA-steps, "
                             "made on first use), so the copies share no reads in the host's caches")
    parser.add_argument("--split", action="store_true",
                        help="also k processes of N/k threads each (k = 2, 4, … below N), pinned to CPU sets of their own")
    parser.add_argument("--out", type=Path, default=RESULTS / "independent_copies.json", help="the JSON report")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        measure_one(args.one)
        return
    cpus = sorted(os.sched_getaffinity(0))
    if args.copies < 1 or args.copies > len(cpus) or cpus[: args.copies] != list(range(args.copies)):
        parser.error(f"--copies must be 1 … {len(cpus)}, and CPUs 0 … N-1 must be this process's to use")
    if args.distinct_steps:
        args.data = ensure_steps(args.data.with_name(args.data.name + "-steps"), args.copies)
    else:
        ensure_data(args.data)
    load_start = os.getloadavg()
    shared = "a step each" if args.distinct_steps else "the same step"
    print(f"{args.copies} one-thread copies ({shared}) against one process on {args.copies} threads: "
          f"{args.method} field, {args.points:.0e} points, {args.rounds} rounds; load average {load_start[0]:.2f}",
          flush=True)
    rounds = []
    for i in range(args.rounds):
        r = run_round(args.data, args.method, args.points, args.copies, args.path, args.distinct_steps, args.split)
        rounds.append(r)
        print(f"  round {i + 1}/{args.rounds}: alone {r['alone'] / 1e6:.2f} M/s, {args.copies} copies "
              f"{r['copies'] / 1e6:.2f} M/s together ({r['copies'] / r['alone']:.1f}×), {args.copies} threads "
              f"{r['threads'] / 1e6:.2f} M/s ({r['threads'] / r['alone']:.1f}×), path {r['kernel']}"
              + "".join(f"; {k} {v / 1e6:.2f} M/s ({v / r['alone']:.1f}×)" for k, v in r.get("split", {}).items()),
              flush=True)
    summary = summarize(rounds, args.copies)
    print_summary(summary)
    if args.split:
        summary["split"] = {k: statistics.median(r["split"][k] / r["alone"] for r in rounds) for k in rounds[0]["split"]}
        parts = [f"1x{args.copies} {summary['scaling']['median']:.1f}×"]
        parts += [f"{k} {v:.1f}×" for k, v in summary["split"].items()]
        parts += [f"{args.copies}x1 {summary['ceiling']['median']:.1f}×"]
        print("  processes x threads / one alone (median round): " + ", ".join(parts))
    load_end = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine_info(), "load_average": [load_start[0], load_end[0]], "method": args.method,
              "points": args.points, "timed_queries": TIMED_QUERIES,
              "distinct_steps": args.distinct_steps, "split": args.split, "rounds": rounds, "summary": summary}
    args.out.write_text(json.dumps(report, indent=1))
    plot(rounds, args.copies, args.out.with_suffix(".png"))
    print(f"  load average {load_end[0]:.2f} at the end; wrote {args.out} and .png")


if __name__ == "__main__":
    main()
