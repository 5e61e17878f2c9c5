"""The pseudo-spectral DNS: configuration checks, determinism, conservation and, on the
default 64^3 run, the physics of forced isotropic turbulence measured from the stored
float32 snapshots."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import turbdb
from turbdb import diagnostics as D
from turbdb.exceptions import InvalidRequestError
from turbdb.simulate import DNSConfig, Snapshot, run_dns
from turbdb.simulate.navier_stokes import SpectralSolver

# A coarse but resolved flow (k_max eta ~ 1) that runs in well under a second.
SMALL = DNSConfig(n=16, nu=0.05, epsilon=0.1, kf=2.0, dt=0.04, spinup_time=0.4, seed=3)


def relative_divergence(u: np.ndarray) -> float:
    a = D.velocity_gradient(u)
    div = np.trace(a, axis1=-2, axis2=-1)
    return float(np.sqrt(np.mean(div**2) / np.mean(np.sum(a**2, axis=(-2, -1)))))


def budget_residual(snaps: list[Snapshot], epsilon: float) -> float:
    """Largest |dE/dt - (eps_in - eps)| between stored steps, relative to eps_in (trapezoid rule)."""
    e = np.array([s.stats["energy"] for s in snaps])
    eps = np.array([s.stats["dissipation"] for s in snaps])
    dt = snaps[1].time - snaps[0].time
    residual = np.diff(e) / dt - (epsilon - 0.5 * (eps[1:] + eps[:-1]))
    return float(np.abs(residual).max() / epsilon)


@pytest.mark.parametrize(
    "change",
    [
        {"n": 15},
        {"n": 8},
        {"n": 32.0},
        {"n": True},
        {"nu": 0.0},
        {"nu": -0.01},
        {"nu": float("nan")},
        {"epsilon": float("inf")},
        {"kf": 0.5},
        {"kf": 64 / 3},
        {"dt": 0.0},
        {"scheme": "euler"},
        {"seed": -1},
        {"seed": 1.5},
        {"spinup_time": -1.0},
        {"refine_time": float("nan")},
        {"settle_time": -0.1},
        {"spinup_grid": 128},
        {"spinup_grid": 17},
        {"n": 96, "spinup_grid": 12},
        {"precision": "float16"},
    ],
)
def test_bad_config_raises_invalid_request(change: dict) -> None:
    with pytest.raises(InvalidRequestError):
        DNSConfig(**change)


def test_defaults_scale_with_the_grid_to_keep_resolution_and_cfl() -> None:
    base = DNSConfig()
    assert (base.n, base.nu, base.dt, base.scheme, base.default_save_every) == (64, 0.01, 0.04, "rk4", 3)
    assert base.precision == "float32"
    fine = DNSConfig(n=128)
    assert fine.dt == pytest.approx(base.dt / 2)
    # k_max eta ~ k_max nu^(3/4) is unchanged when nu scales as n^(-4/3).
    assert fine.k_max * fine.nu**0.75 == pytest.approx(base.k_max * base.nu**0.75)
    # The stored dt scales with the grid spacing, as the sweeping time of the smallest scales.
    assert fine.default_save_every * fine.dt == pytest.approx(base.default_save_every * base.dt / 2)


def kolmogorov_kmax_eta(config: DNSConfig) -> float:
    """k_max eta at the stationary state, where the dissipation equals eps_in."""
    return config.k_max * (config.nu**3 / config.epsilon) ** 0.25


def test_isotropic256_parameters_resolve_the_dissipation_range() -> None:
    config = DNSConfig(n=256)
    assert config.nu == pytest.approx(0.01 / 4 ** (4 / 3))
    assert config.dt == pytest.approx(0.01)
    assert 1.1 < kolmogorov_kmax_eta(config) < 1.3
    # eta = 0.0140, tau_eta = 0.125: the stored dt 0.03 is a quarter of tau_eta.
    assert config.default_save_every * config.dt < 0.3 * (config.nu / config.epsilon) ** 0.5


def test_spinup_ladder_doubles_the_grid_and_drops_viscosity_only_on_cheap_grids() -> None:
    config = DNSConfig(n=256)
    levels = config.spinup_levels
    assert [lv.n for lv in levels] == [64, 128, 256]
    assert [lv.steps for lv in levels] == [200, 200, 100]  # 8, 4 and 1 time units
    # Below n, every grid runs at half the final k_max eta with the next grid's viscosity…
    assert levels[0].nu == pytest.approx(DNSConfig(n=128).nu)
    assert levels[1].nu == levels[2].nu == config.nu
    for lv in levels[:-1]:
        assert lv.n / 3 * (lv.nu**3 / config.epsilon) ** 0.25 == pytest.approx(kolmogorov_kmax_eta(config) / 2)
    # …and the same CFL number.
    assert [lv.dt * lv.n for lv in levels] == pytest.approx([config.dt * 256] * 3)
    assert DNSConfig(n=64).spinup_levels == [type(levels[0])(n=64, nu=0.01, dt=0.04, steps=200)]
    odd = DNSConfig(n=96).spinup_levels
    assert [lv.n for lv in odd] == [64, 96] and odd[0].nu == odd[1].nu  # never below the final nu


def compact_box(full: np.ndarray, m: int = 7) -> np.ndarray:
    """The modes |k_z|, |k_y| <= m, 0 <= k_x <= m of a full rfftn half-spectrum (..., n, n, n//2+1)."""
    rows = np.r_[0 : m + 1, -m:0]
    return full[..., rows[:, None], rows[None, :], : m + 1]


def test_pruned_transforms_equal_full_ffts_of_band_limited_fields() -> None:
    solver = SpectralSolver(24, nu=0.05, dt=0.01, epsilon=0.1, kf=2.0, scheme="rk4", precision="float64", seed=1)
    u = solver.velocity()
    full = np.fft.rfftn(u, axes=(1, 2, 3)) / 24**3
    np.testing.assert_allclose(solver._fft(u), compact_box(full), atol=1e-15)
    np.testing.assert_allclose(np.fft.irfftn(full * 24**3, s=(24,) * 3, axes=(1, 2, 3)), u, atol=1e-14)
    x = np.random.default_rng(0).standard_normal((2, 24, 24, 24))
    np.testing.assert_allclose(solver._fft(x), compact_box(np.fft.rfftn(x, axes=(1, 2, 3)) / 24**3),
                               atol=1e-15)


def test_spectral_refinement_keeps_the_field_energy_and_dissipation() -> None:
    coarse = SpectralSolver(24, nu=0.02, dt=0.02, epsilon=0.1, kf=2.0, scheme="rk4", precision="float64", seed=2)
    fine = SpectralSolver(48, nu=0.02, dt=0.01, epsilon=0.1, kf=2.0, scheme="rk4", precision="float64", uh=coarse.uh)
    np.testing.assert_allclose(fine.velocity()[:, ::2, ::2, ::2], coarse.velocity(), atol=1e-13)
    assert fine.energy() == pytest.approx(coarse.energy(), rel=1e-13)
    assert fine.dissipation() == pytest.approx(coarse.dissipation(), rel=1e-13)
    with pytest.raises(ValueError, match="cannot refine"):
        SpectralSolver(24, nu=0.02, dt=0.02, epsilon=0.1, kf=2.0, scheme="rk4", precision="float64", uh=fine.uh)


def test_the_last_refinement_leaves_the_dissipation_at_the_injection_rate() -> None:
    # 32^3 at the final viscosity (k_max eta 0.6), then 64^3: no viscosity drop at the
    # refinement, so eps stays at eps_in; refining with the coarse grid's own resolved
    # viscosity (the naive ladder) would cut eps by the viscosity ratio 2.5.
    config = DNSConfig(n=64, spinup_grid=32, spinup_time=4.0, settle_time=0.2)
    (snap,) = run_dns(config, n_saved=1)
    assert snap.stats["kmax_eta"] == pytest.approx(1.2, abs=0.06)
    assert abs(snap.stats["dissipation"] / config.epsilon - 1) < 0.1
    assert -0.65 < snap.stats["skewness"] < -0.4


def test_float32_and_float64_runs_follow_the_same_flow() -> None:
    short = replace(SMALL, spinup_time=0.0)
    (_, single) = run_dns(short, n_saved=2, save_every=10)
    (_, double) = run_dns(replace(short, precision="float64"), n_saved=2, save_every=10)
    diff = np.linalg.norm(single.velocity - double.velocity) / np.linalg.norm(double.velocity)
    assert 0 < diff < 1e-5
    assert single.stats["energy"] == pytest.approx(double.stats["energy"], rel=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [{"n_saved": -1}, {"n_saved": 2, "save_every": 0}, {"n_saved": 2.5}, {"n_saved": 1, "config": "64"}],
)
def test_bad_run_arguments_raise_invalid_request(kwargs: dict) -> None:
    config = kwargs.pop("config", SMALL)
    with pytest.raises(InvalidRequestError):
        run_dns(config, **kwargs)


def test_a_diverging_run_raises_instead_of_storing_nan() -> None:
    with pytest.raises(InvalidRequestError, match="diverged"):
        list(run_dns(replace(SMALL, dt=2.0), n_saved=5, save_every=3))


def test_no_snapshots_requested_runs_nothing() -> None:
    calls: list[tuple[int, int, str]] = []
    assert list(run_dns(SMALL, n_saved=0, progress=lambda *a: calls.append(a))) == []
    assert calls == []


def test_snapshots_have_the_stored_layout_and_exactly_uniform_times() -> None:
    snaps = list(run_dns(SMALL, n_saved=4, save_every=3))
    stored_dt = 3 * SMALL.dt
    assert [s.step for s in snaps] == [0, 1, 2, 3]
    assert [s.time for s in snaps] == [0.0, 0.12, 0.24, 0.36]  # decimal, not 3 * 0.12 = 0.36000000000000004
    assert stored_dt == pytest.approx(0.12)
    for s in snaps:
        assert s.velocity.shape == (16, 16, 16, 3) and s.velocity.dtype == np.float32
        assert s.velocity.flags.c_contiguous
        assert s.pressure.shape == (16, 16, 16) and s.pressure.dtype == np.float32
        for key in ("Re_lambda", "dissipation", "injection", "energy", "skewness", "flatness"):
            assert math.isfinite(s.stats[key])
    assert [s.stats["solver_step"] for s in snaps] == [10.0, 13.0, 16.0, 19.0]


def test_same_seed_gives_the_same_run_and_another_seed_does_not() -> None:
    a = list(run_dns(SMALL, n_saved=2, save_every=2))
    b = list(run_dns(SMALL, n_saved=2, save_every=2))
    c = list(run_dns(replace(SMALL, seed=4), n_saved=2, save_every=2))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.velocity, y.velocity)
        np.testing.assert_array_equal(x.pressure, y.pressure)
        assert x.stats == y.stats
    assert not np.allclose(a[1].velocity, c[1].velocity)


