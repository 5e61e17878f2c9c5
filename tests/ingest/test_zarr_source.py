"""The Zarr reader: stores written by xarray (v2 and v3) and by zarr-python directly."""

from __future__ import annotations

import os

import numpy as np
import pytest
import xarray as xr
import zarr

from turbdb.exceptions import FormatError, UnknownNameError
from turbdb.ingest import open_source


def field(nt=1, nz=3, ny=4, nx=5, nc=3, dtype="float64"):
    """(nt, nz, ny, nx, nc) holding 10000t + 1000x + 100y + 10z + c: any mix-up of axes shows."""
    t, z, y, x, c = np.indices((nt, nz, ny, nx, nc))
    return (10000 * t + 1000 * x + 100 * y + 10 * z + c).astype(dtype)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_xarray_store_with_dimensions_in_any_order(tmp_path, zarr_format):
    f = field(nt=3, dtype="float32")
    var = f.transpose(0, 3, 2, 1, 4)  # time, x, y, z, component
    ds = xr.Dataset({"velocity": (("time", "x", "y", "z", "component"), var)})
    ds.to_zarr(tmp_path / "run.zarr", zarr_format=zarr_format, consolidated=zarr_format == 2)
    src = open_source(tmp_path / "run.zarr")
    assert (src.axes, src.grid, src.ncomp, src.n_steps) == ("txyzc", (5, 4, 3), 3, 3)
    for ref in src.refs():
        np.testing.assert_array_equal(src.read(ref), f[ref.index])


def test_xarray_store_with_one_variable_per_component(tmp_path):
    f = field(nt=2)
    ds = xr.Dataset({n: (("t", "z", "y", "x"), f[..., c]) for c, n in enumerate(("ux", "uy", "uz"))})
    ds.to_zarr(tmp_path / "run.zarr", zarr_format=2)
    src = open_source(tmp_path / "run.zarr", variables=["ux", "uy", "uz"])
    assert (src.key, src.ncomp, src.n_steps) == ("ux,uy,uz", 3, 2)
    np.testing.assert_array_equal(src.read(src.refs()[1]), f[1])


def test_zarr_python_store_without_dimension_names_uses_default_axes(tmp_path):
    # turbdb's own layout: (nt, nz, ny, nx, ncomp), sharded.
    f = field(nt=2, dtype="float32")
    g = zarr.open_group(tmp_path / "db", mode="w")
    a = g.create_array("velocity", shape=f.shape, dtype="f4", chunks=(1, 1, 2, 5, 3), shards=(1, 3, 4, 5, 3))
    a[...] = f
    g.create_array("mask", shape=(3, 4, 5), dtype="i1")
    src = open_source(tmp_path / "db")
    assert (src.key, src.axes, src.n_steps) == ("velocity", "tzyxc", 2)
    np.testing.assert_array_equal(src.read(src.refs()[1]), f[1])


def test_zarr_python_dimension_names_determine_the_axes(tmp_path):
    f = field(nc=1)[0, ..., 0]
    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    sim = g.create_group("sim")
    a = sim.create_array("p", shape=(5, 4, 3), dtype="f8", dimension_names=("nx", "ny", "nz"))
    a[...] = f.transpose()
    src = open_source(tmp_path / "s.zarr", variables="sim/p")
    assert (src.key, src.axes) == ("sim/p", "xyz")
    np.testing.assert_array_equal(src.read(src.refs()[0])[..., 0], f)


def test_a_store_that_is_one_array(tmp_path):
    f = field()[0]
    a = zarr.create_array(tmp_path / "u.zarr", shape=f.shape, dtype="f8", chunks=(1, 4, 5, 3))
    a[...] = f
    src = open_source(tmp_path / "u.zarr")
    assert src.key == ""
    np.testing.assert_array_equal(src.read(src.refs()[0]), f)
    with pytest.raises(FormatError, match="single Zarr array.*drop it"):
        open_source(tmp_path / "u.zarr", variables="u")


def test_unknown_variable_lists_the_arrays(tmp_path):
    xr.Dataset({"u": (("z", "y", "x"), np.zeros((3, 4, 5)))}).to_zarr(tmp_path / "a.zarr", consolidated=False)
    with pytest.raises(UnknownNameError, match=r"no array 'v'.*u \(3, 4, 5\) float64"):
        open_source(tmp_path / "a.zarr", variables="v")


def test_packed_array_is_refused(tmp_path):
    a = zarr.create_array(tmp_path / "p.zarr", shape=(3, 4, 5), dtype="i2")
    a.attrs["scale_factor"] = 0.01
    with pytest.raises(FormatError, match="CF-packed"):
        open_source(tmp_path / "p.zarr")


