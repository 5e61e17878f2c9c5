"""Dataset.query against analytic fields: trigonometric fields on periodic grids converge
at each method's order, polynomials on bounded grids are reproduced exactly (also next to
the walls, where stencils shift inward), and bad requests get clear errors."""

import math

import numpy as np
import pytest

import turbdb
from turbdb.arguments import axes_of

TWO_PI = 2 * math.pi


def trig_dataset(path, n, times=(0.0, 1.0)):
    """u = (sin x cos 2y, cos z sin(x + y), sin 3z + cos x) on the periodic box, n³ nodes."""
    ds = turbdb.create_dataset(path, f"trig{n}", grid=(n, n, n), times=times, fields={"velocity": 3},
                               atom=8, partition=32, overwrite=True)
    axis = np.arange(n) * TWO_PI / n
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    for t in range(len(times)):
        ds.write("velocity", t, trig(np.stack([x, y, z], -1).reshape(-1, 3))[0].reshape(n, n, n, 3))
    return ds


def trig(p):
    """Value (N, 3), gradient (N, 3, 3) and Hessian (N, 3, 6: xx xy xz yy yz zz)."""
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    zero = np.zeros_like(x)
    u = np.stack([np.sin(x) * np.cos(2 * y), np.cos(z) * np.sin(x + y), np.sin(3 * z) + np.cos(x)], -1)
    g = np.stack([
        np.stack([np.cos(x) * np.cos(2 * y), -2 * np.sin(x) * np.sin(2 * y), zero], -1),
        np.stack([np.cos(z) * np.cos(x + y), np.cos(z) * np.cos(x + y), -np.sin(z) * np.sin(x + y)], -1),
        np.stack([-np.sin(x), zero, 3 * np.cos(3 * z)], -1),
    ], 1)
    s = np.sin(x + y) * np.cos(z)
    h = np.stack([
        np.stack([-np.sin(x) * np.cos(2 * y), -2 * np.cos(x) * np.sin(2 * y), zero, -4 * np.sin(x) * np.cos(2 * y), zero, zero], -1),
        np.stack([-s, -s, -np.sin(z) * np.cos(x + y), -s, -np.sin(z) * np.cos(x + y), -s], -1),
        np.stack([-np.cos(x), zero, zero, zero, zero, -9 * np.sin(3 * z)], -1),
    ], 1)
    return u, g, h


def random_points(count, seed=0, low=0.0, high=TWO_PI):
    return np.random.default_rng(seed).uniform(low, high, (count, 3))


def max_error(ds, method, operator, pts):
    got = ds.query("velocity", pts, time=0.0, method=method, operator=operator, dtype=np.float64)
    u, g, h = trig(pts)
    expected = {"field": u, "gradient": g, "hessian": h, "laplacian": h[:, :, 0] + h[:, :, 3] + h[:, :, 5]}[operator]
    assert got.shape == expected.shape
    return np.abs(got - expected).max()


# (method, operator, expected order, coarse grid): orders of the truncation error.
CONVERGENCE = [
    ("lag4", "field", 4, 16), ("lag6", "field", 6, 16), ("lag8", "field", 8, 16),
    ("lag4", "gradient", 3, 16), ("lag6", "gradient", 5, 16), ("lag8", "hessian", 6, 16),
    ("m1q4", "field", 3, 16), ("m2q8", "field", 6, 16), ("m2q8", "gradient", 5, 16),
    ("fd4noint", "gradient", 4, 16), ("fd6noint", "hessian", 6, 16), ("fd8noint", "gradient", 8, 16),
    ("fd4noint", "laplacian", 4, 16), ("fd4lag4", "gradient", 4, 16), ("fd4lag4", "hessian", 4, 16),
]


@pytest.mark.parametrize("method, operator, order, n", CONVERGENCE)
def test_error_converges_at_the_methods_order(tmp_path, method, operator, order, n):
    pts = random_points(400, seed=1)
    if method.endswith("noint"):  # no interpolation: compare at nodes only
        pts = np.round(pts / (TWO_PI / (2 * n))) * (TWO_PI / (2 * n))
    coarse = max_error(trig_dataset(tmp_path, n), method, operator, pts)
    fine = max_error(trig_dataset(tmp_path, 2 * n), method, operator, pts)
    observed = math.log2(coarse / fine)
    assert observed > order - 1.0, f"{method} {operator}: errors {coarse:.3g} → {fine:.3g}, order {observed:.2f}"


