"""The JHTDB-compatible endpoint answers the request JHTDB's own client (givernylocal
getData) sends, in the layout that client parses: rows point × time (time-major), JHTDB's
columns, errors as 4xx with a description."""

import json

import httpx
import numpy as np
import pytest

import turbdb
import turbdb.jhtdb
from turbdb.service.jhtdb import columns, series_times

from servicekit import FULL, random_points

TESTING_TOKEN = "edu.jhu.pha.turbulence.testing-201406"


def get_data(server, points, var, t, sint, sop, tint, option=(-999.9, -999.9), token=TESTING_TOKEN, dataset="trig"):
    """What givernylocal.turbulence_toolkit.getData does over REST, with only the address
    changed: the same URL, the same body, the same parsing of the answer."""
    timepoint_end, delta_t = option
    request_points = "\n".join(["\t".join(["%.8f" % coord for coord in point]) for point in points])
    url = (f"{server.url}/turbulence-svc/values?authToken={token}&dataset={dataset}&function=GetVariable&var={var}"
           f"&t={t}&sint={sint}&sop={sop}&tint={tint}&timepoint_end={timepoint_end}&delta_t={delta_t}")
    response = httpx.post(url, content=request_points, timeout=30)
    if response.status_code >= 400:
        return response
    return np.array(json.loads(response.text), dtype=np.float32)


def sent(points):
    """The points as the client rounds them (%.8f)."""
    return np.array([[float("%.8f" % c) for c in p] for p in points])


@pytest.mark.parametrize("sint, sop, method, operator, width", [
    ("lag6", "field", "lag6", "field", 3),
    ("Lag8", "function", "lag8", "field", 3),
    ("fd4noint", "gradient", "fd4noint", "gradient", 9),
    ("None_Fd4", "gradient", "fd4noint", "gradient", 9),
    ("FD4Lag4", "hessian", "fd4lag4", "hessian", 18),
    ("m2q8", "laplacian", "m2q8", "laplacian", 3),
    ("M1Q4", "gradient", "m1q4", "gradient", 9),
    ("none", "field", "none", "field", 3),
])
def test_velocity_layouts_match_jhtdb(server, local, sint, sop, method, operator, width):
    pts = random_points(30, seed=7)
    rows = get_data(server, pts, "velocity", 0.5, sint, sop, "none")
    assert rows.shape == (30, width) and rows.dtype == np.float32
    expected = local["trig"].query("velocity", sent(pts), time=0.5, method=method, operator=operator, dtype=np.float64)
    np.testing.assert_allclose(rows, expected.reshape(30, -1), rtol=2e-6, atol=2e-6)
    if operator == "gradient":  # duxdx, duxdy, duxdz, duydx, …: row-major over (component, axis)
        assert columns("velocity", 3, "gradient")[:4] == ["duxdx", "duxdy", "duxdz", "duydx"]
        np.testing.assert_allclose(rows[:, 1], expected[:, 0, 1], rtol=2e-6, atol=2e-6)  # duxdy
        np.testing.assert_allclose(rows[:, 3], expected[:, 1, 0], rtol=2e-6, atol=2e-6)  # duydx


def test_the_documented_column_names():
    assert columns("velocity", 3, "gradient") == ["duxdx", "duxdy", "duxdz", "duydx", "duydy", "duydz",
                                                  "duzdx", "duzdy", "duzdz"]
    assert columns("velocity", 3, "hessian")[:7] == ["d2uxdxdx", "d2uxdxdy", "d2uxdxdz", "d2uxdydy", "d2uxdydz",
                                                     "d2uxdzdz", "d2uydxdx"]
    assert columns("velocity", 3, "laplacian") == ["grad2ux", "grad2uy", "grad2uz"]
    assert columns("pressure", 1, "field") == ["p"]
    assert columns("pressure", 1, "gradient") == ["dpdx", "dpdy", "dpdz"]
    assert columns("pressure", 1, "hessian") == ["d2pdxdx", "d2pdxdy", "d2pdxdz", "d2pdydy", "d2pdydz", "d2pdzdz"]
    assert columns("position", 3, "field") == ["x", "y", "z"]


