"""The remote client's cutout is the local one, with the time coordinates and the units of
the field and the axes that the notebook probe found missing (a dataset with units of its own)."""

import numpy as np
import xarray

import turbdb

from servicekit import running_server


def test_a_remote_cutout_carries_the_same_time_coordinates_and_units_as_the_local(tmp_path):
    db = tmp_path / "db"
    ds = turbdb.create_dataset(db, "units", grid=(8, 6, 4), times=[0.0, 0.5], units={"length": "m", "time": "s"},
                               fields={"temp": {"ncomp": 1, "units": "K"}})
    for t in range(2):
        ds.write("temp", t, np.full((4, 6, 8), 280.0 + t, np.float32))
    local = turbdb.open(db)["units"]
    with running_server(db, tmp_path / "server.log") as server, turbdb.connect(server.url) as remote:
        for time in (0.5, [0.0, 0.5]):
            got = remote["units"].cutout("temp", time=time, x=(0, 4), y=(1, 5), z=(0, 3))
            xarray.testing.assert_identical(got, local.cutout("temp", time=time, x=(0, 4), y=(1, 5), z=(0, 3)))
            assert got.attrs["units"] == "K" and got.x.attrs["units"] == "m" and got["time"].attrs["units"] == "s"
    assert float(got.isel(time=1)["time"]) == 0.5 and int(got.isel(time=1)["time_index"]) == 1
