"""The baseline the kernel is measured against: a plain direct gather compiled with numba, as a
user would write it. Every point computes its 8-point Lagrange weights along x, y and z, reads
its 8³ nodes (all components) straight out of the field held in RAM and sums them in float64;
the points are split over the threads with ``prange``, compiled with ``fastmath`` (the sums
stay within 1e-15 of the numpy reference). No sorting, no blocking: what the partial-sum
kernel must beat (issue "The interpolation kernel at the machine's limit" measured
such a gather at 0.38 M points/s on one AVX2 core and 4.97 M/s on 16).

numba is a benchmark dependency only (``make bench-query`` installs it); without it the
benchmark falls back to the much slower numpy gather and says so.
"""

from __future__ import annotations

import time

import numpy as np

try:
    import numba
except ImportError:  # the benchmark says which baseline it used
    numba = None

WHAT = "numba direct gather, lag8 field, float64 sums, field in RAM"


def available() -> bool:
    return numba is not None


if numba is not None:

    @numba.njit(inline="always")
    def _weights8(t):
        """Lagrange weights of nodes 0…7 at ``t`` (in grid units from node 0), from prefix
        and suffix products of (t - m): no division by t - j, exact at the nodes."""
        a0, a1, a2, a3, a4, a5, a6, a7 = t, t - 1.0, t - 2.0, t - 3.0, t - 4.0, t - 5.0, t - 6.0, t - 7.0
        p1 = a0
        p2 = p1 * a1
        p3 = p2 * a2
        p4 = p3 * a3
        p5 = p4 * a4
        p6 = p5 * a5
        p7 = p6 * a6
        s6 = a7
        s5 = s6 * a6
        s4 = s5 * a5
        s3 = s4 * a4
        s2 = s3 * a3
        s1 = s2 * a2
        s0 = s1 * a1
        # prod_{m != j} (j - m) for j = 0..7
        return (s0 / -5040.0, p1 * s1 / 720.0, p2 * s2 / -240.0, p3 * s3 / 144.0,
                p4 * s4 / -144.0, p5 * s5 / 240.0, p6 * s6 / -720.0, p7 / 5040.0)

    @numba.njit(inline="always")
    def _nodes8(b, n):
        """The 8 node indices from ``b`` on, wrapped on a periodic axis of ``n`` nodes."""
        return ((b % n), (b + 1) % n, (b + 2) % n, (b + 3) % n, (b + 4) % n, (b + 5) % n, (b + 6) % n,
                (b + 7) % n)

    @numba.njit(parallel=True, fastmath=True)
    def _gather(field, grid_pos, out):
        nz, ny, nx, nc = field.shape
        for i in numba.prange(grid_pos.shape[0]):
            sx, sy, sz = grid_pos[i, 0], grid_pos[i, 1], grid_pos[i, 2]
            bx, by, bz = int(np.floor(sx)) - 3, int(np.floor(sy)) - 3, int(np.floor(sz)) - 3
            wx, wy, wz = _weights8(sx - bx), _weights8(sy - by), _weights8(sz - bz)
            ys, zs = _nodes8(by, ny), _nodes8(bz, nz)
            if nc == 3 and 0 <= bx and bx + 8 <= nx:
                # The usual case: the 8 x nodes of a row lie side by side, 24 values.
                a0, a1, a2 = 0.0, 0.0, 0.0
                for k in range(8):
                    for j in range(8):
                        row = field[zs[k], ys[j]]
                        r0, r1, r2 = 0.0, 0.0, 0.0
                        for ii in range(8):
                            f = wx[ii]
                            r0 += f * row[bx + ii, 0]
                            r1 += f * row[bx + ii, 1]
                            r2 += f * row[bx + ii, 2]
                        w = wz[k] * wy[j]
                        a0 += w * r0
                        a1 += w * r1
                        a2 += w * r2
                out[i, 0], out[i, 1], out[i, 2] = a0, a1, a2
                continue
            xs = _nodes8(bx, nx)
            for c in range(nc):
                out[i, c] = 0.0
            for k in range(8):
                for j in range(8):
                    w = wz[k] * wy[j]
                    for c in range(nc):
                        row_sum = 0.0
                        for ii in range(8):
                            row_sum += wx[ii] * field[zs[k], ys[j], xs[ii], c]
                        out[i, c] += w * row_sum


def gather(field: np.ndarray, grid_pos: np.ndarray) -> np.ndarray:
    """lag8 field values at ``grid_pos`` ((N, 3): x, y, z in grid units, periodic) from
    ``field`` ((nz, ny, nx, ncomp), float32 as stored), float64."""
    out = np.empty((len(grid_pos), field.shape[3]))
    _gather(field, np.ascontiguousarray(grid_pos, dtype=np.float64), out)
    return out


def measure(field: np.ndarray, grid_pos: np.ndarray, threads: int) -> dict:
    """Points/s of :func:`gather` on ``threads`` threads (best of two after a compiling
    warm-up), with its answers for checking."""
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    gather(field, grid_pos[:1000])
    best, values = float("inf"), None
    for _ in range(2):
        start = time.perf_counter()
        values = gather(field, grid_pos)
        best = min(best, time.perf_counter() - start)
    return {"what": WHAT, "threads": numba.get_num_threads(), "n": len(grid_pos), "seconds": best,
            "points_per_s": len(grid_pos) / best, "values": values}
