"""What a user does first with an installed wheel, run by the wheel tests in a fresh
environment: write a dataset, query it to the analytic answer, name the SIMD path it ran
on. Run as a script; prints ``kernel <path>`` and ``error <max abs error>``."""

import platform
import shutil

import numpy as np

import turbdb

assert shutil.which("cargo") is None and shutil.which("rustc") is None, "a Rust toolchain is on PATH"
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
print("machine", platform.machine())
print("module", turbdb.__file__)
print("kernel", wave.last_query_stats["kernel"])
print("error", error)