def test_pressure_hessian_with_pchip(server, local):
    pts = random_points(12, seed=8)
    rows = get_data(server, pts, "pressure", 0.8, "fd4lag4", "hessian", "pchip")
    expected = local["trig"].query("pressure", sent(pts), time=0.8, method="fd4lag4", operator="hessian",
                                   temporal="pchip", dtype=np.float64)
    assert rows.shape == (12, 6)
    np.testing.assert_allclose(rows, expected.reshape(12, 6), rtol=2e-6, atol=2e-6)


def test_a_time_series_gives_one_row_per_point_per_time_time_major(server, local):
    pts = random_points(7, seed=9)
    times = series_times(0.25, 1.25, 0.5)
    np.testing.assert_allclose(times, [0.25, 0.75, 1.25])
    rows = get_data(server, pts, "velocity", 0.25, "lag4", "field", "pchip", option=(1.25, 0.5), token=FULL)
    assert rows.shape == (3 * 7, 3)
    cube = rows.reshape(3, 7, 3)  # as givernylocal: (n_times, n_points, n_columns)
    for k, t in enumerate(times):
        expected = local["trig"].query("velocity", sent(pts), time=t, method="lag4", temporal="pchip", dtype=np.float64)
        np.testing.assert_allclose(cube[k], expected, rtol=2e-6, atol=2e-6)
    assert len(series_times(0.0, 0.9, 0.5)) == 2  # 0.9 is not a step from 0.5: not appended


