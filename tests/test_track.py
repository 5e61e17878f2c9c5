"""Dataset.track against flows with known trajectories: a time-dependent solid-body rotation
(linear in space and time, so interpolation is exact and the result must be Heun's
recurrence to round-off) and a steady ABC flow (interpolation error bounded, RK2 error
second order in dt); forward then backward on a DNS; bad requests."""

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import turbdb
from turbdb.track import step_times, wrap

TWO_PI = 2 * math.pi
W = 3.0  # axial velocity of the rotation flow: particles cross the periodic z axis


# -- solid-body rotation ---------------------------------------------------------------------


def omega(t):
    """Rotation rate, linear in time: pchip reproduces it exactly."""
    return 1 + t / 4


def rotation_velocity(x, t):
    return np.stack([-omega(t) * x[:, 1], omega(t) * x[:, 0], np.full(len(x), W)], 1)


def rotation_exact(x0, t0, t):
    theta = (t - t0) + (t * t - t0 * t0) / 8  # ∫ omega dt
    c, s = np.cos(theta), np.sin(theta)
    return np.stack([c * x0[:, 0] - s * x0[:, 1], s * x0[:, 0] + c * x0[:, 1], x0[:, 2] + W * (t - t0)], 1)


def heun(velocity, x, times):
    """Heun's recurrence on an analytic velocity: what track must compute."""
    out = [x]
    for t, t1 in zip(times[:-1], times[1:]):
        h = t1 - t
        u0 = velocity(x, t)
        u1 = velocity(x + h * u0, t1)
        x = x + h / 2 * (u0 + u1)
        out.append(x)
    return np.array(out)


@pytest.fixture(scope="module")
def rotation(tmp_path_factory):
    """u = omega(t) (−y, x, 0) + (0, 0, W) on [−2, 2]² (walls) × [0, 4) (periodic z).
    Dyadic nodes, rates and times: the stored float32 values are exact."""
    origin, spacing, grid = (-2.0, -2.0, 0.0), (0.125, 0.125, 0.25), (33, 33, 16)
    times = np.arange(9) * 0.25
    ds = turbdb.create_dataset(tmp_path_factory.mktemp("rotation"), "rotation", grid=grid, origin=origin,
                               spacing=spacing, periodic=(False, False, True), times=times,
                               fields={"velocity": 3, "pressure": 1}, atom=4, partition=16)
    y, x = np.meshgrid(origin[1] + spacing[1] * np.arange(grid[1]), origin[0] + spacing[0] * np.arange(grid[0]),
                       indexing="ij")
    for k, t in enumerate(times):
        u = np.empty((grid[2], grid[1], grid[0], 3))
        u[..., 0], u[..., 1], u[..., 2] = -omega(t) * y, omega(t) * x, W
        ds.write("velocity", k, u)
        ds.write("pressure", k, np.zeros(grid[::-1]))
    return ds


def disc_points(count, radius=1.4, seed=0):
    rng = np.random.default_rng(seed)
    r, a = radius * np.sqrt(rng.uniform(0, 1, count)), rng.uniform(0, TWO_PI, count)
    return np.stack([r * np.cos(a), r * np.sin(a), rng.uniform(0, 4, count)], 1)


def test_rotation_is_heuns_recurrence_to_round_off_with_one_engine_call_per_stage(rotation):
    x0 = disc_points(300)
    positions = rotation.track(x0, start=0.1, end=1.9, dt=0.05, method="lag4")
    assert positions.shape == (37, 300, 3) and positions.dtype == np.float64
    np.testing.assert_array_equal(positions[0], x0)
    np.testing.assert_allclose(positions, heun(rotation_velocity, x0, step_times(0.1, 1.9, 0.05)), rtol=0, atol=1e-12)
    stats = rotation.last_query_stats
    assert stats["queries"] == 2 * 36 and stats["points"] == 2 * 36 * 300  # per step, never per point


