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

SMOKE = Path(__file__).with_name("wheel_smoke.py")


@pytest.mark.slow
def test_wheel_installs_and_queries_in_a_fresh_venv_without_rust(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(["make", "-C", str(REPO), "wheel", f"WHEEL_DIR={wheels}"], check=True, capture_output=True)
    [wheel] = wheels.glob("*.whl")
    assert re.fullmatch(r"turbdb-[\d.]+-cp311-abi3-manylinux_\d+_\d+_(x86_64|aarch64)\.whl", wheel.name), wheel.name

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", str(wheel)], check=True)

    # A user's shell: the new venv and the system, no cargo/rustc, nothing of this repository.
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)),
           "LANG": "C.UTF-8"}
    run = subprocess.run([str(python), str(SMOKE)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("module ")[1].split()[0].startswith(str(env_dir)), run.stdout
    kernel = run.stdout.split("kernel ")[1].split()[0]
    assert kernel in {"avx512", "avx2", "neon", "portable"}, run.stdout
