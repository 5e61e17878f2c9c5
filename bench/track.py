"""Particle-tracking throughput (issue "Particle tracking and velocity-gradient statistics"):
particle-steps per second of Heun RK2 tracking with lag6 in space and pchip in time, for 1e4,
1e5 and 1e6 particles on the 256³ synthetic dataset of bench/query.py, for

- ``track``: ``Dataset.track`` in-process (the step loop next to the engine, one engine
  call per stage for all particles);
- ``client``: the client-side loop of examples/client_side_tracking.py (two ``query``
  calls per step, the user advances the particles), in-process;
- the same two over HTTP against a ``turbdb serve`` subprocess (``track`` is then one
  request per trajectory, the client loop two requests per step);
- ``engine``: one pchip query between stored steps (4 steps read) and one nearest-step
  query of the same N points: what pchip costs the engine over a single step. The share
  of ``track``'s time spent inside engine calls says what is left outside the engine.

    python bench/track.py [--data /tmp/turbdb-bench-data] [--quick] [--no-http] [--seed 0]

The trajectory spans 5 steps of dt = 0.005 from t = 0.0025, so no stage falls on a stored
time (which would read one step instead of pchip's four). Every measurement follows a warm-up
run of the same size; 1e4 and 1e5 take the best of 3. Writes bench/results/track.json and
track.png (--quick: N ≤ 1e5, track_quick.*). Target: ≥ 1 M particle-steps/s in-process at 1e6.
Parcels 4 is quoted at about 0.085 M/s with trilinear interpolation (not measured here).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import turbdb

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from query import NAME, engine_build, ensure_data, machine_info  # noqa: E402  (bench/query.py)

RESULTS = HERE / "results"
FIELD, METHOD = "velocity", "lag6"
START, DT, STEPS = 0.0025, 0.005, 5
# The engine ceiling is measured between stored times 0.01 and 0.02, where pchip reads all
# four steps (the trajectory's first and last stages read three).
CEILING_TIME = 0.0125
TARGET = 1e6  # particle-steps/s, in-process, 1e6 particles
PARCELS = 0.085e6  # Parcels 4, trilinear, as quoted in the issue


def load_example():
    spec = importlib.util.spec_from_file_location("client_side_tracking", HERE.parent / "examples" / "client_side_tracking.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def particles(info, n: int, seed: int) -> np.ndarray:
    lo, hi = np.array(info.domain).T
    return lo + np.random.default_rng([seed, n]).uniform(0.0, 1.0, (n, 3)) * (hi - lo)


def timed(fn, repeats: int, stats=None) -> tuple[float, float, dict]:
    """(best, first) seconds of ``repeats`` runs after one warm-up run, and ``stats()``
    taken right after the best run."""
    fn()
    best = (float("inf"), {})
    first = None
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        seconds = time.perf_counter() - began
        first = seconds if first is None else first
        if seconds < best[0]:
            best = (seconds, stats() if stats else {})
    return best[0], first, best[1]


def measure(ds, example, n: int, seed: int, where: str) -> list[dict]:
    x0 = particles(ds.metadata, n, seed)
    end = START + STEPS * DT
    times = example.step_times(START, end, DT)
    assert len(times) == STEPS + 1
    repeats = 1 if n >= 1_000_000 else 3
    rows = []

    def run_track():
        return ds.track(x0, start=START, end=end, dt=DT, method=METHOD)

    in_process = where == "in-process"
    seconds, first, stats = timed(run_track, repeats, (lambda: dict(ds.last_query_stats)) if in_process else None)
    row = {"where": where, "mode": "track", "n": n, "steps": STEPS, "seconds": seconds, "first_timed_seconds": first,
           "particle_steps_per_s": n * STEPS / seconds}
    if in_process:
        row["engine_seconds"] = stats["engine_seconds"]
        row["engine_share"] = stats["engine_seconds"] / seconds
        row["engine_calls"] = stats["queries"]
        row["atoms_read"] = stats["atoms_read"]
    rows.append(row)
    _say(row)

    seconds, first, _ = timed(lambda: example.track_tracers(ds, x0, times, METHOD), repeats)
    rows.append({"where": where, "mode": "client", "n": n, "steps": STEPS, "seconds": seconds,
                 "first_timed_seconds": first, "particle_steps_per_s": n * STEPS / seconds})
    _say(rows[-1])
    if in_process:
        # Same arithmetic: the two must agree to round-off.
        rows[-1]["max_difference_vs_track"] = float(np.abs(example.track_tracers(ds, x0, times[:3], METHOD)
                                                           - run_track()[:3]).max())
        for temporal in ("pchip", "none"):
            seconds, _, stats = timed(lambda: ds.query(FIELD, x0, time=CEILING_TIME, method=METHOD, temporal=temporal,
                                                       dtype=np.float64), repeats, lambda: dict(ds.last_query_stats))
            rows.append({"where": where, "mode": f"engine {temporal}", "n": n, "seconds": seconds,
                         "points_per_s": n / seconds, "atoms_read": stats["atoms_read"]})
            print(f"  {where:<10} engine {temporal:<6} N={n:<8.0e} {n / seconds / 1e6:8.3f} M points/s "
                  f"({seconds:.3f} s, {stats['atoms_read']} atoms)", flush=True)
    return rows


def _say(r: dict) -> None:
    extra = f", engine {r['engine_share']:.0%} of the time" if "engine_share" in r else ""
    print(f"  {r['where']:<10} {r['mode']:<13} N={r['n']:<8.0e} {r['particle_steps_per_s'] / 1e6:8.3f} M "
          f"particle-steps/s ({r['seconds']:.3f} s for {r['steps']} steps{extra})", flush=True)


class Server:
    """``turbdb serve`` in a subprocess on a free port, with a token file lifting the
    anonymous point limit so that 1e6 particles fit in one request."""

    def __init__(self, data: Path, max_points: int):
        self.dir = tempfile.TemporaryDirectory(prefix="turbdb-bench-track-")
        tokens = Path(self.dir.name) / "tokens.toml"
        tokens.write_text(f"[anonymous]\nallowed = true\nmax_points = {max_points}\nrequests_per_minute = 1000000\n"
                          'datasets = ["*"]\n')
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(Path(self.dir.name) / "server.log", "w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "turbdb.cli", "serve", str(data), "--port", str(self.port), "--tokens", str(tokens),
             "--max-inflight-points", str(max_points * (STEPS + 2)), "--log-level", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT)
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise RuntimeError(f"turbdb serve did not start:\n{self.log.read()}")
            time.sleep(0.2)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
        self.dir.cleanup()


def http_available() -> str | None:
    """Why the HTTP runs cannot be done, or None."""
    out = subprocess.run([sys.executable, "-m", "turbdb.cli", "serve", "--help"], capture_output=True, text=True)
    if out.returncode != 0:
        return "turbdb serve is not available in this build"
    if not hasattr(turbdb, "connect") and "connect" not in getattr(turbdb, "__all__", ()):
        return "turbdb.connect is not available"
    return None


def find(rows: list[dict], where: str, mode: str, n: int) -> dict | None:
    return next((r for r in rows if (r["where"], r["mode"], r["n"]) == (where, mode, n)), None)


def ratios(rows: list[dict], ns: list[int]) -> dict:
    out = {}
    for n in ns:
        pairs = {
            f"track / client-side loop, in-process, N={n:.0e}": (("in-process", "track"), ("in-process", "client")),
            f"track / client-side loop, HTTP, N={n:.0e}": (("http", "track"), ("http", "client")),
            f"track in-process / track over HTTP, N={n:.0e}": (("in-process", "track"), ("http", "track")),
            f"client in-process / client over HTTP, N={n:.0e}": (("in-process", "client"), ("http", "client")),
        }
        for label, (a, b) in pairs.items():
            ra, rb = find(rows, *a, n), find(rows, *b, n)
            if ra and rb:
                out[label] = ra["particle_steps_per_s"] / rb["particle_steps_per_s"]
        pchip, none = find(rows, "in-process", "engine pchip", n), find(rows, "in-process", "engine none", n)
        track = find(rows, "in-process", "track", n)
        if pchip and none:
            out[f"engine pchip / nearest-step points/s, N={n:.0e}"] = pchip["points_per_s"] / none["points_per_s"]
        if track:
            out[f"share of track's time spent in the engine, N={n:.0e}"] = track["engine_share"]
            out[f"track in-process / Parcels 4 quoted 0.085 M/s, N={n:.0e}"] = track["particle_steps_per_s"] / PARCELS
    return out


def plot(rows: list[dict], ns: list[int], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {("in-process", "track"): ("C0", "-", "track, in-process"),
              ("in-process", "client"): ("C0", "--", "client-side loop, in-process"),
              ("http", "track"): ("C1", "-", "track, over HTTP"),
              ("http", "client"): ("C1", "--", "client-side loop, over HTTP")}
    for (where, mode), (color, ls, label) in styles.items():
        pts = [(r["n"], r["particle_steps_per_s"]) for r in rows if (r["where"], r["mode"]) == (where, mode)]
        if pts:
            ax.plot(*zip(*sorted(pts)), color=color, linestyle=ls, marker="o", label=label)
    for temporal, ls in (("pchip", ":"), ("none", "-.")):
        engine = [(r["n"], r["points_per_s"] / 2) for r in rows if r["mode"] == f"engine {temporal}"]
        if engine:
            ax.plot(*zip(*sorted(engine)), color="grey", linestyle=ls, marker=".",
                    label=f"engine alone, {temporal} points/s ÷ 2 (2 stages per step)")
    ax.axhline(TARGET, color="C3", lw=0.8, label="target 1 M/s")
    ax.axhline(PARCELS, color="k", lw=0.8, ls="-.", label="Parcels 4 (quoted, trilinear)")
    ax.set(xscale="log", yscale="log", xlabel="particles", ylabel="particle-steps / s", title=title)
    ax.title.set_fontsize(9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/tmp/turbdb-bench-data"),
                        help="scratch database shared with bench/query.py (default /tmp/turbdb-bench-data)")
    parser.add_argument("--quick", action="store_true", help="N ≤ 1e5 only")
    parser.add_argument("--no-http", action="store_true", help="skip the runs over HTTP")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    began = time.perf_counter()
    build = engine_build()
    ensure_data(args.data)
    ns = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    load_start = os.getloadavg()
    print(f"tracking benchmark: {METHOD} + pchip, Heun RK2, {STEPS} steps of {DT} on {NAME} (256³ synthetic) in "
          f"{args.data}, {os.cpu_count()} cores, load average {load_start[0]:.2f}{' (quick)' if args.quick else ''}")
    example = load_example()
    ds = turbdb.open(args.data)[NAME]
    rows = []
    for n in ns:
        rows += measure(ds, example, n, args.seed, "in-process")

    http_reason = "skipped (--no-http)" if args.no_http else http_available()
    if http_reason is None:
        server = Server(args.data, max_points=max(ns))
        try:
            remote = turbdb.connect(server.url)[NAME]
            for n in ns:
                rows += measure(remote, example, n, args.seed, "http")
        finally:
            server.close()
    else:
        print(f"  HTTP runs unavailable: {http_reason}")

    r = ratios(rows, ns)
    print()
    for label, value in r.items():
        print(f"  {label:<62} " + (f"{value:8.0%}" if label.startswith("share") else f"{value:8.2f}×"))
    big = find(rows, "in-process", "track", max(ns))
    met = big["particle_steps_per_s"] >= TARGET
    note = "" if max(ns) == 1_000_000 else f" (quick: measured at N={max(ns):.0e})"
    print(f"\n  target ≥ 1 M particle-steps/s in-process at 1e6: {'met' if met else 'NOT met'} "
          f"({big['particle_steps_per_s'] / 1e6:.3f} M/s{note})")
    load_end = os.getloadavg()
    elapsed = time.perf_counter() - began
    rebuilt = engine_build() != build
    if rebuilt:
        print("  WARNING: the engine was rebuilt during the run: run again")
    print(f"  load average {load_end[0]:.2f} at the end; total {elapsed:.0f} s")

    RESULTS.mkdir(exist_ok=True)
    name = "track_quick" if args.quick else "track"
    report = {
        "benchmark": "track", "quick": args.quick, "dataset": {"name": NAME, "grid": 256, "kind": "synthetic"},
        "method": METHOD, "temporal": "pchip", "integrator": "rk2", "start": START, "dt": DT, "steps": STEPS,
        "seed": args.seed, "machine": machine_info(), "engine_build": build, "engine_rebuilt_during_run": rebuilt,
        "load_average_start": load_start, "load_average_end": load_end, "elapsed_seconds": elapsed,
        "http_available": http_reason is None, "http_unavailable_reason": http_reason,
        "results": rows, "ratios": r,
        "target": {"what": "≥ 1 M particle-steps/s in-process at 1e6 particles", "met": met,
                   "measured": big["particle_steps_per_s"], "note": note},
        "peer": {"Parcels 4 (trilinear)": PARCELS, "source": "quoted in the issue, not measured"},
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    plot(rows, ns, RESULTS / f"{name}.png",
         f"Heun RK2 tracking, {METHOD} + pchip, 256³ synthetic, {os.cpu_count()} cores (load {load_start[0]:.1f})")
    print(f"wrote {RESULTS / (name + '.json')} and {RESULTS / (name + '.png')}")


if __name__ == "__main__":
    main()
