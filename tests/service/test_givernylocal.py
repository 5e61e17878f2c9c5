"""JHTDB's own Python client, givernylocal 3.6.4 (a test dependency), unmodified, against a
real `turbdb serve`: after the one documented line, turbdb.jhtdb.redirect(url), its
turb_dataset, getData and getCutout reach turbdb and return the local answers in their own
layouts. turbdb.jhtdb gives the same outputs from a local path or a URL, and
`python -m turbdb.jhtdb URL script.py` runs a JHTDB script as it is."""

import subprocess
import sys

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray

import turbdb
import turbdb.jhtdb
from turbdb.jhtdb.metadata import OPERATOR_METHODS, TESTING_TOKEN
from turbdb.jhtdb.redirect import GIVERNY_METADATA, JHTDB_SERVICE, rewrite

from givernylocal.turbulence_dataset import turb_dataset
from givernylocal.turbulence_gizmos.basic_gizmos import cutout_values, write_cutout_hdf5_and_xmf_files
from givernylocal.turbulence_gizmos.jhtdb_schema import TurbulenceDB
from givernylocal.turbulence_toolkit import getCutout, getData

from servicekit import FULL, random_points


@pytest.fixture(scope="module")
def redirected(server):
    """givernylocal's requests go to the test server for the tests of this module."""
    with turbdb.jhtdb.redirect(server.url):
        yield server


@pytest.fixture
def cube(redirected, tmp_path):
    # Exactly as a JHTDB notebook does it: no address anywhere.
    return turb_dataset(dataset_title="trig", output_path=str(tmp_path), auth_token=TESTING_TOKEN)


def sent(points):
    """The points as givernylocal sends them (%.8f)."""
    return np.array([[float("%.8f" % c) for c in p] for p in points])


def test_the_metadata_document_passes_givernylocals_own_schema(server):
    document = server.get("/turbulence-svc/metadata").json()
    TurbulenceDB(**document)  # raises on any mismatch
    codes = {d["code"]: d for d in document["datasets"]}
    assert set(codes) == {"trig", "other"}
    trig = codes["trig"]
    assert trig["simulation"]["tlims"]["n"] == 4 and trig["simulation"]["xlims"]["isPeriodic"] is True
    assert {v["code"] for v in trig["physicalVariables"]} == {"velocity", "pressure", "position"}
    assert document["giverny_constants"]["max_data_points"] == 2_000_000  # the largest token's limit


@pytest.mark.parametrize("var, tint, sint, sop, time", [
    ("velocity", "none", "lag6", "field", 0.5),
    ("velocity", "pchip", "fd4noint", "gradient", 0.7),
    ("velocity", "none", "m2q8", "hessian", 1.0),
    ("pressure", "pchip", "fd6noint", "laplacian", 1.2),
    ("pressure", "none", "none", "field", 1.5),
])
def test_unmodified_getdata_returns_the_local_answers(cube, local, var, tint, sint, sop, time):
    points = random_points(200, seed=21)
    result = getData(cube, var, time, tint, sint, sop, points, verbose=False)
    assert isinstance(result, list) and len(result) == 1 and isinstance(result[0], pd.DataFrame)
    expected = local["trig"].query(var, sent(points), time=time, method=sint, operator=sop, temporal=tint)
    np.testing.assert_array_equal(result[0].to_numpy(), expected.reshape(len(points), -1))
    assert result[0].index.name == "index"


def test_unmodified_time_series_and_particle_tracking(cube, local):
    points = random_points(50, seed=22)
    frames, times = getData(cube, "velocity", 0.25, "pchip", "lag4", "field", points, option=[1.25, 0.5],
                            return_times=True, verbose=False)
    np.testing.assert_allclose(times, [0.25, 0.75, 1.25])
    expected = local["trig"].query("velocity", sent(points), time=list(times), method="lag4", temporal="pchip")
    np.testing.assert_array_equal(np.stack([f.to_numpy() for f in frames]), expected)
    (positions,) = getData(cube, "position", 0.0, "pchip", "lag6", "field", points, option=[1.0, 0.25], verbose=False)
    assert list(positions.columns) == ["x", "y", "z"]
    tracked = local["trig"].track(sent(points), start=0.0, end=1.0, dt=0.25, method="lag6")[-1]
    np.testing.assert_array_equal(positions.to_numpy(), tracked.astype(np.float32))