def test_rotation_error_against_the_exact_trajectory_is_second_order_in_dt(rotation):
    x0 = disc_points(200, seed=1)
    errors = []
    for dt in (0.1, 0.05, 0.025):
        positions = rotation.track(x0, start=0.1, end=1.9, dt=dt, method="lag6")
        errors.append(np.abs(positions[-1] - rotation_exact(x0, 0.1, 1.9)).max())
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((orders > 1.9) & (orders < 2.1)), (errors, orders)


def test_euler_is_first_order(rotation):
    x0 = disc_points(50, radius=1.0, seed=2)
    errors = [np.abs(rotation.track(x0, start=0.0, end=1.0, dt=dt, integrator="euler")[-1]
                     - rotation_exact(x0, 0.0, 1.0)).max() for dt in (0.02, 0.01)]
    assert 0.9 < math.log2(errors[0] / errors[1]) < 1.1


def test_backward_tracking_runs_the_recurrence_backward_in_time(rotation):
    x0 = disc_points(100, seed=3)
    back = rotation.track(x0, start=1.9, end=0.2, dt=0.05)
    times = step_times(1.9, 0.2, 0.05)
    assert times[1] == pytest.approx(1.85) and times[-1] == 0.2
    np.testing.assert_allclose(back, heun(rotation_velocity, x0, times), rtol=0, atol=1e-12)
    np.testing.assert_allclose(back[-1], rotation_exact(x0, 1.9, 0.2), atol=5e-3)


def test_the_last_step_is_shortened_to_land_on_end(rotation):
    x0 = disc_points(20, seed=4)
    positions = rotation.track(x0, start=0.0, end=1.0, dt=0.3)
    assert positions.shape == (5, 20, 3)  # 0, 0.3, 0.6, 0.9, then 0.1 to land on 1.0
    np.testing.assert_allclose(positions, heun(rotation_velocity, x0, [0.0, 0.3, 0.6, 0.9, 1.0]), atol=1e-12)
    np.testing.assert_allclose(step_times(0.0, 0.3, 0.1), [0.0, 0.1, 0.2, 0.3])  # 0.3/0.1 = 2.9999999999999996
    assert step_times(0.5, 0.5, 0.1).tolist() == [0.5]
    assert rotation.track(x0, start=0.5, end=0.5, dt=0.1).shape == (1, 20, 3)


def test_positions_are_continuous_across_the_periodic_axis_and_wrap_splits_them(rotation):
    x0 = disc_points(30, seed=5)
    positions = rotation.track(x0, start=0.0, end=2.0, dt=0.1)
    np.testing.assert_allclose(positions[-1, :, 2], x0[:, 2] + 2 * W, atol=1e-12)  # 6 > the period 4
    inside, crossings = wrap(positions, rotation.info)
    assert inside[..., 2].min() >= 0 and inside[..., 2].max() < 4
    np.testing.assert_array_equal(crossings[..., :2], 0)
    assert crossings[-1, :, 2].min() >= 1
    np.testing.assert_allclose(inside + crossings * np.array([0, 0, 4.0]), positions, atol=1e-12)


def test_velocities_are_returned_at_each_position_and_time(rotation):
    x0 = disc_points(40, seed=6)
    positions, velocities = rotation.track(x0, start=0.3, end=1.3, dt=0.25, return_velocity=True)
    times = step_times(0.3, 1.3, 0.25)
    assert velocities.shape == positions.shape == (5, 40, 3)
    expected = np.stack([rotation_velocity(p, t) for p, t in zip(positions, times)])
    np.testing.assert_allclose(velocities, expected, atol=1e-12)
    assert rotation.last_query_stats["queries"] == 2 * 4 + 1


def test_a_particle_leaving_a_wall_bounded_axis_is_named_with_the_time(rotation):
    x0 = disc_points(10, seed=7)
    x0[6] = [1.8, 1.8, 0.0]  # radius 2.55: rotates out of the [−2, 2]² box
    with pytest.raises(turbdb.OutOfDomainError, match=r"left the domain at time 0\.\d+ \(point 6: y = 2\.0"):
        rotation.track(x0, start=0.0, end=1.0, dt=0.05)
    # One that was never inside is not said to have left.
    x0[6] = [2.5, 0.0, 0.0]
    with pytest.raises(turbdb.OutOfDomainError, match=r"a particle starts outside the domain, at time 0 \(point 6"):
        rotation.track(x0, start=0.0, end=1.0, dt=0.05)


