"""What a probe of notebook use found: exports that labelled a selected step, a time mean or
a concatenation as step 1 at t = 0; a single-time cutout whose time was an attribute only,
lost in xarray's concat; units that never reached a cutout; a track bar that a notebook
never drew; and two documentation lines that said the opposite of the code."""

import inspect
import re
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray

import turbdb
from turbdb import export

TIMES = [0.0, 0.12, 0.24, 0.36]
GRID = (8, 6, 4)
BOX = dict(x=(0, 4), y=(0, 3), z=(0, 2))
DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    """A small periodic box with units: velocity in m/s, temperature in K, lengths in m, times in s."""
    rng = np.random.default_rng(10)
    db = tmp_path_factory.mktemp("notebook") / "db"
    ds = turbdb.create_dataset(db, "box", grid=GRID, times=TIMES, units={"length": "m", "time": "s"},
                               fields={"velocity": {"ncomp": 3, "units": "m/s"}, "temp": {"ncomp": 1, "units": "K"}})
    for t in range(len(TIMES)):
        ds.write("velocity", t, rng.standard_normal(GRID[::-1] + (3,)).astype(np.float32))
        ds.write("temp", t, rng.standard_normal(GRID[::-1]).astype(np.float32))
    return turbdb.open(db)["box"]


def _written(path):
    """(HDF5 dataset names, the ``time`` dataset or None, the XDMF times) of an export."""
    with h5py.File(path) as f:
        names, time = sorted(f), (f["time"][()].tolist() if "time" in f else None)
    xmf = ET.parse(Path(path).with_suffix(".xmf")).getroot()
    return names, time, [float(t.get("Value")) for t in xmf.iter("Time")]


def _single_cutouts(ds):
    return [ds.cutout("velocity", time=t, **BOX) for t in TIMES]


# --- D1: export labels steps from the array's own coordinates ----------------------------------


def test_an_isel_step_is_exported_as_that_step_at_its_time(ds, tmp_path):
    many = ds.cutout("velocity", time=TIMES, **BOX)
    export.write(many.isel(time=2), tmp_path / "isel.h5")
    assert _written(tmp_path / "isel.h5") == (["time", "velocity_0003", "xcoor", "ycoor", "zcoor"], [0.24], [0.24])
    with h5py.File(tmp_path / "isel.h5") as f:
        assert (f.attrs["time"], f.attrs["time_index"]) == (0.24, 2)


def test_a_mean_over_time_is_exported_unlabelled_not_as_step_one_at_zero(ds, tmp_path):
    many = ds.cutout("velocity", time=TIMES, **BOX)
    export.write(many[1:].mean("time"), tmp_path / "mean.h5")
    names, time, xmf_times = _written(tmp_path / "mean.h5")
    assert names == ["velocity", "xcoor", "ycoor", "zcoor"] and time is None and xmf_times == []
    with h5py.File(tmp_path / "mean.h5") as f:
        np.testing.assert_allclose(f["velocity"][...], many[1:].mean("time").values, rtol=1e-6)
        assert "time" not in f.attrs and "time_index" not in f.attrs
    xmf = ET.parse(tmp_path / "mean.xmf").getroot()
    assert [g.get("GridType") for g in xmf.iter("Grid")] == ["Uniform"]  # no temporal collection
    # xarray keeps the first cutout's time attributes through the concatenation and the mean.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # xarray's notice of new concat defaults
        stacked = xarray.concat(_single_cutouts(ds), dim="time")
    assert stacked.mean("time").attrs["time"] == 0.0
    export.write(stacked.mean("time"), tmp_path / "stacked_mean.h5")
    assert _written(tmp_path / "stacked_mean.h5")[1:] == (None, [])


