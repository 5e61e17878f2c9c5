"""The raw binary reader: C and Fortran order, both byte orders, Fortran record markers,
and size mismatches explained."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from turbdb.exceptions import FormatError, InvalidRequestError
from turbdb.ingest import open_source


def field(nt=1, nz=3, ny=4, nx=5, nc=3, dtype="float64"):
    """(nt, nz, ny, nx, nc) holding 10000t + 1000x + 100y + 10z + c: any mix-up of axes shows."""
    t, z, y, x, c = np.indices((nt, nz, ny, nx, nc))
    return (10000 * t + 1000 * x + 100 * y + 10 * z + c).astype(dtype)


def fortran(f):
    """A (nt, nz, ny, nx, nc) field as Fortran's u(nx, ny, nz, nc, nt), in file byte order."""
    return f.transpose(3, 2, 1, 4, 0).ravel(order="F")


def record(data: bytes, marker="<i4", sign=1) -> bytes:
    n = np.array([sign * len(data)], dtype=marker).tobytes()
    return n + data + n


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", ">f8", "float16"])
def test_c_order_in_either_byte_order(tmp_path, dtype):
    f = field(dtype=dtype)[0]
    f.tofile(tmp_path / "u.bin")
    src = open_source(tmp_path / "u.bin", dtype=dtype, shape=(3, 4, 5, 3))
    assert (src.grid, src.ncomp, src.n_steps) == ((5, 4, 3), 3, 1)
    out = src.read(src.refs()[0])
    assert out.dtype == np.dtype(dtype).newbyteorder("=") and out.dtype.isnative
    np.testing.assert_array_equal(out, f)


def test_c_order_multi_step_and_scalar(tmp_path):
    f = field(nt=3, nc=1)[..., 0]
    f.astype("<f4").tofile(tmp_path / "p.raw")
    src = open_source(tmp_path / "p.raw", dtype="float32", shape="3,3,4,5", axes="tzyx")
    assert (src.ncomp, src.n_steps) == (1, 3)
    np.testing.assert_array_equal(src.read(src.refs()[2]), f[2][..., None])


@pytest.mark.parametrize("dtype", ["<f4", ">f4"])
def test_fortran_order_default_axes_are_xyzc(tmp_path, dtype):
    f = field()
    fortran(f).astype(dtype).tofile(tmp_path / "u.dat")
    src = open_source(tmp_path / "u.dat", dtype=dtype, shape=(5, 4, 3, 3), order="F")
    assert src.axes == "xyzc"
    np.testing.assert_array_equal(src.read(src.refs()[0]), f[0])


def test_fortran_order_with_time_last_is_xyzct(tmp_path):
    f = field(nt=2)
    fortran(f).astype(">f8").tofile(tmp_path / "u.dat")
    src = open_source(tmp_path / "u.dat", dtype=">f8", shape=(5, 4, 3, 3, 2), order="F")
    assert (src.axes, src.n_steps) == ("xyzct", 2)
    for ref in src.refs():
        np.testing.assert_array_equal(src.read(ref), f[ref.index])


@pytest.mark.parametrize("marker", ["<i4", ">i4", "<i8"])
def test_fortran_sequential_record_markers_are_skipped(tmp_path, marker):
    f = field()
    dtype = ">f4" if marker.startswith(">") else "<f4"
    (tmp_path / "u.dat").write_bytes(record(fortran(f).astype(dtype).tobytes(), marker))
    src = open_source(tmp_path / "u.dat", dtype=dtype, shape=(5, 4, 3, 3), order="F")
    np.testing.assert_array_equal(src.read(src.refs()[0]), f[0])


def test_one_record_per_step_is_read_across_markers(tmp_path):
    f = field(nt=3)
    steps = [fortran(f[i : i + 1]).astype("<f4").tobytes() for i in range(3)]
    (tmp_path / "u.dat").write_bytes(b"".join(record(s) for s in steps))
    src = open_source(tmp_path / "u.dat", dtype="f4", shape=(5, 4, 3, 3, 3), order="F")
    for ref in src.refs():
        np.testing.assert_array_equal(src.read(ref), f[ref.index])


