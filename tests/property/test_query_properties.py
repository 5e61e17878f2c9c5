"""Invariants of the query engine, by hypothesis: lagN reproduces any polynomial of degree
below N in each variable; a batch's answer does not depend on the order or the grouping of
its points."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turbdb

# Integer nodes in [-4, 4]: a term of total degree ≤ 11 stays below 2²⁴, so node values of
# integer-coefficient polynomials are exact in float32 and the comparison can be tight.
GRID = (9, 9, 9)
ORIGIN = (-4.0, -4.0, -4.0)
SPACING = (1.0, 1.0, 1.0)


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    path = tmp_path_factory.mktemp("prop")
    return turbdb.create_dataset(path, "poly", grid=GRID, origin=ORIGIN, spacing=SPACING, periodic=(False,) * 3,
                                 times=[0.0], fields={"s": 1}, atom=4, partition=8)


def nodes():
    axes = [o + d * np.arange(n) for o, d, n in zip(ORIGIN, SPACING, GRID)]
    z, y, x = np.meshgrid(axes[2], axes[1], axes[0], indexing="ij")
    return x, y, z


def evaluate(coeffs, x, y, z):
    """Σ c[i, j, k] x^i y^j z^k."""
    total = np.zeros(np.broadcast(x, y, z).shape)
    for (i, j, k), c in np.ndenumerate(coeffs):
        total = total + c * x**i * y**j * z**k
    return total


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    order=st.sampled_from([4, 6, 8]),
    data=st.data(),
)
def test_lagrange_reproduces_polynomials_below_its_order(bounded, order, data):
    degree = order - 1
    coeffs = np.zeros((degree + 1,) * 3)
    for _ in range(3):
        i = data.draw(st.integers(0, degree))
        j = data.draw(st.integers(0, min(degree, 11 - i)))
        k = data.draw(st.integers(0, min(degree, 11 - i - j)))
        coeffs[i, j, k] = data.draw(st.sampled_from([-2.0, -1.0, 1.0, 2.0]))
    x, y, z = nodes()
    values = evaluate(coeffs, x, y, z)
    assert np.array_equal(values.astype(np.float32).astype(np.float64), values)
    bounded.write("s", 0, values)
    seed = data.draw(st.integers(0, 2**31))
    hi = [o + d * (n - 1) for o, d, n in zip(ORIGIN, SPACING, GRID)]
    pts = np.random.default_rng(seed).uniform(ORIGIN, hi, (64, 3))
    got = bounded.query("s", pts, time=0.0, method=f"lag{order}", dtype=np.float64)[:, 0]
    expected = evaluate(coeffs, *pts.T)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-10 * np.abs(values).max())


@pytest.fixture(scope="module")
def periodic(tmp_path_factory):
    path = tmp_path_factory.mktemp("periodic")
    ds = turbdb.create_dataset(path, "box", grid=(24, 24, 24), times=[0.0, 1.0, 2.0], fields={"velocity": 3},
                               atom=4, partition=8)
    rng = np.random.default_rng(0)
    for t in range(3):
        ds.write("velocity", t, rng.standard_normal((24, 24, 24, 3)))
    return ds


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**31),
    count=st.integers(1, 300),
    method=st.sampled_from(["lag4", "lag6", "lag8", "m2q8", "fd4lag4"]),
    operator=st.sampled_from(["gradient", "hessian"]),
    split=st.integers(1, 5),
)
def test_answers_do_not_depend_on_point_order_or_batching(periodic, seed, count, method, operator, split):
    rng = np.random.default_rng(seed)
    pts = rng.uniform(-7, 14, (count, 3))
    whole = periodic.query("velocity", pts, time=0.6, method=method, operator=operator, temporal="pchip",
                           dtype=np.float64)
    permutation = rng.permutation(count)
    shuffled = periodic.query("velocity", pts[permutation], time=0.6, method=method, operator=operator,
                              temporal="pchip", dtype=np.float64)
    np.testing.assert_allclose(shuffled, whole[permutation], rtol=1e-12, atol=1e-12)
    parts = np.array_split(np.arange(count), split)
    pieces = np.concatenate([periodic.query("velocity", pts[p], time=0.6, method=method, operator=operator,
                                            temporal="pchip", dtype=np.float64) for p in parts])
    np.testing.assert_allclose(pieces, whole, rtol=1e-12, atol=1e-12)
