"""The synthetic generator: Kolmogorov spectrum, solenoidal, smooth in time, and Gaussian
enough that the physics checks reject it."""

from __future__ import annotations

import numpy as np
import pytest

from turbdb import diagnostics as D
from turbdb.exceptions import InvalidRequestError
from turbdb.simulate import Snapshot, synthetic_snapshots


def relative_divergence(u: np.ndarray) -> float:
    a = D.velocity_gradient(u)
    div = np.trace(a, axis1=-2, axis2=-1)
    return float(np.sqrt(np.mean(div**2) / np.mean(np.sum(a**2, axis=(-2, -1)))))


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return float(np.sum(a * b) / np.sqrt(np.sum(a * a) * np.sum(b * b)))


def test_snapshots_have_the_stored_layout_and_uniform_times() -> None:
    snaps = list(synthetic_snapshots(16, n_steps=4, dt=0.25))
    assert [s.step for s in snaps] == [0, 1, 2, 3]
    assert [s.time for s in snaps] == [0.0, 0.25, 0.5, 0.75]
    for s in snaps:
        assert isinstance(s, Snapshot)
        assert s.velocity.shape == (16, 16, 16, 3) and s.velocity.dtype == np.float32
        assert s.velocity.flags.c_contiguous
        assert s.pressure.shape == (16, 16, 16) and s.pressure.dtype == np.float32
    # Scaled to unit rms per component.
    assert np.std(snaps[0].velocity) == pytest.approx(1.0, rel=0.15)


def test_synthetic_field_fails_the_physics_checks() -> None:
    snaps = list(synthetic_snapshots(64, n_steps=2, dt=0.2, seed=3))
    checks = D.physics_checks([s.velocity for s in snaps], nu=0.01, injection=0.1)
    assert abs(checks["skewness"]) < 0.1 and not checks["skewness_ok"]
    assert abs(checks["flatness"] - 3.0) < 0.2 and not checks["flatness_ok"]
    assert abs(checks["rq_asymmetry"] - 1.0) < 0.1 and not checks["rq_ok"]
    assert not checks["passed"]


def test_velocity_is_divergence_free_and_pressure_solves_poisson() -> None:
    (snap,) = synthetic_snapshots(32, n_steps=1, seed=5)
    assert relative_divergence(snap.velocity) < 1e-5
    p = D.poisson_pressure(snap.velocity)
    np.testing.assert_allclose(snap.pressure, p, atol=1e-5 * p.std())


def test_consecutive_steps_are_correlated_and_decorrelate_with_lag() -> None:
    snaps = list(synthetic_snapshots(32, n_steps=41, dt=0.05))
    u = [s.velocity for s in snaps]
    assert correlation(u[0], u[1]) > 0.99
    lagged = [correlation(u[0], u[i]) for i in (1, 10, 40)]
    assert lagged[0] > lagged[1] > lagged[2]
    assert lagged[2] < 0.5
    # Small scales turn faster (omega ~ k^(2/3)): the gradient decorrelates sooner.
    grad_corr = correlation(D.velocity_gradient(u[0]), D.velocity_gradient(u[10]))
    assert grad_corr < lagged[1]


def test_inertial_range_has_the_kolmogorov_slope() -> None:
    (snap,) = synthetic_snapshots(128, n_steps=1, seed=1)
    k, e = D.energy_spectrum(snap.velocity)
    band = (k >= 4) & (k <= 14)
    slope = np.polyfit(np.log(k[band]), np.log(e[band]), 1)[0]
    assert slope == pytest.approx(-5 / 3, abs=0.2)
    # Nothing beyond the 2/3 cutoff, as in a dealiased DNS.
    assert e[k > 128 / 3 + 1].max() < 1e-10 * e.max()


def test_same_seed_same_field_and_step_depends_only_on_its_time() -> None:
    a = list(synthetic_snapshots(16, n_steps=3, dt=0.1, seed=7))
    b = list(synthetic_snapshots(16, n_steps=3, dt=0.1, seed=7))
    c = list(synthetic_snapshots(16, n_steps=2, dt=0.1, seed=8))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.velocity, y.velocity)
        np.testing.assert_array_equal(x.pressure, y.pressure)
    assert not np.allclose(a[0].velocity, c[0].velocity)
    (late,) = [s for s in synthetic_snapshots(16, n_steps=2, dt=0.2, seed=7) if s.step == 1]
    np.testing.assert_array_equal(late.velocity, a[2].velocity)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 7, "n_steps": 1},
        {"n": 15, "n_steps": 1},
        {"n": 16, "n_steps": -1},
        {"n": 16, "n_steps": 1, "dt": 0.0},
        {"n": 16, "n_steps": 1, "box": float("nan")},
    ],
)
def test_bad_arguments_raise_invalid_request(kwargs) -> None:
    n = kwargs.pop("n")
    with pytest.raises(InvalidRequestError):
        synthetic_snapshots(n, **kwargs)
