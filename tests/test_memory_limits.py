"""The memory a process may use bounds what turbdb sizes from memory (the result limit, the
engine's default cache): a container's cgroup limit and `ulimit -v` were ignored, so a
query too large for them was killed by the OOM killer or, under `ulimit -v`, aborted the
interpreter (`memory allocation of 96000000 bytes failed`) instead of being refused."""

import os
import resource
import subprocess
import sys
import textwrap

import turbdb
from turbdb import _core

LIMIT = 3 << 30  # address space: enough to import numpy, xarray and turbdb and start threads


def test_usable_memory_is_within_the_machines():
    assert 0 < _core.usable_memory() <= _core.get_max_result_bytes() * 2 + 2


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_under_ulimit_v_a_query_too_large_is_refused_not_aborted(tmp_path):
    script = textwrap.dedent(f"""
        import numpy as np, turbdb
        from turbdb import _core
        assert _core.usable_memory() <= {LIMIT}, _core.usable_memory()
        assert _core.get_max_result_bytes() <= {LIMIT} // 2
        ds = turbdb.create_dataset({str(tmp_path / "db")!r}, "d", grid=(16, 16, 16), times=[0.0], fields={{"velocity": 3}})
        ds.write("velocity", 0, np.ones((16, 16, 16, 3)))
        points = np.zeros((10_000_000, 3))  # a Hessian of 3 x 6 float64 values a point: 1.4 GB
        try:
            ds.query("velocity", points, time=0.0, operator="hessian", dtype="float64")
        except turbdb.LimitExceededError as e:
            print("refused:", e)
    """)
    done = subprocess.run([sys.executable, "-c", script], preexec_fn=_limited, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "refused:" in done.stdout, done.stderr[-2000:]


def test_a_huge_rayon_num_threads_is_capped_at_four_kernel_threads_a_cpu(tmp_path):
    # RAYON_NUM_THREADS=99999 started thousands of threads and stalled the machine (load 4 000).
    script = textwrap.dedent(f"""
        import os, numpy as np, turbdb
        ds = turbdb.create_dataset({str(tmp_path / "db")!r}, "d", grid=(16, 16, 16), times=[0.0], fields={{"p": 1}})
        ds.write("p", 0, np.ones((16, 16, 16)))
        ds.query("p", np.zeros((1000, 3)), time=0.0)
        names = [open(f"/proc/self/task/{{t}}/comm").read() for t in os.listdir("/proc/self/task")]
        print(sum(name.startswith("turbdb-kernel") for name in names))
    """)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "RAYON_NUM_THREADS": "99999"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert 0 < int(done.stdout) <= 4 * os.cpu_count()