def test_every_method_operator_temporal_combination_is_accurate_on_a_fine_grid(tmp_path):
    ds = trig_dataset(tmp_path, 64, times=(0.0, 0.5, 1.0, 1.5))
    pts = random_points(300, seed=2)
    tolerance = {"field": 2e-3, "gradient": 2e-2, "hessian": 0.15, "laplacian": 0.3}
    low_order = {"lag4", "m1q4"}  # derivatives of O(h³)/O(h²) accuracy (m1q4: O(h²)/O(h))
    for method in ("lag4", "lag6", "lag8", "m1q4", "m2q8", "fd4lag4", "fd4noint", "fd6noint", "fd8noint", "none"):
        for operator in ("field", "gradient", "hessian", "laplacian"):
            for temporal in ("none", "pchip"):
                try:
                    got = ds.query("velocity", pts, time=0.7, method=method, operator=operator, temporal=temporal,
                                   dtype=np.float64)
                except turbdb.InvalidRequestError as e:
                    assert "offers" in str(e)
                    continue
                at = pts if not method.endswith("noint") and method != "none" else np.round(pts / (TWO_PI / 64)) * (TWO_PI / 64)
                u, g, h = trig(at)
                expected = {"field": u, "gradient": g, "hessian": h, "laplacian": h[:, :, 0] + h[:, :, 3] + h[:, :, 5]}[operator]
                err = np.abs(got - expected).max()
                limit = tolerance[operator] * (4 if method in low_order and operator != "field" else 1)
                assert err < limit, f"{method} {operator} {temporal}: {err}"


def poly_dataset(path):
    """A bounded grid whose node values are exact in float32: dyadic origin and spacing."""
    grid = (24, 20, 18)
    origin, spacing = (-2.0, 0.5, 1.0), (0.25, 0.5, 0.125)
    ds = turbdb.create_dataset(path, "poly", grid=grid, origin=origin, spacing=spacing, periodic=(False,) * 3,
                               times=[0.0, 1.0, 2.0, 3.0], fields={"pressure": 1}, atom=4, partition=16)
    axes = [o + d * np.arange(n) for o, d, n in zip(origin, spacing, grid)]
    z, y, x = np.meshgrid(axes[2], axes[1], axes[0], indexing="ij")
    for t in range(4):
        ds.write("pressure", t, poly(x, y, z, t))
    return ds, origin, spacing, grid


def poly(x, y, z, t=0.0):
    """Degree 3 in x, 2 in y, 3 in z; quadratic in t."""
    return (x**3 - 2 * x * y + 0.5 * y**2 * z - z**3 + 3 * x * z + 1) * (1 + 0.25 * t * t)


def poly_derivatives(p, t=0.0):
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    s = 1 + 0.25 * t * t
    g = np.stack([3 * x**2 - 2 * y + 3 * z, -2 * x + y * z, 0.5 * y**2 - 3 * z**2 + 3 * x], -1) * s
    h = np.stack([6 * x, -2 + 0 * x, 3 + 0 * x, z, y, -6 * z], -1) * s
    return g, h


def domain_points(origin, spacing, grid, count, seed):
    rng = np.random.default_rng(seed)
    hi = [o + d * (n - 1) for o, d, n in zip(origin, spacing, grid)]
    pts = rng.uniform(origin, hi, (count, 3))
    pts[:10] = np.array(origin) + rng.uniform(0, 0.3, (10, 3)) * spacing  # next to the low walls
    pts[10:20] = np.array(hi) - rng.uniform(0, 0.3, (10, 3)) * spacing  # next to the high walls
    pts[20] = origin
    pts[21] = hi
    return pts


