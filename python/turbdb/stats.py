"""Velocity-gradient statistics of a stored time step (Perlman et al. §4.2): the joint PDF of
the invariants R and Q from gradients at random points, and the energy spectrum from a
cutout. Each result can be drawn as a PNG and saved as data."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import diagnostics
from .exceptions import InvalidRequestError
from .arguments import as_points

if TYPE_CHECKING:
    from .dataset import Dataset

__all__ = ["RQPdf", "Spectrum", "rq_pdf", "energy_spectrum", "plot_rq", "plot_spectrum", "random_points"]

#: Plot and histogram window in the normalised variables R/<Q_w>^(3/2), Q/<Q_w>.
R_RANGE = (-3.0, 3.0)
Q_RANGE = (-6.0, 6.0)


@dataclasses.dataclass
class RQPdf:
    """The joint PDF of R = −⅓ tr(A³) and Q = −½ tr(A²) normalised by ⟨Q_w⟩ = ⟨ω²⟩/4.

    ``pdf[i, j]`` is the probability density at ``r_centres[i]``, ``q_centres[j]`` (counts
    over all samples, so mass outside the window is not spread over the inside);
    ``r``, ``q`` are the raw invariants at every sample point."""

    dataset: str
    field: str
    time: float
    method: str
    r: np.ndarray
    q: np.ndarray
    qw_mean: float
    pdf: np.ndarray
    r_edges: np.ndarray
    q_edges: np.ndarray
    fractions: dict[str, float]

    @property
    def r_centres(self) -> np.ndarray:
        return 0.5 * (self.r_edges[1:] + self.r_edges[:-1])

    @property
    def q_centres(self) -> np.ndarray:
        return 0.5 * (self.q_edges[1:] + self.q_edges[:-1])

    @property
    def asymmetry(self) -> float:
        """P(Q<0, R>0) / P(Q<0, R<0): about 1 for a Gaussian field, 1.5–2.5 in turbulence,
        whose PDF is the teardrop along the right Vieillefosse branch."""
        return self.fractions["Q<0,R>0"] / max(self.fractions["Q<0,R<0"], 1e-300)

    def summary(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "field": self.field, "time": self.time, "method": self.method,
                "points": int(self.r.size), "qw_mean": self.qw_mean, "fractions": self.fractions,
                "asymmetry": self.asymmetry, "teardrop": self.asymmetry > diagnostics.MIN_RQ_ASYMMETRY}

    def save(self, stem: str | Path) -> list[Path]:
        """Writes ``stem.png`` (the plot), ``stem.npz`` (PDF, edges, raw R and Q) and
        ``stem.json`` (summary); returns the paths."""
        stem = Path(stem)
        stem.parent.mkdir(parents=True, exist_ok=True)
        npz, summary, png = (stem.with_name(stem.name + ext) for ext in (".npz", ".json", ".png"))
        np.savez_compressed(npz, pdf=self.pdf, r_edges=self.r_edges, q_edges=self.q_edges, r=self.r, q=self.q,
                            qw_mean=self.qw_mean)
        summary.write_text(json.dumps(self.summary(), indent=2) + "\n")
        return [plot_rq(self, png), npz, summary]


def rq_pdf(
    dataset: Dataset,
    *,
    time: float,
    points: int | Any = 100_000,
    method: str = "lag6",
    field: str = "velocity",
    seed: int = 0,
    bins: int = 80,
) -> RQPdf:
    """The R–Q joint PDF from velocity gradients at ``points`` at ``time``.

    ``points``: a count of points uniform in the domain (drawn with ``seed``), or an
    ``(N, 3)`` array. The gradients come from one point query with ``method`` (lag6: the
    derivative of the Lagrange interpolant, as in Perlman et al.; fd4lag4 is JHTDB's other
    usual choice) at the stored time nearest ``time``.
    """
    info = dataset.metadata
    xyz = random_points(info, points, seed) if _is_count(points) else as_points(points)
    if len(xyz) < 2:
        raise InvalidRequestError("the R–Q PDF needs at least 2 points")
    if field in info.fields and info.fields[field].ncomp != 3:
        raise InvalidRequestError(f"the velocity gradient needs a 3-component field; {field!r} has "
                                  f"{info.fields[field].ncomp}")
    grad = dataset.query(field, xyz, time=time, method=method, operator="gradient", dtype=np.float64)
    r, q = diagnostics.rq_invariants(grad)  # grad[:, c, a] = ∂u_c/∂x_a = A_ca
    vorticity = np.stack([grad[:, 2, 1] - grad[:, 1, 2], grad[:, 0, 2] - grad[:, 2, 0], grad[:, 1, 0] - grad[:, 0, 1]], 1)
    qw_mean = float(np.mean(np.sum(vorticity**2, axis=1)) / 4)
    if not qw_mean > 0:
        raise InvalidRequestError(f"the flow has no vorticity at time {time:g}: R and Q cannot be normalised")
    counts, r_edges, q_edges = np.histogram2d(r / qw_mean**1.5, q / qw_mean, bins=bins, range=[R_RANGE, Q_RANGE])
    area = np.diff(r_edges)[:, None] * np.diff(q_edges)[None, :]
    stored = info.times[int(np.argmin(np.abs(info.times - time)))] if len(info.times) else time
    return RQPdf(dataset=dataset.name, field=field, time=float(stored), method=method, r=r, q=q, qw_mean=qw_mean,
                 pdf=counts / (r.size * area), r_edges=r_edges, q_edges=q_edges,
                 fractions=diagnostics.rq_quadrant_fractions(r, q))


def plot_rq(result: RQPdf, path: str | Path) -> Path:
    """Draws log10 of the R–Q PDF with the Vieillefosse line; returns ``path``."""
    from scipy.ndimage import gaussian_filter

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4.5))
    levels = np.arange(-3.0, 0.5, 0.5)
    # A one-bin Gaussian blur for the contours only: sampling noise would fray the outer
    # levels into islands (the saved data are not smoothed).
    smooth = gaussian_filter(result.pdf, 1.0, mode="constant")
    ax.contour(result.r_centres, result.q_centres, np.log10(smooth.T + 1e-6), levels=levels, cmap="viridis")
    rr = np.linspace(*R_RANGE, 200)
    ax.plot(rr, -(27 / 4 * rr**2) ** (1 / 3), "k:", lw=1, label="Vieillefosse line")
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set(xlabel="R / <Q_w>^(3/2)", ylabel="Q / <Q_w>",
           title=f"{result.dataset}: joint PDF of R and Q (log10)\n"
                 f"t = {result.time:.3g}, {result.r.size} points, {result.method}, "
                 f"P(Q<0,R>0)/P(Q<0,R<0) = {result.asymmetry:.2f}")
    ax.title.set_fontsize(9)
    ax.legend(loc="upper right")
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


@dataclasses.dataclass
class Spectrum:
    """The shell-summed energy spectrum E(k) of one stored time step."""

    dataset: str
    field: str
    time: float
    k: np.ndarray
    e: np.ndarray

    def summary(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "field": self.field, "time": self.time,
                "energy": float(np.sum(self.e) * self.k[0]), "k": self.k.tolist(), "E": self.e.tolist()}

    def save(self, stem: str | Path) -> list[Path]:
        """Writes ``stem.png``, ``stem.npz`` (k, E) and ``stem.json``; returns the paths."""
        stem = Path(stem)
        stem.parent.mkdir(parents=True, exist_ok=True)
        npz, summary, png = (stem.with_name(stem.name + ext) for ext in (".npz", ".json", ".png"))
        np.savez_compressed(npz, k=self.k, E=self.e)
        summary.write_text(json.dumps(self.summary(), indent=2) + "\n")
        return [plot_spectrum(self, png), npz, summary]


def energy_spectrum(dataset: Dataset, *, time: float, field: str = "velocity") -> Spectrum:
    """E(k) of ``field`` at the stored time nearest ``time``, from a cutout of the whole
    box (a periodic cube is needed for the Fourier transform)."""
    info = dataset.metadata
    lengths = [n * d for n, d in zip(info.grid, info.spacing)]
    if not all(info.periodic) or not np.allclose(lengths, lengths[0], rtol=1e-9):
        raise InvalidRequestError(f"the energy spectrum needs a periodic box of equal sides; {dataset.name!r} has "
                                  f"sides {', '.join(f'{v:.6g}' for v in lengths)} and periodic {info.periodic}")
    cut = dataset.cutout(field, time=time)
    if cut.shape[-1] != 3:
        raise InvalidRequestError(f"the energy spectrum needs a 3-component field; {field!r} has {cut.shape[-1]}")
    k, e = diagnostics.energy_spectrum(cut.values, box_length=lengths[0])
    return Spectrum(dataset=dataset.name, field=field, time=float(cut.attrs["time"]), k=k, e=e)


def plot_spectrum(spectrum: Spectrum, path: str | Path) -> Path:
    """Draws E(k) on log axes with a k^(-5/3) guide; returns ``path``."""
    plt = _pyplot()
    k, e = spectrum.k, spectrum.e
    # Shells beyond the dealiasing cutoff hold only float32 round-off: not drawn.
    keep = (k > 0) & (e > 1e-10 * e.max(initial=0.0))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.loglog(k[keep], e[keep], label="E(k)")
    if keep.sum() >= 3:
        k_ref = k[keep][1 : max(3, keep.sum() // 3)]
        ax.loglog(k_ref, 1.6 * e[keep][1] * (k_ref / k_ref[0]) ** (-5 / 3), "k--", label="k^(-5/3)")
    ax.set(xlabel="k", ylabel="E(k)", title=f"{spectrum.dataset}: energy spectrum, t = {spectrum.time:.3g}")
    ax.legend()
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def random_points(info: Any, count: int, seed: int = 0) -> np.ndarray:
    """``count`` points uniform in the dataset's domain."""
    count = int(count)
    if count < 0:
        raise InvalidRequestError(f"the number of points must not be negative, not {count}")
    lo = np.array([a for a, _ in info.domain])
    hi = np.array([b for _, b in info.domain])
    return lo + np.random.default_rng(seed).uniform(0.0, 1.0, (count, 3)) * (hi - lo)


def _is_count(points: Any) -> bool:
    return isinstance(points, (int, np.integer)) and not isinstance(points, bool)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

