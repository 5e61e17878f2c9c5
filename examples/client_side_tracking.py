"""Client-side particle tracking, the pattern of Perlman et al. Figure 2: the user's loop asks
the database for the velocity at every particle once per stage (one batch query for all of
them) and advances the particles itself, so it can change the physics, here with inertial
particles. Compared with ``Dataset.track``, which runs the same loop next to the data.

    python examples/client_side_tracking.py data isotropic64 [--particles 10000]
    python examples/client_side_tracking.py http://127.0.0.1:8000 isotropic64   # turbdb serve

Prints the cost of both (particle-steps per second), that the two give the same tracer
trajectories, and how inertial particles (Stokes drag, response time --tau) lag the flow.

Against a server the client loop sends two requests per step; anonymous use is limited to
4096 points per request and 60 requests a minute (the client waits when told to), so set
TURBDB_TOKEN to a token with larger limits (turbdb serve --tokens) for real work.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import turbdb


def open_dataset(source: str, name: str):
    """A local database directory, or the URL of a ``turbdb serve``."""
    db = turbdb.connect(source) if source.startswith(("http://", "https://")) else turbdb.open(source)
    return db[name]


def step_times(start: float, end: float, dt: float) -> np.ndarray:
    """start, start ± dt, …, the last step shortened to land on end (as Dataset.track)."""
    n = int(np.floor(abs(end - start) / dt + 1e-9))
    times = start + np.sign(end - start) * dt * np.arange(n + 1)
    return times if abs(times[-1] - end) < 1e-9 * dt else np.append(times, end)


def track_tracers(ds, x0: np.ndarray, times: np.ndarray, method: str = "lag6") -> np.ndarray:
    """Fluid particles, Heun's RK2 as JHTDB's GetPosition: two batch queries per step."""

    def u(x: np.ndarray, t: float) -> np.ndarray:
        return ds.query("velocity", x, time=t, method=method, temporal="pchip", dtype=np.float64)

    positions = [np.asarray(x0, dtype=np.float64)]
    x = positions[0]
    for t, t_next in zip(times[:-1], times[1:]):
        h = t_next - t
        u0 = u(x, t)
        u1 = u(x + h * u0, t_next)
        x = x + 0.5 * h * (u0 + u1)
        positions.append(x)
    return np.stack(positions)


def track_inertial(ds, x0: np.ndarray, times: np.ndarray, tau: float, method: str = "lag6") -> np.ndarray:
    """Heavy small particles with Stokes drag: dx/dt = v, dv/dt = (u(x, t) − v) / tau,
    released at the local fluid velocity. Heun on (x, v): still two queries per step."""

    def u(x: np.ndarray, t: float) -> np.ndarray:
        return ds.query("velocity", x, time=t, method=method, temporal="pchip", dtype=np.float64)

    x = np.asarray(x0, dtype=np.float64)
    v = u(x, times[0])
    positions = [x]
    for t, t_next in zip(times[:-1], times[1:]):
        h = t_next - t
        a0 = (u(x, t) - v) / tau
        x1, v1 = x + h * v, v + h * a0
        a1 = (u(x1, t_next) - v1) / tau
        x, v = x + 0.5 * h * (v + v1), v + 0.5 * h * (a0 + a1)
        positions.append(x)
    return np.stack(positions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="database directory or http(s):// URL of a turbdb server")
    parser.add_argument("name", help="dataset, e.g. isotropic64")
    parser.add_argument("--particles", type=int, default=10_000)
    parser.add_argument("--start", type=float, default=None, help="default: the second stored time")
    parser.add_argument("--end", type=float, default=None, help="default: 10 stored steps after --start")
    parser.add_argument("--dt", type=float, default=None, help="default: a quarter of the stored time step")
    parser.add_argument("--method", default="lag6")
    parser.add_argument("--tau", type=float, default=0.5, help="response time of the inertial particles")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    ds = open_dataset(args.source, args.name)
    info = ds.info
    stored = info.times
    start = args.start if args.start is not None else float(stored[min(1, len(stored) - 1)])
    end = args.end if args.end is not None else float(stored[min(len(stored) - 1, int(np.searchsorted(stored, start)) + 10)])
    dt = args.dt if args.dt is not None else (info.dt or abs(end - start)) / 4
    lo, hi = np.array(info.domain).T
    x0 = lo + np.random.default_rng(args.seed).uniform(0, 1, (args.particles, 3)) * (hi - lo)
    times = step_times(start, end, dt)
    work = args.particles * (len(times) - 1)
    print(f"{args.particles} particles in {args.name} from t = {start:g} to {end:g}, dt = {dt:g} "
          f"({len(times) - 1} steps), {args.method} + pchip, at {args.source}")

    began = time.perf_counter()
    server_side = ds.track(x0, start=start, end=end, dt=dt, method=args.method)
    t_track = time.perf_counter() - began
    began = time.perf_counter()
    client_side = track_tracers(ds, x0, times, args.method)
    t_client = time.perf_counter() - began
    print(f"  Dataset.track (loop next to the data)   {t_track:7.2f} s  {work / t_track / 1e6:7.3f} M particle-steps/s")
    print(f"  client-side loop (2 queries per step)   {t_client:7.2f} s  {work / t_client / 1e6:7.3f} M particle-steps/s"
          f"  ({t_client / t_track:.2f}× the time)")
    print(f"  largest difference between the two: {np.abs(server_side - client_side).max():.1e} "
          "(the same arithmetic; round-off only)")

    inertial = track_inertial(ds, x0, times, args.tau, args.method)
    lag = np.linalg.norm(inertial[-1] - client_side[-1], axis=1)
    spread = np.sqrt(np.mean(np.sum((client_side[-1] - x0) ** 2, axis=1)))
    spread_inertial = np.sqrt(np.mean(np.sum((inertial[-1] - x0) ** 2, axis=1)))
    print(f"  inertial particles (tau = {args.tau:g}): end {lag.mean():.3f} from the tracers on average; "
          f"rms displacement {spread_inertial:.3f} vs {spread:.3f} for tracers")


if __name__ == "__main__":
    main()
