"""The eleventh probe's findings on the files turbdb writes for other tools: the JHTDB
writers wrote in place (Ctrl-C destroyed the earlier box), NetCDF on a full disk crashed the
process after its error, XDMF described 2-, 4-, 6-component fields so that VTK misread them,
float64 was saved as float32, the HTTP NetCDF lacked the local file's units and time, an
output linked to /dev/stdout failed, a colon in the name made the XDMF unreadable, the HTTP
file name counted steps from 0, and one exported component lost its name."""

import io
import os
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import h5py
import httpx
import numpy as np
import pytest
import xarray

import turbdb
import turbdb.jhtdb as jhtdb
from turbdb import export
from turbdb.service.app import create_app

from test_cli import db  # noqa: F401  (the CLI tests' two-step 16³ database)
from test_full_disk_outputs import assert_failed_cleanly, full_tmpfs

TEMPORARY = ".turbdb-tmp-"
AS_ROOT = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def fields(tmp_path):
    """Fields of 1, 2, 3, 6 and 9 components on an 8 × 6 × 4 grid, two steps, with units."""
    counts = {"pressure": 1, "pair": 2, "velocity": 3, "tau": 6, "grad": 9}
    ds = turbdb.create_dataset(tmp_path / "db", "box", grid=(8, 6, 4), spacing=(0.5, 0.25, 1.0), times=[0.0, 0.5],
                               fields={n: {"ncomp": c, "units": "m/s" if n == "velocity" else ""}
                                       for n, c in counts.items()},
                               units={"length": "m", "time": "s"}, atom=4, partition=8)
    rng = np.random.default_rng(11)
    for name, count in counts.items():
        for t in range(2):
            ds.write(name, t, rng.standard_normal((4, 6, 8, count)).astype(np.float32))
    return turbdb.open(tmp_path / "db")["box"]


def contents(*paths: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in paths}


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(f"{TEMPORARY}*")]


# --- D1: the JHTDB writers replace their files only once complete ---------------------------------


def interrupted(original):
    """``original``, then Ctrl-C as it returns."""
    def call(*args, **kwargs):
        original(*args, **kwargs)
        raise KeyboardInterrupt
    return call


@pytest.mark.parametrize("moment", ["writing the .h5", "between the .h5 and the .xmf"])
def test_an_interrupted_jhtdb_cutout_write_leaves_the_earlier_box_as_it_was(fields, tmp_path, monkeypatch, moment):
    cube = jhtdb.turb_dataset("box", str(tmp_path / "out"), url=str(tmp_path / "db"))
    small = jhtdb.getCutout(cube, "velocity", np.array([[1, 2], [1, 2], [1, 2], [1, 1]]), np.ones(4, int),
                            verbose=False)
    written = jhtdb.write_cutout_hdf5_and_xmf_files(cube, small, "box")
    before = contents(*written)
    bigger = jhtdb.getCutout(cube, "velocity", np.array([[1, 8], [1, 6], [1, 4], [1, 2]]), np.ones(4, int),
                             verbose=False)
    if moment == "writing the .h5":  # the new file written whole, the call not yet returned
        monkeypatch.setattr(xarray.Dataset, "to_netcdf", interrupted(xarray.Dataset.to_netcdf))
    else:
        monkeypatch.setattr(export, "xdmf_text", interrupted(export.xdmf_text))
    with pytest.raises(KeyboardInterrupt):
        jhtdb.write_cutout_hdf5_and_xmf_files(cube, bigger, "box")
    assert contents(*written) == before and temporaries(tmp_path) == []
    monkeypatch.undo()
    jhtdb.write_cutout_hdf5_and_xmf_files(cube, bigger, "box")
    with h5py.File(written[0]) as h5:
        np.testing.assert_array_equal(h5["velocity_0002"][...], bigger["velocity_0002"].values)
    assert "box.h5:/velocity_0002" in written[1].read_text() and temporaries(tmp_path) == []


class InterruptedFrame:
    """getData's second frame, as Ctrl-C finds it while its rows are written."""

    def __init__(self, columns):
        self.columns = columns

    def to_numpy(self):
        raise KeyboardInterrupt