@pytest.mark.parametrize("method", ["lag4", "lag6", "lag8", "m2q8"])
def test_polynomials_below_the_order_are_reproduced_exactly_up_to_the_walls(tmp_path, method):
    ds, origin, spacing, grid = poly_dataset(tmp_path)
    pts = domain_points(origin, spacing, grid, 500, seed=3)
    loose = 1
    value = ds.query("pressure", pts, time=1.0, method=method, dtype=np.float64)[:, 0]
    np.testing.assert_allclose(value, poly(pts[:, 0], pts[:, 1], pts[:, 2], 1.0), rtol=1e-11 * loose, atol=1e-10 * loose)
    g, h = poly_derivatives(pts, 1.0)
    grad = ds.query("pressure", pts, time=1.0, method=method, operator="gradient", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(grad, g, rtol=1e-9 * loose, atol=1e-8 * loose)
    hess = ds.query("pressure", pts, time=1.0, method=method, operator="hessian", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(hess, h, rtol=1e-8 * loose, atol=1e-7 * loose)
    lap = ds.query("pressure", pts, time=1.0, method=method, operator="laplacian", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(lap, h[:, 0] + h[:, 3] + h[:, 5], rtol=1e-8 * loose, atol=1e-7 * loose)
    interior = pts[30:]
    exact = ds.query("pressure", interior, time=1.0, method=method, dtype=np.float64)[:, 0]
    np.testing.assert_allclose(exact, poly(*interior.T, 1.0), rtol=1e-11, atol=1e-10)


@pytest.mark.parametrize("method", ["fd4noint", "fd6noint", "fd8noint", "fd4lag4"])
def test_finite_differences_are_exact_on_polynomials_at_nodes_and_by_the_walls(tmp_path, method):
    ds, origin, spacing, grid = poly_dataset(tmp_path)
    pts = domain_points(origin, spacing, grid, 300, seed=4)
    nodes = np.array(origin) + np.round((pts - origin) / spacing) * spacing
    at = nodes if method.endswith("noint") else pts
    g, h = poly_derivatives(at, 2.0)
    grad = ds.query("pressure", pts, time=2.0, method=method, operator="gradient", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(grad, g, rtol=1e-9, atol=1e-8)
    hess = ds.query("pressure", pts, time=2.0, method=method, operator="hessian", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(hess, h, rtol=1e-8, atol=1e-7)


def test_pchip_is_exact_for_quadratics_in_time_and_none_takes_the_nearest_step(tmp_path):
    ds, origin, spacing, grid = poly_dataset(tmp_path)
    pts = domain_points(origin, spacing, grid, 50, seed=5)
    x, y, z = pts.T
    got = ds.query("pressure", pts, time=1.3, method="lag4", temporal="pchip", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(got, poly(x, y, z, 1.3), rtol=1e-11, atol=1e-10)
    nearest = ds.query("pressure", pts, time=1.3, method="lag4", temporal="none", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(nearest, poly(x, y, z, 1.0), rtol=1e-11, atol=1e-10)
    at_end = ds.query("pressure", pts, time=3.0, method="lag4", temporal="pchip", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(at_end, poly(x, y, z, 3.0), rtol=1e-11, atol=1e-10)


def test_pchip_is_third_order_in_the_first_and_last_stored_intervals_too(tmp_path):
    # methods.md said second order there (the secant slope of before); the one-sided
    # three-point slopes are exact for quadratics, so t**3 is off by O(dt**3).
    errors = {}
    for k, dt in enumerate((0.1, 0.05, 0.025)):
        times = [i * dt for i in range(6)]
        ds = turbdb.create_dataset(tmp_path / str(k), "t3", grid=(8, 8, 8), times=times, fields={"s": 1}, atom=4,
                                   partition=8)
        for i, t in enumerate(times):
            ds.write("s", i, np.full((8, 8, 8), t**3))
        for end, at in (("first", dt / 2), ("last", times[-1] - dt / 2)):
            got = ds.query("s", [[1.0, 2.0, 3.0]], time=at, method="lag4", temporal="pchip", dtype=np.float64)[0, 0]
            errors.setdefault(end, []).append(abs(got - at**3))
    for end, (coarse, middle, fine) in errors.items():
        assert coarse / middle > 6 and middle / fine > 6, (end, errors[end])


def test_none_gives_the_value_at_the_nearest_node(tmp_path):
    ds, origin, spacing, grid = poly_dataset(tmp_path)
    pts = domain_points(origin, spacing, grid, 100, seed=6)
    nodes = np.array(origin) + np.round((pts - origin) / spacing) * spacing
    got = ds.query("pressure", pts, time=0.0, method="none", dtype=np.float64)[:, 0]
    np.testing.assert_allclose(got, poly(*nodes.T), rtol=1e-12)


def test_strategies_give_the_same_answer(tmp_path):
    ds = trig_dataset(tmp_path, 40)
    pts = random_points(2000, seed=7, low=-10, high=20)  # also far outside the box: wraps
    results = {s: ds.query("velocity", pts, time=0.4, method="lag6", operator="hessian", temporal="pchip",
                           dtype=np.float64, strategy=s) for s in ("streaming", "sorted", "direct")}
    np.testing.assert_allclose(results["sorted"], results["streaming"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(results["direct"], results["streaming"], rtol=1e-12, atol=1e-12)


def test_the_streaming_path_reads_each_atom_once_per_cell_whose_box_needs_it(tmp_path):
    ds = trig_dataset(tmp_path, 32)
    ds.query("velocity", random_points(5000), time=0.0, method="lag8")
    streaming = ds.last_query_stats["atoms_read"]
    # 32³ / 8³ = 64 atoms, one time step: each at least once, and at most once into each
    # cell whose box (the cell and its halo) holds it: there are at most 8 cells here
    assert 64 <= streaming <= 8 * 64
    assert ds.last_query_stats["contributions"] == 5000  # every point once, in its own cell
    ds.query("velocity", random_points(5000), time=0.0, method="lag8", strategy="direct")
    assert ds.last_query_stats["atoms_read"] > 10 * streaming


def test_results_have_the_documented_shapes_and_dtypes(tmp_path):
    ds = trig_dataset(tmp_path, 16)
    pts = random_points(7)
    assert ds.query("velocity", pts, time=0, operator="field").shape == (7, 3)
    assert ds.query("velocity", pts, time=0, operator="gradient").shape == (7, 3, 3)
    assert ds.query("velocity", pts, time=0, operator="hessian").shape == (7, 3, 6)
    assert ds.query("velocity", pts, time=0, operator="laplacian").shape == (7, 3)
    assert ds.query("velocity", pts, time=0).dtype == np.float32
    assert ds.query("velocity", pts.astype(np.float32), time=0, dtype=np.float64).dtype == np.float64
    assert ds.query("velocity", np.zeros((0, 3)), time=0).shape == (0, 3)


@pytest.mark.parametrize("strategy, operator", [("streaming", "gradient"), ("direct", "field"),
                                                ("direct", "gradient")])
def test_a_float32_answer_is_the_float64_answer_rounded_once(tmp_path, strategy, operator):
    # The engine rounds its float64 sums to float32 as it puts them in the caller's order:
    # the same bits as casting the float64 answer.
    ds = trig_dataset(tmp_path, 16)
    pts = random_points(2000)
    single = ds.query("velocity", pts, time=0, method="lag6", operator=operator, strategy=strategy)
    double = ds.query("velocity", pts, time=0, method="lag6", operator=operator, strategy=strategy,
                      dtype=np.float64)
    assert single.dtype == np.float32 and double.dtype == np.float64
    np.testing.assert_array_equal(single, double.astype(np.float32))


@pytest.mark.parametrize("method", ["lag4", "lag6", "lag8"])
def test_a_streamed_float32_field_is_within_float32_rounding_of_the_float64_answer(tmp_path, method):
    # Its z sums run in float32 (a quarter of the instructions); the error they add is of
    # the order of the answer's own rounding, far inside 1e-6 of the field's magnitude.
    ds = trig_dataset(tmp_path, 16)
    pts = random_points(2000)
    single = ds.query("velocity", pts, time=0, method=method)
    double = ds.query("velocity", pts, time=0, method=method, dtype=np.float64)
    error = np.abs(single - double).max() / np.abs(double).max()
    assert error <= 1e-6
    assert not np.array_equal(single, double.astype(np.float32))  # the float32 sums did run


def test_the_store_refuses_an_answer_dtype_it_cannot_give(tmp_path):
    ds = trig_dataset(tmp_path, 16)
    store = ds.field_store("velocity")
    info = ds.metadata
    with pytest.raises(turbdb.InvalidRequestError, match="float32 or float64, not int16"):
        store.query(random_points(3), axes=axes_of(info), times=info.times, time=0.0, method="lag4",
                    operator="field", temporal="none", strategy="streaming", dtype=np.dtype(np.int16))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(points=[[0, 0, 0], [1, np.nan, 0]]), turbdb.InvalidRequestError, "point 1 is not finite"),
        (dict(points=[[0, 0, 0], [1, 2, np.inf]]), ValueError, "point 1"),
        (dict(points=np.zeros((4, 2))), turbdb.InvalidRequestError, r"shape \(N, 3\)"),
        (dict(points=[1.0, 2.0, 3.0]), turbdb.InvalidRequestError, r"\[\[x, y, z\]\]"),
        (dict(points="abc"), turbdb.InvalidRequestError, "numbers"),
        (dict(time=5.0), turbdb.InvalidRequestError, "outside the stored range"),
        (dict(time=float("nan")), turbdb.InvalidRequestError, "finite"),
        (dict(field="magnetic"), KeyError, "has velocity"),
        (dict(method="lag5"), turbdb.UnknownNameError, "lag4, lag6, lag8"),
        (dict(operator="curl"), KeyError, "field, gradient, hessian, laplacian"),
        (dict(temporal="linear"), KeyError, "none, pchip"),
        (dict(method="none", operator="gradient"), turbdb.InvalidRequestError, "offers: field"),
        (dict(method="fd4noint", operator="field"), turbdb.InvalidRequestError, "offers: gradient, hessian, laplacian"),
        (dict(dtype=np.int32), turbdb.InvalidRequestError, "float32 or float64"),
    ],
)
def test_bad_requests_are_refused_with_a_message(tmp_path, kwargs, error, message):
    ds = trig_dataset(tmp_path, 16)
    args = dict(field="velocity", points=random_points(3), time=0.0)
    args.update(kwargs)
    field, points = args.pop("field"), args.pop("points")
    with pytest.raises(error, match=message):
        ds.query(field, points, **args)


def test_points_outside_a_bounded_axis_and_unwritten_steps_are_refused(tmp_path):
    ds, origin, spacing, grid = poly_dataset(tmp_path)
    with pytest.raises(turbdb.OutOfDomainError, match="point 1: x = -3 is outside"):
        ds.query("pressure", [[0, 1, 2], [-3.0, 1, 2]], time=0)
    fresh = turbdb.create_dataset(tmp_path, "fresh", grid=(16, 16, 16), times=[0, 1], fields={"pressure": 1})
    fresh.write("pressure", 0, np.zeros((16, 16, 16)))
    with pytest.raises(turbdb.InvalidRequestError, match=r"time index 1 \(t = 1\) of pressure is not stored"):
        fresh.query("pressure", [[1, 1, 1]], time=1.0)
    with pytest.raises(turbdb.InvalidRequestError, match=r"time index 1 \(t = 1\) of pressure is not stored"):
        fresh.query("pressure", [[1, 1, 1]], time=0.5, temporal="pchip")


def test_points_and_times_come_as_numpy_pandas_and_xarray_give_them(tmp_path):
    import pandas as pd
    import xarray as xr

    ds = trig_dataset(tmp_path, 16)
    pts = random_points(4)
    expected = ds.query("velocity", pts, time=0.5)
    frame = pd.DataFrame(pts, columns=["x", "y", "z"])  # iterated, it gave its column names
    np.testing.assert_array_equal(ds.query("velocity", frame, time=0.5), expected)
    np.testing.assert_array_equal(ds.query("velocity", xr.DataArray(pts, dims=("point", "xyz")), time=0.5), expected)
    np.testing.assert_array_equal(ds.query("velocity", pts, time=np.array(0.5)), expected)  # a 0-d array
    masked = np.ma.masked_array(pts, mask=np.zeros_like(pts, dtype=bool))
    np.testing.assert_array_equal(ds.query("velocity", masked, time=0.5), expected)
    masked[1, 2] = np.ma.masked
    with pytest.raises(turbdb.InvalidRequestError, match="masked values"):
        ds.query("velocity", masked, time=0.5)
    with pytest.raises(turbdb.InvalidRequestError, match="real numbers"):
        ds.query("velocity", pd.DataFrame({"x": ["a"], "y": [1.0], "z": [2.0]}), time=0.5)
    with pytest.raises(turbdb.InvalidRequestError, match="finite number"):
        ds.query("velocity", pts, time=np.array(np.nan))


def test_a_runaway_point_on_a_periodic_axis_is_refused_not_wrapped(tmp_path):
    # 1e20 and 1e308 once wrapped onto the same node and gave a plausible answer: a float64
    # that large no longer says where in its cell the point is.
    ds = trig_dataset(tmp_path, 16)
    far = [[1.0, 2.0, 3.0], [1.0, 1e20, 3.0]]
    for strategy in ("streaming", "sorted", "direct"):
        with pytest.raises(turbdb.OutOfDomainError, match=r"point 1: y = 1e20 is too far from the periodic y axis"):
            ds.query("velocity", far, time=0.0, strategy=strategy)
    with pytest.raises(turbdb.OutOfDomainError, match=r"x = -1e308 is too far"):
        ds.query("velocity", [[-1e308, 0, 0]], time=0.0, method="lag4", operator="gradient")
    # A thousand periods away still wraps, to the same answer as inside the box.
    near = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(ds.query("velocity", near + 1000 * TWO_PI, time=0.0),
                               ds.query("velocity", near, time=0.0), rtol=0, atol=1e-5)


def test_cutout_wraps_on_periodic_axes_and_carries_coordinates(tmp_path):
    ds = trig_dataset(tmp_path, 16)
    stored = np.asarray(__import__("zarr").open_array(ds.path / "velocity", mode="r")[1])
    cut = ds.cutout("velocity", time=0.9, x=(-3, 5), y=(2, 9), z=(14, 20), stride=2)
    xi, yi, zi = np.arange(-3, 5, 2) % 16, np.arange(2, 9, 2), np.arange(14, 20, 2) % 16
    np.testing.assert_array_equal(cut.values, stored[np.ix_(zi, yi, xi)])
    assert cut.dims == ("z", "y", "x", "component")
    np.testing.assert_allclose(cut.x.values, np.arange(-3, 5, 2) * TWO_PI / 16)
    np.testing.assert_array_equal(cut.x_index.values, xi)
    assert list(cut.component.values) == ["ux", "uy", "uz"] and cut.attrs["time_index"] == 1
    whole = ds.cutout("velocity", time=0.0)
    assert whole.shape == (16, 16, 16, 3)


def test_cutout_refuses_ranges_outside_a_bounded_axis(tmp_path):
    ds, *_ = poly_dataset(tmp_path)
    with pytest.raises(turbdb.OutOfDomainError, match="outside the non-periodic axis"):
        ds.cutout("pressure", time=0, x=(-1, 4))
    with pytest.raises(turbdb.InvalidRequestError, match="empty"):
        ds.cutout("pressure", time=0, x=(4, 4))
    with pytest.raises(turbdb.InvalidRequestError, match="stride"):
        ds.cutout("pressure", time=0, stride=0)


def test_float32_points_on_a_wall_are_on_it(tmp_path):
    # float32's rounding of a wall at 0.35 lies 6e-9 outside it, past the float64 tolerance.
    ds = turbdb.create_dataset(tmp_path, "w", grid=(16, 16, 16), spacing=(0.1, 0.1, 0.1), origin=(0.0, 0.35, 0.0),
                               periodic=(True, False, True), times=[0.0], fields={"p": 1})
    ds.write("p", 0, np.ones((16, 16, 16)))
    walls = np.array([[0.5, 0.35, 0.5], [0.5, 0.35 + 15 * 0.1, 0.5]], dtype=np.float32)  # x, z: exact in float32
    assert float(np.float32(0.35)) < 0.35 and float(np.float32(1.85)) > 1.85
    np.testing.assert_allclose(ds.query("p", walls, time=0.0, method="lag4"), 1.0)
    with pytest.raises(turbdb.OutOfDomainError):
        ds.query("p", np.array([[0.5, 0.3499, 0.5]], dtype=np.float32), time=0.0, method="lag4")
    # A track from the wall (in a flow at rest), and a float32 DataFrame, too.
    ds.add_field("velocity", 3)
    ds.write("velocity", 0, np.zeros((16, 16, 16, 3)))
    np.testing.assert_array_equal(ds.track(walls, start=0.0, end=0.0, dt=0.1, method="lag4")[0],
                                  [[0.5, 0.35, 0.5], [0.5, 0.35 + 15 * 0.1, 0.5]])
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(walls, columns=["x", "y", "z"])
    np.testing.assert_allclose(ds.query("p", frame, time=0.0, method="lag4"), 1.0)
    # The R–Q PDF takes the same points (it refused them before).
    ds.write("velocity", 0, np.random.default_rng(0).normal(size=(16, 16, 16, 3)))
    from turbdb.stats import rq_pdf
    assert rq_pdf(ds, time=0.0, points=walls, method="lag4").r.shape == (2,)


def test_float32_points_are_exact_at_a_wall_at_zero(tmp_path):
    # One float32 step past a wall at 0 is 1e-45: a point 1e-7 outside is refused, not put on it.
    ds = turbdb.create_dataset(tmp_path, "z", grid=(16, 16, 16), spacing=(1e-8, 1.0, 1.0),
                               periodic=(False, True, True), times=[0.0], fields={"p": 1})
    ds.write("p", 0, np.ones((16, 16, 16)))
    np.testing.assert_allclose(ds.query("p", np.zeros((1, 3), np.float32), time=0.0, method="lag4"), 1.0)
    with pytest.raises(turbdb.OutOfDomainError):
        ds.query("p", np.array([[-1e-7, 0.0, 0.0]], dtype=np.float32), time=0.0, method="lag4")
