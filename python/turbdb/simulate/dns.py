"""Pseudo-spectral DNS of forced isotropic turbulence in the periodic box [0, 2 pi)^3, the
built-in source of physically faithful data for turbdb.

Numerics (float64 throughout):

* Velocity held as real-to-complex Fourier coefficients (scipy.fft, norm="forward").
* Nonlinear term in rotational form u x omega, computed on the grid and projected onto
  divergence-free fields; dealiased by a sharp spherical cutoff |k| < n/3 (the 2/3 rule
  applied isotropically, so k_max = n/3 and every product's aliases fall outside it).
* Viscosity by the exact integrating factor exp(-nu k^2 dt); time stepping by classical
  RK4 (default) or Heun's RK2 on the remaining terms, with a fixed dt, so stored times are
  exactly uniform. At equal cost per unit time (RK4 at dt = 0.04 vs RK2 at 0.02) RK4 was
  25x more accurate and has the wider stability margin, hence the default.
* Constant-power forcing f_hat = eps_in / (2 E_f) u_hat on 0 < |k| <= k_f, where E_f is
  the energy in those modes: it injects exactly eps_in at every stage.
* Stored pressure: the physical static pressure over density, p = P - |u|^2/2, where P is
  the total pressure solving lap P = div(u x omega) (the forcing is solenoidal and drops
  out); |u|^2/2 is dealiased at the same cutoff, which makes p identical to the solution
  of lap p = -d_i d_j (u_i u_j) truncated at k_max. Zero mean.

The defaults (``DNSConfig``, ``DEFAULT_SAVE_EVERY``) at n = 64 give Re_lambda ~ 41,
k_max eta ~ 1.2, tau_eta = 0.32, a large-eddy time L/u' ~ 2.4 and a stored dt of 0.12
(tau_eta / 2.6). 100 stored steps then span 11.9 time units (~5 L/u'), over which the mean
dissipation stays within a few percent of eps_in; shorter windows are not enough, since
the dissipation swings by +-10-20% over a few L/u'.
"""

from __future__ import annotations

import math
import os
import time as _time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import scipy.fft as sfft

from turbdb import diagnostics
from turbdb.exceptions import InvalidRequestError
from turbdb.simulate.snapshot import Snapshot
from turbdb.simulate.synthetic import model_spectrum

__all__ = ["DNSConfig", "run_dns", "DEFAULT_SAVE_EVERY"]

#: Stored time spacing the default ``save_every`` aims for (tau_eta / 2.6 at the defaults).
_STORED_DT = 0.12
#: Solver steps between stored snapshots for the default n = 64 configuration
#: (``DNSConfig.default_save_every`` gives it for any grid).
DEFAULT_SAVE_EVERY = 3

_SCHEMES = ("rk2", "rk4")


