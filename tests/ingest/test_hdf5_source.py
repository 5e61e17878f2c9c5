"""The HDF5 reader: choosing datasets, per-component datasets, dimension scales."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from turbdb.exceptions import FormatError, UnknownNameError
from turbdb.ingest import open_source


def field(nt=1, nz=3, ny=4, nx=5, nc=3, dtype="float64"):
    """(nt, nz, ny, nx, nc) holding 10000t + 1000x + 100y + 10z + c: any mix-up of axes shows."""
    t, z, y, x, c = np.indices((nt, nz, ny, nx, nc))
    return (10000 * t + 1000 * x + 100 * y + 10 * z + c).astype(dtype)


def test_the_only_field_dataset_is_found_without_a_path(tmp_path):
    f = field(dtype="float32")[0]
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h["grid/x"] = np.arange(5.0)  # 1-D: not a candidate
        h["fields/velocity"] = f
    src = open_source(tmp_path / "a.h5")
    assert (src.key, src.grid, src.ncomp, src.dtype) == ("/fields/velocity", (5, 4, 3), 3, np.float32)
    np.testing.assert_array_equal(src.read(src.refs()[0]), f)


def test_dataset_with_time_is_read_step_by_step(tmp_path):
    f = field(nt=3)
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h.create_dataset("u", data=f, chunks=(1, 3, 4, 5, 3))
        h["p"] = f[..., 0]
    src = open_source(tmp_path / "a.h5", dataset_path="u")
    assert (src.axes, src.n_steps) == ("tzyxc", 3)
    for ref in src.refs():
        np.testing.assert_array_equal(src.read(ref), f[ref.index])


@pytest.mark.parametrize("variables", ["u,v,w", ["/u", "v", "w"], " u , v , w "])
def test_per_component_datasets_are_stacked_along_c(tmp_path, variables):
    f = field(nt=2)
    with h5py.File(tmp_path / "a.h5", "w") as h:
        for c, name in enumerate("uvw"):
            h[name] = f[..., c]
    src = open_source(tmp_path / "a.h5", variables=variables, axes="tzyx")
    assert (src.key, src.ncomp, src.n_steps) == ("/u,/v,/w", 3, 2)
    np.testing.assert_array_equal(src.read(src.refs()[1]), f[1])


def test_dataset_path_may_name_the_group_holding_the_variables(tmp_path):
    f = field()
    with h5py.File(tmp_path / "a.h5", "w") as h:
        for c, name in enumerate(("ux", "uy", "uz")):
            h[f"step0/{name}"] = f[0, ..., c]
            h[f"step1/{name}"] = f[0, ..., c] + 1
    src = open_source(tmp_path / "a.h5", dataset_path="/step1", variables=["ux", "uy", "uz"])
    np.testing.assert_array_equal(src.read(src.refs()[0]), f[0] + 1)


def test_ambiguous_file_lists_the_candidates(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h["u"] = field()[0]
        h["p"] = field(nc=1)[0, ..., 0]
        h["mask"] = np.zeros((3, 4, 5), "i1")
    with pytest.raises(FormatError, match=r"several.*p \(3, 4, 5\) float64; u \(3, 4, 5, 3\) float64.*dataset_path="):
        open_source(tmp_path / "a.h5")


def test_file_without_float_fields_says_so(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h["mask"] = np.zeros((3, 4, 5), "i1")
    with pytest.raises(FormatError, match=r"no floating-point dataset.*mask \(3, 4, 5\) int8"):
        open_source(tmp_path / "a.h5")


def test_unknown_dataset_path_lists_what_is_there(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h["u"] = field()[0]
    with pytest.raises(UnknownNameError, match=r"no dataset or group '/vel'.*/u \(3, 4, 5, 3\)"):
        open_source(tmp_path / "a.h5", dataset_path="/vel")
    with pytest.raises(UnknownNameError, match=r"no dataset 'w'.*u \(3, 4, 5, 3\)"):
        open_source(tmp_path / "a.h5", variables="u,w")


def test_integer_dataset_is_refused(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h["u"] = field(dtype="int16")[0]
    with pytest.raises(FormatError, match=r"dataset /u .* integer dtype int16.*scale_factor"):
        open_source(tmp_path / "a.h5", dataset_path="u")


def test_components_of_different_shapes_are_refused(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h["u"] = np.zeros((3, 4, 5))
        h["v"] = np.zeros((3, 4, 6))
    with pytest.raises(FormatError, match="differ in shape"):
        open_source(tmp_path / "a.h5", variables="u,v")


def test_dimension_scales_determine_the_axes(tmp_path):
    # Stored as (x, y, z, component), as a netCDF-4 writer with those dimensions would.
    f = field()[0]
    with h5py.File(tmp_path / "a.h5", "w") as h:
        ds = h.create_dataset("u", data=f.transpose(2, 1, 0, 3))
        for i, name in enumerate(("x", "y", "z")):
            h[name] = np.arange(ds.shape[i], dtype="f8")
            h[name].make_scale(name)
            ds.dims[i].attach_scale(h[name])
        ds.dims[3].label = "component"
    src = open_source(tmp_path / "a.h5")
    assert src.axes == "xyzc"
    np.testing.assert_array_equal(src.read(src.refs()[0]), f)


def test_not_an_hdf5_file_is_a_format_error(tmp_path):
    (tmp_path / "a.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(FormatError, match="not a readable HDF5 file"):
        open_source(tmp_path / "a.h5")


def test_an_hdf5_cutout_of_several_steps_is_named_as_time_steps_not_components(tmp_path):
    # The advice was to stack velocity_0002,velocity_0004 as components: the steps became components.
    with h5py.File(tmp_path / "cut.h5", "w") as f:
        for step in (2, 4):
            f[f"pressure_{step:04d}"] = np.zeros((4, 4, 4, 1), np.float32)
        f["xcoor"] = np.arange(4.0)
    with pytest.raises(FormatError) as refused:
        open_source(tmp_path / "cut.h5")
    message = str(refused.value)
    assert "holds 2 time steps of 'pressure' (pressure_0002, pressure_0004)" in message, message
    assert "--dataset-path (Python: dataset_path=) 'pressure_0002'" in message and "variables" not in message


def test_a_chunk_never_written_is_refused_not_read_as_the_fill_value(tmp_path):
    # A writer stopped halfway: HDF5 reads the missing chunks as zeros.
    f = field(nt=3, dtype="float32")
    with h5py.File(tmp_path / "a.h5", "w") as h:
        u = h.create_dataset("u", shape=f.shape, dtype="f4", chunks=(1, 3, 4, 5, 3))
        u[0], u[1] = f[0], f[1]
        h.create_dataset("never", shape=f.shape[1:], dtype="f4")  # contiguous, not written
    src = open_source(tmp_path / "a.h5", dataset_path="u")
    np.testing.assert_array_equal(src.read(src.refs()[1]), f[1])
    with pytest.raises(FormatError, match=r"1 of the chunks this step needs were never written.*incomplete"):
        src.read(src.refs()[2])
    with pytest.raises(FormatError, match="never written"):
        open_source(tmp_path / "a.h5", dataset_path="never")


def test_components_labelled_with_other_dimensions_are_refused(tmp_path):
    f = field(nz=8, ny=8, nx=8, nc=1, dtype="float32")[0, ..., 0]
    with h5py.File(tmp_path / "a.h5", "w") as h:
        for name, labels in (("u", "zyx"), ("v", "xyz"), ("w", "zyx")):
            h[name] = f if labels == "zyx" else f.T
            for axis, label in enumerate(labels):
                h[name].dims[axis].label = label
    with pytest.raises(FormatError, match=r"differ in dimensions.*/v \('x', 'y', 'z'\)"):
        open_source(tmp_path / "a.h5", variables="u,v,w")


def test_external_storage_and_staggered_components_are_read_as_before(tmp_path):
    f = field(nz=4, ny=4, nx=4, nc=1, dtype="float32")[0, ..., 0]
    f.tofile(tmp_path / "raw.bin")
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h.create_dataset("p", shape=f.shape, dtype="f4", external=[(str(tmp_path / "raw.bin"), 0, f.nbytes)])
        for name, labels in (("u", ("z", "y", "xu")), ("v", ("z", "yv", "x")), ("w", ("zw", "y", "x"))):
            h[name] = f
            for axis, label in enumerate(labels):
                h[name].dims[axis].label = label
    src = open_source(tmp_path / "a.h5", dataset_path="p")
    np.testing.assert_array_equal(src.read(src.refs()[0])[..., 0], f)
    src = open_source(tmp_path / "a.h5", variables="u,v,w", axes="zyx")
    np.testing.assert_array_equal(src.read(src.refs()[0])[..., 1], f)


@pytest.mark.parametrize("name", ["run.h5", "run.0001"])
@pytest.mark.parametrize(("attribute", "shown"), [("_FillValue", r"-9999\.0"), ("missing_value", r"-1e\+30")])
def test_a_netcdf4_file_read_as_hdf5_refuses_its_missing_values_as_the_netcdf_reader_does(tmp_path, name, attribute,
                                                                                           shown):
    # A netCDF-4 file is HDF5 inside; not named .nc, its -9999 cells were stored as data.
    import xarray as xr

    u = np.ones((2, 3, 4, 5), np.float32)
    u[1, 2, 3, 4] = np.nan
    ds = xr.Dataset({"u": (("time", "z", "y", "x"), u)})
    value = -9999.0 if attribute == "_FillValue" else -1e30
    ds["u"].encoding[attribute] = value
    ds.to_netcdf(tmp_path / name, engine="h5netcdf")
    src = open_source(tmp_path / name)
    assert src.format == "hdf5"
    np.testing.assert_array_equal(src.read(src.refs()[0]), 1.0)
    with pytest.raises(FormatError, match=rf"dataset /u of .*{name} holds its {attribute} \({shown}\) at 1 of this "
                                          rf"step's values, which netCDF and xarray mark as missing.*import h5py"):
        src.read(src.refs()[1])


def test_a_netcdf4_record_never_written_is_refused_in_a_file_read_as_hdf5(tmp_path):
    import netCDF4

    with netCDF4.Dataset(tmp_path / "p.h5", "w", format="NETCDF4") as nc:
        for name, n in (("t", None), ("z", 3), ("y", 4), ("x", 5)):
            nc.createDimension(name, n)
        p = nc.createVariable("p", "f4", ("t", "z", "y", "x"))
        p[0] = np.ones((3, 4, 5))
        p[1, 0, 0, 0] = 3.0  # the writer stopped after one value of the second record
    src = open_source(tmp_path / "p.h5")
    with pytest.raises(FormatError, match="default fill value .* at 59 of this step's values: they were never written"):
        src.read(src.refs()[1])


def test_zeros_equal_to_a_plain_hdf5_fill_value_are_data(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as h:
        h.create_dataset("u", data=np.zeros((3, 4, 5), "f4"), fillvalue=0.0)
    src = open_source(tmp_path / "a.h5")
    np.testing.assert_array_equal(src.read(src.refs()[0]), 0.0)


@pytest.mark.parametrize("steps", [[0.25], [0.25, 0.3]])
def test_an_hdf5_cutouts_coordinates_are_named_with_the_options_that_keep_them(tmp_path, steps):
    # .nc and .zarr cutouts got the note; HDF5 ones (turbdb's, as JHTDB's) were ingested with
    # the spacing 2π/n of the sub-box, without a word.
    import turbdb
    from turbdb import export

    ds = turbdb.create_dataset(tmp_path / "db", "a", grid=(16, 12, 8), spacing=(0.1, 0.2, 0.3), origin=(1.0, 0.0, 0.0),
                               periodic=(False,) * 3, times=[0.25, 0.3, 0.35], fields={"p": 1})
    for t in range(3):
        ds.write("p", t, np.full((8, 12, 16), float(t)))
    cut = ds.cutout("p", time=steps if len(steps) > 1 else steps[0], x=(2, 8))
    written = export.write(cut, tmp_path / "c.h5")[0]  # and its .xmf
    (note,) = open_source(written, dataset_path=f"p_{len(steps):04d}").notes
    assert f"--spacing 0.1,0.2,0.3 --origin 1.2,0,0 --t0 {steps[-1]}," in note, note


def test_a_netcdf4_files_coordinates_and_calendar_times_are_noted_when_read_as_hdf5(tmp_path):
    import xarray as xr

    times = ("time", [0.0, 500.0], {"units": "milliseconds since 2000-01-01"})
    ds = xr.Dataset({"u": (("time", "z", "y", "x"), np.zeros((2, 3, 4, 5), np.float32))},
                    coords={"time": times, "x": np.arange(5) * 0.1, "y": np.arange(4) * 0.2, "z": np.arange(3) * 0.3})
    ds.to_netcdf(tmp_path / "run.0001", engine="h5netcdf")
    (note,) = open_source(tmp_path / "run.0001").notes
    assert "--spacing 0.1,0.2,0.3 --origin 0,0,0 --t0 0 --dt 0.5 (seconds since 2000-01-01, converted from the " \
           "file's milliseconds)" in note, note
