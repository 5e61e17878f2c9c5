"""Inputs from the wider Python ecosystem that the API must read as meant, or refuse with a
TurbdbError that says what to do: pandas and xarray points (columns taken by name), xarray
times and indices, big-endian and nullable float32 points, fields given as lists, and
points of the wrong shape."""

import pydoc

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import turbdb
from turbdb.exceptions import InvalidRequestError

POINTS = np.array([[0.3, 0.7, 1.1], [1.2, 0.4, 0.5]])


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    """16³ with a bounded y axis whose walls (0.35 and 1.85) float32 cannot hold exactly."""
    ds = turbdb.create_dataset(tmp_path_factory.mktemp("inputs"), "inputs", grid=(16, 16, 16), spacing=(0.1,) * 3,
                               origin=(0.0, 0.35, 0.0), periodic=(True, False, True), times=[0.0, 0.1, 0.2],
                               fields={"pressure": 1, "velocity": 3})
    rng = np.random.default_rng(3)
    for t in range(3):
        ds.write("pressure", t, rng.standard_normal((16, 16, 16)).astype(np.float32))
        ds.write("velocity", t, np.zeros((16, 16, 16, 3), np.float32))  # at rest: tracks stay put
    return ds


def answer(ds, points, **options):
    return ds.query("pressure", points, time=0.0, method="lag4", **options)


# -- labelled points ---------------------------------------------------------------------------


def test_named_columns_of_a_frame_or_data_array_are_read_by_name_not_position(ds):
    expected = answer(ds, POINTS)
    frame = pd.DataFrame(POINTS, columns=["x", "y", "z"])
    np.testing.assert_array_equal(answer(ds, frame[["z", "y", "x"]]), expected)
    named = xr.DataArray(POINTS[:, ::-1], dims=("point", "axis"), coords={"axis": ["z", "y", "x"]})
    np.testing.assert_array_equal(answer(ds, named), expected)
    with_id = pd.DataFrame({"id": [7, 8], "x": POINTS[:, 0], "y": POINTS[:, 1], "z": POINTS[:, 2]})
    np.testing.assert_array_equal(answer(ds, with_id), expected)
    np.testing.assert_array_equal(answer(ds, pd.DataFrame(POINTS[:, ::-1], columns=["Z", "Y", "X"])), expected)


def test_labels_naming_some_of_x_y_z_are_refused_and_others_read_by_position(ds):
    with pytest.raises(InvalidRequestError, match="x, y, w"):
        answer(ds, pd.DataFrame(POINTS, columns=["x", "y", "w"]))
    with pytest.raises(InvalidRequestError, match="z, y, z"):
        answer(ds, xr.DataArray(POINTS, dims=("point", "axis"), coords={"axis": ["z", "y", "z"]}))
    # Labels that name none of them are taken by position, as before (the review: read_csv of
    # a saved plain frame gives "0", "1", "2"; x1, x2, x3 is common too).
    by_position = answer(ds, POINTS)
    for columns in ([0, 1, 2], ["0", "1", "2"], ["x1", "x2", "x3"], ["lon", "lat", "depth"]):
        np.testing.assert_array_equal(answer(ds, pd.DataFrame(POINTS, columns=columns)), by_position)


def test_shape_errors_say_what_to_do(ds):
    with pytest.raises(InvalidRequestError, match=r"\[xs, ys, zs\].*transpose"):
        answer(ds, POINTS.T.tolist())  # [xs, ys, zs]: three rows of two
    with pytest.raises(InvalidRequestError, match=r"\(3, 4\).*points\.T"):
        answer(ds, np.zeros((3, 4)))
    with pytest.raises(InvalidRequestError, match="0, 1, 2, 3; select the x, y, z"):
        answer(ds, pd.DataFrame(np.zeros((2, 4))))
    assert answer(ds, []).shape == (0, 1)


# -- values that are not what they seem --------------------------------------------------------


@pytest.mark.parametrize("field", [["pressure"], ["pressure", "velocity"], {"velocity": 3}])
@pytest.mark.parametrize("call", ["query", "submit", "cutout", "track"])
def test_a_field_that_is_not_one_name_is_an_invalid_request(ds, call, field):
    calls = {
        "query": lambda: ds.query(field, POINTS, time=0.0),
        "submit": lambda: ds.submit(field, POINTS, time=0.0).result(),
        "cutout": lambda: ds.cutout(field, time=0.0, x=(0, 2), y=(0, 2), z=(0, 2)),
        "track": lambda: ds.track(POINTS, start=0.0, end=0.1, dt=0.1, field=field),
    }
    with pytest.raises(InvalidRequestError, match="one field"):
        calls[call]()


def test_points_that_are_no_array_are_an_invalid_request_and_a_buffer_is_read(ds):
    columns = xr.Dataset({axis: ("point", POINTS[:, i]) for i, axis in enumerate("xyz")})
    with pytest.raises(InvalidRequestError, match="shape \\(N, 3\\)"):
        answer(ds, columns)
    np.testing.assert_array_equal(answer(ds, memoryview(POINTS)), answer(ds, POINTS))


def test_big_endian_and_nullable_float32_points_on_a_wall_are_put_on_it(ds):
    walls = np.array([[0.5, 0.35, 0.5], [0.5, 0.35 + 15 * 0.1, 0.5]], dtype=np.float32)
    expected = answer(ds, walls)
    for given in (walls.astype(">f4"), pd.DataFrame(walls, columns=list("xyz")).astype("Float32"), list(walls)):
        np.testing.assert_array_equal(answer(ds, given), expected)
    track = ds.track(walls.astype(">f4"), start=0.0, end=0.1, dt=0.1, method="lag4")
    np.testing.assert_allclose(track[-1], [[0.5, 0.35, 0.5], [0.5, 1.85, 0.5]])


# -- xarray times and indices ------------------------------------------------------------------


def test_times_and_indices_taken_from_a_cutout_are_numbers(ds):
    cut = ds.cutout("pressure", time=ds.info.times[1:3], x=(0, 2), y=(0, 2), z=(0, 2))
    np.testing.assert_array_equal(ds.query("pressure", POINTS, time=cut.time[0]),
                                  ds.query("pressure", POINTS, time=0.1))
    assert ds.query("pressure", POINTS, time=cut.time).shape == (2, 2, 1)
    assert ds.cutout("pressure", time=cut.time, x=(0, 2), y=(0, 2), z=(0, 2)).shape == cut.shape
    assert ds.cutout("pressure", time=0.0, x=(cut.x_index[1], 4), y=(0, 2), z=(0, 2)).shape[2] == 3
    assert ds.track(POINTS, start=cut.time[0], end=0.2, dt=0.1).shape == (2, 2, 3)


def test_a_bad_time_is_named_in_one_short_line(ds):
    with pytest.raises(InvalidRequestError) as caught:
        ds.query("pressure", POINTS, time=xr.DataArray(np.zeros((4, 4)), dims=("a", "b")))
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200
    with pytest.raises(InvalidRequestError, match="time must be a finite number"):
        ds.query("pressure", POINTS, time=xr.Dataset())


def test_connect_is_listed_by_dir_and_documented_by_help():
    assert "connect" in dir(turbdb) and "open" in dir(turbdb)
    assert "connect(" in pydoc.render_doc(turbdb, renderer=pydoc.plaintext)
