"""Grids as scientists bring them (thirteenth probe): every method, operator, cutout and
track on odd, thin, anisotropic and offset grids agreed with an independent reference; two
inputs were taken wrongly. A malformed `--spacing` or `--origin` value (negative, zero,
infinite, NaN) failed the work (exit 1, named by the Python parameter) where cli.md makes it
a usage error (exit 2, named by its flag); a spacing float64 cannot resolve where the domain
lies (origin 1e300, spacing 0.1) was taken, every node's coordinate 1e300, every point on
node 0."""

import subprocess
import sys

import numpy as np
import pytest

import turbdb


@pytest.mark.parametrize("option, value, says", [
    ("--spacing", "-0.1,0.25,1", "three positive numbers"),
    ("--spacing", "0,1,1", "three positive numbers"),
    ("--spacing", "inf,1,1", "three finite numbers"),
    ("--origin", "nan,0,0", "three finite numbers"),
])
def test_a_malformed_spacing_or_origin_is_a_usage_error_named_by_its_flag(tmp_path, option, value, says):
    np.save(tmp_path / "u.npy", np.zeros((8, 8, 8, 3), np.float32))
    run = subprocess.run([sys.executable, "-m", "turbdb.cli", "ingest", str(tmp_path / "db"), "--name", "t",
                          "--field", "u", str(tmp_path / "u.npy"), f"{option}={value}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert option in run.stderr and says in run.stderr and "Usage:" in run.stderr
    assert not (tmp_path / "db" / "t").exists()


@pytest.mark.parametrize("origin, spacing", [
    ((1e300, 0.0, 0.0), (0.1, 1.0, 1.0)),   # every node at 1e300
    ((1e6, 0.0, 0.0), (1e-11, 1.0, 1.0)),   # 2 distinct coordinates of 16
    ((0.0, 1e16, 0.0), (1.0, 1.0, 1.0)),    # 9 of 16, the far wall "outside"
])
def test_a_spacing_float64_cannot_resolve_where_the_domain_lies_is_refused(tmp_path, origin, spacing):
    with pytest.raises(turbdb.InvalidRequestError, match="is too fine for coordinates near .* give the origin"):
        turbdb.create_dataset(tmp_path, "far", grid=(16, 16, 16), times=[0.0], fields={"u": 1}, origin=origin,
                              spacing=spacing)
    assert not (tmp_path / "far").exists()


def test_an_offset_domain_float64_resolves_is_taken_and_answers(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "offset", grid=(16, 16, 16), times=[0.0], fields={"u": 1},
                               origin=(1e6, -3.5, 10.0), spacing=(1e-3, 0.25, 1.0), periodic=(False, True, True))
    z, y, x = np.meshgrid(np.arange(16) * 1.0, np.arange(16) * 0.25, np.arange(16) * 1e-3, indexing="ij")
    ds.write("u", 0, x * 1000 + 0 * y + 0 * z)
    value = ds.query("u", [[1e6 + 5.5e-3, 0.0, 12.0]], time=0.0, method="lag4", dtype=np.float64)
    assert value[0, 0] == pytest.approx(5.5, abs=1e-6)