def test_one_record_per_component_is_read_as_one_step(tmp_path):
    # write(10) u; write(10) v; write(10) w
    f = field()
    comps = [f[0, ..., c].transpose().ravel(order="F").astype("<f8").tobytes() for c in range(3)]
    (tmp_path / "u.dat").write_bytes(b"".join(record(c) for c in comps))
    src = open_source(tmp_path / "u.dat", dtype="f8", shape=(5, 4, 3, 3), order="F")
    np.testing.assert_array_equal(src.read(src.refs()[0]), f[0])


def test_subrecords_of_a_long_record_are_joined(tmp_path):
    # gfortran splits records over 2 GiB into subrecords with negative markers.
    data = fortran(field()).astype("<f4").tobytes()
    cut = 100
    (tmp_path / "u.dat").write_bytes(record(data[:cut], sign=-1) + record(data[cut:]))
    src = open_source(tmp_path / "u.dat", dtype="f4", shape=(5, 4, 3, 3), order="F")
    np.testing.assert_array_equal(src.read(src.refs()[0]), field()[0])


def test_big_endian_markers_read_with_a_little_endian_dtype_are_refused(tmp_path):
    # Smooth data read in the wrong byte order is finite garbage, stored without a word.
    big = fortran(field()).astype(">f4").tobytes()
    n = len(big).to_bytes(4, "big")
    (tmp_path / "u.dat").write_bytes(n + big + n)
    with pytest.raises(FormatError, match=r"markers are big-endian.*give --dtype '>f4'"):
        open_source(tmp_path / "u.dat", dtype="f4", shape=(5, 4, 3, 3), order="F")
    src = open_source(tmp_path / "u.dat", dtype=">f4", shape=(5, 4, 3, 3), order="F")
    np.testing.assert_array_equal(src.read(src.refs()[0]), field()[0])


def test_records_need_time_slowest(tmp_path):
    f = field(nt=2)
    data = f.transpose(1, 0, 2, 3, 4).astype("<f4").tobytes()  # z t y x c
    (tmp_path / "u.dat").write_bytes(record(data[:240]) + record(data[240:]))
    with pytest.raises(FormatError, match="only when time is the slowest axis"):
        open_source(tmp_path / "u.dat", dtype="f4", shape=(3, 2, 4, 5, 3), axes="ztyxc")


def test_wrong_size_says_what_is_needed(tmp_path):
    (tmp_path / "a.bin").write_bytes(bytes(1000))
    expected = r"a\.bin has 1000 bytes but shape \(8, 8, 8, 3\) of float32 needs 6144; check --shape/--dtype"
    with pytest.raises(FormatError, match=expected):
        open_source(tmp_path / "a.bin", dtype="float32", shape=(8, 8, 8, 3))


def test_wrong_dtype_is_recognised_from_the_size(tmp_path):
    field().tofile(tmp_path / "u.bin")
    with pytest.raises(FormatError, match="if it holds float64 data, pass dtype float64"):
        open_source(tmp_path / "u.bin", dtype="float32", shape=(3, 4, 5, 3))


@pytest.mark.parametrize(
    ("order", "shape", "suggestion"),
    [
        ("C", (3, 4, 5, 3), r"shape \(2, 3, 4, 5, 3\) with axes 'tzyxc'"),
        ("F", (5, 4, 3, 3), r"shape \(5, 4, 3, 3, 2\) with axes 'xyzct'"),
    ],
)
def test_several_steps_without_a_time_axis_suggest_one(tmp_path, order, shape, suggestion):
    field(nt=2).tofile(tmp_path / "u.bin")
    with pytest.raises(FormatError, match=rf"if it holds 2 steps .*{suggestion}"):
        open_source(tmp_path / "u.bin", dtype="float64", shape=shape, order=order)