def test_an_interrupted_jhtdb_tsv_write_leaves_the_earlier_file_as_it_was(fields, tmp_path):
    cube = jhtdb.turb_dataset("box", str(tmp_path / "out"), url=str(tmp_path / "db"))
    points = np.array([[0.5, 0.25, 1.0], [1.0, 0.5, 2.0]])
    frames = jhtdb.getData(cube, "velocity", 0.0, "none", "lag4", "field", points, option=[0.5, 0.5], verbose=False)
    path = jhtdb.write_interpolation_tsv_file(cube, points, frames, "points")
    before = path.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        jhtdb.write_interpolation_tsv_file(cube, points, [frames[0], InterruptedFrame(frames[0].columns)], "points")
    assert path.read_bytes() == before and temporaries(tmp_path) == []


# --- D2: NetCDF on a full disk is an error, never a crash ------------------------------------------


FILLED_MEANWHILE = """
import errno, gc, sys
import turbdb
from turbdb import export
export.check_room = lambda path, nbytes: None  # the disk fills after the check
cut = turbdb.open(sys.argv[1])["flow"].cutout("velocity", time=[0, 1])
try:
    export.write(cut, sys.argv[2])
except OSError as e:
    print("refused", e.errno == errno.ENOSPC, e.filename, flush=True)
del cut
gc.collect()
print("still running", flush=True)
"""