def test_velocity_is_solenoidal_with_zero_mean_and_pressure_solves_poisson() -> None:
    (snap,) = run_dns(SMALL, n_saved=1)
    assert relative_divergence(snap.velocity) < 1e-6
    assert np.abs(snap.velocity.mean(axis=(0, 1, 2))).max() < 1e-6
    p = D.poisson_pressure(snap.velocity)
    np.testing.assert_allclose(snap.pressure, p, atol=1e-5 * p.std())


def test_energy_input_balances_dissipation_plus_energy_change() -> None:
    snaps = list(run_dns(SMALL, n_saved=20, save_every=1))
    assert snaps[0].stats["injection"] == SMALL.epsilon
    assert budget_residual(snaps, SMALL.epsilon) < 1e-3


def test_rk2_and_rk4_converge_to_the_same_flow() -> None:
    short = replace(SMALL, spinup_time=0.0, dt=0.01)
    (_, rk4) = run_dns(short, n_saved=2, save_every=20)
    (_, rk2) = run_dns(replace(short, scheme="rk2"), n_saved=2, save_every=20)
    diff = np.linalg.norm(rk2.velocity - rk4.velocity) / np.linalg.norm(rk4.velocity)
    assert 0 < diff < 1e-4


def test_progress_counts_every_solver_step_and_log_reports() -> None:
    calls: list[tuple[int, int, str]] = []
    lines: list[str] = []
    snaps = list(run_dns(SMALL, n_saved=3, save_every=2, progress=lambda *a: calls.append(a), log=lines.append))
    total = 10 + 2 * 2
    assert len(snaps) == 3
    assert [c[0] for c in calls] == list(range(1, total + 1))
    assert {c[1] for c in calls} == {total}
    assert [c[2] for c in calls] == ["spinup"] * 10 + ["run"] * 4
    assert lines and all(isinstance(line, str) for line in lines)
    assert any("Re_lambda" in line for line in lines)