def test_several_steps_in_fortran_records_suggest_a_time_axis(tmp_path):
    f = field(nt=2)
    steps = [fortran(f[i : i + 1]).astype("<f4").tobytes() for i in range(2)]
    (tmp_path / "u.dat").write_bytes(b"".join(record(s) for s in steps))
    with pytest.raises(FormatError, match=r"Fortran sequential file whose 2 record.*if it holds 2 steps"):
        open_source(tmp_path / "u.dat", dtype="f4", shape=(5, 4, 3, 3), order="F")


@pytest.mark.parametrize("dtype", ["int32", "complex64", "f16" if np.dtype("g").itemsize == 16 else "c16"])
def test_non_float_dtypes_are_refused(tmp_path, dtype):
    (tmp_path / "u.bin").write_bytes(bytes(3 * 4 * 5 * np.dtype(dtype).itemsize))
    with pytest.raises(FormatError, match="float16, float32 or float64"):
        open_source(tmp_path / "u.bin", dtype=dtype, shape=(3, 4, 5))


def test_unparseable_dtype_and_shape_are_refused(tmp_path):
    (tmp_path / "u.bin").write_bytes(bytes(240))
    with pytest.raises(InvalidRequestError, match="not a numpy dtype"):
        open_source(tmp_path / "u.bin", dtype="floaty", shape=(3, 4, 5))
    with pytest.raises(InvalidRequestError, match="positive integers"):
        open_source(tmp_path / "u.bin", dtype="f4", shape=(3, -4, 5))
    with pytest.raises(InvalidRequestError, match="positive integers"):
        open_source(tmp_path / "u.bin", dtype="f4", shape="3,four,5")


def test_reading_one_step_does_not_load_the_whole_file(tmp_path):
    f = field(nt=40, nz=16, ny=16, nx=16)
    fortran(f).tofile(tmp_path / "u.bin")
    src = open_source(tmp_path / "u.bin", dtype="f8", shape=(16, 16, 16, 3, 40), order="F")
    tracemalloc.start()
    try:
        out = src.read(src.refs()[23])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, f[23])
    assert peak < 3 * f[0].nbytes < f.nbytes / 10


@pytest.mark.parametrize(("header", "sizes", "strip"), [
    (np.array([5, 4, 3], "<i4").tobytes(), "12 \\+ 240 bytes", "tail -c \\+21 u.dat > u_field.dat"),
    (np.array([0.25], "<f8").tobytes(), "8 \\+ 240 bytes", "tail -c \\+17 u.dat > u_field.dat"),
])
def test_a_header_record_is_named_with_how_to_strip_it(tmp_path, header, sizes, strip):
    # write(10) nx, ny, nz; write(10) u: "check --shape/--dtype", though no shape reads it.
    f = field(nc=1)
    (tmp_path / "u.dat").write_bytes(record(header) + record(fortran(f).astype("<f4").tobytes()))
    with pytest.raises(FormatError, match=rf"2 record\(s\) hold .*: {sizes}\); turbdb reads only files whose records "
                                          rf"all hold field data, and record 1 \(\d+ bytes\) does not .*\({strip}\)"):
        open_source(tmp_path / "u.dat", dtype="f4", shape=(5, 4, 3), order="F")
    # What it says to run gives a file that reads.
    (tmp_path / "u_field.dat").write_bytes((tmp_path / "u.dat").read_bytes()[len(record(header)):])
    src = open_source(tmp_path / "u_field.dat", dtype="f4", shape=(5, 4, 3), order="F")
    np.testing.assert_array_equal(src.read(src.refs()[0]), f[0])


def test_records_that_are_not_all_field_data_are_never_answered_with_check_the_shape(tmp_path):
    # write(10) t; write(10) u, twice: a header before every step.
    data = fortran(field(nc=1)).astype("<f4").tobytes()
    time = np.array([0.25], "<f8").tobytes()
    (tmp_path / "u.dat").write_bytes((record(time) + record(data)) * 2)
    with pytest.raises(FormatError, match=r"8 \+ 240 \+ 8 \+ 240 bytes\); turbdb reads only files whose records all "
                                          r"hold field data .*write the file without them"):
        open_source(tmp_path / "u.dat", dtype="f4", shape=(5, 4, 3, 2), order="F", axes="xyzt")
