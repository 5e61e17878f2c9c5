"""``turbdb demo``: what a newcomer sees first. Describes the default dataset, checks its
physics from the stored data, tracks particles forward and back through the stored history,
and draws a vorticity slice, the energy spectrum, the trajectories and the R–Q joint PDF
(from velocity gradients queried at random points)."""

from __future__ import annotations

import math
from pathlib import Path
from time import perf_counter
from typing import Any

import click
import numpy as np
import zarr

from . import diagnostics, plots, stats
from .database import open as open_db
from .exceptions import InvalidRequestError
from .times import format_time
from .track import step_times

SAMPLED_STEPS = 10
#: Tracking: particles, integration steps per stored step, and the stored steps spanned by
#: the return test (forward, then back to the start). Dispersion uses the whole window.
PARTICLES = 4096
SUBSTEPS = 4
RETURN_STEPS = 20
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
    # float32 as stored, read one step at a time: a 256³ step is 200 MB.
    snapshots = (np.asarray(velocity[t]) for t in picked)
    click.echo(f"\nphysics from {len(picked)} stored steps ({picked[0]} … {picked[-1]}):")
    nu, injection = info.provenance.get("dns_nu"), info.provenance.get("dns_epsilon")
    checks: dict = {}
    if nu and injection:
        checks = diagnostics.physics_checks(snapshots, nu=nu, injection=injection, box_length=box)
        click.echo(diagnostics.format_checks(checks))
    else:
        skew, flat = diagnostics.derivative_moments(list(snapshots), box_length=box)
        moments = (f"skewness of du/dx {skew:+.3f}, flatness {flat:.3f}" if math.isfinite(skew) else
                   "no velocity gradients: skewness and flatness are undefined")
        click.echo(f"  {moments} (no viscosity recorded: not a DNS)")

    out = Path(out or Path(db) / f"{name}-demo").expanduser()
    out.mkdir(parents=True, exist_ok=True)
    last = np.asarray(velocity[picked[-1]])
    time = float(info.times[picked[-1]])
    written = [plots.plot_vorticity_slice(diagnostics.vorticity(last, box), box, name, time,
                                          out / "vorticity_slice.png")]
    spectrum = stats.spectrum_of(last, dataset=name, field="velocity", time=time, box_length=box,
                                 provenance=info.provenance)
    del last
    _report_spectrum(spectrum)
    checks["spectrum"] = {key: value for key, value in spectrum.summary().items() if key not in ("k", "E")}
    written.append(spectrum.save(out / "energy_spectrum")[0])
    if len(steps) > 1:
        checks["tracking"], plot = _tracking(dataset, steps, out, spectrum)
        written.append(plot)
    else:
        click.echo("\ntracking: skipped, it needs two stored steps or more")
    try:
        rq = stats.rq_pdf(dataset, time=time, points=RQ_POINTS, method="lag6")
    except InvalidRequestError as e:  # a flow without vorticity has no R–Q PDF
        click.echo(f"\nR–Q joint PDF: skipped, {e}")
    else:
        checks["rq_points"] = rq.summary()
        click.echo(f"\nR–Q joint PDF from lag6 velocity gradients at {RQ_POINTS} random points, t = {format_time(rq.time)}:")
        click.echo(f"  P(Q<0,R>0) = {rq.fractions['Q<0,R>0']:.3f}, P(Q<0,R<0) = {rq.fractions['Q<0,R<0']:.3f}: "
                   f"ratio {rq.asymmetry:.2f} ({'the teardrop of turbulence' if rq.asymmetry > diagnostics.MIN_RQ_ASYMMETRY else 'no teardrop'})")
        written.append(rq.save(out / "rq_pdf")[0])
    click.echo(f"\nplots (in {out}):")
    for path in written:
        click.echo(f"  {path}")
    return checks


