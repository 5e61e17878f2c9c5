"""Cutouts with a stride per axis, several times, and JHTDB's box filter (checked against
scipy's uniform filter and a brute-force mean), saved by turbdb.export and by `turbdb cutout`
as NetCDF, Zarr, HDF5 + XDMF and .npy and read back; the XDMF is checked element by element
against what the XDMF model requires, and its HDF5 references are read with h5py."""

import math
import time
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import scipy.ndimage
import xarray
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import turbdb
from turbdb import export
from turbdb.cli import main

NX, NY, NZ = 16, 12, 10
TIMES = [0.0, 0.5, 1.0, 1.5]


@pytest.fixture(scope="module")
def fields(tmp_path_factory):
    """Random fields on a periodic box and on a box with walls (x, z periodic; y not)."""
    rng = np.random.default_rng(3)
    stored = {t: rng.standard_normal((NZ, NY, NX, 3)).astype(np.float32) for t in range(len(TIMES))}
    db = tmp_path_factory.mktemp("cutout") / "db"
    for name, periodic in (("box", (True, True, True)), ("walls", (True, False, True))):
        ds = turbdb.create_dataset(db, name, grid=(NX, NY, NZ), periodic=periodic, times=TIMES,
                                   fields={"velocity": {"ncomp": 3, "units": "m/s"}, "pressure": 1})
        for t, values in stored.items():
            ds.write("velocity", t, values)
            ds.write("pressure", t, values[..., 0] * 2)
    return turbdb.open(db), stored


def brute_force_box_mean(values, width, periodic):
    """The mean over each node's clipped box, computed one node at a time."""
    half = (width - 1) // 2
    out = np.empty(values.shape)
    nz, ny, nx = values.shape[:3]
    for k in range(nz):
        for j in range(ny):
            for i in range(nx):
                box = []
                for centre, n, wraps in ((k, nz, periodic[2]), (j, ny, periodic[1]), (i, nx, periodic[0])):
                    nodes = np.arange(centre - half, centre - half + width)
                    box.append(np.mod(nodes, n) if wraps else nodes[(nodes >= 0) & (nodes < n)])
                out[k, j, i] = values[np.ix_(*box)].astype(np.float64).mean(axis=(0, 1, 2))
    return out


def test_the_box_filter_of_a_periodic_field_is_scipys_uniform_filter(fields):
    db, stored = fields
    for width in (2, 3, 5):
        cut = db["box"].cutout("velocity", time=1.0, filter_width=width)
        # scipy centres an even box one node lower; turbdb (as h = (w-1)//2) one node higher.
        origin = -1 if width % 2 == 0 else 0
        expected = scipy.ndimage.uniform_filter(stored[2].astype(np.float64), size=(width, width, width, 1),
                                                mode="wrap", origin=(origin, origin, origin, 0))
        np.testing.assert_allclose(cut.values, expected, rtol=0, atol=2e-6)
        assert cut.attrs["filter_width"] == width


def test_the_box_filter_is_truncated_at_walls(fields):
    db, stored = fields
    cut = db["walls"].cutout("pressure", time=0.5, filter_width=4)
    expected = brute_force_box_mean(stored[1][..., :1] * 2, 4, (True, False, True))
    np.testing.assert_allclose(cut.values, expected, rtol=0, atol=2e-6)


@settings(max_examples=25, deadline=None)
@given(x=st.tuples(st.integers(-20, 20), st.integers(1, 30)), z=st.tuples(st.integers(-12, 12), st.integers(1, 20)),
       y0=st.integers(0, NY - 1), strides=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
       width=st.integers(1, 5))
def test_a_filtered_strided_box_is_the_whole_filtered_field_sampled(fields, x, z, y0, strides, width):
    db, _ = fields
    whole = db["walls"].cutout("velocity", time=1.5, filter_width=width).values
    ranges = ((x[0], x[0] + x[1]), (y0, NY), (z[0], z[0] + z[1]))
    part = db["walls"].cutout("velocity", time=1.5, x=ranges[0], y=ranges[1], z=ranges[2], stride=strides,
                              filter_width=width)
    xi, yi, zi = (np.arange(a, b, s) % n for (a, b), s, n in zip(ranges, strides, (NX, NY, NZ)))
    np.testing.assert_array_equal(part.values, whole[np.ix_(zi, yi, xi)])
    np.testing.assert_array_equal(part.x_index.values, xi)


