"""Bad Python calls the fault and abuse probe (issue 13) made that did not hold: each must now
be a clear ``TurbdbError`` subclass — never an abort, a ``PanicException``, an
``OverflowError`` or a silent truncation — and lose nothing. Hypothesis then throws
arbitrary values at the argument checks."""

import os
import stat

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turbdb
from turbdb.exceptions import InvalidRequestError, LimitExceededError, TurbdbError, UnknownOptionError


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    ds = turbdb.create_dataset(tmp_path_factory.mktemp("bad"), "small", grid=(8, 8, 8), times=[0.0, 1.0],
                               atom=4, partition=8)
    rng = np.random.default_rng(0)
    for t in range(2):
        ds.write("velocity", t, rng.standard_normal((8, 8, 8, 3)).astype(np.float32))
        ds.write("pressure", t, rng.standard_normal((8, 8, 8)).astype(np.float32))
    return ds


@pytest.mark.parametrize("n", [2**22, 2**22 + 1, 2**31])
def test_a_cutout_too_large_for_memory_is_a_limit_error_that_says_how_to_split(small, n):
    with pytest.raises(LimitExceededError, match="split|smaller|stride|pieces|at most"):
        small.cutout("velocity", time=0.0, x=(0, n), y=(0, n), z=(0, n))


def test_the_result_size_limit_is_configurable(small):
    before = turbdb.max_result_bytes()
    try:
        turbdb.set_max_result_bytes(1000)
        with pytest.raises(LimitExceededError):
            small.cutout("velocity", time=0.0)  # 8³·3·4 bytes
        assert small.cutout("pressure", time=0.0, x=(0, 4), y=(0, 4), z=(0, 4)).shape[:3] == (4, 4, 4)
    finally:
        turbdb.set_max_result_bytes(None)
    assert turbdb.max_result_bytes() == before
    with pytest.raises(InvalidRequestError):
        turbdb.set_max_result_bytes(True)


def test_the_result_size_limit_from_the_environment_takes_units_and_names_a_bad_value():
    # "1MiB" and "1e6" were ignored for the default (half the memory) without a word.
    import subprocess
    import sys

    def limit(value):
        return subprocess.run([sys.executable, "-c", "import turbdb; print(turbdb.max_result_bytes())"],
                              env={**os.environ, "TURBDB_MAX_RESULT_BYTES": value}, capture_output=True, text=True)

    assert [limit(v).stdout.strip() for v in ("1000000", "1MiB", "1e6")] == ["1000000", "1048576", "1000000"]
    for bad in map(limit, ("garbage", "0", "20000000000000000000")):
        assert "TURBDB_MAX_RESULT_BYTES" in bad.stderr and "the default limit" in bad.stderr and bad.returncode == 0


@pytest.mark.parametrize("kwargs", [
    {"x": (float("inf"), 3)},
    {"time": None},
    {"stride": True},
    {"x": "05"},
    {"x": (0.5, 3.7)},
    {"stride": 2**64},
    {"x": (0, 18446744073709551616)},
    {"time": "0"},
    {"time": complex(0, 1)},
])
def test_bad_cutout_arguments_are_invalid_requests(small, kwargs):
    args = {"time": 0.0, **kwargs}
    with pytest.raises(InvalidRequestError):
        small.cutout("velocity", **args)


@pytest.mark.parametrize("points", [
    [[True, 0.0, 0.0]],
    [[1j, 0.0, 0.0]],
    [["1", 0.0, 0.0]],
    np.array([[1 + 0j, 0, 0]]),
    np.array([[True, False, True]]),
    "0 0 0",
])
def test_bools_complex_numbers_and_strings_are_not_points(small, points):
    with pytest.raises(InvalidRequestError):
        small.query("velocity", points, time=0.0)


@pytest.mark.parametrize("option", [{"method": "lag5"}, {"operator": "curl"}, {"temporal": "linear"},
                                    {"strategy": "fastest"}])
def test_an_unknown_method_or_operator_is_a_value_error_and_a_key_error(small, option):
    with pytest.raises(UnknownOptionError) as caught:
        small.query("velocity", [[0.1, 0.2, 0.3]], time=0.0, **option)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, KeyError)


def test_python_accepts_every_name_the_engine_accepts():
    from turbdb import _core
    from turbdb.arguments import METHOD_ALIASES, METHODS, OPERATORS

    assert set(METHODS) == set(_core.METHODS) and set(OPERATORS) == set(_core.OPERATORS)
    assert set(METHOD_ALIASES.values()) <= set(METHODS)


def test_metadata_files_honour_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        ds = turbdb.create_dataset(tmp_path, "perm", grid=(8, 8, 8), times=[0.0], atom=4, partition=8)
    finally:
        os.umask(previous)
    for path in (tmp_path / "zarr.json", ds.path / "zarr.json", ds.path / "velocity" / "zarr.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_a_failed_metadata_write_leaves_no_temporary_file(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "ro", grid=(8, 8, 8), times=[0.0], atom=4, partition=8)
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    ds.path.chmod(0o555)
    try:
        with pytest.raises(turbdb.StorageError, match="cannot write"):
            ds.append_times([1.0])
    finally:
        ds.path.chmod(0o755)
    assert not [p for p in ds.path.iterdir() if p.name.startswith(".turbdb-tmp-")]


# -- hypothesis: arbitrary values at the argument checks --------------------------------------


@pytest.fixture()
def bounded_results():
    """A 64 MiB result limit, so that no generated range can make the test allocate much."""
    turbdb.set_max_result_bytes(64 << 20)
    yield
    turbdb.set_max_result_bytes(None)


anything = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(), st.text(max_size=5), st.binary(max_size=5),
    st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=2), st.booleans()), max_size=4),
    st.tuples(st.integers(min_value=-2**70, max_value=2**70), st.integers(min_value=-2**70, max_value=2**70)),
)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=anything, stride=anything, time=anything)
def test_any_cutout_arguments_give_an_answer_or_a_turbdb_error(small, bounded_results, x, stride, time):
    try:
        small.cutout("pressure", time=time, x=x, stride=stride)
    except TurbdbError:
        pass


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(points=anything, method=st.one_of(st.sampled_from(["lag4", "LAG6", "none", "fd4noint"]), anything),
       time=anything)
def test_any_query_arguments_give_an_answer_or_a_turbdb_error(small, bounded_results, points, method, time):
    try:
        small.query("velocity", points, time=time, method=method)
    except TurbdbError:
        pass
