"""Velocity-gradient statistics of a stored time step (Perlman et al. §4.2): the joint PDF of
the invariants R and Q from gradients at random points, and the energy spectrum from a
cutout. Each result can be drawn as a PNG (``plots.py``) and saved as data."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import diagnostics
from .query import query_points
from .exceptions import InvalidRequestError
from .output_files import replacing
from .size_limit import check_result_bytes
from .times import format_time, nearest_stored_index

if TYPE_CHECKING:
    from .dataset import Dataset

__all__ = ["RQPdf", "Spectrum", "rq_pdf", "energy_spectrum", "random_points"]

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
        ``stem.json`` (summary); returns the paths. Each replaces an earlier one only once
        all three are complete."""
        from .plots import plot_rq

        stem = Path(stem)
        written = [stem.with_name(stem.name + ext) for ext in (".png", ".npz", ".json")]
        with replacing(*written) as (png, npz, summary):
            np.savez_compressed(npz, pdf=self.pdf, r_edges=self.r_edges, q_edges=self.q_edges, r=self.r, q=self.q,
                                qw_mean=self.qw_mean)
            summary.write_text(json.dumps(self.summary(), indent=2) + "\n")
            plot_rq(self, png)
        return written


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
    # float32 points on a bounded wall are put on it, as for a query (query_points)
    xyz = random_points(info, points, seed) if _is_count(points) else query_points(points, info)
    if len(xyz) < 2:
        raise InvalidRequestError("the R–Q PDF needs at least 2 points")
    if field in info.fields and info.fields[field].ncomp != 3:
        raise InvalidRequestError(f"the velocity gradient needs a 3-component field; {field!r} has "
                                  f"{info.fields[field].ncomp}")
    grad = dataset.query(field, xyz, time=time, method=method, operator="gradient", dtype=np.float64)
    r, q = diagnostics.rq_invariants(grad)  # grad[:, c, a] = ∂u_c/∂x_a = A_ca
    vorticity = np.stack([grad[:, 2, 1] - grad[:, 1, 2], grad[:, 0, 2] - grad[:, 2, 0], grad[:, 1, 0] - grad[:, 0, 1]], 1)
    qw_mean = float(np.mean(np.sum(vorticity**2, axis=1)) / 4)
    # Gradients of a (nearly) uniform field are rounding noise of the float32 values: a PDF of
    # them is no result. Noise is below a millionth of |u| / spacing.
    sample = dataset.query(field, xyz[:1000], time=time, method="lag4", dtype=np.float64)
    noise = 1e-6 * float(np.sqrt(np.mean(np.sum(sample**2, axis=1)))) / min(info.spacing)
    if not qw_mean > noise**2:
        raise InvalidRequestError(f"the flow has no vorticity at time {format_time(time)} (<Q_w> = {qw_mean:.3g}, "
                                  f"below the rounding noise {noise**2:.3g} of its values): R and Q cannot be "
                                  "normalised")
    counts, r_edges, q_edges = np.histogram2d(r / qw_mean**1.5, q / qw_mean, bins=bins, range=[R_RANGE, Q_RANGE])
    area = np.diff(r_edges)[:, None] * np.diff(q_edges)[None, :]
    # The step the engine read (ties and near-ties go to the later one), not a nearest
    # found apart: argmin took the earlier, labelling t = 0.5's gradients t = 0.
    stored = info.times[nearest_stored_index(info.times, time)] if len(info.times) else time
    return RQPdf(dataset=dataset.name, field=field, time=float(stored), method=method, r=r, q=q, qw_mean=qw_mean,
                 pdf=counts / (r.size * area), r_edges=r_edges, q_edges=q_edges,
                 fractions=diagnostics.rq_quadrant_fractions(r, q))


