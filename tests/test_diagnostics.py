"""Diagnostics against analytic fields whose gradients, spectra and invariants are exact."""

from __future__ import annotations

import numpy as np
import pytest

from turbdb import diagnostics as D
from turbdb.exceptions import InvalidRequestError


def grid(shape: tuple[int, int, int], box: float = 2 * np.pi) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coordinates (z, y, x) broadcast over a (nz, ny, nx) periodic grid."""
    nz, ny, nx = shape
    z = np.arange(nz)[:, None, None] * box / nz
    y = np.arange(ny)[None, :, None] * box / ny
    x = np.arange(nx)[None, None, :] * box / nx
    return z, y, x


def stack(*components: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    return np.stack([np.broadcast_to(c, shape) for c in components], axis=-1)


def taylor_green(n: int) -> np.ndarray:
    z, y, x = grid((n, n, n))
    shape = (n, n, n)
    return stack(
        np.sin(x) * np.cos(y) * np.cos(z),
        -np.cos(x) * np.sin(y) * np.cos(z),
        np.zeros(shape),
        shape=shape,
    )


def test_gradient_of_sum_of_sines_is_exact_on_a_non_cubic_grid() -> None:
    shape = (12, 10, 16)
    box = 3.0
    z, y, x = grid(shape, box)
    c = 2 * np.pi / box
    u = stack(
        np.sin(2 * c * x) * np.cos(c * y) + np.cos(3 * c * z),
        np.sin(c * z) * np.sin(c * x),
        np.cos(c * y + 2 * c * x),
        shape=shape,
    )
    exact = np.zeros((*shape, 3, 3))
    exact[..., 0, 0] = 2 * c * np.cos(2 * c * x) * np.cos(c * y)
    exact[..., 0, 1] = -c * np.sin(2 * c * x) * np.sin(c * y)
    exact[..., 0, 2] = -3 * c * np.sin(3 * c * z)
    exact[..., 1, 0] = c * np.sin(c * z) * np.cos(c * x)
    exact[..., 1, 2] = c * np.cos(c * z) * np.sin(c * x)
    exact[..., 2, 0] = -2 * c * np.sin(c * y + 2 * c * x)
    exact[..., 2, 1] = -c * np.sin(c * y + 2 * c * x)
    a = D.velocity_gradient(u, box_length=box)
    assert a.shape == (*shape, 3, 3)
    np.testing.assert_allclose(a, exact, atol=1e-12)


def test_taylor_green_dissipation_spectrum_and_reynolds_number_are_exact() -> None:
    u = taylor_green(16)
    nu = 0.01
    # <|grad u|^2> = 3/4, and 2 <s_ij s_ij> = <|grad u|^2> for a periodic solenoidal field.
    assert D.dissipation(u, nu) == pytest.approx(0.75 * nu, rel=1e-12)
    k, e = D.energy_spectrum(u)
    # All modes sit at |k| = sqrt(3), which rounds to shell 2; energy <|u|^2>/2 = 1/8.
    assert e.sum() * k[0] == pytest.approx(1 / 8, rel=1e-12)
    assert e[1] == pytest.approx(1 / 8, rel=1e-12)
    u2 = 1 / 12  # 2E/3
    assert D.taylor_reynolds(u, nu) == pytest.approx(u2 * np.sqrt(15 / (nu * 0.75 * nu)), rel=1e-12)


def test_taylor_green_poisson_pressure_matches_the_classical_solution() -> None:
    n = 16
    z, y, x = grid((n, n, n))
    exact = (np.cos(2 * x) + np.cos(2 * y)) * (np.cos(2 * z) + 2) / 16
    np.testing.assert_allclose(D.poisson_pressure(taylor_green(n)), exact - exact.mean(), atol=1e-13)


def test_energy_spectrum_of_a_single_mode_in_a_scaled_box() -> None:
    shape = (8, 8, 8)
    box = 0.5
    z, y, x = grid(shape, box)
    amp = 0.3
    u = stack(np.zeros(shape), amp * np.cos(3 * 2 * np.pi / box * x), np.zeros(shape), shape=shape)
    k, e = D.energy_spectrum(u, box_length=box)
    k0 = 2 * np.pi / box
    np.testing.assert_allclose(k[:5], k0 * np.arange(1, 6))
    # E(k) dk with dk = k0 holds the mode's energy amp^2/4; nothing elsewhere.
    assert e[2] * k0 == pytest.approx(amp**2 / 4, rel=1e-12)
    assert np.abs(np.delete(e, 2)).max() < 1e-14
    # A single shell of energy E at wavenumber k has L = 3 pi / (4 k).
    assert D.integral_scale(k, e) == pytest.approx(3 * np.pi / (4 * 3 * k0), rel=1e-12)


def test_derivative_moments_match_the_analytic_derivatives() -> None:
    shape = (8, 16, 16)
    z, y, x = grid(shape)
    u = stack(np.sin(x) + 0.5 * np.sin(2 * x), np.sin(y), np.sin(z) - 0.2 * np.cos(3 * z), shape=shape)
    a = np.concatenate(
        [
            np.broadcast_to(np.cos(x) + np.cos(2 * x), shape).ravel(),
            np.broadcast_to(np.cos(y), shape).ravel(),
            np.broadcast_to(np.cos(z) + 0.6 * np.sin(3 * z), shape).ravel(),
        ]
    )
    m2, m3, m4 = (a**2).mean(), (a**3).mean(), (a**4).mean()
    skew, flat = D.derivative_moments(u)
    assert skew == pytest.approx(m3 / m2**1.5, abs=1e-12)
    assert flat == pytest.approx(m4 / m2**2, rel=1e-12)
    # Pooling a stack of identical snapshots changes nothing.
    assert D.derivative_moments(np.stack([u, u])) == pytest.approx((skew, flat), rel=1e-12)


def test_rq_invariants_of_hand_computed_gradients() -> None:
    biaxial_strain = np.diag([1.0, 1.0, -2.0])  # sheet forming: Q = -3, R = 2
    rotation = np.array([[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # Q = w^2, R = 0
    s, w = 1.0, 2.0  # stretched vortex: Q = w^2 - 3 s^2/4, R = -s (s^2/4 + w^2)
    stretched = np.array([[-s / 2, -w, 0.0], [w, -s / 2, 0.0], [0.0, 0.0, s]])
    r, q = D.rq_invariants(np.stack([biaxial_strain, rotation, stretched]))
    np.testing.assert_allclose(q, [-3.0, 4.0, w**2 - 0.75 * s**2])
    np.testing.assert_allclose(r, [2.0, 0.0, -s * (s**2 / 4 + w**2)])


def test_rq_invariants_agree_with_determinant_and_strain_rotation_split() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 50, 3, 3))
    a -= np.trace(a, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) / 3  # solenoidal
    r, q = D.rq_invariants(a)
    assert r.shape == q.shape == (4, 50)
    sym = 0.5 * (a + np.swapaxes(a, -1, -2))
    rot = 0.5 * (a - np.swapaxes(a, -1, -2))
    np.testing.assert_allclose(q, 0.5 * ((rot**2).sum((-2, -1)) - (sym**2).sum((-2, -1))), atol=1e-12)
    np.testing.assert_allclose(r, -np.linalg.det(a), atol=1e-12)


def test_rq_quadrant_fractions_count_each_quadrant() -> None:
    r = np.array([1.0, 2.0, -1.0, -1.0, 3.0, -2.0, 0.5, -0.5])
    q = np.array([1.0, -1.0, 1.0, -1.0, -2.0, -3.0, -1.0, 2.0])
    f = D.rq_quadrant_fractions(r, q)
    assert f == {"Q>0,R>0": 1 / 8, "Q>0,R<0": 2 / 8, "Q<0,R>0": 3 / 8, "Q<0,R<0": 2 / 8}


def test_physics_checks_reject_a_laminar_field() -> None:
    checks = D.physics_checks([taylor_green(16)] * 2, nu=0.01, injection=0.0075)
    assert checks["snapshots"] == 2
    assert checks["dissipation_ok"]  # eps = 0.75 nu by construction
    # Symmetric in x -> -x, so no skewness; a laminar field is not turbulence.
    assert checks["skewness"] == pytest.approx(0.0, abs=1e-12)
    assert not checks["skewness_ok"]
    assert not checks["passed"]
    assert "FAIL" in D.format_checks(checks)


def test_physics_checks_consume_a_generator_one_field_at_a_time() -> None:
    made = []

    def fields():
        for _ in range(3):
            made.append(taylor_green(16))
            yield made[-1]

    checks = D.physics_checks(fields(), nu=0.01, injection=0.0075)
    assert checks["snapshots"] == 3 and len(made) == 3
    assert checks["dissipation_ratio"] == pytest.approx(1.0, rel=1e-12)


def test_vorticity_of_taylor_green_is_exact() -> None:
    n = 16
    z, y, x = grid((n, n, n))
    w = D.vorticity(taylor_green(n))
    exact = stack(-np.cos(x) * np.sin(y) * np.sin(z), -np.sin(x) * np.cos(y) * np.sin(z),
                  2 * np.sin(x) * np.sin(y) * np.cos(z), shape=(n, n, n))
    np.testing.assert_allclose(w, exact, atol=1e-13)


def test_compensated_plateau_finds_the_inertial_range_of_a_model_spectrum() -> None:
    k = np.arange(1, 86, dtype=float)
    # A Kolmogorov range between a box-scale roll-off and an exponential dissipation range.
    e = 1.6 * k ** (-5 / 3) * np.exp(-((1.5 / k) ** 2)) * np.exp(-5.2 * k / 100)
    comp = k ** (5 / 3) * e
    lo, hi, level = D.compensated_plateau(k, comp, k_min=2.5)
    run, longer = comp[int(lo) - 1 : int(hi)], comp[int(lo) - 1 : int(hi) + 1]
    assert lo == 3 and run.max() <= D.PLATEAU_SPREAD * run.min()
    assert longer.max() > D.PLATEAU_SPREAD * longer.min()  # one shell more would break ±14%
    assert hi / lo >= D.PLATEAU_MIN_WIDTH and level == pytest.approx(np.exp(np.mean(np.log(run))))
    # A spectrum without a -5/3 range (a steep k^-3 decay) has none, not even near its peak.
    steep = k**-3.0 * np.exp(-((2 / k) ** 2))
    assert D.compensated_plateau(k, k ** (5 / 3) * steep, k_min=2.5) is None
    # The forced shells do not count.
    assert D.compensated_plateau(k[:10], np.ones(10), k_min=2.5) == (3.0, 10.0, 1.0)
    assert D.compensated_plateau(k[:10], np.ones(10), k_min=4.0) is None


def test_lagrangian_integral_time_of_a_cosine_correlation() -> None:
    # v_p(t) = a_p cos(w t): rho(tau) = cos(w tau), first zero at pi/(2w), integral 1/w.
    w = 2.0
    t = np.linspace(0.0, 3.0, 3001)
    a = np.concatenate([np.linspace(-1, 1, 50)[:, None] * [1.0, 0.5, -2.0]])
    v = np.cos(w * t)[:, None, None] * a[None]
    rho, t_l = D.lagrangian_integral_time(t, v)
    np.testing.assert_allclose(rho, np.cos(w * t), atol=1e-12)
    assert t_l == pytest.approx(1 / w, rel=1e-6)
    # A span shorter than the first zero crossing leaves T_L unknown.
    assert D.lagrangian_integral_time(t[:500], v[:500])[1] is None


@pytest.mark.parametrize(
    "call",
    [
        lambda: D.velocity_gradient(np.zeros((4, 4, 4))),
        lambda: D.velocity_gradient(np.zeros((4, 4, 4, 3)), box_length=-1.0),
        lambda: D.rq_invariants(np.zeros((5, 2, 3))),
        lambda: D.rq_quadrant_fractions(np.zeros(3), np.zeros(4)),
        lambda: D.physics_checks([], nu=0.1, injection=0.1),
        lambda: D.physics_checks(np.zeros((4, 4, 4, 3)), nu=0.1, injection=0.0),
        lambda: D.physics_checks(iter([]), nu=0.1, injection=0.1),
        lambda: D.compensated_plateau(np.arange(3.0), np.ones(4)),
        lambda: D.lagrangian_integral_time(np.arange(3.0), np.zeros((3, 2, 2))),
    ],
)
def test_bad_arguments_raise_invalid_request(call) -> None:
    with pytest.raises(InvalidRequestError):
        call()