def test_unmodified_getcutout_returns_the_local_values_and_writes_files_paraview_opens(cube, local, tmp_path):
    ranges = np.array([[30, 40], [1, 8], [5, 9], [1, 3]])  # x wraps past the 32 nodes; steps 1 and 3
    strides = np.array([1, 2, 1, 2])
    result = getCutout(cube, "velocity", ranges, strides, verbose=False)
    assert list(result.data_vars) == ["velocity_0001", "velocity_0003"]
    for step, name in ((1, "velocity_0001"), (3, "velocity_0003")):
        expected = local["trig"].cutout("velocity", time=float(local["trig"].info.times[step - 1]), x=(29, 40),
                                        y=(0, 8), z=(4, 9), stride=(1, 2, 1))
        assert result[name].dims == ("zcoor", "ycoor", "xcoor", "values")
        np.testing.assert_array_equal(result[name].values, expected.values)
    # givernylocal's own helpers select by the coordinates the server sent.
    value = cutout_values(cube, 31, 3, 6, result, 3, ranges, strides)
    np.testing.assert_array_equal(np.asarray(value).reshape(-1), result["velocity_0003"].values[1, 1, 1])
    write_cutout_hdf5_and_xmf_files(cube, result, "box")
    with h5py.File(tmp_path / "box.h5") as h5:
        np.testing.assert_array_equal(h5["velocity_0001"][...], result["velocity_0001"].values)
    assert "box.h5:/velocity_0003" in (tmp_path / "box.xmf").read_text()


def test_turbdb_jhtdb_gives_givernylocals_outputs_from_a_path_or_a_url(cube, redirected, service_db, tmp_path):
    points = sent(random_points(120, seed=23))
    theirs = getData(cube, "velocity", 0.6, "pchip", "fd4lag4", "gradient", points, option=[1.1, 0.25],
                     verbose=False)
    ranges, strides = np.array([[3, 20], [1, 32], [2, 2], [2, 4]]), np.array([2, 3, 1, 1])
    their_cut = getCutout(cube, "pressure", ranges, strides, verbose=False)
    for url in (str(service_db), redirected.url):
        ours = turbdb.jhtdb.turb_dataset(dataset_title="trig", output_path=str(tmp_path / "ours"), auth_token=FULL,
                                         url=url)
        frames = turbdb.jhtdb.getData(ours, "velocity", 0.6, "pchip", "fd4lag4", "gradient", points,
                                      option=[1.1, 0.25], verbose=False)
        assert len(frames) == len(theirs) == 3  # 0.6, 0.85, 1.1
        for mine, their in zip(frames, theirs):
            pd.testing.assert_frame_equal(mine, their)
        xarray.testing.assert_identical(turbdb.jhtdb.getCutout(ours, "pressure", ranges, strides, verbose=False),
                                        their_cut)
    written = turbdb.jhtdb.write_cutout_hdf5_and_xmf_files(ours, their_cut, "mine")
    with h5py.File(written[0]) as h5:
        np.testing.assert_array_equal(h5["pressure_0004"][...], their_cut["pressure_0004"].values)
    # givernylocal's gizmos take this dataset object as their own (they read its spacing).
    corner = dict(x=np.array([3, 7]), y=np.array([4]), z=np.array([2]), output_data=their_cut, time=3,
                  xyzt_axes_ranges=ranges, xyzt_strides=strides)
    xarray.testing.assert_identical(cutout_values(ours, **corner), cutout_values(cube, **corner))
    tsv = turbdb.jhtdb.write_interpolation_tsv_file(ours, points, frames, "points")
    lines = tsv.read_text().splitlines()
    # Labelled with the last call's settings, as givernylocal does: here the cutout's.
    assert lines[0] == "dataset: trig, variable: pressure, time: 4, temporal method: none, spatial method: none, " \
                       "spatial operator: field"
    turbdb.jhtdb.getData(ours, "velocity", 0.6, "pchip", "fd4lag4", "gradient", points, option=[1.1, 0.25],
                         verbose=False)
    lines = turbdb.jhtdb.write_interpolation_tsv_file(ours, points, frames, "points").read_text().splitlines()
    assert "variable: velocity, time: 0.6, time end: 1.1, delta t: 0.25" in lines[0]
    assert lines[1].split("\t")[:5] == ["time", "x_point", "y_point", "z_point", "duxdx"] and len(lines) == 2 + 3 * 120
    assert [float(row.split("\t")[0]) for row in lines[2::120]] == [0.6, 0.85, 1.1]