def test_progress_reports_every_step(rotation):
    calls = []
    rotation.track(disc_points(5), start=0.0, end=0.5, dt=0.1, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(k, 5) for k in range(1, 6)]


# -- ABC flow ------------------------------------------------------------------------------


A, B, C = 1.0, 0.8, 0.6


def abc_velocity(x, t=0.0):
    return np.stack([A * np.sin(x[:, 2]) + C * np.cos(x[:, 1]),
                     B * np.sin(x[:, 0]) + A * np.cos(x[:, 2]),
                     C * np.sin(x[:, 1]) + B * np.cos(x[:, 0])], 1)


@pytest.fixture(scope="module")
def abc(tmp_path_factory):
    """The steady Arnold–Beltrami–Childress flow on a periodic 32³ grid, 4 stored steps."""
    n = 32
    ds = turbdb.create_dataset(tmp_path_factory.mktemp("abc"), "abc", grid=(n, n, n), times=[0.0, 1.0, 2.0, 3.0],
                               fields={"velocity": 3}, atom=8, partition=32)
    axis = np.arange(n) * TWO_PI / n
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    u = abc_velocity(np.stack([x, y, z], -1).reshape(-1, 3)).reshape(n, n, n, 3)
    for k in range(4):
        ds.write("velocity", k, u)
    return ds


def abc_exact(x0, duration):
    solution = solve_ivp(lambda t, y: abc_velocity(y.reshape(-1, 3)).ravel(), (0, duration), x0.ravel(),
                         method="DOP853", rtol=1e-12, atol=1e-12)
    return solution.y[:, -1].reshape(-1, 3)


def test_abc_error_is_within_the_interpolation_plus_rk2_bound_and_second_order(abc):
    x0 = np.random.default_rng(8).uniform(0, TWO_PI, (100, 3))
    start, end = 0.5, 2.5
    exact = abc_exact(x0, end - start)
    # Interpolation error of the stored (float32) field, measured at many points.
    probe = np.random.default_rng(9).uniform(-TWO_PI, 2 * TWO_PI, (5000, 3))
    eps_u = np.abs(abc.query("velocity", probe, time=1.3, temporal="pchip", dtype=np.float64)
                   - abc_velocity(probe)).max()
    lipschitz = A + B + C  # bound on |∇u|
    gronwall = eps_u * (math.exp(lipschitz * (end - start)) - 1) / lipschitz
    errors = []
    for dt in (0.1, 0.05, 0.025):
        positions = abc.track(x0, start=start, end=end, dt=dt)
        heun_exact_field = heun(abc_velocity, x0, step_times(start, end, dt))[-1]
        # Same scheme on the analytic field: the difference is interpolation only.
        assert np.abs(positions[-1] - heun_exact_field).max() <= gronwall
        errors.append(np.abs(positions[-1] - exact).max())
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(orders > 1.8), (errors, orders)
    assert np.max(np.abs(positions[-1] - positions[0])) > TWO_PI / 4  # they went somewhere
    assert eps_u < 1e-4 and errors[-1] < 1e-3


def test_abc_forward_then_backward_returns_to_the_start(abc):
    x0 = np.random.default_rng(10).uniform(0, TWO_PI, (500, 3))
    forward = abc.track(x0, start=0.0, end=3.0, dt=0.05, method="lag8")
    back = abc.track(forward[-1], start=3.0, end=0.0, dt=0.05, method="lag8")
    assert np.abs(back[-1] - x0).max() < 1e-3


# -- DNS -----------------------------------------------------------------------------------