def test_directory_that_is_not_a_store_is_a_format_error(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("hello")
    with pytest.raises(FormatError, match=r"not a Zarr store.*zarr\.json"):
        open_source(tmp_path / "d")


def test_ident_of_a_store_changes_when_a_chunk_is_rewritten(tmp_path):
    a = zarr.create_array(tmp_path / "u.zarr", shape=(3, 4, 5), dtype="f8", chunks=(1, 4, 5))
    a[...] = 1.0
    before = open_source(tmp_path / "u.zarr").refs()[0].ident()
    a[2] = 2.0
    # The store's top directory is untouched; only the chunk's time tells.
    os.utime(tmp_path / "u.zarr" / "c" / "2" / "0" / "0", ns=(2**60, 2**60))
    assert open_source(tmp_path / "u.zarr").refs()[0].ident() != before


def test_a_damaged_chunk_is_a_format_error_and_an_absent_one_is_noted(tmp_path):
    f = field()[0]
    a = zarr.create_array(tmp_path / "u.zarr", shape=f.shape, dtype="f8", chunks=(1, 4, 5, 3))
    a[...] = f
    chunk = tmp_path / "u.zarr" / "c" / "1" / "0" / "0" / "0"
    chunk.write_bytes(b"not zstd at all" * 4)
    src = open_source(tmp_path / "u.zarr")
    assert src.notes == ()
    with pytest.raises(FormatError, match=r"could not decode step 0 of .*u\.zarr.*a chunk of it is damaged"):
        src.read(src.refs()[0])
    # An incomplete copy: zarr would read the absent chunk as zeros, without a word.
    chunk.unlink()
    (note,) = open_source(tmp_path / "u.zarr").notes
    assert "1 of 3 chunks" in note and "fill value 0" in note and "copy is complete" in note


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize(("attribute", "value", "shown"), [("_FillValue", -9999.0, r"-9999\.0"),
                                                           ("missing_value", -1e30, r"-1e\+30")])
def test_a_value_xarray_reads_as_missing_is_refused_not_stored(tmp_path, zarr_format, attribute, value, shown):
    # xarray writes the _FillValue as the array's fill_value (v2) or base64 text (v3); the
    # reader returned the stored number, and -9999 was ingested where xarray reads NaN.
    u = np.ones((1, 3, 4, 5), np.float32)
    u[0, 1, 2, 3] = np.nan
    ds = xr.Dataset({"u": (("time", "z", "y", "x"), u)})
    encoding = {"u": {"_FillValue": value}} if attribute == "_FillValue" else {}
    if attribute == "missing_value":
        ds["u"].encoding["missing_value"] = value
    ds.to_zarr(tmp_path / "u.zarr", zarr_format=zarr_format, encoding=encoding, consolidated=False)
    assert np.isnan(xr.open_zarr(tmp_path / "u.zarr", consolidated=False)["u"].values[0, 1, 2, 3])
    src = open_source(tmp_path / "u.zarr")
    with pytest.raises(FormatError, match=rf"array 'u' of .*u\.zarr holds its {attribute} \({shown}\) at 1 of this "
                                          rf"step's values, which netCDF and xarray mark as missing.*if they are data"):
        src.read(src.refs()[0])


def test_the_fill_value_of_an_array_xarray_did_not_write_is_no_missing_mark(tmp_path):
    # zarr-python gives every float array the fill value 0; walls of exact zeros are data.
    g = zarr.open_group(tmp_path / "u.zarr", mode="w", zarr_format=2)
    g.create_array("u", shape=(3, 4, 5), dtype="f4")[...] = 0.0
    src = open_source(tmp_path / "u.zarr")
    np.testing.assert_array_equal(src.read(src.refs()[0]), 0.0)
    # Given the dimension names xarray needs by hand (a common recipe): still data, with a
    # note that xarray would read those zeros as missing (the review found them refused).
    g["u"].attrs["_ARRAY_DIMENSIONS"] = ["z", "y", "x"]
    src = open_source(tmp_path / "u.zarr")
    np.testing.assert_array_equal(src.read(src.refs()[0]), 0.0)
    assert any("fill value 0 (zarr-python's default)" in note for note in src.notes)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_stale_consolidated_metadata_hides_no_steps_and_no_arrays(tmp_path, zarr_format):
    # Consolidated, then grown and given a new array without consolidating, as zarr-python
    # does by default: the consolidated copy said 2 steps and no p.
    f = field(nt=4, nc=1, dtype="float32")[..., 0]
    g = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=zarr_format)
    g.create_array("u", shape=(2, 3, 4, 5), dtype="f4")[...] = f[:2]
    zarr.consolidate_metadata(tmp_path / "s.zarr", zarr_format=zarr_format)
    g = zarr.open_group(tmp_path / "s.zarr", mode="a", use_consolidated=False)
    g["u"].resize((4, 3, 4, 5))
    g["u"][2:] = f[2:]
    g.create_array("p", shape=(3, 4, 5), dtype="f4")[...] = 1.0
    assert zarr.open_group(tmp_path / "s.zarr", mode="r")["u"].shape[0] == 2  # what a default open sees
    src = open_source(tmp_path / "s.zarr", variables="u", axes="tzyx")
    assert src.n_steps == 4
    np.testing.assert_array_equal(src.read(src.refs()[3])[..., 0], f[3])
    assert open_source(tmp_path / "s.zarr", variables="p").key == "p"