def test_turbdb_jhtdb_refuses_bad_arguments_with_a_turbdb_error(service_db, tmp_path):
    ours = turbdb.jhtdb.turb_dataset(dataset_title="trig", output_path=str(tmp_path / "out"), url=str(service_db))
    points = np.array([[1.0, 2.0, 3.0]])

    def refused(words, var="velocity", t=0.5, sop="field", tint="none", **kwargs):
        with pytest.raises(turbdb.TurbdbError, match=words):
            turbdb.jhtdb.getData(ours, var, t, tint, "lag4", sop, points, verbose=False, **kwargs)

    refused("would take .* TiB", option=[1.5, 1e-12])  # a series of 10^12 times: was a MemoryError
    refused("option must be \\[timepoint_end, delta_t\\]", option=None)
    refused("option must be", option=[1, 2, 3])
    refused("timepoint_original must be a finite number", t="soon")
    refused("delta_t must be positive", var="position", tint="pchip", option=[1.0, -0.1])
    refused("takes spatial_operator 'field'", var="position", tint="pchip", sop="gradient", option=[1.0, 0.1])
    (empty,) = turbdb.jhtdb.getData(ours, "velocity", 0.5, "none", "lag4", "field", np.zeros((0, 3)), verbose=False)
    assert list(empty.columns) == ["ux", "uy", "uz"] and len(empty) == 0
    (tmp_path / "afile").write_text("in the way")
    with pytest.raises(turbdb.InvalidRequestError, match="is a file"):
        turbdb.jhtdb.turb_dataset(dataset_title="trig", output_path=str(tmp_path / "afile"), url=str(service_db))


def test_turbdb_jhtdb_takes_pyjhtdbs_numeric_codes_and_a_time_as_text(service_db, tmp_path):
    ours = turbdb.jhtdb.turb_dataset(dataset_title="trig", output_path=str(tmp_path / "out"), url=str(service_db))
    points = sent(random_points(20, seed=5))
    by_name = turbdb.jhtdb.getData(ours, "velocity", 0.6, "none", "lag4", "field", points, verbose=False)
    # pyJHTDB scripts hold the codes as numbers: sinterp = 4 (Lag4), tinterp = 0 (none).
    for sint, tint in ((4, 0), (np.int64(4), np.int32(0)), ("4", "0")):
        by_code = turbdb.jhtdb.getData(ours, "velocity", 0.6, tint, sint, "field", points, verbose=False)
        pd.testing.assert_frame_equal(by_code[0], by_name[0])
    with pytest.raises(turbdb.InvalidRequestError, match="neither a name nor one of pyJHTDB's numeric codes"):
        turbdb.jhtdb.getData(ours, "velocity", 0.6, "none", 4.5, "field", points, verbose=False)
    # A time given as text is parsed; the written file then adds to it as to a number.
    frames = turbdb.jhtdb.getData(ours, "velocity", "0.6", "none", "lag4", "field", points, verbose=False)
    lines = turbdb.jhtdb.write_interpolation_tsv_file(ours, points, frames, "text").read_text().splitlines()
    assert "time: 0.6" in lines[0] and float(lines[2].split("\t")[0]) == 0.6