def test_dns_forward_then_backward_returns_close_to_the_start_and_converges(dns32):
    info = dns32.info
    x0 = np.random.default_rng(11).uniform(0, TWO_PI, (2000, 3))
    start, end = float(info.times[1]), float(info.times[-2])
    dx = info.spacing[0]
    medians = []
    for dt in (info.dt / 4, info.dt / 8):
        forward = dns32.track(x0, start=start, end=end, dt=dt)
        back = dns32.track(forward[-1], start=end, end=start, dt=dt)
        error = np.linalg.norm(back[-1] - x0, axis=1) / dx
        medians.append(np.median(error))
    assert np.sqrt(np.mean(np.sum((forward[-1] - x0) ** 2, axis=1))) > 5 * dx  # a real excursion
    assert medians[1] < 1e-3 and np.percentile(error, 99) < 0.05, (medians, np.percentile(error, 99))
    assert medians[0] / medians[1] > 3  # at least second order


# -- bad requests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(points=[[0, 0, 0], [1, np.nan, 0]]), turbdb.InvalidRequestError, "particle 1 is not finite"),
        (dict(points=np.zeros((4, 2))), turbdb.InvalidRequestError, r"shape \(N, 3\)"),
        (dict(start=-1.0), turbdb.InvalidRequestError, r"start = -1 is outside the stored times \[0, 2\]"),
        (dict(end=2.5), turbdb.InvalidRequestError, "end = 2.5 is outside"),
        (dict(dt=0.0), turbdb.InvalidRequestError, "dt must be positive"),
        (dict(dt=-0.1), turbdb.InvalidRequestError, "end < start tracks backward"),
        (dict(start=float("nan")), turbdb.InvalidRequestError, "start must be a finite number"),
        (dict(field="pressure"), turbdb.InvalidRequestError, "3 components; 'pressure' has 1"),
        (dict(field="magnetic"), KeyError, "has velocity, pressure"),
        (dict(method="lag5"), turbdb.UnknownNameError, "lag4, lag6"),
        (dict(method="fd4noint"), turbdb.InvalidRequestError, "offers"),
        (dict(integrator="rk4"), turbdb.UnknownNameError, "rk2, euler"),
    ],
)
def test_bad_requests_are_refused_with_a_message(rotation, kwargs, error, message):
    args = dict(points=disc_points(3), start=0.0, end=1.0, dt=0.1)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        rotation.track(args.pop("points"), **args)


def test_unwritten_steps_are_refused_before_any_work(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "partial", grid=(16, 16, 16), times=np.arange(6) * 0.125, fields={"velocity": 3})
    for k in range(4):
        ds.write("velocity", k, np.ones((16, 16, 16, 3)))
    np.testing.assert_allclose(ds.track([[1.0, 1.0, 1.0]], start=0.0, end=0.25, dt=0.05)[-1], [[1.25] * 3])
    with pytest.raises(turbdb.InvalidRequestError, match=r"needs time indices 2-5 of velocity; time index 4 \(t = 0.5\), time index 5 \(t = 0.625\) are not stored"):
        ds.track([[1.0, 1.0, 1.0]], start=0.375, end=0.5625, dt=0.05)


def test_a_predictor_outside_a_wall_is_named_as_such_not_as_the_particle(tmp_path):
    # Solid-body rotation in [-1, 1]³: a particle at radius 0.99 stays inside, but Heun's
    # predictor x + dt·u(x) overshoots the wall when dt is large.
    n = 33
    ds = turbdb.create_dataset(tmp_path, "rot", grid=(n, n, n), times=[0.0, 1.0], fields={"velocity": 3},
                               spacing=(2 / (n - 1),) * 3, origin=(-1.0,) * 3, periodic=(False,) * 3)
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, n),) * 3, indexing="ij")
    u = np.stack([-2 * y, 2 * x, np.zeros_like(x)], axis=-1)
    for t in range(2):
        ds.write("velocity", t, u)
    start = np.array([[0.99 * np.cos(-np.arctan(0.2)), 0.99 * np.sin(-np.arctan(0.2)), 0.0]])
    with pytest.raises(turbdb.OutOfDomainError, match=r"the rk2 predictor x \+ dt·u\(x\) of a particle left the "
                                                     r"domain at time 0\.1 .*if a smaller dt stops at about the same time"):
        ds.track(start, start=0.0, end=0.5, dt=0.1, method="lag4")
    assert np.abs(ds.track(start, start=0.0, end=0.5, dt=0.05, method="lag4")).max() < 1.0
