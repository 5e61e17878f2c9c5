"""The pseudo-spectral Navier–Stokes solver on one grid: spectral state, transforms,
right-hand side, time step and diagnostics. ``dns.py`` drives it (spin-up ladder, stored
window); this file knows nothing of datasets.

Numerics:

* Velocity held as real-to-complex Fourier coefficients (scipy.fft, norm="forward", so a
  coefficient is the same number on any grid, which makes spectral refinement a copy).
* Nonlinear term in rotational form u x omega, computed on the grid and projected onto
  divergence-free fields; dealiased by a sharp spherical cutoff |k| < n/3 (the 2/3 rule
  applied isotropically, so k_max = n/3 and every product's aliases fall outside it).
* Viscosity by the exact integrating factor exp(-nu k^2 dt); time stepping by classical
  RK4 or Heun's RK2 on the remaining terms, with a fixed dt, so stored times are uniform.
* Constant-power forcing f_hat = eps_in / (2 E_f) u_hat on 0 < |k| <= k_f, where E_f is
  the energy in those modes: it injects exactly eps_in at every stage.
* Pressure: the static pressure over density, p = P - |u|^2/2, where P solves
  lap P = div(u x omega); |u|^2/2 is dealiased at the same cutoff, which makes p the
  solution of lap p = -d_i d_j (u_i u_j) truncated at k_max. Zero mean.
* Precision: float32 or float64 for the state and the transforms; energy, dissipation and
  moments are always summed in float64.
"""

from __future__ import annotations

import math
import os

import numpy as np
import scipy.fft as sfft

from turbdb import diagnostics
from turbdb.simulate.synthetic import model_spectrum

__all__ = ["SpectralSolver"]

_DTYPES = {"float32": (np.float32, np.complex64), "float64": (np.float64, np.complex128)}