@dataclasses.dataclass
class Spectrum:
    """The shell-summed energy spectrum E(k) of one stored time step: shell m holds the
    modes with m − ½ ≤ |k|/k0 < m + ½ (k0 = 2π/L), m ≥ 1, and sum(E)·k0 is the kinetic
    energy of the fluctuations, ⟨|u − ⟨u⟩|²⟩/2 (the mean flow, k = 0, is no shell).

    ``nu`` (the kinematic viscosity, known for a turbdb DNS) gives the Kolmogorov scale η
    and Re_λ with the dissipation ``epsilon`` = 2ν⟨s_ij s_ij⟩ of the field (when not
    given, 2ν Σ k² E(k) dk over the shells, which takes each mode at its shell's centre);
    ``k_cutoff`` is the largest resolved wavenumber (a DNS's dealiasing cutoff n/3, else
    the Nyquist n/2: shells beyond hold round-off or the corners of the cube);
    ``dealiased`` says which (a DNS's cutoff); ``k_forcing`` the radius of the forced
    shells."""

    dataset: str
    field: str
    time: float
    k: np.ndarray
    e: np.ndarray
    nu: float | None = None
    k_cutoff: float | None = None
    k_forcing: float | None = None
    epsilon: float | None = None
    dealiased: bool = False

    def resolved(self) -> tuple[np.ndarray, np.ndarray]:
        """(k, E) of the resolved shells, those holding a mode inside the cutoff (the last
        is partly filled), above float32 round-off."""
        keep = self.e > 1e-10 * self.e.max(initial=0.0)
        if self.k_cutoff is not None:
            keep &= self.k < self.k_cutoff + 0.5 * self.k[0]
        return self.k[keep], self.e[keep]

    @property
    def energy(self) -> float:
        """The fluctuations' kinetic energy ⟨|u − ⟨u⟩|²⟩/2: a uniform flow has none."""
        return float(np.sum(self.e) * self.k[0])

    @property
    def dissipation(self) -> float | None:
        """ε: ``epsilon`` if given, else 2ν Σ k² E(k) dk; ``None`` when ν is unknown."""
        if self.nu is None:
            return None
        if self.epsilon is not None:
            return self.epsilon
        k, e = self.resolved()
        return float(2 * self.nu * np.sum(k**2 * e) * self.k[0])

    @property
    def eta(self) -> float | None:
        eps = self.dissipation
        return (self.nu**3 / eps) ** 0.25 if eps else None

    @property
    def re_lambda(self) -> float | None:
        eps = self.dissipation
        return diagnostics.turbulence_scales(self.energy, eps, self.nu)["re_lambda"] if eps else None

    def compensated(self, k: np.ndarray | None = None, e: np.ndarray | None = None) -> np.ndarray:
        """k^(5/3) E(k) / ε^(2/3) (just k^(5/3) E(k) when ν, hence ε, is unknown)."""
        if k is None or e is None:
            k, e = self.resolved()
        eps = self.dissipation
        return k ** (5 / 3) * e / (eps ** (2 / 3) if eps else 1.0)

    @property
    def plateau(self) -> tuple[float, float, float] | None:
        """(k_lo, k_hi, level) of the inertial range in the compensated spectrum, beyond
        the forced shells (``diagnostics.compensated_plateau``); ``None`` if there is none."""
        if self.nu is None:
            return None
        k, e = self.resolved()
        return diagnostics.compensated_plateau(k, self.compensated(k, e), k_min=self.k_forcing or 0.0)

    def summary(self) -> dict[str, Any]:
        plateau = self.plateau
        eta = self.eta
        return {"dataset": self.dataset, "field": self.field, "time": self.time, "energy": self.energy,
                "nu": self.nu, "dissipation": self.dissipation, "eta": eta, "re_lambda": self.re_lambda,
                "k_cutoff": self.k_cutoff, "k_forcing": self.k_forcing,
                "kmax_eta": self.k_cutoff * eta if eta and self.k_cutoff else None,
                "plateau": None if plateau is None else {"k_lo": plateau[0], "k_hi": plateau[1], "level": plateau[2]},
                "k": self.k.tolist(), "E": self.e.tolist()}

    def save(self, stem: str | Path) -> list[Path]:
        """Writes ``stem.png``, ``stem.npz`` (k, E) and ``stem.json``; returns the paths.
        Each replaces an earlier one only once all three are complete."""
        from .plots import plot_spectrum

        stem = Path(stem)
        written = [stem.with_name(stem.name + ext) for ext in (".png", ".npz", ".json")]
        with replacing(*written) as (png, npz, summary):
            np.savez_compressed(npz, k=self.k, E=self.e)
            summary.write_text(json.dumps(self.summary(), indent=2) + "\n")
            plot_spectrum(self, png)
        return written