def test_turbdb_jhtdb_cutout_errors_count_as_jhtdb_does(tmp_path):
    # 1-based inclusive ranges and stored steps 1 … n, not the engine's 0-based numbers.
    ds = turbdb.create_dataset(tmp_path / "db", "wall", grid=(8, 8, 8), times=[0.0, 0.1, 0.2], fields={"p": 1},
                               periodic=(True, False, True))
    ds.write("p", 0, np.zeros((8, 8, 8)))
    ours = turbdb.jhtdb.turb_dataset(dataset_title="wall", output_path=str(tmp_path / "out"), url=str(tmp_path / "db"))

    def refused(ranges, words):
        with pytest.raises(turbdb.InvalidRequestError, match=words):
            turbdb.jhtdb.getCutout(ours, "p", np.array(ranges), np.array([1, 1, 1, 1]), verbose=False)

    refused([[1, 4], [0, 8], [1, 2], [1, 1]], r"the y range \[0, 8\] is outside the non-periodic y axis, whose "
                                              r"nodes are 1 … 8")
    refused([[1, 4], [1, 9], [1, 2], [1, 1]], r"the y range \[1, 9\]")
    refused([[1, 4], [1, 4], [1, 2], [1, 2]], r"time step 2 of 'p' \(ts … te number the stored steps 1 … 3\) is "
                                              "not stored")
    whole = turbdb.jhtdb.getCutout(ours, "p", np.array([[7, 10], [1, 8], [1, 1], [1, 1]]), np.array([1, 1, 1, 1]),
                                   verbose=False)
    assert whole["p_0001"].shape == (1, 8, 4, 1)  # x wraps: it is periodic


def test_a_jhtdb_script_runs_unchanged_with_python_m_turbdb_jhtdb(server, local, tmp_path):
    script = tmp_path / "jhtdb_script.py"
    script.write_text(
        "import numpy as np\n"
        "from givernylocal.turbulence_dataset import *\n"
        "from givernylocal.turbulence_toolkit import *\n"
        f"dataset = turb_dataset(dataset_title='trig', output_path={str(tmp_path)!r},\n"
        "                        auth_token='edu.jhu.pha.turbulence.testing-201406')\n"
        "points = np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]])\n"
        "result = getData(dataset, 'pressure', 1.0, 'none', 'lag8', 'field', points)\n"
        "np.save('answer.npy', result[0].to_numpy())\n")
    run = subprocess.run([sys.executable, "-m", "turbdb.jhtdb", server.url, str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "query completed successfully" in run.stdout
    expected = local["trig"].query("pressure", [[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]], time=1.0, method="lag8")
    np.testing.assert_array_equal(np.load(tmp_path / "answer.npy"), expected)


def test_a_script_run_with_python_m_turbdb_jhtdb_imports_the_modules_beside_it(server, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "helper.py").write_text("POINTS = [[0.1, 0.2, 0.3]]\n")
    (project / "main.py").write_text(
        "from helper import POINTS\n"
        "import numpy as np\n"
        "from givernylocal.turbulence_dataset import *\n"
        "from givernylocal.turbulence_toolkit import *\n"
        f"dataset = turb_dataset(dataset_title='trig', output_path={str(tmp_path)!r},\n"
        "                        auth_token='edu.jhu.pha.turbulence.testing-201406')\n"
        "getData(dataset, 'pressure', 1.0, 'none', 'lag8', 'field', np.array(POINTS))\n")
    # Run from elsewhere, as `python project/main.py` would be.
    run = subprocess.run([sys.executable, "-m", "turbdb.jhtdb", server.url, "project/main.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_the_redirect_rewrites_jhtdbs_two_addresses_and_nothing_else():
    server = "http://turbdb.example:8000"
    assert rewrite(JHTDB_SERVICE + "values?authToken=x&dataset=d", server) == \
        "http://turbdb.example:8000/turbulence-svc/values?authToken=x&dataset=d"
    assert rewrite(JHTDB_SERVICE + "cutout/api/local?token=x", server) == \
        "http://turbdb.example:8000/turbulence-svc/cutout/api/local?token=x"
    assert rewrite(GIVERNY_METADATA + "refs/heads/main/metadata/configs/jhtdb_config.json", server) == \
        "http://turbdb.example:8000/turbulence-svc/metadata"
    assert rewrite("https://pypi.org/simple/", server) == "https://pypi.org/simple/"


@pytest.mark.parametrize("operator", list(OPERATOR_METHODS))
def test_the_method_table_of_the_metadata_is_the_engines(local, operator):
    offered = set()
    for method in ("none", "lag4", "lag6", "lag8", "fd4noint", "fd6noint", "fd8noint", "fd4lag4", "m1q4", "m2q8"):
        try:
            local["trig"].query("pressure", [[1.0, 2.0, 3.0]], time=0.5, method=method, operator=operator)
            offered.add(method)
        except turbdb.InvalidRequestError:
            pass
    assert offered == set(OPERATOR_METHODS[operator])
