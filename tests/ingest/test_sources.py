"""Behaviour shared by every input reader: format detection, step identity, option checks,
axes validation and agreement between several inputs."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
import xarray as xr

from turbdb.exceptions import FormatError, InvalidRequestError, StorageError, UnknownNameError
from turbdb.ingest import Source, StepRef, open_source, open_sources
from turbdb.ingest import formats
from turbdb.ingest.axes import axis_letter
from turbdb.ingest.formats import detect_format
from turbdb.ingest.readers import npy


def field(nt=1, nz=3, ny=4, nx=5, nc=3, dtype="float64"):
    """(nt, nz, ny, nx, nc) holding 10000t + 1000x + 100y + 10z + c: any mix-up of axes shows."""
    t, z, y, x, c = np.indices((nt, nz, ny, nx, nc))
    return (10000 * t + 1000 * x + 100 * y + 10 * z + c).astype(dtype)


# --- format detection ------------------------------------------------------------------


def test_format_is_detected_from_the_extension(tmp_path):
    f = field()[0]
    np.save(tmp_path / "a.npy", f)
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h["u"] = f
    xr.Dataset({"u": (("z", "y", "x", "c"), f)}).to_netcdf(tmp_path / "a.nc")
    xr.Dataset({"u": (("z", "y", "x", "c"), f)}).to_zarr(tmp_path / "a.zarr", consolidated=False)
    for name, fmt in [("a.npy", "npy"), ("a.h5", "hdf5"), ("a.nc", "netcdf"), ("a.zarr", "zarr")]:
        src = open_source(tmp_path / name)
        assert src.format == fmt
        np.testing.assert_array_equal(src.read(src.refs()[0]), f)


def test_format_is_detected_from_magic_bytes_without_extension(tmp_path):
    f = field()[0]
    np.save(tmp_path / "a.npy", f)
    os.rename(tmp_path / "a.npy", tmp_path / "velocity")
    with h5py.File(tmp_path / "data", "w") as h:
        h["u"] = f
    assert detect_format(tmp_path / "velocity") == "npy"
    assert detect_format(tmp_path / "data") == "hdf5"
    src = open_source(tmp_path / "velocity")
    np.testing.assert_array_equal(src.read(src.refs()[0]), f)


def test_netcdf3_is_detected_by_its_signature(tmp_path):
    f = field(nc=1)[0, ..., 0]
    xr.Dataset({"p": (("z", "y", "x"), f)}).to_netcdf(tmp_path / "p.dat", format="NETCDF3_64BIT")
    src = open_source(tmp_path / "p.dat")
    assert src.format == "netcdf"
    np.testing.assert_array_equal(src.read(src.refs()[0])[..., 0], f)


def test_unrecognised_file_is_raw_and_needs_dtype_and_shape(tmp_path):
    field().tofile(tmp_path / "u.bin")
    assert detect_format(tmp_path / "u.bin") == "raw"
    with pytest.raises(InvalidRequestError, match=r"raw binary.*needs dtype and shape"):
        open_source(tmp_path / "u.bin")


def test_zip_archive_is_refused_with_advice(tmp_path):
    np.savez(tmp_path / "a.npz", u=field())
    with pytest.raises(FormatError, match="zip archive.*extract"):
        open_source(tmp_path / "a.npz")


def test_explicit_format_overrides_detection_and_accepts_aliases(tmp_path):
    with h5py.File(tmp_path / "a.dat", "w") as h:
        h["u"] = field()[0]
    assert open_source(tmp_path / "a.dat", format="h5").format == "hdf5"


def test_unknown_format_name_lists_the_known_ones(tmp_path):
    np.save(tmp_path / "a.npy", field()[0])
    with pytest.raises(UnknownNameError, match="hdf5, netcdf, npy, raw, zarr"):
        open_source(tmp_path / "a.npy", format="grib")


# --- errors common to every format -----------------------------------------------------


def test_missing_file_is_a_storage_error_naming_it(tmp_path):
    with pytest.raises(StorageError, match=r"nope\.npy does not exist"):
        open_source(tmp_path / "nope.npy")


def test_options_of_another_format_are_refused(tmp_path):
    np.save(tmp_path / "a.npy", field()[0])
    with pytest.raises(InvalidRequestError, match="does not take dtype, shape"):
        open_source(tmp_path / "a.npy", dtype="float32", shape=(3, 4, 5, 3))
    with pytest.raises(InvalidRequestError, match="does not take variables"):
        open_source(tmp_path / "a.npy", variables="u")
    with pytest.raises(InvalidRequestError, match="does not take order"):
        open_source(tmp_path / "a.npy", order="F")


def test_bad_order_is_refused(tmp_path):
    field().tofile(tmp_path / "u.bin")
    with pytest.raises(InvalidRequestError, match="order must be 'C' or 'F'"):
        open_source(tmp_path / "u.bin", dtype="f8", shape=(3, 4, 5, 3), order="K")


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ("zyxq", "contains 'q'"),
        ("zyxx", "names 'x' more than once"),
        ("tzyc", "lacks 'x'"),
        ("zyx", "names 3 axes but .* has 4"),
        (4, "must be a string"),
    ],
)
def test_bad_axes_are_refused_with_what_to_do(tmp_path, axes, message):
    np.save(tmp_path / "a.npy", field()[0])
    with pytest.raises(InvalidRequestError, match=message):
        open_source(tmp_path / "a.npy", axes=axes)


def test_integer_data_is_a_format_error(tmp_path):
    np.save(tmp_path / "a.npy", field(dtype="int32")[0])
    with pytest.raises(FormatError, match="integer dtype int32.*float16, float32 or float64"):
        open_source(tmp_path / "a.npy")


def test_complex_data_is_a_format_error(tmp_path):
    np.save(tmp_path / "a.npy", field(dtype="complex64")[0])
    with pytest.raises(FormatError, match="complex dtype"):
        open_source(tmp_path / "a.npy")


def test_two_dimensional_data_is_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((4, 5)))
    with pytest.raises(FormatError, match="2 dimensions.*3 to 5"):
        open_source(tmp_path / "a.npy")


def test_empty_array_is_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((0, 4, 5)))
    with pytest.raises(FormatError, match="empty array"):
        open_source(tmp_path / "a.npy")


def test_default_axes_that_would_give_many_components_suggest_time(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((2, 4, 5, 12), "f4"))
    with pytest.raises(FormatError, match=r"12 components.*axes='tzyx'"):
        open_source(tmp_path / "a.npy")
    assert open_source(tmp_path / "a.npy", axes="tzyx").n_steps == 2


def test_a_component_first_array_is_offered_czyx_before_time(tmp_path):
    # np.stack([u, v, w]): following the advice "tzyx" stored 3 steps of a scalar.
    np.save(tmp_path / "a.npy", np.zeros((3, 16, 16, 16), "f4"))
    with pytest.raises(FormatError, match=r"16 components.*pass axes='czyx' if its first axis \(3\) holds the "
                                          r"components, or axes='tzyx' if its first axis is time"):
        open_source(tmp_path / "a.npy")
    source = open_source(tmp_path / "a.npy", axes="czyx")
    assert (source.grid, source.ncomp, source.n_steps) == ((16, 16, 16), 3, 1)


@pytest.mark.parametrize(("shape", "order", "message"), [
    ((3, 16, 16, 8), "C", r"grid of 16 x 16 x 3 with 8 components.*axes='czyx'.*or axes='tzyx'"),
    ((5, 16, 16, 8), "C", r"grid of 16 x 16 x 5 with 8 components.*axes='czyx'.*or axes='tzyx'"),
    ((3, 16, 16, 8), "F", r"grid of 3 x 16 x 16 with 8 components.*axes='cxyz'.*or axes='xyzt'"),
    ((2, 3, 16, 16, 4), "C", r"grid of 16 x 16 x 3 with 4 components.*axes='tczyx' if its second axis \(3\)"),
])
def test_a_thin_grid_is_never_taken_for_components(tmp_path, shape, order, message):
    # With nx <= 9 a (3, nz, ny, nx) array passed the "more than 9 components" guard: stored
    # as a 16 x 16 x 3 grid of 8 components, without a word.
    np.zeros(shape, "f4").tofile(tmp_path / "a.bin")
    with pytest.raises(FormatError, match=message):
        open_source(tmp_path / "a.bin", dtype="float32", shape=shape, order=order)


@pytest.mark.parametrize("shape", [(3, 4, 5, 3), (2, 16, 16, 1), (4, 16, 16, 6), (16, 16, 16, 2), (2, 3, 4, 5, 3)])
def test_default_axes_stand_where_the_last_axis_holds_a_fields_components_or_the_first_is_long(tmp_path, shape):
    np.save(tmp_path / "a.npy", np.zeros(shape, "f4"))
    assert open_source(tmp_path / "a.npy").ncomp == shape[-1]


# --- steps and their identity ----------------------------------------------------------


def test_refs_identify_each_step_stably(tmp_path):
    np.save(tmp_path / "a.npy", field(nt=3))
    src = open_source(tmp_path / "a.npy")
    refs = src.refs()
    assert [r.index for r in refs] == [0, 1, 2]
    assert refs[0].source == str((tmp_path / "a.npy").resolve())
    assert len({r.ident() for r in refs}) == 3
    assert [r.ident() for r in open_source(tmp_path / "a.npy").refs()] == [r.ident() for r in refs]
    assert StepRef(**vars(refs[1])).ident() == refs[1].ident()


def test_ident_changes_when_the_file_is_rewritten(tmp_path):
    np.save(tmp_path / "a.npy", field(nt=2))
    before = open_source(tmp_path / "a.npy").refs()[0].ident()
    np.save(tmp_path / "a.npy", field(nt=2) + 1)
    os.utime(tmp_path / "a.npy", ns=(1, 1))
    assert open_source(tmp_path / "a.npy").refs()[0].ident() != before


def test_reading_after_the_file_changed_is_refused(tmp_path):
    np.save(tmp_path / "a.npy", field(nt=2))
    src = open_source(tmp_path / "a.npy")
    ref = src.refs()[0]
    np.save(tmp_path / "a.npy", field(nt=3))
    with pytest.raises(StorageError, match="changed after it was opened"):
        src.read(ref)


def test_a_ref_of_another_source_is_refused(tmp_path):
    np.save(tmp_path / "a.npy", field())
    np.save(tmp_path / "b.npy", field())
    a, b = open_source(tmp_path / "a.npy"), open_source(tmp_path / "b.npy")
    with pytest.raises(InvalidRequestError, match="belongs to another source"):
        a.read(b.refs()[0])
    with pytest.raises(InvalidRequestError, match="out of range"):
        a.read(StepRef(**{**vars(a.refs()[0]), "index": 5}))


def test_read_returns_a_fresh_writable_c_contiguous_array(tmp_path):
    np.save(tmp_path / "a.npy", field(nt=2, dtype="float32"))
    src = open_source(tmp_path / "a.npy")
    step = src.read(src.refs()[1])
    assert isinstance(src, Source)
    assert type(step) is np.ndarray and step.flags.c_contiguous and step.flags.writeable
    assert step.dtype == np.float32 == src.dtype
    step[...] = 0  # must not reach the file
    np.testing.assert_array_equal(src.read(src.refs()[1]), field(nt=2)[1])


# --- several inputs --------------------------------------------------------------------


def test_open_sources_accepts_agreeing_inputs_in_order(tmp_path):
    np.save(tmp_path / "a.npy", field(nt=2, dtype="float32"))
    np.save(tmp_path / "b.npy", field(nt=1))
    sources = open_sources([tmp_path / "a.npy", tmp_path / "b.npy"])
    assert [s.n_steps for s in sources] == [2, 1]


def test_open_sources_names_the_first_input_that_differs(tmp_path):
    np.save(tmp_path / "a.npy", field())
    np.save(tmp_path / "b.npy", field())
    np.save(tmp_path / "c.npy", field(nx=4))
    with pytest.raises(FormatError, match=r"c\.npy has grid .* \(4, 4, 3\).*first input .*a\.npy"):
        open_sources([tmp_path / n for n in ("a.npy", "b.npy", "c.npy")])


def test_open_sources_refuses_a_file_given_twice_or_none(tmp_path):
    np.save(tmp_path / "a.npy", field())
    with pytest.raises(InvalidRequestError, match="given twice"):
        open_sources([tmp_path / "a.npy", tmp_path / "." / "a.npy"])
    with pytest.raises(InvalidRequestError, match="no input files"):
        open_sources([])


# --- dimension names -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "letter"),
    [
        ("x", "x"), ("nx", "x"), ("Y", "y"), ("z_dim", "z"), ("xc", "x"), ("iy", "y"),
        ("time", "t"), ("t", "t"), ("step", "t"), ("component", "c"), ("ncomp", "c"),
        ("index", None), ("dim_0", None), ("phony_dim_2", None), ("xy", None), ("lat", None),
    ],
)
def test_dimension_names_map_to_axis_letters(name, letter):
    assert axis_letter(name) == letter


def test_cf_axis_attribute_beats_the_name():
    assert axis_letter("i", "X") == "x"
    assert axis_letter("k", "Z") == "z"


def test_a_directory_is_only_accepted_as_a_zarr_store(tmp_path):
    with pytest.raises(FormatError, match="is a directory, which only a Zarr store may be"):
        open_source(tmp_path, format="raw", dtype="f4", shape=(3, 4, 5))


def test_os_errors_become_storage_errors_naming_the_input(tmp_path, monkeypatch):
    np.save(tmp_path / "a.npy", field())

    def unreadable(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(formats, "detect_format", unreadable)
    with pytest.raises(StorageError, match=r"could not read input .*a\.npy.*Permission denied"):
        open_source(tmp_path / "a.npy")
    monkeypatch.undo()
    src = open_source(tmp_path / "a.npy")
    monkeypatch.setattr(npy.NpySource, "_read_blocks", unreadable)
    with pytest.raises(StorageError, match=r"could not read step 0 of .*a\.npy"):
        src.read(src.refs()[0])


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_cutouts_coordinates_are_named_with_the_options_that_keep_them(tmp_path, suffix):
    # They were dropped without a word: spacing 2π/n, origin 0, times 0, 1, … for a sub-box.
    import turbdb
    from turbdb import export

    ds = turbdb.create_dataset(tmp_path / "db", "a", grid=(16, 12, 8), spacing=(0.1, 0.2, 0.3), origin=(1.0, 0.0, 0.0),
                               periodic=(False,) * 3, times=[0.25, 0.3, 0.35], fields={"p": 1})
    for t in range(3):
        ds.write("p", t, np.full((8, 12, 16), float(t)))
    cut = ds.cutout("p", time=[0.25, 0.3], x=(2, 8))
    (written,) = export.write(cut, tmp_path / f"c{suffix}")
    (note,) = open_source(written).notes
    options = note.split("to keep them pass ")[1].split(", and")[0]
    assert options == "--spacing 0.1,0.2,0.3 --origin 1.2,0,0 --t0 0.25 --dt 0.05", note
    # Taken, they rebuild the cutout's coordinates.
    from click.testing import CliRunner

    from turbdb.cli import main

    ran = CliRunner().invoke(main, ["ingest", str(tmp_path / "db2"), str(written), "--name", "b", "--field", "p",
                                    "--periodic", "none", "--quiet", *options.split()])
    assert ran.exit_code == 0, ran.output
    again = turbdb.open(tmp_path / "db2")["b"].cutout("p", time=[0.25, 0.3])
    np.testing.assert_allclose(again.x.values, cut.x.values)
    np.testing.assert_allclose(again.time.values, cut.time.values)
    np.testing.assert_array_equal(again.values, cut.values)


def test_text_or_descending_coordinates_never_fail_an_ingest(tmp_path):
    values = np.zeros((2, 4, 4, 4), np.float32)
    xr.Dataset({"p": (("time", "z", "y", "x"), values)},
               coords={"x": ["a", "b", "c", "d"], "y": np.arange(4.0)[::-1], "z": np.arange(4.0),
                       "time": np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[ns]")}).to_netcdf(tmp_path / "t.nc")
    source = open_source(tmp_path / "t.nc")
    assert source.n_steps == 2
    (note,) = source.notes
    options = note.split("to keep them pass ")[1].split(", and")[0]
    assert options.startswith("--t0 0 --dt 86400 (seconds since 2020-01-01"), note  # the times only


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
@pytest.mark.parametrize(("time", "options"), [
    (("time", [0.0, 0.5, 1.0], {"units": "seconds since 2000-01-01", "axis": "T"}),
     "--t0 0 --dt 0.5 (the file's seconds since 2000-01-01)"),
    (np.array(["2020-01-01T00:00:00", "2020-01-01T00:00:00.25", "2020-01-01T00:00:00.5"], dtype="datetime64[ns]"),
     "--t0 0 --dt 0.25 (seconds since 2020-01-01 00:00:00, converted from the file's milliseconds)"),
    (("time", [0, 1, 2], {"units": "months since 2000-01"}), "--t0 0 --dt 1 (times in months since 2000-01, as "
                                                             "the file counts them)"),
])
def test_calendar_times_are_noted_in_seconds_or_in_the_files_unit(tmp_path, suffix, time, options):
    # They were dropped without a note, where times without units got one: stored as 0, 1, 2.
    values = np.zeros((3, 4, 4, 4), np.float32)
    ds = xr.Dataset({"p": (("time", "z", "y", "x"), values)}, coords={"time": time})
    if suffix == ".nc":
        ds.to_netcdf(tmp_path / "t.nc")
    else:
        ds.to_zarr(tmp_path / "t.zarr", consolidated=False)
    (note,) = open_source(tmp_path / f"t{suffix}").notes
    assert note.split("to keep them pass ")[1].split(", and")[0] == options, note


def test_coordinates_that_cannot_be_kept_are_named_with_why():
    from turbdb.ingest.coordinates import coordinate_note

    even = np.arange(4.0)
    note = coordinate_note("f.nc", {"x": even[::-1], "y": np.array([0, 1, 3, 7.0]), "z": even,
                                    "time": np.array([0.2, 0.1, 0.3])})
    assert "x decreases (the data would be stored mirrored" in note
    assert "y is not evenly spaced (stretched nodes)" in note
    assert "time is not in increasing order" in note
    assert "to keep them pass" not in note
    assert "cannot be kept" not in coordinate_note("f.nc", {"x": even, "y": even, "z": even})
