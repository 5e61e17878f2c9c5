"""Many users over HTTP: the same JHTDB-shaped trace replayed by real HTTP clients
(`turbdb.workload.replay` through `turbdb.connect`, as `turbdb workload replay --url` does)
at several client counts against four servers: on data the OS page cache holds, `turbdb
serve` without a node engine and with `--scheduler jaws` (the default server reads through
the page cache, the engine keeps its own cache too); and as bench/workload.py measures the
engine in-process (`--io direct`, a cache of a twelfth of the data), `--scheduler noshare`
and `--scheduler jaws`. What the in-process run leaves out is here: each request's HTTP and
Python handling in the server, and the clients' own work on the same cores.

    python bench/http_workload.py [--data /tmp/turbdb-bench-workload] [--clients 8,64,128]
                                  [--rounds 2] [--quick]

Each replay gets a fresh server; the servers take turns within every round, so a shared
machine's drifting load weighs on all alike. The token has no rate limit worth the name, so
the server, not its limit, sets the pace. Prints queries/s, the server's CPU a query and
the small and medium queries' p50/p99 per server and client count, and each engine
server's median throughput as a ratio of its baseline's (jaws over no engine, jaws-direct
over noshare-direct); writes bench/results/http_workload.json and .svg (--quick:
http_workload_quick.*, a 64³ × 8 dataset, about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import turbdb
from turbdb.workload import generate, replay

sys.path.insert(0, str(Path(__file__).parent))
from service import TOKEN, start_server  # noqa: E402  (bench/service.py: a server with an unreachable rate limit)
from workload import ensure_data, machine_info, setup  # noqa: E402  (bench/workload.py: the same dataset)

RESULTS = Path(__file__).parent / "results"
#: The servers compared, name → `turbdb serve` options: on the OS page cache, without an
#: engine and with one; and as bench/workload.py runs the engine in-process (io=direct, a
#: cache of a twelfth of the data: the engine's cache is the only one), noshare and jaws.
#: ``{cache}`` is that twelfth, in bytes.
SERVERS = {"none": (), "jaws": ("--scheduler", "jaws"),
           "noshare-direct": ("--scheduler", "noshare", "--io", "direct", "--cache-policy", "lru",
                              "--cache-bytes", "{cache}"),
           "jaws-direct": ("--scheduler", "jaws", "--io", "direct", "--cache-policy", "lru", "--cache-bytes", "{cache}")}
#: Each engine server against its baseline: the ratios printed and stored.
PAIRS = {"jaws": "none", "jaws-direct": "noshare-direct"}


def replay_once(data: Path, workdir: Path, server: str, trace, clients: int, cache_bytes: int) -> dict:
    options = tuple(o.format(cache=cache_bytes) for o in SERVERS[server])
    process, url = start_server(data, workdir, options)
    try:
        with turbdb.connect(url, token=TOKEN) as remote:
            cpu = process_cpu_seconds(process.pid)
            report = replay(remote, trace, clients=clients)
            server_cpu = process_cpu_seconds(process.pid) - cpu
            engine = remote.engine_stats() if options else None
    finally:
        process.terminate()
        process.wait(timeout=30)
    # The server's CPU a query: on a machine that the replay's clients share with it, what
    # it has left for them sets the pace.
    row = {"server": server, "clients": clients, **report.summary(), "server_cpu_seconds": server_cpu,
           "server_cpu_ms_per_query": server_cpu / max(report.queries, 1) * 1e3}
    if engine is not None:
        row["engine"] = {k: engine[k] for k in ("completed", "served_from_cache", "served_alone", "batches",
                                                 "busy_seconds", "idle_seconds", "atoms_read") if k in engine}
        row["gating"] = engine.get("gating")
    return row


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (Linux ``/proc``; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def line(row: dict) -> str:
    response = row["response"]
    classes = ", ".join(f"{c} p50 {v['p50'] * 1e3:6.1f} p99 {v['p99'] * 1e3:7.1f} ms" for c, v in response.items()
                        if c in ("small", "medium"))
    return (f"  {row['server']:>5} {row['clients']:4d} clients: {row['queries_per_second']:6.1f} q/s "
            f"({row['failed']} failed), server CPU {row['server_cpu_ms_per_query']:.1f} ms a query; {classes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "turbdb-bench-workload")
    parser.add_argument("--clients", default="8,64,128",
                        help="client counts, comma-separated (128: the most connections a server takes from one "
                             "address)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of every server and client count")
    parser.add_argument("--jobs", type=int, default=300, help="jobs in the trace")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="a 64³ × 8 dataset, one round, 8 and 64 clients, 100 jobs (not with those options)")
    args = parser.parse_args()
    shape = setup(args.quick)
    if args.quick:  # --quick sets these: given too, they would be silently overridden
        given = [f"--{n}" for n in ("clients", "rounds", "jobs") if getattr(args, n) != parser.get_default(n)]
        if given:
            parser.error(f"--quick sets {', '.join(given)} itself (8 and 64 clients, one round, 100 jobs); leave "
                         "them out, or leave out --quick")
    clients = [8, 64] if args.quick else [int(c) for c in args.clients.split(",")]
    rounds = 1 if args.quick else args.rounds
    jobs = 100 if args.quick else args.jobs
    ds = ensure_data(args.data, shape["grid"], shape["steps"], 0)
    cache_bytes = shape["grid"] ** 3 * 3 * 4 * shape["steps"] // 12
    trace = generate(ds.info, dataset=ds.name, jobs=jobs, duration=shape["duration"], seed=args.seed)
    machine = machine_info()
    load = [os.getloadavg()[0]]
    print(f"{len(trace)} queries of {jobs} jobs on {ds.name}; {machine['cpu']} ({machine['simd']}), "
          f"{machine['affinity']} cores, load {load[0]:.2f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(rounds):
            for c in clients:
                for server in SERVERS:
                    row = replay_once(args.data, Path(workdir), server, trace, c, cache_bytes)
                    row["round"] = r
                    rows.append(row)
                    print(line(row), flush=True)
    load.append(os.getloadavg()[0])
    ratios: dict[str, dict[str, float]] = {}
    for engine, base in PAIRS.items():
        for c in clients:
            median = {s: statistics.median(r["queries_per_second"] for r in rows if r["server"] == s and r["clients"] == c)
                      for s in (engine, base)}
            ratios.setdefault(f"{engine}_over_{base}", {})[str(c)] = median[engine] / median[base]
            print(f"  {c:4d} clients: {engine} {median[engine]:.1f} q/s against {base} {median[base]:.1f}: "
                  f"{median[engine] / median[base]:.2f}× (median of {rounds})")
    out = {"machine": machine, "load": load, "dataset": ds.name, "queries": len(trace), "jobs": jobs,
           "servers": {name: [o.format(cache=cache_bytes) for o in options] for name, options in SERVERS.items()},
           "clients": clients, "rounds": rounds, "rows": rows, **ratios}
    RESULTS.mkdir(exist_ok=True)
    name = "http_workload_quick" if args.quick else "http_workload"
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=1))
    plot(out, RESULTS / f"{name}.svg")
    print(f"wrote {RESULTS / name}.json and .svg")


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = {"none": "no engine", "jaws": "--scheduler jaws", "noshare-direct": "noshare, io=direct",
              "jaws-direct": "jaws, io=direct"}
    for server, colour in zip(out["servers"], ("C0", "C1", "C7", "C2")):
        rows = [r for r in out["rows"] if r["server"] == server]
        label = labels.get(server, server)
        axes[0].plot([r["clients"] for r in rows], [r["queries_per_second"] for r in rows], "o", color=colour,
                     label=label, alpha=0.7)
        axes[1].plot([r["clients"] for r in rows], [r["response"]["small"]["p99"] * 1e3 for r in rows], "o",
                     color=colour, label=label, alpha=0.7)
    for ax, title, ylabel in ((axes[0], "throughput over HTTP", "queries / s"),
                              (axes[1], "small-query p99 response", "ms")):
        ax.set_xscale("log")
        ax.set_xticks(out["clients"], [str(c) for c in out["clients"]])
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    m = out["machine"]
    fig.suptitle(f"{out['queries']} queries, {out['dataset']}; {m['cpu']} ({m['simd']}), {m['affinity']} cores, "
                 f"load {out['load'][0]:.1f}→{out['load'][1]:.1f}, git {m['git']}", fontsize=9)
    fig.tight_layout()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


if __name__ == "__main__":
    main()
