"""The SIMD path of the interpolation kernel: chosen at run time, forced with TURBDB_KERNEL
(read once per process, so each path runs in its own process), reported after every query,
and every path this CPU has gives the same answers."""

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import turbdb

QUERY = r"""
import json, sys
import numpy as np
import turbdb

ds = turbdb.open(sys.argv[1])[sys.argv[2]]
pts = np.random.default_rng(3).uniform(0, 2 * np.pi, (2_000, 3))
values = {op: ds.query("velocity", pts, time=0.0, method="lag8", operator=op, dtype=np.float64).tolist()
          for op in ("field", "gradient", "hessian")}
print(json.dumps({"kernel": ds.last_query_stats["kernel"], "selected": turbdb.kernel_path(), "values": values}))
"""


DEFAULT = r"""
import json, sys
import numpy as np
import turbdb

ds = turbdb.open(sys.argv[1])[sys.argv[2]]
pts = np.random.default_rng(3).uniform(0, 2 * np.pi, (500, 3))
ran = {}
for op in ("field", "gradient", "hessian"):
    ds.query("velocity", pts, time=0.0, method="lag8", operator=op)
    ran[op] = [ds.last_query_stats["kernel"], turbdb.kernel_path(op)]
print(json.dumps(ran))
"""


def run_on(path: str, ds: turbdb.Dataset) -> subprocess.CompletedProcess:
    env = {**os.environ, "TURBDB_KERNEL": path}
    return subprocess.run([sys.executable, "-c", QUERY, str(ds.path.parent), ds.name], env=env,
                          capture_output=True, text=True)


def test_the_default_path_is_the_preferred_one_this_cpu_has():
    paths = turbdb.kernel_paths()
    assert paths[-1] == "portable"
    # AVX2 before AVX-512: it measured as fast or faster on both AVX-512 machines we have.
    if "avx2" in paths:
        assert paths[0] == "avx2"
    if "TURBDB_KERNEL" not in os.environ:
        assert turbdb.kernel_path() == paths[0]


def test_by_default_derivatives_run_on_avx512_where_the_cpu_has_it_and_fields_on_the_preferred_path(synthetic32):
    env = {k: v for k, v in os.environ.items() if k != "TURBDB_KERNEL"}
    run = subprocess.run([sys.executable, "-c", DEFAULT, str(synthetic32.path.parent), synthetic32.name], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    ran = json.loads(run.stdout)
    paths = turbdb.kernel_paths()
    derivatives = "avx512" if "avx512" in paths else paths[0]
    assert ran == {"field": [paths[0]] * 2, "gradient": [derivatives] * 2, "hessian": [derivatives] * 2}


def test_kernel_path_names_the_operator_it_is_asked_about():
    with pytest.raises(turbdb.TurbdbError, match="operator"):
        turbdb.kernel_path("curl")


def test_every_path_this_cpu_has_gives_the_same_answers_and_says_it_ran(synthetic32):
    answers = {}
    for path in turbdb.kernel_paths():
        run = run_on(path, synthetic32)
        assert run.returncode == 0, run.stderr
        result = json.loads(run.stdout)
        assert result["kernel"] == result["selected"] == path
        answers[path] = result["values"]
    for path, values in answers.items():
        for op, v in values.items():
            expected = np.asarray(answers["portable"][op])
            np.testing.assert_allclose(v, expected, rtol=0, atol=1e-12 * np.abs(expected).max(), err_msg=f"{path} {op}")


@pytest.mark.parametrize("name, message", [("sse9", "unknown kernel path"), ("AVX9000", "valid: avx512, avx2, neon, portable")])
def test_an_unknown_path_is_refused_with_the_valid_names(synthetic32, name, message):
    run = run_on(name, synthetic32)
    assert run.returncode != 0
    assert "InvalidRequestError" in run.stderr and message in run.stderr and "TURBDB_KERNEL" in run.stderr


def test_a_path_this_cpu_lacks_is_refused_with_the_ones_it_has(synthetic32):
    missing = [p for p in ("avx512", "avx2", "neon") if p not in turbdb.kernel_paths()]
    if not missing:
        pytest.skip("this CPU has every path")
    run = run_on(missing[0], synthetic32)
    assert run.returncode != 0
    assert f"cannot run the {missing[0]} kernel" in run.stderr and "portable" in run.stderr


def test_the_benchmark_measures_the_core_clock_instead_of_reading_it():
    # bench/kernel_scaling.py computes its arithmetic bound from this clock (a chain of
    # dependent additions): a chain the CPU or compiler shortcut would give tens of GHz.
    from turbdb import _core

    ghz = _core.measured_clock_ghz()
    if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64"):
        assert 0.3 < ghz < 7.0
    else:
        assert ghz is None
