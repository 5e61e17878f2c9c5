"""``turbdb demo``: what a newcomer sees first. Describes the default dataset, checks its
physics from the stored data, tracks particles forward and back through the stored history,
and draws a vorticity slice, the energy spectrum, the trajectories and the R–Q joint PDF
(from velocity gradients queried at random points)."""

from __future__ import annotations

from pathlib import Path
from time import perf_counter
from typing import Any

import click
import numpy as np
import zarr

from . import diagnostics, stats
from .database import open as open_db
from .exceptions import InvalidRequestError
from .track import step_times

SAMPLED_STEPS = 10
#: Tracking: particles, stored steps spanned (about one large-eddy time on isotropic64),
#: and integration steps per stored step.
PARTICLES = 4096
TRACKED_STEPS = 20
SUBSTEPS = 4
RQ_POINTS = 100_000


def run_demo(db: Path, name: str, out: Path | None = None) -> dict:
    """Runs the demo on dataset ``name`` of ``db``; returns the physics checks."""
    dataset = open_db(db)[name]
    info = dataset.info
    click.echo(info.describe())
    steps = info.steps_present("velocity")
    if not steps:
        raise InvalidRequestError(f"dataset {name!r} has no velocity stored yet")
    if len(set(info.grid)) != 1 or not all(info.periodic):
        raise InvalidRequestError("the demo's spectral diagnostics need a periodic cube")
    box = info.grid[0] * info.spacing[0]

    velocity = zarr.open_array(dataset.path / "velocity", mode="r")
    picked = steps[:: max(1, len(steps) // SAMPLED_STEPS)]
    snapshots = [np.asarray(velocity[t], dtype=np.float64) for t in picked]
    click.echo(f"\nphysics from {len(picked)} stored steps ({picked[0]} … {picked[-1]}):")
    nu, injection = info.provenance.get("dns_nu"), info.provenance.get("dns_epsilon")
    checks: dict = {}
    if nu and injection:
        checks = diagnostics.physics_checks(snapshots, nu=nu, injection=injection, box_length=box)
        click.echo(diagnostics.format_checks(checks))
        click.echo(f"  Re_λ = {diagnostics.taylor_reynolds(snapshots[-1], nu, box):.1f}")
    else:
        skew, flat = diagnostics.derivative_moments(snapshots, box_length=box)
        click.echo(f"  skewness of du/dx {skew:+.3f}, flatness {flat:.3f} (no viscosity recorded: not a DNS)")

    out = out or Path(db) / f"{name}-demo"
    out.mkdir(parents=True, exist_ok=True)
    written = _plots(snapshots[-1], box, out, name, info.times[picked[-1]])
    checks["tracking"], plot = _tracking(dataset, steps, out)
    written.append(plot)
    rq = stats.rq_pdf(dataset, time=info.times[picked[-1]], points=RQ_POINTS, method="lag6")
    checks["rq_points"] = rq.summary()
    click.echo(f"\nR–Q joint PDF from lag6 velocity gradients at {RQ_POINTS} random points, t = {rq.time:.3g}:")
    click.echo(f"  P(Q<0,R>0) = {rq.fractions['Q<0,R>0']:.3f}, P(Q<0,R<0) = {rq.fractions['Q<0,R<0']:.3f}: "
               f"ratio {rq.asymmetry:.2f} ({'the teardrop of turbulence' if rq.asymmetry > diagnostics.MIN_RQ_ASYMMETRY else 'no teardrop'})")
    written.append(rq.save(out / "rq_pdf")[0])
    click.echo(f"\nplots (in {out}):")
    for path in written:
        click.echo(f"  {path}")
    return checks


def _tracking(dataset: Any, steps: list[int], out: Path) -> tuple[dict, Path]:
    """Tracks PARTICLES particles forward over TRACKED_STEPS stored steps and back again
    (Perlman et al. §4.1), prints dispersion and return error, plots trajectories."""
    info = dataset.metadata
    first = steps[0] + 1 if len(steps) > TRACKED_STEPS + 2 else steps[0]
    last = min(steps[-1], first + TRACKED_STEPS)
    start, end = float(info.times[first]), float(info.times[last])
    dt = (info.dt or (end - start)) / SUBSTEPS
    x0 = stats.random_points(info, PARTICLES, seed=1)
    began = perf_counter()
    forward = dataset.track(x0, start=start, end=end, dt=dt, method="lag6")
    backward = dataset.track(forward[-1], start=end, end=start, dt=dt, method="lag6")
    seconds = perf_counter() - began
    n_steps = len(forward) - 1
    displacement = forward - forward[0]
    msd = np.mean(np.sum(displacement**2, axis=-1), axis=1)
    error = np.linalg.norm(backward[-1] - x0, axis=1)
    dx = info.spacing[0]
    result = {"particles": PARTICLES, "start": start, "end": end, "dt": dt, "steps": n_steps,
              "seconds": seconds, "particle_steps_per_s": 2 * n_steps * PARTICLES / seconds,
              "rms_displacement": float(np.sqrt(msd[-1])), "return_error_mean": float(error.mean()),
              "return_error_median": float(np.median(error)), "return_error_p99": float(np.percentile(error, 99)),
              "return_error_max": float(error.max()), "dx": dx}
    click.echo(f"\ntracking {PARTICLES} particles from t = {start:.3g} to {end:.3g} and back "
               f"(lag6 + pchip, RK2, dt = {dt:.3g}, {n_steps} steps each way): {seconds:.1f} s, "
               f"{result['particle_steps_per_s'] / 1e6:.2f} M particle-steps/s")
    click.echo(f"  rms displacement {result['rms_displacement']:.3f} ({result['rms_displacement'] / dx:.1f} grid spacings)")
    click.echo(f"  back at the start within {result['return_error_mean'] / dx:.1e} dx on average (median "
               f"{result['return_error_median'] / dx:.1e} dx, 99% within {result['return_error_p99'] / dx:.1e} dx; "
               f"the worst, {result['return_error_max'] / dx:.2g} dx, shows how chaos amplifies the RK2 error)")
    return result, _trajectory_plot(dataset, forward, msd, x0, step_times(start, end, dt), out)


def _trajectory_plot(dataset: Any, forward: np.ndarray, msd: np.ndarray, x0: np.ndarray, times: np.ndarray,
                     out: Path) -> Path:
    """40 trajectories projected on x-y, and the mean square displacement against time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    info = dataset.metadata
    start, end = times[0], times[-1]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.5))
    (x0_, x1_), (y0_, y1_) = info.domain[0], info.domain[1]
    ax.plot([x0_, x1_, x1_, x0_, x0_], [y0_, y0_, y1_, y1_, y0_], color="grey", lw=0.6, ls="--")
    for i in range(min(40, forward.shape[1])):
        ax.plot(forward[:, i, 0], forward[:, i, 1], lw=0.8)
        ax.plot(*forward[0, i, :2], "k.", ms=3)
    ax.set(xlabel="x", ylabel="y", aspect="equal",
           title=f"{dataset.name}: {min(40, forward.shape[1])} of {forward.shape[1]} trajectories (unwrapped), t = {start:.3g} … {end:.3g}")
    ax.title.set_fontsize(9)
    ax2.loglog(times[1:] - start, msd[1:], label="<|x(t) − x(0)|²>")
    u2 = np.mean(np.sum(dataset.query("velocity", x0, time=start, dtype=np.float64) ** 2, axis=1))
    ax2.loglog(times[1:] - start, u2 * (times[1:] - start) ** 2, "k--", lw=1, label="ballistic <|u|²> t²")
    ax2.set(xlabel="t − t0", ylabel="mean square displacement", title="single-particle dispersion")
    ax2.legend()
    path = out / "trajectories.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _plots(u: np.ndarray, box: float, out: Path, name: str, time: float) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = diagnostics.velocity_gradient(u, box_length=box)
    vorticity = np.stack([a[..., 2, 1] - a[..., 1, 2], a[..., 0, 2] - a[..., 2, 0], a[..., 1, 0] - a[..., 0, 1]], -1)
    paths = []

    fig, ax = plt.subplots(figsize=(5.5, 5))
    image = ax.imshow(np.linalg.norm(vorticity[0], axis=-1), origin="lower", extent=(0, box, 0, box), cmap="magma")
    fig.colorbar(image, ax=ax, label="|ω|")
    ax.set(xlabel="x", ylabel="y", title=f"{name}: vorticity magnitude, z = 0, t = {time:.3g}")
    paths.append(out / "vorticity_slice.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)

    k, e = diagnostics.energy_spectrum(u, box_length=box)
    paths.append(stats.Spectrum(dataset=name, field="velocity", time=float(time), k=k, e=e).save(out / "energy_spectrum")[0])
    return paths