def _report_spectrum(spectrum: stats.Spectrum) -> None:
    click.echo(f"\nenergy spectrum at t = {format_time(spectrum.time)}:")
    if spectrum.nu is not None:
        click.echo(f"  Re_λ = {spectrum.re_lambda:.1f}, ε = {spectrum.dissipation:.4g}, η = {spectrum.eta:.4g}, "
                   f"k_max η = {spectrum.k_cutoff * spectrum.eta:.2f}")
    click.echo(f"  {plots.spectrum_statement(spectrum)}")


def _tracking(dataset: Any, steps: list[int], out: Path, spectrum: stats.Spectrum) -> tuple[dict, Path]:
    """Tracks PARTICLES particles forward through the stored window (its interior: pchip
    has centred slopes there) and back over RETURN_STEPS stored steps (Perlman et al.
    §4.1); prints the dispersion, the Lagrangian integral time and the return error, and
    plots trajectories and dispersion."""
    info = dataset.metadata
    first, last = (steps[1], steps[-2]) if len(steps) > 4 else (steps[0], steps[-1])
    start, end = float(info.times[first]), float(info.times[last])
    dt = (info.dt or (end - start)) / SUBSTEPS
    x0 = stats.random_points(info, PARTICLES, seed=1)
    began = perf_counter()
    forward, velocity = dataset.track(x0, start=start, end=end, dt=dt, method="lag6", return_velocity=True)
    times = step_times(start, end, dt)
    back_from = min(RETURN_STEPS * SUBSTEPS, len(times) - 1)
    backward = dataset.track(forward[back_from], start=float(times[back_from]), end=start, dt=dt, method="lag6")
    seconds = perf_counter() - began
    n_steps = len(forward) - 1 + len(backward) - 1
    error = np.linalg.norm(backward[-1] - x0, axis=1)
    dx = info.spacing[0]
    u2 = float(np.mean(np.sum(velocity[0] ** 2, axis=1)))
    rho, lagrangian_time = diagnostics.lagrangian_integral_time(times, velocity)
    msd = float(np.mean(np.sum((forward[-1] - forward[0]) ** 2, axis=-1)))
    result = {"particles": PARTICLES, "start": start, "end": end, "dt": dt, "steps": n_steps,
              "seconds": seconds, "particle_steps_per_s": n_steps * PARTICLES / seconds,
              "rms_displacement": float(np.sqrt(msd)), "lagrangian_integral_time": lagrangian_time,
              "return_from": float(times[back_from]), "return_error_mean": float(error.mean()),
              "return_error_median": float(np.median(error)), "return_error_p99": float(np.percentile(error, 99)),
              "return_error_max": float(error.max()), "dx": dx}
    click.echo(f"\ntracking {PARTICLES} particles from t = {format_time(start)} to {format_time(end)} "
               f"(lag6 + pchip, RK2, dt = {dt:.3g}), and back from t = {format_time(times[back_from])}: "
               f"{seconds:.1f} s, {result['particle_steps_per_s'] / 1e6:.2f} M particle-steps/s")
    t_l = f"{lagrangian_time:.2f}" if lagrangian_time is not None else "not reached within the window"
    click.echo(f"  rms displacement {result['rms_displacement']:.3f} ({result['rms_displacement'] / dx:.1f} grid "
               f"spacings); Lagrangian integral time T_L = {t_l}")
    click.echo(f"  back at the start within {result['return_error_mean'] / dx:.1e} dx on average (median "
               f"{result['return_error_median'] / dx:.1e} dx, 99% within {result['return_error_p99'] / dx:.1e} dx; "
               f"the worst, {result['return_error_max'] / dx:.2g} dx, shows how chaos amplifies the RK2 error)")
    tau_eta = (spectrum.nu / spectrum.dissipation) ** 0.5 if spectrum.nu is not None else None
    plot = plots.plot_dispersion(dataset.name, forward, times, info.domain, u2, lagrangian_time, tau_eta,
                                 out / "trajectories.png")
    return result, plot