class SpectralSolver:
    """State and precomputed operators of forced isotropic turbulence on an n³ grid.

    Only the modes inside the cube |k_i| <= m (m the largest integer below n/3) can be
    non-zero, so the spectral state ``uh`` is held compactly as (3, 2m+1, 2m+1, m+1)
    (a third of the rfft half-spectrum): every spectral operation runs on that, and the
    transforms are pruned to it (only the 1-D passes that touch kept modes are done).

    ``uh`` is a random field with the stationary energy and dissipation (see
    ``initial_field``) unless ``uh`` is given: then it must be a compact state of a grid
    no finer than this one (spectral refinement embeds it unchanged).
    """

    def __init__(self, n: int, *, nu: float, dt: float, epsilon: float, kf: float, scheme: str,
                 precision: str, seed: int = 0, uh: np.ndarray | None = None) -> None:
        self.n, self.nu, self.dt, self.epsilon, self.kf, self.scheme = n, nu, dt, epsilon, kf, scheme
        self.precision = precision
        real, cplx = _DTYPES[precision]
        self.real, self.cplx = real, cplx
        self.shape = (n, n, n)
        self.k_max = n / 3.0
        self.workers = os.cpu_count() or 1
        m = math.ceil(self.k_max) - 1
        self.m = m
        # Compact axis order: wavenumbers 0..m, then -m..-1, as in the full fft layout.
        self._pairs = ((slice(0, m + 1), slice(0, m + 1)), (slice(m + 1, 2 * m + 1), slice(n - m, n)))
        k = np.concatenate([np.arange(0, m + 1), np.arange(-m, 0)]).astype(np.float64)
        kz, ky, kx = k[:, None, None], k[None, :, None], np.arange(0, m + 1, dtype=np.float64)[None, None, :]
        k2 = kx**2 + ky**2 + kz**2
        self.kx, self.ky, self.kz = (a.astype(real) for a in (kx, ky, kz))
        self.k2 = k2
        mask = (k2 < self.k_max**2).astype(np.float64)
        mask[0, 0, 0] = 0.0  # no mean flow
        self.mask = mask.astype(real)
        # Projection divides by k^2; folding the dealiasing mask in saves a pass per stage.
        self.inv_k2_masked = (mask / np.where(k2 > 0, k2, 1.0)).astype(real)
        # Parseval multiplicity of each stored mode (the rfft half keeps kx >= 0 only).
        w = np.full(kx.shape, 2.0)
        w[..., 0] = 1.0
        self.weights = w
        self.visc_full = np.exp(-nu * k2 * dt).astype(real)
        self.visc_half = np.exp(-nu * k2 * dt / 2).astype(real)
        self.visc_half2 = (2.0 * np.exp(-nu * k2 * dt / 2)).astype(real)
        self.forced = np.nonzero((k2 > 0) & (k2 <= kf**2))
        self.forced_weights = np.broadcast_to(w, k2.shape)[self.forced]
        shell = np.rint(np.sqrt(k2)).astype(np.intp)
        self.shell = shell.ravel()
        self.n_shells = int(shell.max()) + 1
        self.weighted_k2 = w * k2
        # Scratch reused every stage. The padded spectra of the pruned inverse transform are
        # written only inside the compact box, so they stay zero outside it.
        self._spec6 = np.empty((6, *k2.shape), dtype=cplx)
        self._pad_z = np.zeros((6, n, 2 * m + 1, m + 1), dtype=cplx)
        self._pad_y = np.zeros((6, n, n, m + 1), dtype=cplx)
        self._pad_x = np.zeros((6, n, n, n // 2 + 1), dtype=cplx)
        self._cross = np.empty((3, *self.shape), dtype=real)
        self._tmp = np.empty(self.shape, dtype=real)
        self.uh = self.initial_field(seed) if uh is None else self._embed(uh)

    # -- initial condition and refinement ---------------------------------------------

    def initial_field(self, seed: int) -> np.ndarray:
        """Gaussian, solenoidal, zero-mean field near the stationary state's energy budget.

        Shell energies follow ``model_spectrum`` peaking at the box scale (where the
        constant-power forcing piles the energy up), with total energy the Kolmogorov
        estimate E0 = integral_1^inf 1.5 eps^(2/3) k^(-5/3) dk = 2.25 eps^(2/3), and a
        dissipation cutoff placed so that the initial dissipation is exactly eps_in. The
        spin-up then only has to build the cascade's phase correlations.
        """
        rng = np.random.default_rng(seed)
        uh = self._fft(rng.standard_normal((3, *self.shape)).astype(self.real))
        self._project(uh)
        have = self._shell_energy(uh)
        ok = have > 0
        # Mean k^2 of each shell's modes, weighted by their energy.
        e_modes = 0.5 * self.weights * np.sum(np.abs(uh.astype(np.complex128)) ** 2, axis=0)
        k2_shell = np.bincount(self.shell, weights=(self.k2 * e_modes).ravel(), minlength=self.n_shells)
        k2_shell = np.divide(k2_shell, have, out=np.zeros_like(have), where=ok)
        kshell = np.arange(self.n_shells, dtype=np.float64)
        energy0 = 2.25 * self.epsilon ** (2.0 / 3.0)

        def shells(k_d: float) -> np.ndarray:
            e = np.where(ok, model_spectrum(kshell, k_peak=1.0, k_dissipation=k_d), 0.0)
            return e * (energy0 / e.sum())

        lo, hi = 1.0, 10.0 * self.k_max
        for _ in range(60):  # bisection on log k_d: dissipation grows with k_d
            mid = math.sqrt(lo * hi)
            if 2.0 * self.nu * float(np.sum(shells(mid) * k2_shell)) > self.epsilon:
                hi = mid
            else:
                lo = mid
        scale = np.sqrt(np.divide(shells(lo), have, out=np.zeros_like(have), where=ok))
        uh *= scale[self.shell].reshape(self.k2.shape).astype(self.real)
        return uh

    def _embed(self, coarse: np.ndarray) -> np.ndarray:
        """A coarser grid's compact state placed in this grid's compact box: the same
        Fourier coefficients (norm="forward"), zero at the new wavenumbers."""
        mc = (coarse.shape[-1]) - 1
        if coarse.shape != (3, 2 * mc + 1, 2 * mc + 1, mc + 1) or mc > self.m:
            raise ValueError(f"cannot refine a state of shape {coarse.shape} onto {self.n}^3")
        index = np.concatenate([np.arange(0, mc + 1), np.arange(2 * self.m + 1 - mc, 2 * self.m + 1)])
        uh = np.zeros((3, *self.k2.shape), dtype=self.cplx)
        uh[:, index[:, None], index[None, :], : mc + 1] = coarse
        # Modes of the coarse cube outside this grid's sphere cannot exist: the coarse
        # sphere |k| < n_c/3 lies inside it.
        return uh

    # -- transforms and operators ------------------------------------------------------

    def _fft(self, x: np.ndarray) -> np.ndarray:
        """Compact spectrum of grid values (c, n, n, n), pruned like ``_ifft``: the y pass
        runs only on the kept kx columns and the z pass only on the kept (ky, kx) ones."""
        w, m1 = self.workers, self.m + 1
        (_, flo), (_, fhi) = self._pairs
        a = sfft.rfft(x, axis=3, norm="forward", workers=w)[..., :m1]
        b = sfft.fft(a, axis=2, norm="forward", workers=w, overwrite_x=True)
        box_y = np.concatenate([b[:, :, flo], b[:, :, fhi]], axis=2)
        c = sfft.fft(box_y, axis=1, norm="forward", workers=w, overwrite_x=True)
        return np.concatenate([c[:, flo], c[:, fhi]], axis=1)

    def _ifft(self, compact: np.ndarray) -> np.ndarray:
        """Grid values of a compact spectrum (c, ...) with c <= 6 components.

        A pruned transform, one axis at a time: the z pass runs only on the box's (ky, kx)
        columns and the y pass only on its kx columns.
        """
        c = compact.shape[0]
        (lo, _), (hi, fhi) = self._pairs
        m1, w = self.m + 1, self.workers
        pz, py, px = self._pad_z[:c], self._pad_y[:c], self._pad_x[:c]
        pz[:, lo] = compact[:, lo]
        pz[:, fhi] = compact[:, hi]
        a = sfft.ifft(pz, axis=1, norm="forward", workers=w)
        py[:, :, lo] = a[:, :, lo]
        py[:, :, fhi] = a[:, :, hi]
        px[..., :m1] = sfft.ifft(py, axis=2, norm="forward", workers=w)
        return sfft.irfft(px, n=self.n, axis=3, norm="forward", workers=w)

    def _project(self, vh: np.ndarray) -> None:
        """In place: remove the longitudinal part and everything outside the cutoff."""
        kdot = (self.kx * vh[0] + self.ky * vh[1] + self.kz * vh[2]) * self.inv_k2_masked
        for c, kc in enumerate((self.kx, self.ky, self.kz)):
            vh[c] *= self.mask
            vh[c] -= kc * kdot

    def _u_and_vorticity(self, uh: np.ndarray) -> np.ndarray:
        """Grid values (6, n, n, n) of u and omega = curl u."""
        s = self._spec6
        s[:3] = uh
        w = s[3:]
        kx, ky, kz = self.kx, self.ky, self.kz
        np.multiply(ky, uh[2], out=w[0])
        w[0] -= kz * uh[1]
        np.multiply(kz, uh[0], out=w[1])
        w[1] -= kx * uh[2]
        np.multiply(kx, uh[1], out=w[2])
        w[2] -= ky * uh[0]
        w *= 1j
        return self._ifft(s)

    def _cross_hat(self, phys: np.ndarray) -> np.ndarray:
        """Unprojected, unmasked spectrum of u x omega from the grid values of u and omega."""
        u, w = phys[:3], phys[3:]
        out, tmp = self._cross, self._tmp
        for c, (a, b) in enumerate(((1, 2), (2, 0), (0, 1))):
            np.multiply(u[a], w[b], out=out[c])
            np.multiply(u[b], w[a], out=tmp)
            out[c] -= tmp
        return self._fft(out)

    def _rhs(self, uh: np.ndarray) -> np.ndarray:
        """Nonlinear term plus forcing: P[u x omega] + eps_in / (2 E_f) u on forced modes."""
        nh = self._cross_hat(self._u_and_vorticity(uh))
        self._project(nh)
        iz, iy, ix = self.forced
        uf = uh[:, iz, iy, ix]
        e_f = 0.5 * float(np.sum(self.forced_weights * np.abs(uf.astype(np.complex128)) ** 2))
        if e_f > 0:
            nh[:, iz, iy, ix] += (self.epsilon / (2.0 * e_f)) * uf
        return nh

    # -- time stepping -------------------------------------------------------------------

    def step(self) -> None:
        # A run that blows up overflows here; the caller checks energy() after the step.
        with np.errstate(over="ignore", invalid="ignore"):
            self._step()

    def _step(self) -> None:
        dt = self.dt
        u = self.uh
        ef, eh = self.visc_full, self.visc_half
        if self.scheme == "rk2":
            k1 = self._rhs(u)
            k2 = self._rhs(ef * (u + dt * k1))
            u += (0.5 * dt) * k1
            u *= ef
            u += (0.5 * dt) * k2
            return
        a = self._rhs(u)
        b = self._rhs(eh * (u + (0.5 * dt) * a))
        c = self._rhs(eh * u + (0.5 * dt) * b)
        d = self._rhs(ef * u + dt * (eh * c))
        b += c
        b *= self.visc_half2
        b += ef * a
        b += d
        u *= ef
        u += (dt / 6.0) * b

    # -- diagnostics of the spectral state ------------------------------------------------

    def _mode_energy(self, uh: np.ndarray) -> np.ndarray:
        """|u_hat|^2 / 2 per stored mode, Parseval-weighted, in float64."""
        total = np.zeros(self.k2.shape)
        for c in range(3):
            total += uh[c].real.astype(np.float64) ** 2
            total += uh[c].imag.astype(np.float64) ** 2
        return 0.5 * self.weights * total

    def _shell_energy(self, uh: np.ndarray) -> np.ndarray:
        return np.bincount(self.shell, weights=self._mode_energy(uh).ravel(), minlength=self.n_shells)

    def energy(self) -> float:
        return float(np.sum(self._mode_energy(self.uh)))

    def dissipation(self) -> float:
        return 2.0 * self.nu * float(np.sum(self.k2 * self._mode_energy(self.uh)))

    def spectrum(self) -> tuple[np.ndarray, np.ndarray]:
        """Shell spectrum (k, E(k)) for k = 1 .. the largest shell, as diagnostics computes it."""
        e = self._shell_energy(self.uh)
        return np.arange(1, self.n_shells, dtype=np.float64), e[1:]

    def velocity(self) -> np.ndarray:
        """Grid velocity (3, n, n, n) in the solver's precision."""
        return self._ifft(self.uh)

    def fields(self) -> tuple[np.ndarray, np.ndarray]:
        """Velocity (3, n, n, n) and static pressure p = P - |u|^2/2 (n, n, n) on the grid,
        from one inverse transform of u and omega."""
        phys = self._u_and_vorticity(self.uh)
        nh = self._cross_hat(phys)
        kin = 0.5 * (phys[0] ** 2 + phys[1] ** 2 + phys[2] ** 2)
        kin_h = self._fft(kin[None])[0]
        div = self.kx * nh[0] + self.ky * nh[1] + self.kz * nh[2]
        p_h = (-1j * div) * self.inv_k2_masked - kin_h * self.mask
        return phys[:3], self._ifft(p_h[None])[0]

    def derivative_moments(self) -> tuple[float, float]:
        """Skewness and flatness of du/dx, dv/dy, dw/dz pooled (spectral derivatives)."""
        d = np.empty_like(self.uh)
        np.multiply(1j * self.kx, self.uh[0], out=d[0])
        np.multiply(1j * self.ky, self.uh[1], out=d[1])
        np.multiply(1j * self.kz, self.uh[2], out=d[2])
        a = self._ifft(d)
        m = np.zeros(3)
        for c in range(3):
            x = a[c].astype(np.float64)
            x2 = x * x
            m += [x2.mean(), (x2 * x).mean(), (x2 * x2).mean()]
        m2, m3, m4 = m / 3
        if m2 <= 0:
            return 0.0, 0.0
        return float(m3 / m2**1.5), float(m4 / m2**2)

    def stats(self, u: np.ndarray) -> dict[str, float]:
        """Live diagnostics of the current state; ``u`` is its grid velocity (3, n, n, n)."""
        energy = self.energy()
        eps = self.dissipation()
        scales = diagnostics.turbulence_scales(energy, eps, self.nu)
        k, shell_e = self.spectrum()
        length = diagnostics.integral_scale(k, shell_e)
        skew, flat = self.derivative_moments()
        dx = 2 * np.pi / self.n
        speed = np.abs(u[0]) + np.abs(u[1]) + np.abs(u[2])
        cfl = self.dt * float(np.max(speed)) / dx
        u_rms = scales["u_rms"]
        return {
            "Re_lambda": scales["re_lambda"],
            "dissipation": eps,
            "injection": self.epsilon,  # exact: constant-power forcing at every stage
            "energy": energy,
            "skewness": skew,
            "flatness": flat,
            "u_rms": u_rms,
            "taylor_microscale": scales["taylor_microscale"],
            "eta": scales["eta"],
            "tau_eta": scales["tau_eta"],
            "kmax_eta": self.k_max * scales["eta"],
            "integral_scale": length,
            "large_eddy_time": length / u_rms if u_rms > 0 else float("nan"),
            "cfl": cfl,  # dt max(|u|+|v|+|w|) / dx
        }
