"""Synthetic random-phase turbulence: fields with a Kolmogorov spectrum, fast at any grid
size and smooth in time, for performance work. Gaussian by construction, so it fails the
physics checks (no skewness, no intermittency, no R-Q teardrop) on purpose.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np
import scipy.fft as sfft

from turbdb.exceptions import InvalidRequestError
from turbdb.simulate.snapshot import Snapshot
from turbdb.times import time_grid

__all__ = ["model_spectrum", "synthetic_snapshots"]

_WORKERS = os.cpu_count() or 1

def model_spectrum(k: np.ndarray, *, k_peak: float, k_dissipation: float) -> np.ndarray:
    """Unnormalised model spectrum k^(-5/3) exp(-(k_peak/k)^2) exp(-(k/k_dissipation)^4).

    A Kolmogorov inertial range between a sharp large-scale roll-off (the spectrum peaks
    near 1.1 k_peak) and a dissipation-range cutoff; zero at k = 0. Both roll-offs are
    steep so that a visible -5/3 range survives on small grids.
    """
    k = np.asarray(k, dtype=np.float64)
    safe = np.where(k > 0, k, 1.0)
    e = safe ** (-5.0 / 3.0) * np.exp(-((k_peak / safe) ** 2) - (safe / k_dissipation) ** 4)
    return np.where(k > 0, e, 0.0)


def _half_wavenumbers(n: int, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer (kz, ky, kx) broadcastable over an rfftn half-spectrum of an n^3 grid."""
    kz = np.fft.fftfreq(n, 1.0 / n).astype(dtype)[:, None, None]
    ky = np.fft.fftfreq(n, 1.0 / n).astype(dtype)[None, :, None]
    kx = np.fft.rfftfreq(n, 1.0 / n).astype(dtype)[None, None, :]
    return kz, ky, kx


def synthetic_snapshots(
    n: int,
    *,
    n_steps: int,
    dt: float = 0.01,
    seed: int = 0,
    box: float = 2 * np.pi,
) -> Iterator[Snapshot]:
    """Yield ``n_steps`` snapshots of a random-phase, divergence-free n^3 velocity field
    (n even), at times i * dt.

    The spectrum is ``model_spectrum`` with its peak near k = 1.6 (in units of 2 pi / box)
    and its dissipation cutoff at the 2/3 cutoff k_c = n/3, above which modes are zero as
    in a dealiased DNS; the field is scaled to u' = 1 per component. Mode k turns
    its phase at the eddy frequency omega(k) = u' k0 (k/k0)^(2/3) (k0 = 2 pi/box), so steps
    ``dt`` apart are strongly correlated at large scales and less so at small ones (the
    energy-weighted correlation is 0.99 at lag 0.05 and 0.4 at lag 0.5). Step i is a pure
    function of (seed, i * dt). Memory: about four float32 copies of one step. The pressure is the Poisson pressure
    -laplacian^-1 d_i d_j (u_i u_j) of the synthetic velocity, dealiased at k_c.
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 8 or n % 2:
        raise InvalidRequestError(f"n must be an even integer >= 8, got {n!r}")
    if not isinstance(n_steps, (int, np.integer)) or isinstance(n_steps, bool) or n_steps < 0:
        raise InvalidRequestError(f"n_steps must be a non-negative integer, got {n_steps!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise InvalidRequestError(f"seed must be a non-negative integer, got {seed!r}")
    for name, value in (("dt", dt), ("box", box)):
        if not (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
                and value > 0 and math.isfinite(value)):
            raise InvalidRequestError(f"{name} must be positive and finite, got {value!r}")
    n = int(n)
    return _generate(n, int(n_steps), float(dt), seed, float(box))


def _generate(n: int, n_steps: int, dt: float, seed: int, box: float) -> Iterator[Snapshot]:
    shape = (n, n, n)
    k0 = 2 * np.pi / box
    kz, ky, kx = _half_wavenumbers(n, np.float32)
    k2 = kx * kx + ky * ky + kz * kz
    kmag = np.sqrt(k2)
    k_cut = n / 3.0
    keep = (k2 > 0) & (k2 < k_cut * k_cut)
    inv_k2 = np.where(keep, 1.0 / np.where(k2 > 0, k2, 1.0), 0.0).astype(np.float32)

    # Random directions and phases from the transform of real white noise, which makes the
    # kx = 0 plane Hermitian for free; the projection keeps it so.
    rng = np.random.default_rng(seed)
    modes = np.empty((3, *kmag.shape), dtype=np.complex64)
    for c in range(3):
        modes[c] = sfft.rfftn(rng.standard_normal(shape, dtype=np.float32), workers=_WORKERS)
    kdot = (kx * modes[0] + ky * modes[1] + kz * modes[2]) * inv_k2
    modes[0] -= kx * kdot
    modes[1] -= ky * kdot
    modes[2] -= kz * kdot
    del kdot
    norm = np.sqrt(np.sum(modes.real**2 + modes.imag**2, axis=0))
    # Random phase, deterministic amplitude: |u_hat|^2 / 2 = E(k) / (4 pi k^2) per mode.
    spectrum = model_spectrum(kmag, k_peak=1.5, k_dissipation=k_cut).astype(np.float32)
    amp = np.where(keep, np.sqrt(2.0 * spectrum / (4 * np.pi * np.where(keep, k2, 1.0))), 0.0)
    weights = np.full(kx.shape, 2.0, dtype=np.float32)
    weights[..., 0] = 1.0
    u_var = float(np.sum(weights * amp**2)) / 3.0  # one component's variance (Parseval)
    modes *= (amp / np.where(norm > 0, norm, 1.0) / math.sqrt(u_var)).astype(np.float32)
    del norm, amp, spectrum

    # Phase speed odd in k so that the kx = 0 plane stays Hermitian as it turns.
    sign = np.where(kx > 0, 1.0, np.where(ky != 0, np.sign(ky), np.sign(kz))).astype(np.float32)
    omega = (sign * k0 * np.cbrt(kmag * kmag)).astype(np.float32)
    del sign, k2, kmag, keep
    kk = (kx, ky, kz)

    for i, t in enumerate(time_grid(0.0, dt, n_steps)):
        theta = omega * np.float32(t)
        phase = np.empty(theta.shape, dtype=np.complex64)
        phase.real = np.cos(theta)
        phase.imag = np.sin(theta)
        del theta
        velocity = np.empty((*shape, 3), dtype=np.float32)
        for c in range(3):
            velocity[..., c] = sfft.irfftn(modes[c] * phase, s=shape, norm="forward", workers=_WORKERS)
        del phase
        p_hat = np.zeros(inv_k2.shape, dtype=np.complex64)
        for a in range(3):
            for b in range(a, 3):
                prod = sfft.rfftn(velocity[..., a] * velocity[..., b], norm="forward", workers=_WORKERS)
                # p_hat = -k_a k_b (u_a u_b)^ / k^2; off-diagonal terms appear twice.
                p_hat -= (kk[a] * kk[b] * (1.0 if a == b else 2.0)) * prod
        p_hat *= inv_k2
        pressure = sfft.irfftn(p_hat, s=shape, norm="forward", workers=_WORKERS).astype(np.float32, copy=False)
        yield Snapshot(time=float(t), step=i, velocity=velocity, pressure=pressure, stats={})
