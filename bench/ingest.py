"""Ingest throughput: MB/s of float32 stored from an in-memory array into a turbdb dataset,
against two baselines measured in the same run: np.save of the same bytes (the file system's
ceiling) and zarr-python writing the same sharded layout (the obvious alternative).

    python bench/ingest.py [--grid 256] [--steps 4] [--dir /tmp/turbdb-bench]

Writes bench/results/ingest.json and bench/results/ingest.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import turbdb

RESULTS = Path(__file__).parent / "results"


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", type=int, default=256, help="grid points per side (default 256)")
    parser.add_argument("--steps", type=int, default=4, help="time steps written per measurement (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per method; the best is kept")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()

    n, steps = args.grid, args.steps
    rng = np.random.default_rng(0)
    data = rng.standard_normal((n, n, n, 3), dtype=np.float32)
    data64 = data.astype(np.float64)
    megabytes = data.nbytes * steps / 1e6
    scratch = Path(tempfile.mkdtemp(prefix="turbdb-bench-", dir=args.dir))
    print(f"ingest benchmark: {steps} steps of {n}³×3 float32 ({megabytes:.0f} MB) on {os.cpu_count()} cores, in {scratch}")

    def fresh(name: str) -> turbdb.Dataset:
        return turbdb.create_dataset(scratch, name, grid=(n, n, n), times=np.arange(steps), fields={"velocity": 3}, overwrite=True)

    def turbdb_write(array, sync=False):
        ds = fresh("bench")
        return lambda: [ds.write("velocity", t, array, sync=sync) for t in range(steps)]

    def np_save():
        for t in range(steps):
            np.save(scratch / f"raw{t}.npy", data)

    def zarr_write():
        import zarr

        path = scratch / "zarr_python"
        shutil.rmtree(path, ignore_errors=True)
        array = zarr.create_array(store=str(path), shape=(steps, n, n, n, 3), dtype="float32",
                                  chunks=(1, 8, 8, 8, 3), shards=(1, 64, 64, 64, 3), compressors=None,
                                  fill_value=np.nan)
        for t in range(steps):
            array[t] = data

    methods = {
        "turbdb (float32 input)": lambda: turbdb_write(data)(),
        "turbdb (float64 input)": lambda: turbdb_write(data64)(),
        "turbdb (fsync every shard)": lambda: turbdb_write(data, sync=True)(),
        "np.save (file system ceiling)": np_save,
        "zarr-python, same sharding": zarr_write,
    }
    results = {}
    for label, fn in methods.items():
        repeats = 1 if label.startswith("zarr") else args.repeats
        best = min(timed(fn) for _ in range(repeats))
        results[label] = {"seconds": best, "MB_per_s": megabytes / best}
        print(f"  {label:<32} {megabytes / best:8.0f} MB/s  ({best:.2f} s)")

    ours = results["turbdb (float32 input)"]["MB_per_s"]
    ratios = {
        "turbdb / np.save": ours / results["np.save (file system ceiling)"]["MB_per_s"],
        "turbdb / zarr-python": ours / results["zarr-python, same sharding"]["MB_per_s"],
        "turbdb / JHTDB paper (12 MB/s per node)": ours / 12.0,
    }
    for label, ratio in ratios.items():
        print(f"  {label:<40} {ratio:6.2f}x")
    print(f"  target ≥ 300 MB/s: {'met' if ours >= 300 else 'NOT met'} ({ours:.0f} MB/s)")
    shutil.rmtree(scratch, ignore_errors=True)

    RESULTS.mkdir(exist_ok=True)
    report = {
        "benchmark": "ingest", "grid": n, "steps": steps, "megabytes": megabytes, "cores": os.cpu_count(),
        "machine": platform.platform(), "results": results, "ratios": ratios, "target_MB_per_s": 300,
    }
    (RESULTS / "ingest.json").write_text(json.dumps(report, indent=2))
    plot(results, RESULTS / "ingest.png", f"ingest of {steps}×{n}³×3 float32, {os.cpu_count()} cores")
    print(f"wrote {RESULTS / 'ingest.json'} and {RESULTS / 'ingest.png'}")


def plot(results: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(results)
    values = [results[k]["MB_per_s"] for k in labels]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    bars = ax.barh(labels, values, color=["C0", "C0", "C0", "C7", "C1"])
    ax.axvline(300, color="C3", linestyle="--", label="target 300 MB/s")
    ax.bar_label(bars, fmt="%.0f")
    ax.set_xlabel("MB/s of float32 stored")
    ax.set_title(title)
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