def test_progress_of_a_ladder_counts_coarse_steps_by_their_cost() -> None:
    config = DNSConfig(n=32, nu=0.05, dt=0.04, kf=2.0, spinup_grid=16, spinup_time=0.4, settle_time=0.2, seed=3)
    calls: list[tuple[float, float, str]] = []
    lines: list[str] = []
    list(run_dns(config, n_saved=2, save_every=2, progress=lambda *a: calls.append(a), log=lines.append))
    # 5 steps on 16^3 at 1/8 the cost, 5 on 32^3, then 2 stored-window steps.
    assert [lv.steps for lv in config.spinup_levels] == [5, 5]
    assert [c[0] for c in calls] == pytest.approx(np.r_[np.arange(1, 6) / 8, 5 / 8 + np.arange(1, 8)])
    assert all(c[1] == pytest.approx(5 / 8 + 5 + 2) for c in calls)
    assert "16^3 for 5 steps" in lines[0] and "then 32^3 for 5 steps" in lines[0]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> tuple[DNSConfig, list[Snapshot], turbdb.Dataset]:
    """The default 64^3 run as `turbdb simulate` makes it: spin-up, then 100 stored steps,
    each written to a dataset as it comes."""
    config = DNSConfig()
    snaps = list(run_dns(config, n_saved=100))
    ds = turbdb.create_dataset(tmp_path_factory.mktemp("dns"), "isotropic64", grid=(64, 64, 64),
                               times=[s.time for s in snaps])
    for s in snaps:
        ds.write("velocity", s.step, s.velocity)
        ds.write("pressure", s.step, s.pressure)
    return config, snaps, ds