@dataclass(frozen=True)
class DNSConfig:
    """Parameters of a DNS run; invalid values raise ``InvalidRequestError``.

    n: grid points per side of the 2 pi box (even, >= 16).
    nu: kinematic viscosity; by default 0.01 (64/n)^(4/3), which keeps k_max eta ~ 1.2 at
        any n (Re_lambda ~ 41 at n = 64, growing as n^(2/3)).
    epsilon: energy injection rate eps_in (the forcing's constant power per unit mass).
    kf: forcing radius; modes with 0 < |k| <= kf are forced.
    dt: fixed solver time step; by default 0.04 (64/n), a CFL number
        dt max(|u|+|v|+|w|)/dx of about 1.5, inside RK4's stability limit with margin.
    scheme: "rk4" (classical) or "rk2" (Heun), both with the viscous integrating factor.
        RK2 needs about half the RK4 dt.
    seed: seed of the random initial field.
    spinup_time: physical time integrated before the first stored snapshot. The initial
        field already carries the stationary energy and dissipation, so the spin-up only
        has to build the cascade: derivative skewness and flatness settle within ~1 time
        unit; the default 8 (~3 L/u', 25 tau_eta) also forgets the Gaussian large scales.

    ``replace(config, n=...)`` keeps the resolved nu and dt; build a new DNSConfig to get
    the defaults for another grid.
    """

    n: int = 64
    nu: float | None = None
    epsilon: float = 0.1
    kf: float = 2.5
    dt: float | None = None
    scheme: str = "rk4"
    seed: int = 0
    spinup_time: float = 8.0

    def __post_init__(self) -> None:
        if not _is_int(self.n) or self.n < 16 or self.n % 2:
            raise InvalidRequestError(f"n must be an even integer >= 16, got {self.n!r}")
        if self.nu is None:
            object.__setattr__(self, "nu", 0.01 * (64 / self.n) ** (4 / 3))
        if self.dt is None:
            object.__setattr__(self, "dt", 0.04 * 64 / self.n)
        for name in ("nu", "epsilon", "dt"):
            value = getattr(self, name)
            if not _is_real(value) or not value > 0 or not math.isfinite(value):
                raise InvalidRequestError(f"{name} must be positive and finite, got {value!r}")
        if not _is_real(self.kf) or not 1.0 <= self.kf < self.n / 3.0:
            raise InvalidRequestError(f"kf must be in [1, n/3), got {self.kf!r}")
        if self.scheme not in _SCHEMES:
            raise InvalidRequestError(f"scheme must be one of {_SCHEMES}, got {self.scheme!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise InvalidRequestError(f"seed must be a non-negative integer, got {self.seed!r}")
        st = self.spinup_time
        if not _is_real(st) or not st >= 0 or not math.isfinite(st):
            raise InvalidRequestError(f"spinup_time must be >= 0 and finite, got {st!r}")

    @property
    def k_max(self) -> float:
        """Dealiasing cutoff: modes with |k| < n/3 are kept."""
        return self.n / 3.0

    @property
    def default_save_every(self) -> int:
        """Solver steps per stored step giving a stored dt near 0.12 (3 at the defaults).

        With 100 stored steps that spans ~12 time units, long enough for the mean
        dissipation to settle within a few percent of eps_in.
        """
        return max(1, round(_STORED_DT / self.dt))


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


class _Solver:
    """State and precomputed operators of one run.

    Only the modes inside the cube |k_i| <= m (m the largest integer below k_max) can be
    non-zero, so the spectral state ``uh`` is held compactly as (3, 2m+1, 2m+1, m+1)
    (a third of the rfft half-spectrum at n = 64): every spectral operation runs on that,
    and only the transforms see the full (n, n, n//2+1) layout.
    """

    def __init__(self, cfg: DNSConfig) -> None:
        self.cfg = cfg
        n = cfg.n
        self.shape = (n, n, n)
        self.workers = os.cpu_count() or 1
        m = math.ceil(cfg.k_max) - 1
        self.m = m
        # Compact axis order: wavenumbers 0..m, then -m..-1, as in the full fft layout.
        self._pairs = ((slice(0, m + 1), slice(0, m + 1)), (slice(m + 1, 2 * m + 1), slice(n - m, n)))
        k = np.concatenate([np.arange(0, m + 1), np.arange(-m, 0)]).astype(np.float64)
        self.kz = k[:, None, None]
        self.ky = k[None, :, None]
        self.kx = np.arange(0, m + 1, dtype=np.float64)[None, None, :]
        k2 = self.kx**2 + self.ky**2 + self.kz**2
        self.k2 = k2
        self.mask = (k2 < cfg.k_max**2).astype(np.float64)
        self.mask[0, 0, 0] = 0.0  # no mean flow
        # Projection divides by k^2; folding the dealiasing mask in saves a pass per stage.
        self.inv_k2_masked = self.mask / np.where(k2 > 0, k2, 1.0)
        # Parseval multiplicity of each stored mode (the rfft half keeps kx >= 0 only).
        w = np.full(self.kx.shape, 2.0)
        w[..., 0] = 1.0
        self.weights = w
        self.visc_full = np.exp(-cfg.nu * k2 * cfg.dt)
        self.visc_half = np.exp(-cfg.nu * k2 * cfg.dt / 2)
        self.visc_half2 = 2.0 * self.visc_half
        self.forced = np.nonzero((k2 > 0) & (k2 <= cfg.kf**2))
        self.forced_weights = np.broadcast_to(w, k2.shape)[self.forced]
        shell = np.rint(np.sqrt(k2)).astype(np.intp)
        self.shell = shell.ravel()
        self.n_shells = int(shell.max()) + 1
        self.weighted_k2 = w * k2
        # Scratch reused every stage. The padded spectra of the pruned inverse transform are
        # written only inside the compact box, so they stay zero outside it.
        self._spec6 = np.empty((6, *k2.shape), dtype=np.complex128)
        self._pad_z = np.zeros((6, n, 2 * m + 1, m + 1), dtype=np.complex128)
        self._pad_y = np.zeros((6, n, n, m + 1), dtype=np.complex128)
        self._pad_x = np.zeros((6, n, n, n // 2 + 1), dtype=np.complex128)
        self._cross = np.empty((3, *self.shape))
        self._tmp = np.empty(self.shape)
        self.uh = self._initial_field()

    def _gather(self, full: np.ndarray) -> np.ndarray:
        """The compact box of a full rfft half-spectrum (..., n, n, n//2+1)."""
        out = np.empty((*full.shape[:-3], *self.k2.shape), dtype=full.dtype)
        m1 = self.m + 1
        for cz, fz in self._pairs:
            for cy, fy in self._pairs:
                out[..., cz, cy, :] = full[..., fz, fy, :m1]
        return out

    # -- initial condition -------------------------------------------------------------

    def _initial_field(self) -> np.ndarray:
        """Gaussian, solenoidal, zero-mean field near the stationary state's energy budget.

        Shell energies follow ``model_spectrum`` peaking at the box scale (where the
        constant-power forcing piles the energy up), with total energy the Kolmogorov
        estimate E0 = integral_1^inf 1.5 eps^(2/3) k^(-5/3) dk = 2.25 eps^(2/3), and a
        dissipation cutoff placed so that the initial dissipation is exactly eps_in. The
        spin-up then only has to build the cascade's phase correlations.
        """
        cfg = self.cfg
        rng = np.random.default_rng(cfg.seed)
        uh = self._fft(rng.standard_normal((3, *self.shape)))
        self._project(uh)
        have = self._shell_energy(uh)
        ok = have > 0
        # Mean k^2 of each shell's modes, weighted by their energy.
        e_modes = 0.5 * self.weights * np.sum(uh.real**2 + uh.imag**2, axis=0)
        k2_shell = np.bincount(self.shell, weights=(self.k2 * e_modes).ravel(), minlength=self.n_shells)
        k2_shell = np.divide(k2_shell, have, out=np.zeros_like(have), where=ok)
        kshell = np.arange(self.n_shells, dtype=np.float64)
        energy0 = 2.25 * cfg.epsilon ** (2.0 / 3.0)

        def shells(k_d: float) -> np.ndarray:
            e = np.where(ok, model_spectrum(kshell, k_peak=1.0, k_dissipation=k_d), 0.0)
            return e * (energy0 / e.sum())

        lo, hi = 1.0, 10.0 * cfg.k_max
        for _ in range(60):  # bisection on log k_d: dissipation grows with k_d
            mid = math.sqrt(lo * hi)
            if 2.0 * cfg.nu * float(np.sum(shells(mid) * k2_shell)) > cfg.epsilon:
                hi = mid
            else:
                lo = mid
        scale = np.sqrt(np.divide(shells(lo), have, out=np.zeros_like(have), where=ok))
        uh *= scale[self.shell].reshape(self.k2.shape)
        return uh

    # -- transforms and operators ------------------------------------------------------

    def _fft(self, x: np.ndarray) -> np.ndarray:
        """Compact spectrum of grid values (..., n, n, n)."""
        full = sfft.rfftn(x, axes=(-3, -2, -1), norm="forward", workers=self.workers)
        return self._gather(full)

    def _ifft(self, compact: np.ndarray) -> np.ndarray:
        """Grid values of a compact spectrum (c, ...) with c <= 6 components.

        A pruned transform, one axis at a time: the z pass runs only on the box's (ky, kx)
        columns and the y pass only on its kx columns, a quarter less work than a full
        irfftn of the zero-padded spectrum.
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
        return sfft.irfft(px, n=self.cfg.n, axis=3, norm="forward", workers=w)

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
        e_f = 0.5 * float(np.sum(self.forced_weights * (uf.real**2 + uf.imag**2)))
        if e_f > 0:
            nh[:, iz, iy, ix] += (self.cfg.epsilon / (2.0 * e_f)) * uf
        return nh

    # -- time stepping -------------------------------------------------------------------

    def step(self) -> None:
        # A run that blows up overflows here; _check_finite reports it right after the step.
        with np.errstate(over="ignore", invalid="ignore"):
            self._step()

    def _step(self) -> None:
        dt = self.cfg.dt
        u = self.uh
        ef, eh = self.visc_full, self.visc_half
        if self.cfg.scheme == "rk2":
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

    def _shell_energy(self, uh: np.ndarray) -> np.ndarray:
        e = 0.5 * self.weights * np.sum(uh.real**2 + uh.imag**2, axis=0)
        return np.bincount(self.shell, weights=e.ravel(), minlength=self.n_shells)

    def _dissipation(self, uh: np.ndarray) -> float:
        return self.cfg.nu * float(np.sum(self.weighted_k2 * (uh.real**2 + uh.imag**2)))

    def energy(self) -> float:
        uh = self.uh
        return 0.5 * float(np.sum(self.weights * (uh.real**2 + uh.imag**2)))

    def dissipation(self) -> float:
        return self._dissipation(self.uh)

    def velocity(self) -> np.ndarray:
        """Grid velocity (3, n, n, n) float64."""
        return self._ifft(self.uh)

    def pressure(self) -> np.ndarray:
        """Static pressure p = P - |u|^2/2 on the grid (see the module docstring)."""
        phys = self._u_and_vorticity(self.uh)
        nh = self._cross_hat(phys)
        kin = 0.5 * np.sum(phys[:3] ** 2, axis=0)
        kin_h = self._fft(kin)
        div = self.kx * nh[0] + self.ky * nh[1] + self.kz * nh[2]
        p_h = (-1j * div) * self.inv_k2_masked - kin_h * self.mask
        return self._ifft(p_h[None])[0]

    def stats(self, u: np.ndarray) -> dict[str, float]:
        """Live diagnostics of the current state; ``u`` is its grid velocity (3, n, n, n)."""
        cfg = self.cfg
        energy = self.energy()
        eps = self.dissipation()
        scales = diagnostics.turbulence_scales(energy, eps, cfg.nu)
        shell_e = self._shell_energy(self.uh)
        length = diagnostics.integral_scale(np.arange(1, self.n_shells), shell_e[1:])
        skew, flat = diagnostics.derivative_moments(np.moveaxis(u, 0, -1))
        dx = 2 * np.pi / cfg.n
        cfl = cfg.dt * float(np.max(np.abs(u[0]) + np.abs(u[1]) + np.abs(u[2]))) / dx
        u_rms = scales["u_rms"]
        return {
            "Re_lambda": scales["re_lambda"],
            "dissipation": eps,
            "injection": cfg.epsilon,  # exact: constant-power forcing at every stage
            "energy": energy,
            "skewness": skew,
            "flatness": flat,
            "u_rms": u_rms,
            "taylor_microscale": scales["taylor_microscale"],
            "eta": scales["eta"],
            "tau_eta": scales["tau_eta"],
            "kmax_eta": cfg.k_max * scales["eta"],
            "integral_scale": length,
            "large_eddy_time": length / u_rms if u_rms > 0 else float("nan"),
            "cfl": cfl,  # dt max(|u|+|v|+|w|) / dx
        }


def run_dns(
    config: DNSConfig | None = None,
    *,
    n_saved: int,
    save_every: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> Iterator[Snapshot]:
    """Spin up, then yield ``n_saved`` snapshots ``save_every`` solver steps apart
    (default ``config.default_save_every``).

    Snapshot ``i`` has ``step == i`` and ``time == i * (save_every * dt)`` exactly: time is
    measured from the start of the stored window (the spin-up is not stored). Its ``stats``
    hold the live diagnostics of that step (Re_lambda, dissipation, injection, energy,
    skewness and flatness of the longitudinal derivatives, Kolmogorov and large-eddy
    scales, CFL number) plus ``time_absolute`` and ``solver_step`` counted from the start.

    ``progress(done_steps, total_steps, phase)`` is called after every solver step, with
    steps counted over the whole run (spin-up and stored window) and phase "spinup" or
    "run". ``log(line)`` receives a handful of summary lines.
    """
    cfg = DNSConfig() if config is None else config
    if not isinstance(cfg, DNSConfig):
        raise InvalidRequestError(f"config must be a DNSConfig, got {type(cfg).__name__}")
    if not _is_int(n_saved) or n_saved < 0:
        raise InvalidRequestError(f"n_saved must be a non-negative integer, got {n_saved!r}")
    if save_every is None:
        save_every = cfg.default_save_every
    if not _is_int(save_every) or save_every < 1:
        raise InvalidRequestError(f"save_every must be a positive integer, got {save_every!r}")
    return _run(cfg, int(n_saved), int(save_every), progress, log)


def _run(
    cfg: DNSConfig,
    n_saved: int,
    save_every: int,
    progress: Callable[[int, int, str], None] | None,
    log: Callable[[str], None] | None,
) -> Iterator[Snapshot]:
    if n_saved == 0:
        return
    solver = _Solver(cfg)
    spinup_steps = round(cfg.spinup_time / cfg.dt)
    run_steps = (n_saved - 1) * save_every
    total = spinup_steps + run_steps
    stored_dt = save_every * cfg.dt
    started = _time.perf_counter()

    def say(phase: str, done: int, st: dict[str, float]) -> None:
        if log is not None:
            log(
                f"[{phase} {done}/{total} steps, t={done * cfg.dt:.2f}, {_time.perf_counter() - started:.0f}s] "
                f"Re_lambda={st['Re_lambda']:.1f} eps/eps_in={st['dissipation'] / cfg.epsilon:.3f} "
                f"S={st['skewness']:+.3f} F={st['flatness']:.2f} kmax*eta={st['kmax_eta']:.2f} "
                f"CFL={st['cfl']:.2f}"
            )

    if log is not None:
        log(
            f"DNS {cfg.n}^3 nu={cfg.nu:g} eps_in={cfg.epsilon:g} kf={cfg.kf:g} dt={cfg.dt:g} "
            f"{cfg.scheme}: {spinup_steps} spin-up steps, then {n_saved} snapshots every "
            f"{save_every} steps (stored dt={stored_dt:g})"
        )
    log_every = max(spinup_steps // 4, 1)
    for s in range(1, spinup_steps + 1):
        solver.step()
        _check_finite(solver, s)
        if progress is not None:
            progress(s, total, "spinup")
        if log is not None and (s % log_every == 0 or s == spinup_steps):
            say("spinup", s, solver.stats(solver.velocity()))

    log_saves = max(n_saved // 5, 1)
    done = spinup_steps
    for i in range(n_saved):
        if i > 0:
            for _ in range(save_every):
                solver.step()
                done += 1
                _check_finite(solver, done)
                if progress is not None:
                    progress(done, total, "run")
        u = solver.velocity()
        st = solver.stats(u)
        st["time_absolute"] = done * cfg.dt
        st["solver_step"] = float(done)
        if log is not None and (i % log_saves == 0 or i == n_saved - 1):
            say("run", done, st)
        velocity = np.empty((*solver.shape, 3), dtype=np.float32)
        for c in range(3):
            velocity[..., c] = u[c]
        pressure = solver.pressure().astype(np.float32)
        yield Snapshot(time=i * stored_dt, step=i, velocity=velocity, pressure=pressure, stats=st)


def _check_finite(solver: _Solver, step: int) -> None:
    """Stop a run that blew up (too large a dt for its velocities) instead of storing NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        energy = solver.energy()
    if not math.isfinite(energy):
        raise InvalidRequestError(
            f"the DNS diverged by solver step {step}: reduce dt (now {solver.cfg.dt:g}) or raise nu"
        )
