"""Figures of turbdb's statistics, drawn as a turbulence scientist reads them: the energy
spectrum in Kolmogorov units and compensated form over the resolved shells only, the R–Q
joint PDF with a colorbar, a vorticity slice, and single-particle dispersion against its
ballistic and diffusive limits. Each function writes one PNG and returns its path."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import diagnostics
from .output_files import replacing
from .times import format_time

if TYPE_CHECKING:
    from .stats import RQPdf, Spectrum

__all__ = ["plot_spectrum", "plot_rq", "plot_vorticity_slice", "plot_dispersion", "KOLMOGOROV_CONSTANT"]

#: C in E(k) = C eps^(2/3) k^(-5/3): about 1.5 in experiments and DNS at high Reynolds number
#: (Sreenivasan 1995; Pope, Turbulent Flows §6.5). Drawn as a reference, not fitted.
KOLMOGOROV_CONSTANT = 1.5
DPI = 120


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | Path) -> Path:
    """Writes ``fig`` to ``path`` once it is drawn whole (an interrupt left a 0-byte PNG)."""
    path = Path(path)
    try:
        with replacing(path) as (temporary,):
            fig.savefig(temporary, dpi=DPI)
    finally:
        _pyplot().close(fig)
    return path


def spectrum_statement(spectrum: Spectrum) -> str:
    """One honest sentence on what the spectrum shows about an inertial range."""
    if spectrum.nu is None:
        return "no viscosity recorded: the Kolmogorov scales, and so any inertial range, are unknown"
    re = spectrum.re_lambda
    plateau = spectrum.plateau
    if plateau is None:
        return (f"Re_λ = {re:.0f}: no inertial range. k^(5/3)E/ε^(2/3) is nowhere flat (±14%) over a factor "
                f"{diagnostics.PLATEAU_MIN_WIDTH:g} in k beyond the forcing; a short k^(−5/3) range needs "
                "Re_λ ≳ 100, a decade of it several hundred")
    lo, hi, level = plateau
    eta = spectrum.eta
    return (f"Re_λ = {re:.0f}: k^(5/3)E/ε^(2/3) = {level:.2f} ± 14% for k = {lo:g}–{hi:g} "
            f"(kη = {lo * eta:.2f}–{hi * eta:.2f}), a factor {hi / lo:.1f} in k: a short inertial range")


def plot_spectrum(spectrum: Spectrum, path: str | Path) -> Path:
    """E(k) over the resolved shells on log axes (with a kη axis on top when the viscosity
    is known) and the compensated spectrum k^(5/3) E(k) / ε^(2/3) against kη, with the
    forced shells shaded, the dealiasing cutoff marked, the plateau (if any) drawn at its
    measured level, and a sentence on what the Reynolds number allows."""
    plt = _pyplot()
    k, e = spectrum.resolved()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")
    ax.loglog(k, e, "o-", ms=2.5, lw=1, label="E(k), resolved shells")
    known = spectrum.nu is not None
    eta = spectrum.eta if known else None
    x = k * eta if known else k
    compensated = spectrum.compensated(k, e)
    ax2.semilogx(x, compensated, "o-", ms=2.5, lw=1, color="C0")
    for a, scale in ((ax, 1.0), (ax2, eta if known else 1.0)):
        if spectrum.k_forcing:
            a.axvspan(k[0] * scale / 1.15, spectrum.k_forcing * scale, color="0.88", lw=0,
                      label="forced shells" if a is ax else None)
        if spectrum.k_cutoff:
            a.axvline(spectrum.k_cutoff * scale, color="0.4", ls=":", lw=1,
                      label=((f"dealiasing cutoff k_max = (n/3)·2π/L = {spectrum.k_cutoff:.3g}"
                              if spectrum.dealiased else f"Nyquist k = (n/2)·2π/L = {spectrum.k_cutoff:.3g}")
                             if a is ax else None))
    plateau = spectrum.plateau if known else None
    if plateau is not None:
        lo, hi, level = plateau
        kk = np.geomspace(lo, hi, 20)
        ax.loglog(kk, level * spectrum.dissipation ** (2 / 3) * kk ** (-5 / 3), "k--", lw=1.2,
                  label=f"{level:.2f} ε^(2/3) k^(−5/3) (measured plateau)")
        ax2.hlines(level, lo * eta, hi * eta, colors="k", linestyles="--", lw=1.2, label="plateau ±14%")
        ax2.axhspan(level / 1.14, level * 1.14, xmin=0, xmax=1, color="C1", alpha=0.12, lw=0)
    if known:
        ax2.axhline(KOLMOGOROV_CONSTANT, color="C3", ls=":", lw=1,
                    label=f"C_K ≈ {KOLMOGOROV_CONSTANT} (high-Re experiments)")
        top = ax.secondary_xaxis("top", functions=(lambda v: v * eta, lambda v: v / eta))
        top.set_xlabel(r"$k\eta$")
        ax2.set(xlabel=r"$k\eta$", ylabel=r"compensated  $k^{5/3}E(k)\,/\,\varepsilon^{2/3}$",
                ylim=(0, max(2.6, 1.1 * float(compensated.max()))))
    else:
        ax2.set(xlabel=r"$k$  [1/length]", ylabel=r"$k^{5/3}E(k)$  (not normalised: $\varepsilon$ unknown)")
    ax.set(xlabel=r"$k$  [1/length]", ylabel=r"$E(k)$  [length$^3$/time$^2$]")
    # As in plot_dispersion: a span of about a decade ran its labels together (3×10⁰4×10⁰).
    for a in (ax, ax2):
        a.xaxis.set_major_formatter(plt.FuncFormatter(_one_two_five))
        a.xaxis.set_minor_formatter(plt.FuncFormatter(_one_two_five))
    ax.legend(fontsize=8, loc="best")  # lower left hid the first shells of a short spectrum
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8, loc="upper right")
    head = f"{spectrum.dataset}: energy spectrum of {spectrum.field} at t = {format_time(spectrum.time)}"
    if known:
        head += (f"   (Re_λ = {spectrum.re_lambda:.0f}, ε = {spectrum.dissipation:.3g}, ν = {spectrum.nu:.3g}, "
                 f"η = {eta:.3g}" + (f", k_max η = {spectrum.k_cutoff * eta:.2f})" if spectrum.k_cutoff else ")"))
    fig.suptitle(head + "\n" + textwrap.fill(spectrum_statement(spectrum), 150), fontsize=9)
    return _save(fig, path)


def plot_rq(result: RQPdf, path: str | Path) -> Path:
    """Filled contours of log10 of the R–Q joint PDF with a colorbar and the Vieillefosse
    line; returns ``path``."""
    from scipy.ndimage import gaussian_filter

    from .stats import Q_RANGE, R_RANGE

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 5.0), layout="constrained")
    levels = np.arange(-3.0, 0.51, 0.5)
    # A one-bin Gaussian blur for the contours only: sampling noise would fray the outer
    # levels into islands (the saved data are not smoothed).
    smooth = gaussian_filter(result.pdf, 1.0, mode="constant")
    with np.errstate(divide="ignore"):
        logpdf = np.log10(smooth.T)
    filled = ax.contourf(result.r_centres, result.q_centres, logpdf, levels=levels, cmap="viridis", extend="max")
    ax.contour(result.r_centres, result.q_centres, logpdf, levels=levels, colors="k", linewidths=0.3)
    fig.colorbar(filled, ax=ax, label="log₁₀ of the PDF of (R/⟨Q_w⟩^(3/2), Q/⟨Q_w⟩)")
    rr = np.linspace(*R_RANGE, 200)
    ax.plot(rr, -(27 / 4 * rr**2) ** (1 / 3), "k:", lw=1, label="Vieillefosse line  27R²/4 + Q³ = 0")
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set(xlabel="R / ⟨Q_w⟩^(3/2)", ylabel="Q / ⟨Q_w⟩", xlim=R_RANGE, ylim=Q_RANGE)
    ax.set_title(f"{result.dataset}: joint PDF of R and Q, t = {format_time(result.time)}\n"
                 f"{result.r.size} points, {result.method} gradients; "
                 f"P(Q<0,R>0) / P(Q<0,R<0) = {result.asymmetry:.2f}", fontsize=9)
    ax.legend(loc="upper right", fontsize=8)
    return _save(fig, path)


def plot_vorticity_slice(omega: np.ndarray, box: float, name: str, time: float, path: str | Path) -> Path:
    """|ω| on the plane z = 0 of a vorticity field (nz, ny, nx, 3), in units of its rms over
    the whole box."""
    plt = _pyplot()
    magnitude = np.linalg.norm(omega[0], axis=-1)
    rms = float(np.sqrt(np.mean(np.sum(omega**2, axis=-1))))
    fig, ax = plt.subplots(figsize=(5.6, 5.0), layout="constrained")
    image = ax.imshow(magnitude / rms if rms > 0 else magnitude, origin="lower", extent=(0, box, 0, box), cmap="magma")
    fig.colorbar(image, ax=ax, label=f"|ω| / ω_rms   (ω_rms = {rms:.3g} per unit time)" if rms > 0 else
                 "|ω| (zero everywhere: the flow has no vorticity)")
    ax.set(xlabel="x", ylabel="y")
    ax.set_title(f"{name}: vorticity magnitude on z = 0\nt = {format_time(time)}", fontsize=10)
    return _save(fig, path)


def _one_two_five(value: float, _: Any) -> str:
    """A log axis label: ``value`` when its leading digit is 1, 2 or 5, else none."""
    return f"{value:g}" if f"{value:e}"[0] in "125" else ""


def plot_dispersion(name: str, paths: np.ndarray, times: np.ndarray, domain: Any, u2: float,
                    lagrangian_time: float | None, tau_eta: float | None, path: str | Path) -> Path:
    """Left: 40 trajectories projected on x–y (unwrapped). Right: the mean square
    displacement ⟨|x(t) − x(0)|²⟩ against t − t0 with Taylor's two limits, ballistic
    ⟨|u|²⟩ t² for t ≪ T_L and diffusive 2 ⟨|u|²⟩ T_L t for t ≫ T_L, where T_L is the
    Lagrangian integral time measured from the same particles (``None``: not reached)."""
    plt = _pyplot()
    start = times[0]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.8), layout="constrained")
    (x0_, x1_), (y0_, y1_) = domain[0], domain[1]
    ax.plot([x0_, x1_, x1_, x0_, x0_], [y0_, y0_, y1_, y1_, y0_], color="grey", lw=0.6, ls="--")
    shown = min(40, paths.shape[1])
    for i in range(shown):
        ax.plot(paths[:, i, 0], paths[:, i, 1], lw=0.7)
        ax.plot(*paths[0, i, :2], "k.", ms=3)
    ax.set(xlabel="x", ylabel="y", aspect="equal")
    ax.set_title(f"{shown} of {paths.shape[1]} trajectories (unwrapped, dashed: the box)\n"
                 f"t = {format_time(start)} … {format_time(times[-1])}", fontsize=9)
    lag = times[1:] - start
    msd = np.mean(np.sum((paths[1:] - paths[0]) ** 2, axis=-1), axis=1)
    ax2.loglog(lag, msd, lw=2, label="⟨|x(t) − x(t0)|²⟩")
    ax2.loglog(lag, u2 * lag**2, "k--", lw=1, label="ballistic ⟨|u|²⟩ t²")
    if lagrangian_time is not None:
        ax2.loglog(lag, 2 * u2 * lagrangian_time * lag, "k:", lw=1.2, label="diffusive 2⟨|u|²⟩ T_L t")
        ax2.axvline(lagrangian_time, color="C2", lw=0.8, ls="-.", label=f"T_L = {lagrangian_time:.2f} (measured)")
    if tau_eta is not None and lag[0] <= tau_eta <= lag[-1]:
        ax2.axvline(tau_eta, color="C3", lw=0.8, ls="-.", label=f"τ_η = {tau_eta:.2f}")
    ax2.set_ylim(0.5 * msd[0], 2 * msd[-1])
    ax2.set(xlabel="t − t0", ylabel="mean square displacement  [length²]")
    # Plain numbers at 1, 2 and 5 of each decade: a span of about a decade got a scientific
    # label at every minor tick (3×10⁻¹4×10⁻¹ …), running together.
    ax2.xaxis.set_major_formatter(plt.FuncFormatter(_one_two_five))
    ax2.xaxis.set_minor_formatter(plt.FuncFormatter(_one_two_five))
    span = lag[-1] / lagrangian_time if lagrangian_time else None
    note = (f"span {span:.0f} T_L: ballistic, then approaching the diffusive limit" if span and span >= 5 else
            "span shorter than a few T_L: the diffusive limit is not reached" if span else
            "the velocity stays correlated over the whole span:\nT_L not reached, no diffusive limit")
    ax2.set_title(f"single-particle dispersion\n{note}", fontsize=9)
    ax2.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{name}: particle tracking", fontsize=10)
    return _save(fig, path)
