"""Physics diagnostics of stored velocity fields in a periodic box: gradients, derivative
moments, dissipation, R-Q invariants, spectra and the acceptance checks a DNS must pass.

Velocity arrays are laid out as stored: shape (nz, ny, nx, 3), components (u_x, u_y, u_z),
x fastest in memory. Derivatives are spectral, which is exact for the band-limited fields
the solver writes. Everything is computed in float64 whatever the stored precision.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import scipy.fft as sfft

from turbdb.exceptions import InvalidRequestError

__all__ = [
    "velocity_gradient",
    "derivative_moments",
    "dissipation",
    "rq_invariants",
    "rq_quadrant_fractions",
    "energy_spectrum",
    "compensated_plateau",
    "vorticity",
    "lagrangian_integral_time",
    "poisson_pressure",
    "integral_scale",
    "turbulence_scales",
    "taylor_reynolds",
    "physics_checks",
    "format_checks",
    "SKEWNESS_RANGE",
    "MIN_FLATNESS",
    "DISSIPATION_TOLERANCE",
    "MIN_RQ_ASYMMETRY",
    "PLATEAU_SPREAD",
    "PLATEAU_MIN_WIDTH",
]

#: Acceptance window for the longitudinal derivative skewness (experiments and DNS at
#: moderate Re_lambda give about -0.5).
SKEWNESS_RANGE = (-0.65, -0.3)
#: Longitudinal derivative flatness must exceed this (a Gaussian field gives 3).
MIN_FLATNESS = 3.5
#: |<eps>/eps_in - 1| allowed over a stationary window.
DISSIPATION_TOLERANCE = 0.10
#: P(Q<0, R>0) / P(Q<0, R<0) must exceed this. A Gaussian field is symmetric in R (ratio 1
#: up to sampling noise), turbulence's Vieillefosse tail gives about 1.5-2, so the margin
#: keeps sampling noise of a Gaussian field from passing.
MIN_RQ_ASYMMETRY = 1.2

#: An inertial range in the compensated spectrum k^(5/3) E(k) / eps^(2/3): consecutive shells
#: whose largest and smallest values differ by at most this factor (+-14% about the middle)…
PLATEAU_SPREAD = 1.3
#: …spanning at least this ratio k_hi / k_lo (half a decade). Any smooth spectrum is flat
#: near the maximum of its compensated form over a factor ~2 in k; that is not a range.
PLATEAU_MIN_WIDTH = 3.0

_WORKERS = os.cpu_count() or 1


def _component_first(u: np.ndarray) -> np.ndarray:
    """Validate a (nz, ny, nx, 3) velocity and return a float64 (3, nz, ny, nx) view/copy."""
    u = np.asarray(u)
    if u.ndim != 4 or u.shape[-1] != 3:
        raise InvalidRequestError(f"velocity must have shape (nz, ny, nx, 3), got {u.shape}")
    # Contiguous component planes: transforms over strided data run at half speed.
    return np.ascontiguousarray(np.moveaxis(u, -1, 0), dtype=np.float64)


def _wavenumbers(
    shape: tuple[int, int, int], box_length: float, *, zero_nyquist: bool = True
) -> tuple[np.ndarray, ...]:
    """(kz, ky, kx) broadcastable over an rfftn half-spectrum of a (nz, ny, nx) grid.

    For derivatives the Nyquist wavenumber is set to zero: its derivative is not
    representable as a real field, and zeroing it is what makes the spectral derivative the
    exact derivative of the trigonometric interpolant's real part.
    """
    if not (box_length > 0 and math.isfinite(box_length)):
        raise InvalidRequestError(f"box_length must be positive and finite, got {box_length}")
    scale = 2 * np.pi / box_length

    def axis(n: int, real: bool) -> np.ndarray:
        k = np.fft.rfftfreq(n, 1.0 / n) if real else np.fft.fftfreq(n, 1.0 / n)
        if zero_nyquist and n % 2 == 0:
            k[n // 2] = 0.0
        return k * scale

    nz, ny, nx = shape
    return axis(nz, False)[:, None, None], axis(ny, False)[None, :, None], axis(nx, True)[None, None, :]


def _half_spectrum_weights(nx: int) -> np.ndarray:
    """Multiplicity of each rfft kx column in the full spectrum (Parseval weights)."""
    w = np.full(nx // 2 + 1, 2.0)
    w[0] = 1.0
    if nx % 2 == 0:
        w[-1] = 1.0
    return w[None, None, :]


def _fft(u3: np.ndarray) -> np.ndarray:
    return sfft.rfftn(u3, axes=(-3, -2, -1), norm="forward", workers=_WORKERS)


def _ifft(uh: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    return sfft.irfftn(uh, s=shape, axes=(-3, -2, -1), norm="forward", workers=_WORKERS)


def _gradient_planes(u: np.ndarray, box_length: float) -> np.ndarray:
    """G[i, j] = du_i/dx_j as (3, 3, nz, ny, nx): all nine derivatives in one transform."""
    uc = _component_first(u)
    shape = uc.shape[1:]
    uh = _fft(uc)
    kz, ky, kx = _wavenumbers(shape, box_length)
    ik = 1j * np.stack(np.broadcast_arrays(kx, ky, kz))  # (3, nz, ny, nx//2+1), j = x, y, z
    return _ifft(uh[:, None] * ik[None, :], shape)


def velocity_gradient(u: np.ndarray, box_length: float = 2 * np.pi) -> np.ndarray:
    """A[..., i, j] = du_i/dx_j of a periodic velocity (nz, ny, nx, 3) -> (nz, ny, nx, 3, 3)."""
    return np.ascontiguousarray(np.moveaxis(_gradient_planes(u, box_length), (0, 1), (-2, -1)))


def _longitudinal_raw_moments(u: np.ndarray, box_length: float) -> np.ndarray:
    """<a^2>, <a^3>, <a^4> pooled over a = du/dx, dv/dy, dw/dz of one field."""
    uc = _component_first(u)
    shape = uc.shape[1:]
    uh = _fft(uc)
    kz, ky, kx = _wavenumbers(shape, box_length)
    # x is the last array axis, so du_x/dx uses kx, du_z/dz uses kz.
    uh[0] *= 1j * kx
    uh[1] *= 1j * ky
    uh[2] *= 1j * kz
    a = _ifft(uh, shape)
    a2 = a * a
    return np.array([a2.mean(), (a2 * a).mean(), (a2 * a2).mean()])


def _skewness_flatness(m: np.ndarray) -> tuple[float, float]:
    m2, m3, m4 = m
    if m2 <= 0:  # no gradients at all (a uniform field): the moments' ratios are undefined, not 0
        return math.nan, math.nan
    return float(m3 / m2**1.5), float(m4 / m2**2)


def _as_snapshot_list(velocities: Any) -> list[np.ndarray]:
    """Accept one field (nz, ny, nx, 3), a stack (nt, nz, ny, nx, 3) or an iterable of fields."""
    if isinstance(velocities, np.ndarray):
        if velocities.ndim == 4:
            return [velocities]
        if velocities.ndim == 5:
            return list(velocities)
        raise InvalidRequestError(
            f"velocities must be (nz, ny, nx, 3) or (nt, nz, ny, nx, 3), got {velocities.shape}"
        )
    fields = [np.asarray(v) for v in velocities]
    if not fields:
        raise InvalidRequestError("no velocity fields given")
    return fields


def derivative_moments(
    u: np.ndarray | Iterable[np.ndarray], box_length: float = 2 * np.pi
) -> tuple[float, float]:
    """Skewness and flatness of the longitudinal derivatives du/dx, dv/dy, dw/dz.

    The three components (and, for a stack or list, all snapshots) are pooled into one
    sample before the moments are normalised.
    """
    fields = _as_snapshot_list(u)
    m = np.mean([_longitudinal_raw_moments(f, box_length) for f in fields], axis=0)
    return _skewness_flatness(m)


def dissipation(u: np.ndarray, nu: float, box_length: float = 2 * np.pi) -> float:
    """Mean dissipation 2 nu <s_ij s_ij> of one field, via Parseval on the spectral strain."""
    uc = _component_first(u)
    shape = uc.shape[1:]
    uh = _fft(uc)
    kz, ky, kx = _wavenumbers(shape, box_length)
    k = (kx, ky, kz)
    w = _half_spectrum_weights(shape[2])
    total = 0.0
    for i in range(3):
        for j in range(i, 3):
            # s_ij hat = i/2 (k_j u_i + k_i u_j); off-diagonal pairs appear twice in s_ij s_ij.
            s = 0.5 * (k[j] * uh[i] + k[i] * uh[j])
            total += (1.0 if i == j else 2.0) * float(np.sum(w * (s.real**2 + s.imag**2)))
    return 2.0 * nu * total


def rq_invariants(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R = -tr(A^3)/3 and Q = -tr(A^2)/2 of velocity gradients A of shape (..., 3, 3)."""
    a = np.asarray(a, dtype=np.float64)
    if a.ndim < 2 or a.shape[-2:] != (3, 3):
        raise InvalidRequestError(f"velocity gradients must have shape (..., 3, 3), got {a.shape}")
    return _rq_from_planes(np.ascontiguousarray(np.moveaxis(a, (-2, -1), (0, 1))))