def spectrum_of(u: np.ndarray, *, dataset: str, field: str, time: float, box_length: float,
                provenance: dict[str, Any]) -> Spectrum:
    """The ``Spectrum`` of a periodic cube of velocity (nz, ny, nx, 3); a turbdb DNS's
    provenance gives ν (and so ε, exactly from the field's spectral strain), its dealiasing
    cutoff and its forcing radius."""
    k, e = diagnostics.energy_spectrum(u, box_length=box_length)
    k0 = 2 * np.pi / box_length
    n = u.shape[0]
    dns_n = provenance.get("dns_n")
    nu = float(provenance["dns_nu"]) if provenance.get("dns_nu") else None
    return Spectrum(dataset=dataset, field=field, time=float(time), k=k, e=e, nu=nu,
                    epsilon=diagnostics.dissipation(u, nu, box_length) if nu else None,
                    k_cutoff=(dns_n / 3 if dns_n == n else n / 2) * k0, dealiased=dns_n == n,
                    k_forcing=float(provenance["dns_kf"]) * k0 if "dns_kf" in provenance else None)


def energy_spectrum(dataset: Dataset, *, time: float, field: str = "velocity") -> Spectrum:
    """E(k) of ``field`` at the stored time nearest ``time``, from a cutout of the whole
    box (a periodic cube is needed for the Fourier transform)."""
    info = dataset.metadata
    # A periodic side holds n spacings (node n is node 0 again); a bounded one n − 1.
    lengths = [(n if periodic else n - 1) * d for n, d, periodic in zip(info.grid, info.spacing, info.periodic)]
    if not all(info.periodic) or not np.allclose(lengths, lengths[0], rtol=1e-9) or len(set(info.grid)) != 1:
        raise InvalidRequestError(f"the energy spectrum needs a periodic box of equal sides and grid; {dataset.name!r} has grid "
                                  f"{info.grid}, sides {', '.join(f'{v:.6g}' for v in lengths)} and periodic {info.periodic}")
    cut = dataset.cutout(field, time=time)
    if cut.shape[-1] != 3:
        raise InvalidRequestError(f"the energy spectrum needs a 3-component field; {field!r} has {cut.shape[-1]}")
    return spectrum_of(cut.values, dataset=dataset.name, field=field, time=float(cut.attrs["time"]),
                       box_length=lengths[0], provenance=info.provenance)


def random_points(info: Any, count: int, seed: int = 0) -> np.ndarray:
    """``count`` points uniform in the dataset's domain."""
    count = int(count)
    if count < 0:
        raise InvalidRequestError(f"the number of points must not be negative, not {count}")
    check_result_bytes(count * 3 * 8, f"{count:,} random points", "ask for fewer")  # 10^11 asked for 2 TiB
    if not (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0):
        raise InvalidRequestError(f"the seed must be a whole number from 0, not {seed!r}")
    lo = np.array([a for a, _ in info.domain])
    hi = np.array([b for _, b in info.domain])
    return lo + np.random.default_rng(seed).uniform(0.0, 1.0, (count, 3)) * (hi - lo)


def _is_count(points: Any) -> bool:
    return isinstance(points, (int, np.integer)) and not isinstance(points, bool)
