"""The netCDF reader: axes from dimension names, stacked components, CF decoding."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from turbdb.exceptions import FormatError, UnknownNameError
from turbdb.ingest import open_source


def field(nt=1, nz=3, ny=4, nx=5, nc=3, dtype="float64"):
    """(nt, nz, ny, nx, nc) holding 10000t + 1000x + 100y + 10z + c: any mix-up of axes shows."""
    t, z, y, x, c = np.indices((nt, nz, ny, nx, nc))
    return (10000 * t + 1000 * x + 100 * y + 10 * z + c).astype(dtype)


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_dimension_names_in_any_order_are_transposed(tmp_path, engine):
    f = field(nt=2, dtype="float32")
    # (x, component, time, y, z): nothing like the default
    var = f.transpose(3, 4, 0, 2, 1)
    xr.Dataset({"u": (("x", "comp", "time", "y", "z"), var)}).to_netcdf(tmp_path / "u.nc", engine=engine)
    src = open_source(tmp_path / "u.nc")
    assert (src.axes, src.grid, src.ncomp, src.n_steps) == ("xctyz", (5, 4, 3), 3, 2)
    for ref in src.refs():
        np.testing.assert_array_equal(src.read(ref), f[ref.index])


def test_scalar_with_xyz_dims(tmp_path):
    f = field(nc=1)[0, ..., 0]
    xr.Dataset({"p": (("x", "y", "z"), f.transpose())}).to_netcdf(tmp_path / "p.nc")
    src = open_source(tmp_path / "p.nc", variables="p")
    assert (src.axes, src.ncomp) == ("xyz", 1)
    np.testing.assert_array_equal(src.read(src.refs()[0]), f[..., None])


def test_variables_are_stacked_as_components(tmp_path):
    f = field(nt=2)
    dims = ("nt", "nx", "ny", "nz")
    data = {n: (dims, f[..., c].transpose(0, 3, 2, 1)) for c, n in enumerate("uvw")}
    xr.Dataset(data).to_netcdf(tmp_path / "uvw.nc")
    src = open_source(tmp_path / "uvw.nc", variables="u,v,w")
    assert (src.key, src.axes, src.ncomp, src.n_steps) == ("u,v,w", "txyz", 3, 2)
    np.testing.assert_array_equal(src.read(src.refs()[1]), f[1])


def test_cf_axis_attributes_name_unrecognised_dimensions(tmp_path):
    f = field(nc=1)[0, ..., 0]
    coords = {
        "i": ("i", np.arange(5.0), {"axis": "X"}),
        "k": ("k", np.arange(3.0), {"axis": "Z"}),
        "j": ("j", np.arange(4.0), {"axis": "Y"}),
    }
    xr.Dataset({"p": (("i", "k", "j"), f.transpose(2, 0, 1))}, coords=coords).to_netcdf(tmp_path / "p.nc")
    src = open_source(tmp_path / "p.nc")
    assert src.axes == "xzy"
    np.testing.assert_array_equal(src.read(src.refs()[0])[..., 0], f)


def test_unnamed_dimensions_fall_back_to_the_default_axes(tmp_path):
    f = field()[0]
    xr.Dataset({"u": (("d0", "d1", "d2", "d3"), f)}).to_netcdf(tmp_path / "u.nc")
    src = open_source(tmp_path / "u.nc")
    assert src.axes == "zyxc"
    np.testing.assert_array_equal(src.read(src.refs()[0]), f)


def test_given_axes_override_the_names(tmp_path):
    f = field()[0]
    # Mislabelled dims: the user knows better.
    xr.Dataset({"u": (("x", "y", "z", "c"), f)}).to_netcdf(tmp_path / "u.nc")
    src = open_source(tmp_path / "u.nc", axes="zyxc")
    np.testing.assert_array_equal(src.read(src.refs()[0]), f)


def test_dimension_that_may_be_time_or_components_asks_for_axes(tmp_path):
    xr.Dataset({"u": (("frame", "z", "y", "x"), field(nc=1, nt=2)[..., 0])}).to_netcdf(tmp_path / "u.nc")
    with pytest.raises(FormatError, match=r"whether 'frame' is time or components; pass axes='tzyx' if it is time, or axes='czyx'"):
        open_source(tmp_path / "u.nc")
    assert open_source(tmp_path / "u.nc", axes="tzyx").n_steps == 2


def test_names_that_contradict_the_default_ask_for_axes(tmp_path):
    xr.Dataset({"u": (("x", "a", "b"), np.zeros((5, 4, 3)))}).to_netcdf(tmp_path / "u.nc")
    with pytest.raises(FormatError, match=r"'x' reads as x, where the default axes 'zyx' put z; pass axes"):
        open_source(tmp_path / "u.nc")


def test_names_that_name_only_time_get_the_axes_to_pass(tmp_path):
    # Index names (k, j, i) say nothing; "'t' looks like 't'" said nothing either.
    xr.Dataset({"u": (("t", "k", "j", "i"), field(nt=2, nc=1)[..., 0])}).to_netcdf(tmp_path / "u.nc")
    with pytest.raises(FormatError, match=r"'t' reads as time, where the default axes 'zyxc' put z; pass axes naming "
                                          r"each dimension in order, e.g. axes='tzyx' \('t' as time, 'k' as z, 'j' as y, "
                                          r"'i' as x\)"):
        open_source(tmp_path / "u.nc")
    assert open_source(tmp_path / "u.nc", axes="tzyx").n_steps == 2


def test_packed_integers_are_decoded_to_floats(tmp_path):
    f = field(nc=1)[0, ..., 0] / 1000
    ds = xr.Dataset({"p": (("z", "y", "x"), f)})
    encoding = {"p": {"dtype": "int16", "scale_factor": 0.001, "add_offset": 0.0, "_FillValue": -32768}}
    ds.to_netcdf(tmp_path / "p.nc", encoding=encoding)
    src = open_source(tmp_path / "p.nc")
    assert src.dtype.kind == "f"
    np.testing.assert_allclose(src.read(src.refs()[0])[..., 0], f, atol=1e-6)


def test_integer_variable_is_refused(tmp_path):
    xr.Dataset({"n": (("z", "y", "x"), np.zeros((3, 4, 5), "i4"))}).to_netcdf(tmp_path / "n.nc")
    with pytest.raises(FormatError, match="variable 'n' .* integer dtype"):
        open_source(tmp_path / "n.nc", variables="n")


def test_several_candidates_are_listed(tmp_path):
    z = np.zeros((3, 4, 5))
    xr.Dataset({"u": (("z", "y", "x"), z), "p": (("z", "y", "x"), z)}).to_netcdf(tmp_path / "a.nc")
    with pytest.raises(FormatError, match=r"several.*u \(3, 4, 5\) float64; p \(3, 4, 5\).*variables="):
        open_source(tmp_path / "a.nc")
    with pytest.raises(UnknownNameError, match="no variable 'q'"):
        open_source(tmp_path / "a.nc", variables="q")


def test_variables_with_different_dimensions_are_refused(tmp_path):
    z = np.zeros((3, 4, 5))
    ds = xr.Dataset({"u": (("z", "y", "x"), z), "v": (("x", "y", "z"), z.transpose())})
    ds.to_netcdf(tmp_path / "a.nc")
    with pytest.raises(FormatError, match="differ in dimensions"):
        open_source(tmp_path / "a.nc", variables="u,v")


def test_netcdf_file_that_is_not_netcdf_is_a_format_error(tmp_path):
    (tmp_path / "a.nc").write_bytes(b"garbage" * 10)
    with pytest.raises(FormatError, match="could not be opened as netCDF"):
        open_source(tmp_path / "a.nc")


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF3_64BIT"])
@pytest.mark.parametrize("records", ["none", "one", "several"])
def test_a_truncated_classic_file_is_refused_and_a_whole_one_is_not(tmp_path, fmt, records):
    rng = np.random.default_rng(0)
    dims = ("t", "z", "y", "x")
    data = {name: (dims, rng.standard_normal((2, 3, 4, 5)).astype("f4")) for name in ("u", "v", "w")}
    data["label"] = (("x",), np.arange(5, dtype="i2"))  # 10 bytes: padded in the header's sizes
    if records == "one":
        data = {"u": data["u"], "label": data["label"]}
    path = tmp_path / "c.nc"
    xr.Dataset(data).to_netcdf(path, format=fmt, engine="scipy",
                               unlimited_dims=["t"] if records != "none" else None)
    whole = path.read_bytes()
    src = open_source(path, variables="u")
    np.testing.assert_array_equal(src.read(src.refs()[1])[..., 0], data["u"][1][1])
    for cut in (1, 4, 61, len(whole) // 3):
        path.write_bytes(whole[:-cut])
        with pytest.raises(FormatError, match=rf"c\.nc is truncated: .* the file has {len(whole) - cut:,} bytes"):
            open_source(path, variables="u")


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF4"])
def test_a_record_never_written_is_refused_not_stored_as_the_fill_value(tmp_path, fmt):
    import netCDF4

    path = tmp_path / "p.nc"
    with netCDF4.Dataset(path, "w", format=fmt) as nc:
        for name, n in (("t", None), ("z", 3), ("y", 4), ("x", 5)):
            nc.createDimension(name, n)
        p = nc.createVariable("p", "f4", ("t", "z", "y", "x"))
        p[0], p[1] = np.ones((3, 4, 5)), 2 * np.ones((3, 4, 5))
        nc["p"][2, 0, 0, 0] = 3.0  # the writer stopped after one value of the third record
    src = open_source(path)
    np.testing.assert_array_equal(src.read(src.refs()[1])[..., 0], 2.0)
    with pytest.raises(FormatError, match="default fill value .* at 59 of this step's values: they were never written"):
        src.read(src.refs()[2])


def test_a_fill_value_in_the_data_is_named_not_called_a_nan(tmp_path):
    data = np.ones((3, 4, 5), dtype="f4")
    data[0] = 0.0  # a wall of exact zeros, with _FillValue = 0
    xr.Dataset({"p": (("z", "y", "x"), data)}).to_netcdf(tmp_path / "p.nc", encoding={"p": {"_FillValue": 0.0}})
    src = open_source(tmp_path / "p.nc")
    with pytest.raises(FormatError, match=r"holds its _FillValue \(0.0\) at 20 of this step's values.*ncatted"):
        src.read(src.refs()[0])


def test_a_missing_value_in_the_data_is_named_too(tmp_path):
    data = np.ones((3, 4, 5), dtype="f4")
    data[0, 0, 0] = -999.0
    ds = xr.Dataset({"p": (("z", "y", "x"), data)})
    ds["p"].attrs["missing_value"] = np.float32(-999.0)
    ds.to_netcdf(tmp_path / "p.nc")
    src = open_source(tmp_path / "p.nc")
    with pytest.raises(FormatError, match=r"holds its missing_value \(-999.0\) at 1 of this step's values"):
        src.read(src.refs()[0])