@AS_ROOT
def test_a_netcdf_write_that_meets_a_full_disk_part_way_raises_and_the_process_lives_on(db, tmp_path):  # noqa: F811
    # h5netcdf closed its file half-way, then flushed it again when collected: the process
    # died after the error (a notebook's kernel with it).
    script = tmp_path / "fill.py"
    script.write_text(FILLED_MEANWHILE)
    with full_tmpfs(tmp_path / "full", "48k") as full:
        out = full / "py.nc"
        result = subprocess.run([sys.executable, str(script), str(db), str(out)], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.splitlines() == [f"refused True {out}", "still running"], result.stdout
        assert list(full.iterdir()) == []


def test_hdf5_refusing_a_write_says_so_with_the_systems_words(tmp_path):
    from turbdb.export import _hdf5_errors

    with pytest.raises(OSError) as caught, _hdf5_errors(tmp_path / "c.h5"):
        raise RuntimeError("Disable slist on flush dest failure failed (file write failed: time = …, errno = 28, "
                           "error message = 'No space left on device', …)")
    assert (caught.value.errno, caught.value.filename) == (28, str(tmp_path / "c.h5"))
    assert str(caught.value).startswith("[Errno 28] No space left on device")


# --- D3: XDMF describes each component count so that VTK reads it right ---------------------------


def attribute_values(xmf: Path, attribute: ET.Element) -> np.ndarray:
    """The node values an XDMF reader takes for ``attribute``: a dataset, or a hyperslab of it
    (start, stride and count per dim, as VTK's reader takes them)."""
    item = attribute.find("DataItem")
    if item.get("ItemType") == "HyperSlab":
        selection, source = item.findall("DataItem")
        start, stride, count = np.array(selection.text.split(), int).reshape(3, -1)
        file_name, dataset = source.text.split(":")
        with h5py.File(xmf.parent / file_name) as h5:
            data = h5[dataset][...]
        return data[tuple(slice(b, b + s * n, s) for b, s, n in zip(start, stride, count))][..., 0]
    file_name, dataset = item.text.split(":")
    with h5py.File(xmf.parent / file_name) as h5:
        return h5[dataset][...]


@pytest.mark.parametrize("field, kinds", [
    ("pressure", ["Scalar"]), ("velocity", ["Vector"]), ("grad", ["Tensor"]),
    ("pair", ["Scalar"] * 2), ("tau", ["Scalar"] * 6)])
def test_xdmf_names_scalars_vectors_and_tensors_and_splits_other_counts_into_components(fields, tmp_path, field,
                                                                                         kinds):
    # A 2-component "Matrix" on a 16³ grid was read by VTK as 256 tuples of 32 components, and
    # "Tensor6" was expanded to nine with a symmetric layout the field need not have.
    cut = fields.cutout(field, time=[0.0, 0.5])
    _, xmf = export.write(cut, tmp_path / f"{field}.xmf")
    grids = [g for g in ET.parse(xmf).getroot().iter("Grid") if g.get("GridType") == "Uniform"]
    assert len(grids) == 2
    for k, grid in enumerate(grids):
        attributes = grid.findall("Attribute")
        assert [a.get("AttributeType") for a in attributes] == kinds
        if len(attributes) == 1:
            assert attributes[0].get("Name") == field
            np.testing.assert_array_equal(attribute_values(xmf, attributes[0]).reshape(cut.values[k].shape),
                                          cut.values[k])
            continue
        labels = [str(c) for c in cut.component.values]
        assert [a.get("Name") for a in attributes] == [f"{field}_{c}" for c in labels]
        for attribute, label in zip(attributes, labels):
            np.testing.assert_array_equal(attribute_values(xmf, attribute), cut.sel(component=label).values[k])


def test_the_jhtdb_xdmf_splits_a_six_component_field_too(fields, tmp_path):
    cube = jhtdb.turb_dataset("box", str(tmp_path / "out"), url=str(tmp_path / "db"))
    cut = jhtdb.getCutout(cube, "tau", np.array([[1, 8], [1, 6], [1, 4], [2, 2]]), np.ones(4, int), verbose=False)
    _, xmf = jhtdb.write_cutout_hdf5_and_xmf_files(cube, cut, "tau")
    attributes = list(ET.parse(xmf).getroot().iter("Attribute"))
    labels = fields.metadata.fields["tau"].components
    assert [(a.get("Name"), a.get("AttributeType")) for a in attributes] == [(f"tau_{c}", "Scalar") for c in labels]
    for k, attribute in enumerate(attributes):
        np.testing.assert_array_equal(attribute_values(xmf, attribute), cut["tau_0002"].values[..., k])


# --- D4: float64 stays float64 ----------------------------------------------------------------------


def test_float64_values_are_saved_as_float64_and_float32_ones_as_float32(fields, tmp_path):
    cut = fields.cutout("velocity", time=0.5)
    derived = cut.astype(np.float64) * (1 + 1e-9)  # detail float32 cannot hold
    huge = cut.astype(np.float64) * 0 + 1e39  # beyond float32: was inf, with numpy's overflow warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, array in (("derived", derived), ("huge", huge), ("stored", cut)):
            export.write(array, tmp_path / f"{name}.h5")
    for name, array, precision in (("derived", derived, "8"), ("huge", huge, "8"), ("stored", cut, "4")):
        with h5py.File(tmp_path / f"{name}.h5") as f:
            assert f["velocity_0002"].dtype == array.dtype
            np.testing.assert_array_equal(f["velocity_0002"][...], array.values)
        (values,) = ET.parse(tmp_path / f"{name}.xmf").getroot().find(".//Attribute").findall("DataItem")
        assert values.get("Precision") == precision


# --- D5, D8: the HTTP NetCDF carries the local file's metadata, named by the step from 1 -----------


def http_cutout(db_path: Path, params: dict) -> httpx.Response:
    app = create_app(db_path)

    async def ask():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turbdb") as client:
            return await client.post("/v1/datasets/box/cutout", params=params)

    return anyio.run(ask)


def as_local(remote: xarray.DataArray) -> xarray.DataArray:
    """The HTTP cutout as a local one holds it: NetCDF-3 has no int64 for the grid indices,
    and the HTTP file describes its axes in words too (``long_name``)."""
    for name in ("x", "y", "z", "x_index", "y_index", "z_index"):
        remote[name].attrs.pop("long_name", None)
    remote = remote.assign_coords({f"{a}_index": remote[f"{a}_index"].astype(np.int64) for a in "xyz"})
    remote.attrs = {k: [int(s) for s in v] if k == "stride" and np.ndim(v) else v for k, v in remote.attrs.items()}
    return remote


@pytest.mark.parametrize("field, stride", [("velocity", "1"), ("tau", "1,2,2")])
def test_an_http_netcdf_cutout_holds_what_the_local_netcdf_file_holds(fields, tmp_path, field, stride):
    # x, y, z had no units, the time was only a global attribute, and a field without units
    # got units = "".
    answer = http_cutout(tmp_path / "db", {"field": field, "time": 0.5, "x": "0,8", "y": "1,5", "z": "0,3",
                                            "stride": stride, "format": "netcdf"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-disposition"] == f'attachment; filename="box-{field}-2.nc"'
    strides = tuple(int(s) for s in stride.split(",")) if "," in stride else int(stride)
    local = fields.cutout(field, time=0.5, x=(0, 8), y=(1, 5), z=(0, 3), stride=strides)
    export.write(local, tmp_path / "local.nc")
    with xarray.open_dataarray(io.BytesIO(answer.content)) as remote, \
            xarray.open_dataarray(tmp_path / "local.nc") as written:
        xarray.testing.assert_identical(as_local(remote.load()), written.load())
        xarray.testing.assert_identical(written, local)
    assert ("units" in local.attrs) == (field == "velocity")


def test_an_http_cutout_file_is_named_by_the_stored_step_counted_from_one(fields, tmp_path):
    answer = http_cutout(tmp_path / "db", {"field": "pressure", "time": 0.0, "x": "0,2", "y": "0,2", "z": "0,2"})
    # As the HDF5 export (pressure_0001) and JHTDB (ts=1) name the first stored step.
    assert answer.headers["content-disposition"] == 'attachment; filename="box-pressure-1.npy"'


# --- D6: an output linked to /dev/stdout is the pipe it names --------------------------------------


@pytest.mark.parametrize("command", ["query", "cutout"])
def test_an_output_linked_to_dev_stdout_is_written_into_the_pipe(db, tmp_path, command):  # noqa: F811
    np.save(tmp_path / "points.npy", np.random.default_rng(2).uniform(0, 6, (5, 3)))
    link = tmp_path / ("so.csv" if command == "query" else "so.npy")
    link.symlink_to("/dev/stdout")
    args = (["query", str(db), "flow", "--field", "velocity", "--time", "0", "--points", str(tmp_path / "points.npy")]
            if command == "query" else ["cutout", str(db), "flow", "--field", "velocity", "--time", "0",
                                        "--x", "0,2", "--y", "0,2", "--z", "0,2"])
    result = subprocess.run([sys.executable, "-m", "turbdb.cli", *args, "--out", str(link)], capture_output=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    expected = turbdb.open(db)["flow"]
    if command == "query":
        rows = result.stdout.decode().splitlines()[:6]  # then the command's own "wrote …" line
        assert rows[0] == "ux,uy,uz" and np.loadtxt(rows[1:], delimiter=",").shape == (5, 3)
    else:
        np.testing.assert_array_equal(np.load(io.BytesIO(result.stdout)),
                                      expected.cutout("velocity", time=0, x=(0, 2), y=(0, 2), z=(0, 2)).values)
    assert link.is_symlink() and temporaries(tmp_path) == []


# --- D7: a name XDMF cannot refer to is refused before anything is written ------------------------


def test_an_hdf5_or_xdmf_name_with_a_colon_is_refused_before_anything_is_written(fields, db, tmp_path):  # noqa: F811
    # VTK split "run_12:30.h5:/xcoor" at the first colon: the files were written, unreadable.
    cut = fields.cutout("velocity", time=0.5)
    for name in ("run_12:30.h5", "run_12:30.xmf"):
        with pytest.raises(turbdb.InvalidRequestError, match=r"'run_12:30\.h5' has a ':'.*without ':'"):
            export.write(cut, tmp_path / "colon" / name)
    cube = jhtdb.turb_dataset("box", str(tmp_path / "colon"), url=str(tmp_path / "db"))
    small = jhtdb.getCutout(cube, "velocity", np.array([[1, 2], [1, 2], [1, 2], [1, 1]]), np.ones(4, int),
                            verbose=False)
    with pytest.raises(turbdb.InvalidRequestError, match="':'"):
        jhtdb.write_cutout_hdf5_and_xmf_files(cube, small, "run_12:30")
    result = subprocess.run([sys.executable, "-m", "turbdb.cli", "cutout", str(db), "flow", "--field", "velocity",
                             "--time", "0", "--out", str(tmp_path / "colon" / "run_12:30.h5")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "has a ':'" in result.stderr and "Traceback" not in result.stderr
    assert list((tmp_path / "colon").iterdir()) == []
    export.write(cut, tmp_path / "colon" / "run_12:30.nc")  # NetCDF refers to nothing: a colon is fine


# --- D10: one exported component keeps its name -----------------------------------------------------


def test_a_single_exported_component_is_named_with_its_component(fields, tmp_path):
    uy = fields.cutout("velocity", time=0.5).sel(component="uy")
    h5, xmf = export.write(uy, tmp_path / "c.xmf")
    with h5py.File(h5) as f:
        np.testing.assert_array_equal(f["velocity_uy_0002"][...], uy.values)
    root = ET.parse(xmf).getroot()
    assert [a.get("Name") for a in root.iter("Attribute")] == ["velocity_uy"]
    assert [g.get("Name") for g in root.iter("Grid")] == ["velocity_uy", "velocity_uy_0002"]