def _rq_from_planes(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R, Q of gradients laid out (3, 3, ...): sums of products of whole component planes,
    which numpy runs far faster than a per-point 3x3 matmul."""
    q = np.zeros(g.shape[2:])
    r = np.zeros(g.shape[2:])
    for i in range(3):
        for k in range(3):
            a2_ik = g[i, 0] * g[0, k] + g[i, 1] * g[1, k] + g[i, 2] * g[2, k]
            r += a2_ik * g[k, i]
            if i == k:
                q += a2_ik
    return r / -3.0, q / -2.0


def rq_quadrant_fractions(r: np.ndarray, q: np.ndarray) -> dict[str, float]:
    """Probability mass in each quadrant of the R-Q plane (zero counts as negative)."""
    r = np.asarray(r).ravel()
    q = np.asarray(q).ravel()
    if r.shape != q.shape or r.size == 0:
        raise InvalidRequestError("R and Q must be non-empty and of the same size")
    counts = _rq_quadrant_counts(r, q)
    return {key: c / r.size for key, c in counts.items()}


def _rq_quadrant_counts(r: np.ndarray, q: np.ndarray) -> dict[str, int]:
    rp = r > 0
    qp = q > 0
    return {
        "Q>0,R>0": int(np.count_nonzero(qp & rp)),
        "Q>0,R<0": int(np.count_nonzero(qp & ~rp)),
        "Q<0,R>0": int(np.count_nonzero(~qp & rp)),
        "Q<0,R<0": int(np.count_nonzero(~qp & ~rp)),
    }


def energy_spectrum(u: np.ndarray, box_length: float = 2 * np.pi) -> tuple[np.ndarray, np.ndarray]:
    """Shell-summed energy spectrum: E(k_m) = sum over m-1/2 <= |k|/k0 < m+1/2 of |u_hat|^2/2 / k0.

    k0 = 2 pi / box_length; shells m = 1, 2, ... up to the grid's corner, so that
    sum(E) * k0 equals the fluctuation kinetic energy <|u - <u>|^2>/2 exactly (shells beyond
    the smallest n/2 are incomplete spheres).
    """
    uc = _component_first(u)
    shape = uc.shape[1:]
    uh = _fft(uc)
    k0 = 2 * np.pi / box_length
    nz, ny, nx = shape
    kz = np.fft.fftfreq(nz, 1.0 / nz)[:, None, None]
    ky = np.fft.fftfreq(ny, 1.0 / ny)[None, :, None]
    kx = np.fft.rfftfreq(nx, 1.0 / nx)[None, None, :]
    shell = np.rint(np.sqrt(kx**2 + ky**2 + kz**2)).astype(np.intp)
    energy = 0.5 * _half_spectrum_weights(nx) * np.sum(uh.real**2 + uh.imag**2, axis=0)
    e = np.bincount(shell.ravel(), weights=np.broadcast_to(energy, shell.shape).ravel())
    m = np.arange(1, e.size)
    return m * k0, e[1:] / k0


def compensated_plateau(
    k: np.ndarray, compensated: np.ndarray, *, k_min: float = 0.0
) -> tuple[float, float, float] | None:
    """The widest run of consecutive shells with k > k_min over which ``compensated``
    (k^(5/3) E(k) / eps^(2/3)) stays within ``PLATEAU_SPREAD``, if it spans at least
    ``PLATEAU_MIN_WIDTH`` in k: ``(k_lo, k_hi, level)`` with the geometric-mean level, else
    ``None``. ``k_min`` excludes the forced shells, where the spectrum is set by the forcing."""
    k = np.asarray(k, dtype=np.float64)
    c = np.asarray(compensated, dtype=np.float64)
    if k.shape != c.shape or k.ndim != 1:
        raise InvalidRequestError("k and the compensated spectrum must be 1-D arrays of the same length")
    keep = (k > k_min) & (c > 0)
    best: tuple[float, float, float] | None = None
    idx = np.flatnonzero(keep)
    for a_pos, a in enumerate(idx):
        lo = hi = c[a]
        for b in idx[a_pos:]:
            if b != a and not keep[b - 1]:
                break  # runs are of consecutive shells
            lo, hi = min(lo, c[b]), max(hi, c[b])
            if hi > PLATEAU_SPREAD * lo:
                break
            width = k[b] / k[a]
            if width >= PLATEAU_MIN_WIDTH and (best is None or width > best[1] / best[0]):
                best = (float(k[a]), float(k[b]), float(np.exp(np.mean(np.log(c[a : b + 1])))))
    return best


def vorticity(u: np.ndarray, box_length: float = 2 * np.pi) -> np.ndarray:
    """omega = curl u of a periodic velocity (nz, ny, nx, 3) -> (nz, ny, nx, 3), spectral."""
    uc = _component_first(u)
    shape = uc.shape[1:]
    uh = _fft(uc)
    kz, ky, kx = _wavenumbers(shape, box_length)
    wh = np.stack([ky * uh[2] - kz * uh[1], kz * uh[0] - kx * uh[2], kx * uh[1] - ky * uh[0]]) * 1j
    return np.ascontiguousarray(np.moveaxis(_ifft(wh, shape), 0, -1))


def lagrangian_integral_time(times: np.ndarray, velocities: np.ndarray) -> tuple[np.ndarray, float | None]:
    """Velocity autocorrelation rho(tau) = <u(t0) . u(t0 + tau)> / <|u(t0)|^2> along particle
    paths ``velocities`` (n_times, n_particles, 3) sampled at ``times``, and the Lagrangian
    integral time T_L = integral of rho up to its first zero crossing (trapezoid rule);
    ``None`` when rho has not fallen to zero within the span (T_L is then unknown)."""
    v = np.asarray(velocities, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if v.ndim != 3 or v.shape[2] != 3 or t.shape != (v.shape[0],) or v.shape[0] < 2:
        raise InvalidRequestError("velocities must be (n_times >= 2, n_particles, 3) and times (n_times,)")
    v = v - v.mean(axis=1, keepdims=True)  # fluctuations about the ensemble mean
    rho = np.einsum("tpc,pc->t", v, v[0]) / np.einsum("pc,pc->", v[0], v[0])
    below = np.flatnonzero(rho <= 0)
    if below.size == 0:
        return rho, None
    z = below[0]
    # Integrate up to the interpolated zero crossing between samples z-1 and z.
    t0 = t[z - 1] + (t[z] - t[z - 1]) * rho[z - 1] / (rho[z - 1] - rho[z])
    tau = np.concatenate([t[:z] - t[0], [t0 - t[0]]])
    r = np.concatenate([rho[:z], [0.0]])
    return rho, float(np.sum(0.5 * (r[1:] + r[:-1]) * np.diff(tau)))


def poisson_pressure(u: np.ndarray, box_length: float = 2 * np.pi) -> np.ndarray:
    """Pressure over density solving lap p = -d_i d_j (u_i u_j), zero mean, float64 (nz, ny, nx).

    Truncated to |k| < n/3 (n the smallest grid size) as the DNS stores it: for a velocity
    band-limited to that sphere the grid products then alias only outside it, so the result
    is exact.
    """
    uc = _component_first(u)
    shape = uc.shape[1:]
    kz, ky, kx = _wavenumbers(shape, box_length, zero_nyquist=False)
    k = (kx, ky, kz)
    k2 = kx * kx + ky * ky + kz * kz
    # The cutoff is in grid wavenumbers, independent of the box length.
    scale = box_length / (2 * np.pi)
    keep = (k2 > 0) & (k2 * scale**2 < (min(shape) / 3.0) ** 2)
    inv_k2 = np.where(keep, 1.0 / np.where(k2 > 0, k2, 1.0), 0.0)
    p_hat = np.zeros(k2.shape, dtype=np.complex128)
    for i in range(3):
        for j in range(i, 3):
            # Off-diagonal products appear twice in the double contraction.
            p_hat -= (1.0 if i == j else 2.0) * k[i] * k[j] * _fft(uc[i] * uc[j])
    return _ifft(p_hat * inv_k2, shape)


def integral_scale(k: np.ndarray, e: np.ndarray) -> float:
    """Longitudinal integral length L = pi / (2 u'^2) * sum E(k)/k dk from a shell spectrum."""
    k = np.asarray(k, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    dk = k[0]
    u2 = 2.0 / 3.0 * np.sum(e) * dk
    return float(np.pi / (2 * u2) * np.sum(e / k) * dk) if u2 > 0 else 0.0


def turbulence_scales(energy: float, dissipation_rate: float, nu: float) -> dict[str, float]:
    """Scales of isotropic turbulence from kinetic energy E = <|u|^2>/2, epsilon and nu.

    u' = sqrt(2E/3) is the rms of one component, lambda = sqrt(15 nu u'^2 / eps) the Taylor
    microscale, Re_lambda = u' lambda / nu, and (eta, tau_eta) the Kolmogorov scales.
    """
    u_rms = math.sqrt(max(2.0 * energy / 3.0, 0.0))
    if dissipation_rate <= 0 or nu <= 0:
        nan = float("nan")
        return {"u_rms": u_rms, "taylor_microscale": nan, "re_lambda": nan, "eta": nan, "tau_eta": nan}
    lam = math.sqrt(15.0 * nu * u_rms**2 / dissipation_rate)
    return {
        "u_rms": u_rms,
        "taylor_microscale": lam,
        "re_lambda": u_rms * lam / nu,
        "eta": (nu**3 / dissipation_rate) ** 0.25,
        "tau_eta": math.sqrt(nu / dissipation_rate),
    }


def taylor_reynolds(u: np.ndarray, nu: float, box_length: float = 2 * np.pi) -> float:
    """Taylor-microscale Reynolds number of one field (mean flow removed)."""
    uc = _component_first(u)
    fluct = uc - uc.mean(axis=(1, 2, 3), keepdims=True)
    energy = 0.5 * float(np.mean(np.sum(fluct * fluct, axis=0)))
    return turbulence_scales(energy, dissipation(u, nu, box_length), nu)["re_lambda"]


def physics_checks(
    velocities: np.ndarray | Iterable[np.ndarray],
    nu: float,
    injection: float,
    box_length: float = 2 * np.pi,
) -> dict[str, Any]:
    """Measure the four acceptance checks of forced isotropic turbulence over snapshots
    (one field, a stack, a list, or any iterable of fields such as a generator).

    Returns the measured values (skewness, flatness pooled over du/dx, dv/dy, dw/dz and all
    snapshots; mean dissipation and its ratio to ``injection``; R-Q quadrant fractions pooled
    over all points) and a boolean per check plus ``passed`` for all four.
    """
    if not (injection > 0 and nu > 0):
        raise InvalidRequestError("nu and injection must be positive")
    # A list or stack is taken as is; any other iterable is consumed one field at a time, so
    # a generator reading stored steps never holds more than one of them.
    fields = _as_snapshot_list(velocities) if isinstance(velocities, (np.ndarray, list, tuple)) else velocities
    count = 0
    moments = np.zeros(3)
    eps = 0.0
    counts = dict.fromkeys(("Q>0,R>0", "Q>0,R<0", "Q<0,R>0", "Q<0,R<0"), 0)
    points = 0
    # One snapshot at a time so a long window never holds more than one gradient field.
    for f in fields:
        count += 1
        g = _gradient_planes(f, box_length)
        diag = np.stack([g[0, 0], g[1, 1], g[2, 2]])
        d2 = diag * diag
        moments += [d2.mean(), (d2 * diag).mean(), (d2 * d2).mean()]
        strain = 0.0
        for i in range(3):
            for j in range(3):
                s_ij = 0.5 * (g[i, j] + g[j, i])
                strain += float(np.mean(s_ij * s_ij))
        eps += 2.0 * nu * strain
        r, q = _rq_from_planes(g)
        for key, c in _rq_quadrant_counts(r.ravel(), q.ravel()).items():
            counts[key] += c
        points += r.size
    if count == 0:
        raise InvalidRequestError("no velocity fields given")
    skew, flat = _skewness_flatness(moments / count)
    eps /= count
    fractions = {key: c / points for key, c in counts.items()}
    asym = fractions["Q<0,R>0"] / max(fractions["Q<0,R<0"], 1e-300)
    result: dict[str, Any] = {
        "skewness": skew,
        "flatness": flat,
        "dissipation": eps,
        "injection": float(injection),
        "dissipation_ratio": eps / injection,
        "rq_fractions": fractions,
        "rq_asymmetry": asym,
        "snapshots": count,
        "skewness_ok": SKEWNESS_RANGE[0] <= skew <= SKEWNESS_RANGE[1],
        "flatness_ok": flat > MIN_FLATNESS,
        "dissipation_ok": abs(eps / injection - 1.0) <= DISSIPATION_TOLERANCE,
        "rq_ok": asym > MIN_RQ_ASYMMETRY,
    }
    result["passed"] = all(result[k] for k in ("skewness_ok", "flatness_ok", "dissipation_ok", "rq_ok"))
    return result


def format_checks(checks: Mapping[str, Any]) -> str:
    """Human-readable lines for a ``physics_checks`` result (for logs and the CLI)."""
    lo, hi = SKEWNESS_RANGE
    fr = checks["rq_fractions"]

    def mark(ok: bool) -> str:
        return "ok  " if ok else "FAIL"

    return "\n".join(
        [
            f"{mark(checks['skewness_ok'])} skewness of du/dx   {checks['skewness']:+.3f}  (in [{lo}, {hi}])",
            f"{mark(checks['flatness_ok'])} flatness of du/dx   {checks['flatness']:.3f}  (> {MIN_FLATNESS})",
            f"{mark(checks['dissipation_ok'])} <eps>/eps_in        {checks['dissipation_ratio']:.3f}"
            f"  (within {DISSIPATION_TOLERANCE:.0%})",
            f"{mark(checks['rq_ok'])} R-Q asymmetry       {checks['rq_asymmetry']:.2f}"
            f"  (P(Q<0,R>0)={fr['Q<0,R>0']:.3f} / P(Q<0,R<0)={fr['Q<0,R<0']:.3f} > {MIN_RQ_ASYMMETRY})",
        ]
    )
