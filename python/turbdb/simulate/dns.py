"""Pseudo-spectral DNS of forced isotropic turbulence in the periodic box [0, 2 pi)^3, the
built-in source of physically faithful data for turbdb: the configuration, the spin-up
(on coarser grids first, then refined spectrally) and the stored window. The numerics are
in ``navier_stokes.py``; docs/simulate.md justifies the parameters.

The defaults at n = 64 give Re_lambda ~ 41, k_max eta ~ 1.2, tau_eta = 0.32, a large-eddy
time L/u' ~ 2.4 and a stored dt of 0.12 (tau_eta / 2.6); 100 stored steps span ~5 L/u'.
At n = 256 the same rules give Re_lambda ~ 117 (measured: 114-120 over the stored window)
at k_max eta ~ 1.2 and a stored dt of 0.03.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from turbdb.exceptions import InvalidRequestError
from turbdb.simulate.navier_stokes import SpectralSolver
from turbdb.simulate.snapshot import Snapshot
from turbdb.times import time_grid

__all__ = ["DNSConfig", "SpinupLevel", "run_dns", "DEFAULT_SAVE_EVERY"]

#: Solver steps between stored snapshots. The solver dt scales as 1/n (fixed CFL), so the
#: stored dt does too: 0.12 at 64^3, 0.03 at 256^3. That keeps the stored dt at the same
#: fraction of the sweeping time 1/(k_max u') of the smallest scales, which is what limits
#: the accuracy of pchip in time at a fixed point.
DEFAULT_SAVE_EVERY = 3
#: The grid of the initial spin-up (runs on finer grids start there and are refined).
SPINUP_GRID = 64

_SCHEMES = ("rk2", "rk4")
_PRECISIONS = ("float32", "float64")


@dataclass(frozen=True)
class SpinupLevel:
    """One grid of the spin-up ladder: its size, viscosity, time step and step count."""

    n: int
    nu: float
    dt: float
    steps: int


@dataclass(frozen=True)
class DNSConfig:
    """Parameters of a DNS run; invalid values raise ``InvalidRequestError``.

    n: grid points per side of the 2 pi box (even, >= 16).
    nu: kinematic viscosity; by default 0.01 (64/n)^(4/3), which keeps k_max eta ~ 1.2 at
        any n (Re_lambda ~ 41 at n = 64, ~ 117 at n = 256).
    epsilon: energy injection rate eps_in (the forcing's constant power per unit mass).
    kf: forcing radius; modes with 0 < |k| <= kf are forced.
    dt: fixed solver time step; by default 0.04 (64/n), a CFL number
        dt max(|u|+|v|+|w|)/dx of about 1.5, inside RK4's stability limit with margin.
    scheme: "rk4" (classical) or "rk2" (Heun), both with the viscous integrating factor.
        RK2 needs about half the RK4 dt.
    seed: seed of the random initial field.
    spinup_time: physical time integrated on the spin-up grid before anything else. The
        initial field already carries the stationary energy and dissipation, so the
        spin-up only has to build the cascade: derivative skewness and flatness settle
        within ~1 time unit; the default 8 (~3 L/u', 25 tau_eta) also forgets the
        Gaussian large scales.
    spinup_grid: grid of that first spin-up; by default min(n, 64). A finer run then
        doubles the grid by spectral refinement (the Fourier coefficients are copied, the
        new ones start at zero) until it reaches n. Every grid below n runs at half the
        final k_max eta, with the viscosity of the grid twice as fine (never below nu):
        slightly under-resolved, but the viscosity only drops where the grid is cheap, and
        the last refinement to n changes nothing but the resolution, so the flow arrives
        on n with its final Reynolds number and dissipation. dt scales as 1/n_level.
    refine_time: physical time on each intermediate grid, after its viscosity drop
        (default 4: the dissipation dips by the viscosity ratio and takes ~2 to recover).
    settle_time: physical time on the final grid after the last refinement (default 1,
        ~9 tau_eta at 256^3: the new dissipation-range shells fill within ~0.3).
    precision: "float32" (default) or "float64" for the state and the transforms. float32
        round-off (~1e-7 of u') is far below the energy of the smallest resolved shells and
        halves the cost; sums (energy, dissipation, moments) are float64 either way.

    ``replace(config, n=...)`` keeps the resolved nu, dt and spinup_grid; build a new
    DNSConfig to get the defaults for another grid.
    """

    n: int = 64
    nu: float | None = None
    epsilon: float = 0.1
    kf: float = 2.5
    dt: float | None = None
    scheme: str = "rk4"
    seed: int = 0
    spinup_time: float = 8.0
    spinup_grid: int | None = None
    refine_time: float = 4.0
    settle_time: float = 1.0
    precision: str = "float32"

    def __post_init__(self) -> None:
        if not _is_int(self.n) or self.n < 16 or self.n % 2:
            raise InvalidRequestError(f"n must be an even integer >= 16, got {self.n!r}")
        if self.nu is None:
            object.__setattr__(self, "nu", 0.01 * (64 / self.n) ** (4 / 3))
        if self.dt is None:
            object.__setattr__(self, "dt", 0.04 * 64 / self.n)
        if self.spinup_grid is None:
            object.__setattr__(self, "spinup_grid", min(self.n, SPINUP_GRID))
        for name in ("nu", "epsilon", "dt"):
            value = getattr(self, name)
            if not _is_real(value) or not value > 0 or not math.isfinite(value):
                raise InvalidRequestError(f"{name} must be positive and finite, got {value!r}")
        g = self.spinup_grid
        if not _is_int(g) or g < 16 or g % 2 or g > self.n:
            raise InvalidRequestError(f"spinup_grid must be an even integer in [16, n], got {g!r}")
        if not _is_real(self.kf) or not 1.0 <= self.kf < g / 3.0:
            raise InvalidRequestError(f"kf must be in [1, spinup_grid/3), got {self.kf!r}")
        if self.scheme not in _SCHEMES:
            raise InvalidRequestError(f"scheme must be one of {_SCHEMES}, got {self.scheme!r}")
        if self.precision not in _PRECISIONS:
            raise InvalidRequestError(f"precision must be one of {_PRECISIONS}, got {self.precision!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise InvalidRequestError(f"seed must be a non-negative integer, got {self.seed!r}")
        for name in ("spinup_time", "refine_time", "settle_time"):
            value = getattr(self, name)
            if not _is_real(value) or not value >= 0 or not math.isfinite(value):
                raise InvalidRequestError(f"{name} must be >= 0 and finite, got {value!r}")

    @property
    def k_max(self) -> float:
        """Dealiasing cutoff: modes with |k| < n/3 are kept."""
        return self.n / 3.0

    @property
    def default_save_every(self) -> int:
        """Solver steps per stored step (``DEFAULT_SAVE_EVERY``)."""
        return DEFAULT_SAVE_EVERY

    @property
    def spinup_levels(self) -> list[SpinupLevel]:
        """The spin-up ladder: ``spinup_grid``, doubled until n; the last level is n."""
        grids = [self.spinup_grid]
        while grids[-1] < self.n:
            grids.append(min(2 * grids[-1], self.n))
        levels = []
        for i, g in enumerate(grids):
            final = g == self.n
            nu = self.nu if final else self.nu * max(1.0, self.n / (2 * g)) ** (4 / 3)
            time = self.spinup_time if i == 0 else self.settle_time if final else self.refine_time
            dt = self.dt * self.n / g
            levels.append(SpinupLevel(n=g, nu=nu, dt=dt, steps=round(time / dt)))
        return levels


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


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

    Snapshot ``i`` has ``step == i`` and ``time`` the decimal value of ``i * save_every * dt``
    (``turbdb.times.time_grid``): time is measured from the start of the stored window (the
    spin-up is not stored). Its ``stats``
    hold the live diagnostics of that step (Re_lambda, dissipation, injection, energy,
    skewness and flatness of the longitudinal derivatives, Kolmogorov and large-eddy
    scales, CFL number) plus ``time_absolute`` and ``solver_step`` counted from the start.

    ``progress(done, total, phase)`` is called after every solver step, with the work
    counted over the whole run (spin-up ladder and stored window) in steps of the final
    grid (a step on a grid half as fine counts 1/8), and phase "spinup" or "run". ``log(line)`` receives a handful of summary lines.
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
    levels = cfg.spinup_levels
    run_steps = (n_saved - 1) * save_every
    # Progress in steps of the final grid: a step on a grid half as fine costs about 1/8.
    cost = [(lv.n / cfg.n) ** 3 for lv in levels]
    total = sum(c * lv.steps for c, lv in zip(cost, levels)) + run_steps
    stored_dt = save_every * cfg.dt
    times = time_grid(0.0, stored_dt, n_saved)
    started = _time.perf_counter()
    work = 0.0
    clock = 0.0  # physical time since the start of the spin-up

    def say(phase: str, solver: SpectralSolver, st: dict[str, float]) -> None:
        if log is not None:
            log(
                f"[{phase} {solver.n}^3, t={clock:.2f}, {_time.perf_counter() - started:.0f}s] "
                f"Re_lambda={st['Re_lambda']:.1f} eps/eps_in={st['dissipation'] / cfg.epsilon:.3f} "
                f"S={st['skewness']:+.3f} F={st['flatness']:.2f} kmax*eta={st['kmax_eta']:.2f} "
                f"E={st['energy']:.4f} L/u'={st['large_eddy_time']:.2f} CFL={st['cfl']:.2f}"
            )

    if log is not None:
        ladder = ", then ".join(f"{lv.n}^3 for {lv.steps} steps (nu={lv.nu:.4g}, dt={lv.dt:g})" for lv in levels)
        log(
            f"DNS {cfg.n}^3 eps_in={cfg.epsilon:g} kf={cfg.kf:g} {cfg.scheme} {cfg.precision}: spin-up on "
            f"{ladder}; then {n_saved} snapshots every {save_every} steps (stored dt={stored_dt:g})"
        )
    solver: SpectralSolver | None = None
    for level, c in zip(levels, cost):
        solver = SpectralSolver(level.n, nu=level.nu, dt=level.dt, epsilon=cfg.epsilon, kf=cfg.kf,
                                scheme=cfg.scheme, precision=cfg.precision, seed=cfg.seed,
                                uh=None if solver is None else solver.uh)
        log_every = max(level.steps // 4, 1)
        for s in range(1, level.steps + 1):
            solver.step()
            _check_finite(solver, s)
            work += c
            clock += level.dt
            if progress is not None:
                progress(work, total, "spinup")
            if log is not None and (s % log_every == 0 or s == level.steps):
                say("spinup", solver, solver.stats(solver.velocity()))
    assert solver is not None

    log_saves = max(n_saved // 5, 1)
    done = levels[-1].steps
    for i in range(n_saved):
        if i > 0:
            for _ in range(save_every):
                solver.step()
                done += 1
                work += 1
                clock += cfg.dt
                _check_finite(solver, done)
                if progress is not None:
                    progress(work, total, "run")
        u, p = solver.fields()
        st = solver.stats(u)
        st["time_absolute"] = clock
        st["solver_step"] = float(done)
        if log is not None and (i % log_saves == 0 or i == n_saved - 1):
            say("run", solver, st)
        velocity = np.empty((*solver.shape, 3), dtype=np.float32)
        for comp in range(3):
            velocity[..., comp] = u[comp]
        pressure = p.astype(np.float32)
        yield Snapshot(time=float(times[i]), step=i, velocity=velocity, pressure=pressure, stats=st)


def _check_finite(solver: SpectralSolver, step: int) -> None:
    """Stop a run that blew up (too large a dt for its velocities) instead of storing NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        energy = solver.energy()
    if not math.isfinite(energy):
        raise InvalidRequestError(
            f"the DNS diverged by solver step {step} on {solver.n}^3: reduce dt (now {solver.dt:g}) or raise nu"
        )