def test_several_times_add_a_leading_time_dim(fields):
    db, stored = fields
    cut = db["box"].cutout("velocity", time=[0.0, 1.0, 1.4], stride=(2, 3, 1))
    assert cut.dims == ("time", "z", "y", "x", "component") and cut.shape == (3, NZ, NY // 3, NX // 2, 3)
    np.testing.assert_array_equal(cut.time_index.values, [0, 2, 3])
    np.testing.assert_array_equal(cut.time.values, [0.0, 1.0, 1.5])
    np.testing.assert_array_equal(cut.values[2], stored[3][:, ::3, ::2])
    assert cut.attrs["stride"] == [2, 3, 1] and "time" not in cut.attrs


@pytest.mark.parametrize("kwargs, words", [
    ({"filter_width": 0}, "filter_width must be a positive integer"),
    ({"filter_width": NZ + 1}, f"filter_width {NZ + 1} is wider than the grid's {NZ} nodes along the periodic z axis "
                               f"\\(its box would take nodes twice\\); at most {NZ}"),
    ({"stride": (1, 2)}, "three"),
    ({"stride": 0}, "stride"),
    ({"time": []}, "non-empty sequence"),
    ({"time": [0.0, float("nan")]}, "finite"),
])
def test_bad_cutout_arguments_are_named(fields, kwargs, words):
    db, _ = fields
    with pytest.raises(turbdb.InvalidRequestError, match=words):
        db["box"].cutout("velocity", **{"time": 0.0, **kwargs})


def test_a_filter_whose_reads_would_not_fit_the_memory_limit_is_refused_before_reading(fields):
    # A 2³ cutout filtered 1 000 wide read (1 001³ nodes) as float64 and the process was
    # killed for memory; the same rule is checked here against a small limit.
    db, stored = fields
    turbdb.set_max_result_bytes(16 << 10)
    try:
        with pytest.raises(turbdb.LimitExceededError, match="a box filter 9 nodes wide over this box needs 21.1 KiB"):
            db["box"].cutout("velocity", time=0.0, x=(0, 2), y=(0, 2), z=(0, 2), filter_width=9)
        small = db["box"].cutout("velocity", time=0.0, x=(0, 2), y=(0, 2), z=(0, 2), filter_width=3)
    finally:
        turbdb.set_max_result_bytes(None)
    expected = brute_force_box_mean(stored[0], 3, (True, True, True))[:2, :2, :2]
    np.testing.assert_allclose(small.values, expected, rtol=0, atol=2e-6)


def check_xdmf(xmf_path, cut):
    """The elements and attributes the XDMF model requires, each HDF reference resolved."""
    root = ET.parse(xmf_path).getroot()
    assert root.tag == "Xdmf" and root.get("Version") in ("2.0", "3.0")
    (domain,) = root.findall("Domain")
    (collection,) = domain.findall("Grid")
    assert collection.get("GridType") == "Collection" and collection.get("CollectionType") == "Temporal"
    steps = collection.findall("Grid")
    times = np.atleast_1d(cut.time.values if "time" in cut.dims else cut.attrs["time"])
    assert len(steps) == len(times)
    nz, ny, nx = (cut.sizes[a] for a in "zyx")
    ncomp = cut.sizes["component"]
    for grid, time in zip(steps, times):
        assert grid.get("GridType") == "Uniform" and grid.get("Name")
        assert float(grid.find("Time").get("Value")) == float(time)
        topology = grid.find("Topology")
        assert topology.get("TopologyType") == "3DRectMesh" and topology.get("Dimensions") == f"{nz} {ny} {nx}"
        geometry = grid.find("Geometry")
        assert geometry.get("GeometryType") == "VXVYVZ"
        items = geometry.findall("DataItem")
        assert [int(i.get("Dimensions")) for i in items] == [nx, ny, nz]
        (attribute,) = grid.findall("Attribute")
        assert attribute.get("Name") == cut.name and attribute.get("Center") == "Node"
        assert attribute.get("AttributeType") == {1: "Scalar", 3: "Vector"}[ncomp]
        (values,) = attribute.findall("DataItem")
        for item in [*items, values]:
            assert item.get("Format") == "HDF" and item.get("NumberType") == "Float"
            assert item.get("Precision") in ("4", "8")
            file_name, dataset = item.text.strip().split(":")
            with h5py.File(xmf_path.parent / file_name) as h5:
                data = h5[dataset]
                assert data.shape == tuple(int(n) for n in item.get("Dimensions").split())
                assert data.dtype.itemsize == int(item.get("Precision"))
        yield values.text.strip().split(":")[1]


@pytest.mark.parametrize("suffix", [".nc", ".zarr", ".h5", ".xmf", ".npy"])
def test_turbdb_export_writes_each_format_and_reads_back(fields, tmp_path, suffix):
    db, _ = fields
    cut = db["walls"].cutout("velocity", time=[0.5, 1.5], x=(-4, 9), stride=(1, 2, 2), filter_width=3)
    written = export.write(cut, tmp_path / f"box{suffix}")
    assert all(p.exists() for p in written)
    if suffix == ".nc":
        xarray.testing.assert_identical(xarray.open_dataarray(written[0]).load(), cut)
    elif suffix == ".zarr":
        xarray.testing.assert_identical(xarray.open_zarr(written[0])["velocity"].load(), cut)
    elif suffix == ".npy":
        np.testing.assert_array_equal(np.load(written[0]), cut.values)
    else:
        h5, xmf = written
        assert (h5.suffix, xmf.suffix) == (".h5", ".xmf")
        names = list(check_xdmf(xmf, cut))
        # JHTDB counts stored steps from 1, as turbdb.jhtdb's getCutout names them.
        assert names == [f"/velocity_{i + 1:04d}" for i in cut.time_index.values], names
        with h5py.File(h5) as f:
            for k, name in enumerate(names):
                np.testing.assert_array_equal(f[name][...], cut.values[k])
            np.testing.assert_array_equal(f["xcoor"][...], cut.x.values)


def test_a_scalar_at_one_time_gives_a_scalar_xdmf(fields, tmp_path):
    db, _ = fields
    cut = db["box"].cutout("pressure", time=1.0)
    h5, xmf = export.xdmf(cut, tmp_path / "p.xmf")
    (name,) = check_xdmf(xmf, cut)
    with h5py.File(h5) as f:
        np.testing.assert_array_equal(f[name][...], cut.values[..., 0])


def test_unknown_endings_are_refused_before_anything_is_written(fields, tmp_path):
    db, _ = fields
    with pytest.raises(turbdb.InvalidRequestError, match=r"'\.h6'.*\.nc.*\.zarr.*\.h5.*\.xmf.*\.npy"):
        export.write(db["box"].cutout("pressure", time=0.0), tmp_path / "x.h6")
    result = CliRunner().invoke(main, ["cutout", str(db.path), "box", "--field", "pressure", "--time", "0",
                                       "--out", str(tmp_path / "y.h6")])
    assert result.exit_code == 2 and "cannot tell the format" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".nc", ".zarr", ".h5", ".xdmf", ".npy"])