@pytest.mark.slow
def test_default_run_is_physically_faithful_turbulence(default_run) -> None:
    config, snaps, ds = default_run
    assert len(snaps) == 100 and snaps[1].time == 3 * config.dt
    # The checks read the stored float32 data back through the engine.
    stored = [ds.cutout("velocity", time=t).values for t in ds.info.times]
    np.testing.assert_array_equal(stored[7], snaps[7].velocity)
    checks = D.physics_checks(stored, nu=config.nu, injection=config.epsilon)
    report = D.format_checks(checks)
    lo, hi = D.SKEWNESS_RANGE
    assert lo <= checks["skewness"] <= hi, report
    assert checks["flatness"] > D.MIN_FLATNESS, report
    assert abs(checks["dissipation_ratio"] - 1) <= D.DISSIPATION_TOLERANCE, report
    fractions = checks["rq_fractions"]
    assert fractions["Q<0,R>0"] > fractions["Q<0,R<0"], report
    assert checks["passed"], report
    eta = (config.nu**3 / checks["dissipation"]) ** 0.25
    assert config.k_max * eta > 1.0
    assert D.taylor_reynolds(stored[-1].astype(np.float64), config.nu) > 30


@pytest.mark.slow
def test_default_run_is_solenoidal_and_conserves_energy(default_run) -> None:
    config, snaps, _ = default_run
    assert max(relative_divergence(s.velocity) for s in snaps[::10]) < 1e-6
    # RK4 at the default dt: the budget closes to far better than the 10% check needs.
    assert budget_residual(snaps, config.epsilon) < 5e-3


@pytest.mark.slow
def test_a_run_refined_onto_96_cubed_has_the_reynolds_number_of_its_grid() -> None:
    """The ladder on a grid the suite can afford: 64^3 at the 96^3 viscosity, refined; the
    stored window is resolved turbulence at Re_lambda ~ 41 (96/64)^(2/3) or more."""
    config = DNSConfig(n=96)
    snaps = list(run_dns(config, n_saved=11))
    checks = D.physics_checks([s.velocity for s in snaps], nu=config.nu, injection=config.epsilon)
    assert checks["passed"], D.format_checks(checks)
    re = np.mean([D.taylor_reynolds(s.velocity.astype(np.float64), config.nu) for s in snaps[::5]])
    assert 41 * 1.5 ** (2 / 3) < re < 70
    assert min(s.stats["kmax_eta"] for s in snaps) > 1.1
