"""turbdb.connect checks options, fields and times as turbdb.open does, before sending: a
list went as repeated URL parameters (the server took the last one and answered), None as
an empty string (the server's error named ''), and xarray times were refused."""

import numpy as np
import pandas as pd
import pytest

import turbdb
from turbdb.exceptions import InvalidRequestError, UnknownOptionError

POINTS = [[1.0, 2.0, 3.0]]


def refusal(call, dataset):
    with pytest.raises(turbdb.TurbdbError) as caught:
        call(dataset)
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize("option", [
    {"method": ["lag4", "m2q8"]}, {"operator": ("gradient",)}, {"operator": ["field", "gradient"]},
    {"temporal": ["none", "pchip"]}, {"method": None}, {"operator": None}, {"temporal": None}, {"strategy": None},
    {"method": True},
])
def test_a_query_option_that_is_not_one_name_is_refused_as_locally(remote, local, option):
    def call(db):
        return db["trig"].query("velocity", POINTS, time=0.5, **option)
    kind, message = refusal(call, remote)
    assert (kind, message) == refusal(call, local) and kind is UnknownOptionError


@pytest.mark.parametrize("option", [{"method": None}, {"method": ["lag4"]}, {"integrator": None},
                                    {"integrator": ["rk2", "euler"]}])
def test_a_track_option_that_is_not_one_name_is_refused_as_locally(remote, local, option):
    def call(db):
        return db["trig"].track(POINTS, start=0.0, end=0.5, dt=0.5, **option)
    kind, message = refusal(call, remote)
    assert (kind, message) == refusal(call, local) and kind is UnknownOptionError


@pytest.mark.parametrize("call", [
    lambda ds: ds.query(["pressure", "velocity"], POINTS, time=0.5),
    lambda ds: ds.submit(["pressure"], POINTS, time=0.5).result(),
    lambda ds: ds.cutout(["pressure"], time=0.5, x=(0, 2), y=(0, 2), z=(0, 2)),
    lambda ds: ds.track(POINTS, start=0.0, end=0.5, dt=0.5, field=["velocity"]),
], ids=["query", "submit", "cutout", "track"])
def test_a_field_that_is_not_one_name_is_refused_before_sending(remote, call):
    with pytest.raises(InvalidRequestError, match="one field"):
        call(remote["trig"])


def test_xarray_times_and_named_columns_are_read_as_locally(remote, local):
    cut = remote["trig"].cutout("pressure", time=[0.5, 1.0], x=(0, 2), y=(0, 2), z=(0, 2))
    points = pd.DataFrame(np.array(POINTS)[:, ::-1], columns=["z", "y", "x"])
    got = remote["trig"].query("pressure", points, time=cut.time, dtype=np.float64)
    np.testing.assert_allclose(got, local["trig"].query("pressure", POINTS, time=[0.5, 1.0], dtype=np.float64),
                               rtol=1e-12)
    track = remote["trig"].track(POINTS, start=cut.time[0], end=cut.time[1], dt=0.25)
    np.testing.assert_allclose(track, local["trig"].track(POINTS, start=0.5, end=1.0, dt=0.25), rtol=1e-6)
