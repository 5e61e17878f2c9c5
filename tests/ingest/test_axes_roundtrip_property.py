"""Property: whatever the axis order, memory order and byte order an array was written in,
naming its axes reads every step back as the original (z, y, x, c) array."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from turbdb.ingest import open_source


def field(nt=1, nz=3, ny=4, nx=5, nc=3, dtype="float64"):
    """(nt, nz, ny, nx, nc) holding 10000t + 1000x + 100y + 10z + c: any mix-up of axes shows."""
    t, z, y, x, c = np.indices((nt, nz, ny, nx, nc))
    return (10000 * t + 1000 * x + 100 * y + 10 * z + c).astype(dtype)


@st.composite
def layouts(draw):
    """A field of random small size and an axis order to store it in."""
    sizes = {a: draw(st.integers(1, 4)) for a in "zyx"}
    letters = ["z", "y", "x"]
    sizes["t"] = draw(st.integers(1, 3))
    sizes["c"] = draw(st.integers(1, 3))
    # Leaving t (or c) out of the axes means a single step (or a scalar).
    if draw(st.booleans()):
        letters.append("t")
    else:
        sizes["t"] = 1
    if draw(st.booleans()):
        letters.append("c")
    else:
        sizes["c"] = 1
    axes = "".join(draw(st.permutations(letters)))
    return sizes, axes


@settings(max_examples=80, deadline=None)
@given(
    layout=layouts(),
    container=st.sampled_from(["npy", "npy-fortran", "raw-C", "raw-F"]),
    dtype=st.sampled_from(["<f4", ">f4", "<f8", ">f8"]),
)
def test_any_axis_order_reads_back_as_zyxc(layout, container, dtype):
    sizes, axes = layout
    f = field(*(sizes[a] for a in "tzyxc"), dtype=dtype)  # (t, z, y, x, c)
    stored = f.transpose(["tzyxc".index(a) for a in axes + "".join(a for a in "tc" if a not in axes)])
    stored = stored.reshape(stored.shape[: len(axes)])  # drop the size-1 axes not named
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data"
        if container.startswith("npy"):
            np.save(path.with_suffix(".npy"), np.asfortranarray(stored) if container == "npy-fortran" else stored)
            src = open_source(path.with_suffix(".npy"), axes=axes)
        else:
            order = container[-1]
            stored.ravel(order=order).tofile(path)
            src = open_source(path, dtype=dtype, shape=stored.shape, order=order, axes=axes)
        assert (src.grid, src.ncomp, src.n_steps) == ((sizes["x"], sizes["y"], sizes["z"]), sizes["c"], sizes["t"])
        for ref in src.refs():
            out = src.read(ref)
            assert out.dtype.isnative and out.flags.c_contiguous
            np.testing.assert_array_equal(out, f[ref.index])