def test_position_tracks_particles_like_getposition(server, local):
    pts = random_points(6, seed=10)
    rows = get_data(server, pts, "position", 0.0, "lag6", "field", "pchip", option=(1.0, 0.25))
    expected = local["trig"].track(sent(pts), start=0.0, end=1.0, dt=0.25, method="lag6")[-1]
    assert rows.shape == (6, 3)
    np.testing.assert_allclose(rows, expected, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("sint, sop, tint, option, words", [
    ("lag6", "hessian", "pchip", (1.0, 0.25), "takes spatial_operator 'field'"),
    ("m2q8", "field", "pchip", (1.0, 0.25), "takes spatial method lag4, lag6, lag8"),
    ("lag6", "field", "none", (1.0, 0.25), "takes temporal method 'pchip'"),
    ("lag6", "field", "pchip", (1.0, -0.25), "delta_t must be positive"),
])
def test_position_refuses_what_the_metadata_excludes_as_turbdb_jhtdb_does(server, service_db, tmp_path, sint, sop,
                                                                         tint, option, words):
    refused = get_data(server, random_points(2, seed=1), "position", 0.0, sint, sop, tint, option=option)
    assert refused.status_code == 400 and words in refused.json()["description"]
    local = turbdb.jhtdb.turb_dataset(dataset_title="trig", output_path=str(tmp_path), url=str(service_db))
    with pytest.raises(turbdb.InvalidRequestError, match=words):
        turbdb.jhtdb.getData(local, "position", 0.0, tint, sint, sop, random_points(2, seed=1), option=list(option),
                             verbose=False)


@pytest.mark.parametrize("change, status, words", [
    ({"sint": "spline9"}, 400, "not a valid sint"),
    ({"sop": "curl"}, 400, "not a valid sop"),
    ({"tint": "linear"}, 400, "not a valid tint"),
    ({"var": "vorticity"}, 400, "not a variable of dataset 'trig'"),
    ({"dataset": "isotropic1024coarse"}, 404, "no dataset"),
    ({"t": "99"}, 400, "outside the stored range"),
    ({"sint": "none", "sop": "gradient"}, 400, "offers"),
    ({"token": "not-a-token"}, 401, "not recognised"),
    ({"points": "1\t2\n"}, 400, "line 1"),
    ({"points": "1\t2\tthree\n"}, 400, "numbers"),
    ({"points": "1\tnan\t3\n"}, 400, "not finite"),
    ({"points": "0\t0\t0\n" * 4097}, 413, "4,096"),
    ({"option": (0.0, 0.5)}, 400, "timepoint_end"),
])
def test_bad_requests_answer_4xx_with_a_description(server, change, status, words):
    args = {"points": "0.1\t0.2\t0.3\n", "var": "velocity", "t": 0.5, "sint": "lag4", "sop": "field", "tint": "none",
            "token": TESTING_TOKEN, "dataset": "trig", "option": (-999.9, -999.9)}
    args.update(change)
    end, dt = args["option"]
    url = (f"{server.url}/turbulence-svc/values?authToken={args['token']}&dataset={args['dataset']}"
           f"&function=GetVariable&var={args['var']}&t={args['t']}&sint={args['sint']}&sop={args['sop']}"
           f"&tint={args['tint']}&timepoint_end={end}&delta_t={dt}")
    response = httpx.post(url, content=args["points"], timeout=30)
    assert response.status_code == status, response.text
    assert words in response.json()["description"]
    assert server.alive()


@pytest.mark.parametrize("function, sop, fields, operator, width", [
    ("GetVelocity", "field", ["velocity"], "field", 3),
    ("GetPressureGradient", "field", ["pressure"], "gradient", 3),
    ("getVelocityHessian", "field", ["velocity"], "hessian", 18),
    ("GetVelocityLaplacian", "laplacian", ["velocity"], "laplacian", 3),
    ("GetVelocityAndPressure", "field", ["velocity", "pressure"], "field", 4),
])
def test_the_older_function_names_carry_the_variable_and_operator(server, local, function, sop, fields, operator,
                                                                   width):
    pts = random_points(20, seed=11)
    body = "\n".join("\t".join("%.8f" % c for c in p) for p in pts)
    response = server.post("/turbulence-svc/values", params={"dataset": "trig", "function": function, "t": 0.5,
                                                             "sint": "Lag6" if operator == "field" else "FD4Lag4",
                                                             "sop": sop, "tint": "None"}, content=body)
    assert response.status_code == 200, response.text
    rows = np.array(response.json(), dtype=np.float32)
    method = "lag6" if operator == "field" else "fd4lag4"
    expected = np.hstack([local["trig"].query(f, sent(pts), time=0.5, method=method, operator=operator)
                          .reshape(20, -1) for f in fields])
    assert rows.shape == (20, width)
    np.testing.assert_allclose(rows, expected, rtol=2e-6, atol=2e-6)


def test_pyjhtdbs_numeric_interpolation_codes_are_understood(server, local):
    pts = random_points(10, seed=12)
    body = "\n".join("\t".join("%.8f" % c for c in p) for p in pts)
    for sint, tint, method, temporal in (("208", "1", "m2q8", "pchip"), ("40", "0", "fd4noint", "none"),
                                         ("Lag4", "PCHIPInterpolation", "lag4", "pchip"),
                                         ("M1Q4", "NoTemporalInterpolation", "m1q4", "none")):
        sop = "field" if method == "m2q8" else "gradient"
        response = server.post("/turbulence-svc/values", params={"dataset": "trig", "function": "GetVariable",
                                                                 "var": "velocity", "t": 0.7, "sint": sint, "sop": sop,
                                                                 "tint": tint}, content=body)
        expected = local["trig"].query("velocity", sent(pts), time=0.7, method=method, operator=sop, temporal=temporal)
        np.testing.assert_allclose(np.array(response.json()), expected.reshape(10, -1), rtol=2e-6, atol=2e-6)


def test_getposition_is_var_position(server, local):
    pts = random_points(5, seed=13)
    body = "\n".join("\t".join("%.8f" % c for c in p) for p in pts)
    response = server.post("/turbulence-svc/values", params={"dataset": "trig", "function": "GetPosition", "t": 0.0,
                                                             "sint": "lag6", "timepoint_end": 1.0, "delta_t": 0.25},
                           content=body)
    expected = local["trig"].track(sent(pts), start=0.0, end=1.0, dt=0.25, method="lag6")[-1]
    np.testing.assert_allclose(np.array(response.json()), expected, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("params, words", [
    ({"function": "GetPressure", "var": "velocity"}, "asks for pressure, but var='velocity'"),
    ({"function": "GetVorticityMagnitude?"}, "not offered"),
    ({"function": "GetVariable"}, "needs var="),
    ({"function": "GetVelocityGradient", "sop": "hessian"}, "computes the gradient, but sop='hessian'"),
    ({"function": "GetVorticity"}, "'vorticity' is not a variable of dataset 'trig'"),
    # JHTDB functions turbdb does not offer: said so, with what to use instead (they were
    # taken for variables: "'boxfilter' is not a variable of dataset …").
    ({"function": "GetBoxFilter", "var": "velocity"}, "does not offer JHTDB's function 'GetBoxFilter'; box-filtered "
                                                     "values are offered on cutouts: filter_width="),
    ({"function": "GetBoxFilterGradient"}, "differentiate a box-filtered cutout"),
    ({"function": "GetBoxFilterSGSsymtensor"}, "does not offer"),
    ({"function": "GetThreshold"}, "select the nodes above the threshold"),
    ({"function": "GetInvariant"}, "from the velocity gradient"),
    ({"function": "GetRawVelocity"}, "the stored values of a box are a cutout"),
    # JHTDB's splines beyond the two turbdb has: the family named, no list of internal codes.
    ({"var": "velocity", "sint": "M2Q14"}, "of JHTDB's spline methods (M1Q4 … M4Q14) turbdb implements M1Q4 and M2Q8"),
    ({"var": "velocity", "sint": "406"}, "turbdb implements M1Q4 and M2Q8"),
])
def test_function_names_that_do_not_fit_are_refused_with_a_reason(server, params, words):
    response = server.post("/turbulence-svc/values", params={"dataset": "trig", "t": 0, **params}, content="1\t2\t3")
    assert response.status_code == 400 and words in response.json()["description"]


def test_jhtdbs_cutout_endpoint_answers_givernylocals_layout(server, local):
    params = {"token": TESTING_TOKEN, "function": "velocity", "dataset": "trig", "xs": 31, "xe": 34, "ys": 1,
              "ye": 5, "zs": 2, "ze": 2, "ts": 2, "te": 4, "stridet": 2, "stridex": 1, "stridey": 2, "stridez": 1,
              "filter_width": 3}
    answer = server.get("/turbulence-svc/cutout/api/local", params=params).json()
    assert list(answer["data_vars"]) == ["velocity_0002", "velocity_0004"]
    assert answer["data_vars"]["velocity_0002"]["dims"] == ["zcoor", "ycoor", "xcoor", "values"]
    expected = local["trig"].cutout("velocity", time=[0.5, 1.5], x=(30, 34), y=(0, 5), z=(1, 2), stride=(1, 2, 1),
                                    filter_width=3)
    for k, name in enumerate(answer["data_vars"]):
        np.testing.assert_array_equal(np.array(answer["data_vars"][name]["data"], dtype=np.float32), expected.values[k])
    np.testing.assert_allclose(answer["coords"]["xcoor"]["data"], np.arange(30, 34) * 2 * np.pi / 32, rtol=1e-6)
    too_big = {**params, "xs": 1, "xe": 32, "ys": 1, "ye": 32, "zs": 1, "ze": 5, "stridey": 1, "filter_width": 1}
    refused = server.get("/turbulence-svc/cutout/api/local", params=too_big)
    assert refused.status_code == 413 and "10,240 nodes × times" in refused.json()["description"]
    bad_time = server.get("/turbulence-svc/cutout/api/local", params={**params, "ts": 4, "te": 5})
    assert bad_time.status_code == 400 and "outside the stored steps 1 … 4" in bad_time.json()["description"]
