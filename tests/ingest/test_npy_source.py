"""The .npy reader: layouts, memory-mapped step reads and damaged files."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from turbdb.exceptions import FormatError
from turbdb.ingest import open_source


def field(nt=1, nz=3, ny=4, nx=5, nc=3, dtype="float64"):
    """(nt, nz, ny, nx, nc) holding 10000t + 1000x + 100y + 10z + c: any mix-up of axes shows."""
    t, z, y, x, c = np.indices((nt, nz, ny, nx, nc))
    return (10000 * t + 1000 * x + 100 * y + 10 * z + c).astype(dtype)


def test_single_step_vector_field(tmp_path):
    f = field(dtype="float32")[0]
    np.save(tmp_path / "u.npy", f)
    src = open_source(tmp_path / "u.npy")
    assert (src.grid, src.ncomp, src.n_steps, src.dtype) == ((5, 4, 3), 3, 1, np.float32)
    np.testing.assert_array_equal(src.read(src.refs()[0]), f)


def test_scalar_field_gets_a_component_axis(tmp_path):
    f = field(nc=1)[0, ..., 0]
    np.save(tmp_path / "p.npy", f)
    src = open_source(tmp_path / "p.npy")
    assert src.ncomp == 1
    np.testing.assert_array_equal(src.read(src.refs()[0]), f[..., None])


def test_multi_step_file_is_read_step_by_step(tmp_path):
    f = field(nt=3)
    np.save(tmp_path / "u.npy", f)
    src = open_source(tmp_path / "u.npy")
    assert src.n_steps == 3
    for ref in reversed(src.refs()):
        np.testing.assert_array_equal(src.read(ref), f[ref.index])


def test_multi_step_scalar_file(tmp_path):
    f = field(nt=2, nc=1)[..., 0]
    np.save(tmp_path / "p.npy", f)
    src = open_source(tmp_path / "p.npy", axes="tzyx")
    np.testing.assert_array_equal(src.read(src.refs()[1]), f[1][..., None])


def test_given_axes_are_transposed_to_zyxc(tmp_path):
    f = field(nt=2)
    np.save(tmp_path / "u.npy", f.transpose(4, 3, 0, 2, 1))  # c x t y z
    src = open_source(tmp_path / "u.npy", axes="cxtyz")
    assert (src.grid, src.ncomp, src.n_steps) == ((5, 4, 3), 3, 2)
    np.testing.assert_array_equal(src.read(src.refs()[1]), f[1])


def test_fortran_ordered_npy_keeps_its_logical_axes(tmp_path):
    f = field(nt=2)
    np.save(tmp_path / "u.npy", np.asfortranarray(f))
    src = open_source(tmp_path / "u.npy")
    np.testing.assert_array_equal(src.read(src.refs()[1]), f[1])


def test_big_endian_and_float16_data_come_back_native(tmp_path):
    np.save(tmp_path / "be.npy", field(dtype=">f8")[0])
    np.save(tmp_path / "h.npy", field(dtype="float16")[0] / 1000)
    be, half = open_source(tmp_path / "be.npy"), open_source(tmp_path / "h.npy")
    assert be.dtype == np.dtype("float64") and be.dtype.isnative
    out = be.read(be.refs()[0])
    assert out.dtype.isnative
    np.testing.assert_array_equal(out, field()[0])
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half.read(half.refs()[0]), field(dtype="float16")[0] / 1000)


def test_truncated_npy_names_expected_and_actual_size(tmp_path):
    np.save(tmp_path / "u.npy", field(nt=2))
    data = (tmp_path / "u.npy").read_bytes()
    (tmp_path / "u.npy").write_bytes(data[:-100])
    with pytest.raises(FormatError, match=rf"u\.npy is truncated.*{len(data)} bytes.*has {len(data) - 100}"):
        open_source(tmp_path / "u.npy")


def test_trailing_bytes_after_the_array_are_refused(tmp_path):
    with (tmp_path / "u.npy").open("wb") as fh:
        np.save(fh, field())
        np.save(fh, field())
    with pytest.raises(FormatError, match="bytes after its array.*several arrays"):
        open_source(tmp_path / "u.npy")


def test_damaged_header_is_a_format_error(tmp_path):
    (tmp_path / "u.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(FormatError, match=r"not a readable \.npy file"):
        open_source(tmp_path / "u.npy")


def test_reading_one_step_does_not_load_the_whole_file(tmp_path):
    f = field(nt=40, nz=16, ny=16, nx=16)
    np.save(tmp_path / "u.npy", f)
    src = open_source(tmp_path / "u.npy")
    step_bytes = f[0].nbytes
    tracemalloc.start()
    try:
        out = src.read(src.refs()[17])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, f[17])
    assert peak < 3 * step_bytes < f.nbytes / 10
