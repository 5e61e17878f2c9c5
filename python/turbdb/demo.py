"""``turbdb demo``: what a newcomer sees first. Describes the default dataset, checks its
physics from the stored data, and draws a vorticity slice, the energy spectrum and the
R–Q joint PDF."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
import zarr

from . import diagnostics
from .database import open as open_db
from .exceptions import InvalidRequestError

SAMPLED_STEPS = 10


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
    click.echo("\nplots:")
    for path in written:
        click.echo(f"  {path}")
    return checks


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
    keep = (k > 0) & (e > 0)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.loglog(k[keep], e[keep], label="E(k)")
    k_ref = k[keep][1 : max(3, keep.sum() // 3)]
    ax.loglog(k_ref, 1.6 * e[keep][1] * (k_ref / k_ref[0]) ** (-5 / 3), "k--", label="k^(-5/3)")
    ax.set(xlabel="k", ylabel="E(k)", title=f"{name}: energy spectrum, t = {time:.3g}")
    ax.legend()
    paths.append(out / "energy_spectrum.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)

    r, q = diagnostics.rq_invariants(a.reshape(-1, 3, 3))
    qw = np.mean(0.5 * np.sum(vorticity**2, axis=-1)) / 2  # <Q_w> = <ω²>/4
    fig, ax = plt.subplots(figsize=(5, 4.5))
    hist, xe, ye = np.histogram2d(r / qw**1.5, q / qw, bins=80, range=[[-3, 3], [-6, 6]], density=True)
    ax.contour(0.5 * (xe[1:] + xe[:-1]), 0.5 * (ye[1:] + ye[:-1]), np.log10(hist.T + 1e-6),
               levels=np.arange(-3.0, 0.5, 0.5), cmap="viridis")
    rr = np.linspace(-3, 3, 200)
    ax.plot(rr, -(27 / 4 * rr**2) ** (1 / 3), "k:", lw=1, label="Vieillefosse line")
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set(xlabel="R / <Q_w>^(3/2)", ylabel="Q / <Q_w>", title=f"{name}: joint PDF of R and Q (log10)")
    ax.legend(loc="upper right")
    paths.append(out / "rq_pdf.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    return paths
