"""The wheel of `make wheel` is what users install without Rust: abi3 and manylinux, and
installed with pip into a fresh virtual environment whose PATH has no Rust toolchain, it
imports, writes a dataset, queries it to the analytic answer and names the SIMD path it
ran on."""

import os
import re
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SMOKE = r"""
import shutil, sys
import numpy as np
import turbdb

assert shutil.which("cargo") is None and shutil.which("rustc") is None, "a Rust toolchain is on PATH"
assert turbdb.__file__.startswith(sys.prefix), turbdb.__file__
n = 32
ds = turbdb.create_dataset("db", "wave", grid=(n, n, n), times=[0.0], fields={"velocity": 3})
axis = np.arange(n) * 2 * np.pi / n
z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
ds.write("velocity", 0, np.stack([np.sin(x), np.cos(y), np.sin(z + x)], -1))
pts = np.random.default_rng(0).uniform(0, 2 * np.pi, (10_000, 3))
wave = turbdb.open("db")["wave"]
got = wave.query("velocity", pts, time=0.0, method="lag8", dtype=np.float64)
expected = np.stack([np.sin(pts[:, 0]), np.cos(pts[:, 1]), np.sin(pts[:, 2] + pts[:, 0])], -1)
error = float(np.abs(got - expected).max())
assert error < 1e-5, error
print("kernel", wave.last_query_stats["kernel"])
print("error", error)
"""


@pytest.mark.slow
def test_wheel_installs_and_queries_in_a_fresh_venv_without_rust(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(["make", "-C", str(REPO), "wheel", f"WHEEL_DIR={wheels}"], check=True, capture_output=True)
    [wheel] = wheels.glob("*.whl")
    assert re.fullmatch(r"turbdb-[\d.]+-cp311-abi3-manylinux_\d+_\d+_(x86_64|aarch64)\.whl", wheel.name), wheel.name

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True)

    # A user's shell: the new venv and the system, no cargo/rustc, nothing of this repository.
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)),
           "LANG": "C.UTF-8"}
    run = subprocess.run([str(python), "-c", SMOKE], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    kernel = run.stdout.split("kernel ")[1].split()[0]
    assert kernel in {"avx512", "avx2", "neon", "portable"}, run.stdout