def test_the_cutout_command_writes_each_format(fields, tmp_path, suffix):
    db, _ = fields
    out = tmp_path / f"cut{suffix}"
    result = CliRunner().invoke(main, ["cutout", str(db.path / "walls"), "walls", "--field", "velocity", "--ts", "0.4",
                                       "--te", "1.5", "--stridet", "2", "--x", "-2,10", "--stride", "2,1,3",
                                       "--filter-width", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    expected = db["walls"].cutout("velocity", time=[0.5, 1.5], x=(-2, 10), stride=(2, 1, 3), filter_width=3)
    assert "2 times, t = 0.5 … 1.5" in result.output and str(out) in result.output
    if suffix == ".nc":
        xarray.testing.assert_identical(xarray.open_dataarray(out).load(), expected)
    elif suffix == ".zarr":
        xarray.testing.assert_identical(xarray.open_zarr(out)["velocity"].load(), expected)
    elif suffix == ".npy":
        np.testing.assert_array_equal(np.load(out), expected.values)
    else:
        assert len(list(check_xdmf(out.with_suffix(".xmf") if suffix == ".h5" else out, expected))) == 2


def test_the_cutout_command_says_what_times_it_needs(fields, tmp_path):
    db, _ = fields
    run = CliRunner().invoke
    missing = run(main, ["cutout", str(db.path), "box", "--field", "velocity", "--out", str(tmp_path / "a.nc")])
    assert missing.exit_code == 2 and "--time T" in missing.output
    empty = run(main, ["cutout", str(db.path), "box", "--field", "velocity", "--ts", "0.1", "--te", "0.2",
                       "--out", str(tmp_path / "a.nc")])
    assert empty.exit_code == 2 and "no stored time lies in [0.1, 0.2]" in empty.output
    one = run(main, ["cutout", str(db.path), "box", "--field", "pressure", "--time", "0.9", "--z", "0,1",
                     "--out", str(tmp_path / "one.npy")])
    assert one.exit_code == 0 and "t = 1" in one.output
    assert np.load(tmp_path / "one.npy").shape == (1, NY, NX, 1)


def test_a_cutout_read_into_a_callers_array_equals_the_returned_one_and_a_wrong_array_is_refused(fields):
    db, _ = fields
    ds = db["walls"]
    store, axes = ds.field_store("velocity"), turbdb.arguments.axes_of(ds.metadata)
    ranges = ((-3, 13), (2, 11), (1, 9))  # wraps in x; y has walls
    expected = store.cutout(2, axes, ranges, 1)
    into = np.full((2,) + expected.shape, np.nan, dtype=np.float32)
    store.cutout_into(2, axes, ranges, 1, into[1])
    assert np.array_equal(into[1], expected) and np.isnan(into[0]).all()
    with pytest.raises(turbdb.InvalidRequestError, match=r"shape .* needs"):
        store.cutout_into(2, axes, ranges, 1, np.empty(expected.shape[:3] + (2,), dtype=np.float32))
    strided = np.empty(expected.shape[:2] + (2 * expected.shape[2], 3), dtype=np.float32)[:, :, ::2]
    with pytest.raises(turbdb.TurbdbError, match="contiguous"):
        store.cutout_into(2, axes, ranges, 1, strided)


def test_a_zarr_output_never_empties_a_directory_it_did_not_write(fields, tmp_path):
    db, _ = fields
    cut = db["box"].cutout("pressure", time=0.0)
    mine = tmp_path / "notes.zarr"
    mine.mkdir()
    (mine / "thesis.tex").write_text("keep me")
    with pytest.raises(turbdb.InvalidRequestError, match="exists and is not a cutout written before"):
        export.write(cut, mine)
    # Nor a Zarr v3 store (a database is one; a cutout never writes one), nor a directory
    # given as a file.
    v3 = tmp_path / "v3.zarr"
    v3.mkdir()
    (v3 / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    with pytest.raises(turbdb.InvalidRequestError, match="not a cutout written before"):
        export.write(cut, v3)
    (tmp_path / "dir.npy").mkdir()
    with pytest.raises(turbdb.InvalidRequestError, match="is a directory"):
        export.write(cut, tmp_path / "dir.npy")
    result = CliRunner().invoke(main, ["cutout", str(db.path), "box", "--field", "pressure", "--time", "0",
                                       "--out", str(mine)])
    assert result.exit_code != 0 and "would delete what it holds" in result.output
    assert (mine / "thesis.tex").read_text() == "keep me"
    # A cutout written before is replaced, as a file is.
    again = tmp_path / "again.zarr"
    export.write(cut, again)
    export.write(cut * 2, again)
    xarray.testing.assert_identical(xarray.open_zarr(again)["pressure"].load(), cut * 2)


@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("width", [1, 2, 3, 8])
def test_the_nodes_a_cutout_reads_are_those_its_filter_windows_span(periodic, width):
    from turbdb.cutout import _windows, nodes_read, output_shape

    info = SimpleNamespace(grid=(16, 12, 20), periodic=(periodic,) * 3)
    rng = np.random.default_rng(width)
    for _ in range(50):
        ranges = tuple(tuple(sorted(rng.choice(n, 2, replace=False).tolist())) for n in info.grid)
        strides = tuple(int(s) for s in rng.integers(1, 6, 3))
        expected = (math.prod(output_shape(ranges, strides)) if width == 1 else
                    math.prod(w.hi - w.lo for w in (_windows(a, b, s, width, n, periodic)
                                                    for (a, b), s, n in zip(ranges, strides, info.grid))))
        assert nodes_read(info, ranges, strides, width) == expected



def test_hdf5_and_xdmf_outputs_escape_names_and_refuse_what_they_cannot_write(fields, tmp_path):
    db, _ = fields
    cut = db["box"].cutout("pressure", time=0.0)
    h5, xmf = export.write(cut, tmp_path / "a&b<c.xmf")
    assert ET.parse(xmf).getroot().tag == "Xdmf" and h5.name == "a&b<c.h5"
    (tmp_path / "d.xmf").mkdir()
    with pytest.raises(turbdb.InvalidRequestError, match="written beside .* is a directory"):
        export.write(cut, tmp_path / "d.h5")
    assert not (tmp_path / "d.h5").exists()
    twice = db["box"].cutout("pressure", time=[0.0, 1.0, 0.0])
    with pytest.raises(turbdb.InvalidRequestError, match="more than once"):
        export.write(twice, tmp_path / "twice.h5")


def test_a_box_filter_wider_than_a_bounded_axis_is_the_mean_of_what_lies_inside(tmp_path):
    # Cut at the walls, as documented; only a periodic axis refuses a wider box (it would
    # take nodes twice).
    ds = turbdb.create_dataset(tmp_path, "b", grid=(12, 4, 10), times=[0.0], fields={"p": 1},
                               periodic=(True, False, False))
    values = np.random.default_rng(0).standard_normal((10, 4, 12))
    ds.write("p", 0, values)
    for w in (5, 9, 12):
        h = (w - 1) // 2
        got = ds.cutout("p", time=0.0, filter_width=w).values[..., 0]
        expected = np.empty_like(values)
        for z in range(10):
            for y in range(4):
                zs = [k for k in range(z - h, z - h + w) if 0 <= k < 10]
                ys = [k for k in range(y - h, y - h + w) if 0 <= k < 4]
                for x in range(12):
                    expected[z, y, x] = values[np.ix_(zs, ys, [k % 12 for k in range(x - h, x - h + w)])].mean()
        assert np.abs(got - expected).max() < 1e-6
    with pytest.raises(turbdb.InvalidRequestError, match="wider than the grid's 12 nodes along the periodic x axis"):
        ds.cutout("p", time=0.0, filter_width=13)


def test_a_box_filter_far_wider_than_a_bounded_grid_is_its_mean_quickly(tmp_path):
    # Its reads are cut at the walls: no "60 GiB" refusal, no loop over the whole width.
    ds = turbdb.create_dataset(tmp_path, "b", grid=(8, 6, 5), times=[0.0], fields={"p": 1}, periodic=(False,) * 3)
    values = np.random.default_rng(1).standard_normal((5, 6, 8))
    ds.write("p", 0, values)
    began = time.perf_counter()
    got = ds.cutout("p", time=0.0, filter_width=200_001).values[..., 0]
    assert time.perf_counter() - began < 5
    np.testing.assert_allclose(got, values.astype(np.float32).mean(), rtol=1e-6, atol=1e-6)