def test_concatenated_single_time_cutouts_export_each_step(ds, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        stacked = xarray.concat(_single_cutouts(ds)[1:3], dim="time")  # what a notebook writes
    export.write(stacked, tmp_path / "concat.xmf")
    names, time, xmf_times = _written(tmp_path / "concat.h5")
    assert names[:2] == ["time", "velocity_0002"] and names[2] == "velocity_0003"
    assert time == xmf_times == [0.12, 0.24]
    with h5py.File(tmp_path / "concat.h5") as f:
        assert "time" not in f.attrs  # the first cutout's, which the concatenation kept
    # xarray's coming default keeps one time_index for all: refused, saying how to set it.
    minimal = xarray.concat(_single_cutouts(ds)[1:3], dim="time", coords="minimal", compat="override")
    with pytest.raises(turbdb.TurbdbError, match=r"time_index.*assign_coords"):
        export.write(minimal, tmp_path / "minimal.h5")
    assert not (tmp_path / "minimal.h5").exists()


def test_a_single_component_or_a_plane_exports_and_other_dims_are_refused_clearly(ds, tmp_path):
    one = ds.cutout("velocity", time=0.24, **BOX)
    export.write(one.sel(component="ux"), tmp_path / "ux.h5")
    with h5py.File(tmp_path / "ux.h5") as f:  # named with its component: velocity_0003 said nothing of ux
        np.testing.assert_array_equal(f["velocity_ux_0003"][...], one.sel(component="ux").values)
    attribute = ET.parse(tmp_path / "ux.xmf").getroot().find(".//Attribute")
    assert (attribute.get("Name"), attribute.get("AttributeType")) == ("velocity_ux", "Scalar")
    export.write(one.isel(z=0), tmp_path / "plane.h5")
    with h5py.File(tmp_path / "plane.h5") as f:
        assert f["velocity_0003"].shape == (1, 3, 4, 3) and f["zcoor"][()].tolist() == [float(one.z[0])]
    with pytest.raises(turbdb.TurbdbError, match=r"select or reduce extra"):
        export.write(one.expand_dims(extra=2), tmp_path / "extra.h5")


# --- D2: one time is also a coordinate, as isel leaves it -------------------------------------------


def test_a_single_time_cutout_is_the_isel_of_a_series_plus_its_time_attributes(ds):
    one = ds.cutout("velocity", time=0.12, **BOX)
    picked = ds.cutout("velocity", time=[0.0, 0.12], **BOX).isel(time=1)
    assert float(one["time"]) == 0.12 and int(one["time_index"]) == 1
    assert one.attrs["time"] == 0.12 and one.attrs["time_index"] == 1  # kept for code that reads them
    xarray.testing.assert_identical(one, picked.assign_attrs(time=0.12, time_index=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        stacked = xarray.concat(_single_cutouts(ds), dim="time")
    assert stacked["time"].values.tolist() == TIMES and stacked["time_index"].values.tolist() == [0, 1, 2, 3]
    xarray.testing.assert_identical(stacked.drop_attrs(), ds.cutout("velocity", time=TIMES, **BOX).drop_attrs())


# --- D3: units reach the cutout and its files ---------------------------------------------------------


def test_units_of_the_field_and_of_the_axes_reach_the_cutout_and_its_files(ds, tmp_path):
    temp = ds.cutout("temp", time=0.24, **BOX)
    assert temp.attrs["units"] == "K" and temp["time"].attrs == {"units": "s"}
    assert all(temp[a].attrs == {"units": "m"} for a in "xyz")
    assert ds.cutout("velocity", time=TIMES[:2], **BOX)["time"].attrs == {"units": "s"}
    temp.to_netcdf(tmp_path / "temp.nc", engine="h5netcdf")
    with xarray.open_dataarray(tmp_path / "temp.nc", engine="h5netcdf") as back:
        assert back.attrs["units"] == "K" and back.x.attrs["units"] == "m" and back.time.attrs["units"] == "s"
    export.write(temp, tmp_path / "temp.h5")
    with h5py.File(tmp_path / "temp.h5") as f:
        assert {k: f[k].attrs.get("units") for k in f} == {"temp_0003": "K", "time": "s", "xcoor": "m",
                                                           "ycoor": "m", "zcoor": "m"}


def test_a_dataset_without_units_gives_no_empty_units_attribute(tmp_path):
    bare = turbdb.create_dataset(tmp_path / "db", "bare", grid=(4, 4, 4), times=[0.0], fields={"pressure": 1})
    bare.write("pressure", 0, np.zeros((4, 4, 4), np.float32))
    cut = turbdb.open(tmp_path / "db")["bare"].cutout("pressure", time=0.0)
    assert "units" not in cut.attrs and not cut.x.attrs and not cut["time"].attrs


# --- D5: a bar asked for is drawn where stderr is not a terminal ----------------------------------------


def test_track_draws_the_bar_it_was_asked_for_outside_a_terminal(ds, capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    start = [[1.0, 1.0, 0.5], [2.0, 2.5, 1.0]]
    ds.track(start, start=0.0, end=0.24, dt=0.12, method="lag4", progress=True)
    assert "track" in capsys.readouterr().err  # stderr is a capture here, as in a notebook or a log
    ds.track(start, start=0.0, end=0.24, dt=0.12, method="lag4")
    assert capsys.readouterr().err == ""  # the default draws nothing
    monkeypatch.setenv("TQDM_DISABLE", "1")
    ds.track(start, start=0.0, end=0.24, dt=0.12, method="lag4", progress=True)
    assert capsys.readouterr().err == ""


# --- D6, D7: what the docs say -------------------------------------------------------------------------


def test_the_docs_say_temporal_none_takes_the_later_step_at_a_tie_as_it_does(ds):
    point = [[1.0, 1.0, 0.5]]
    tie = ds.query("velocity", point, time=0.06, method="none", temporal="none")
    np.testing.assert_array_equal(tie, ds.query("velocity", point, time=0.12, method="none"))
    text = " ".join((DOCS / "queries.md").read_text().split())
    assert "at an exact tie in time the later stored step" in text and "the earlier stored step" not in text


def test_the_query_docstring_says_cancel_stops_the_evaluation_without_an_engine():
    doc = " ".join(inspect.getdoc(turbdb.Dataset.query).split())
    assert "looked at only before the query starts" not in doc
    assert re.search(r"Without an engine, .*``cancel`` stops the evaluation", doc)
