"""The HTTP API as any client sees it: JSON and .npy agree, cutouts stream, tokens are
enforced with messages that say what to do, and every bad request gets a 4xx with a
description while the server keeps answering."""

import io
import json

import numpy as np
import pytest
import xarray

from servicekit import FULL, HASHED, OTHER_ONLY, SLOW, SMALL, random_points

BEARER = {"Authorization": f"Bearer {FULL}"}
QUERY = "/v1/datasets/trig/query"


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array))
    return buffer.getvalue()


def test_json_and_npy_bodies_and_answers_agree(server, local):
    pts = random_points(200, seed=5)
    params = {"field": "velocity", "time": 0.75, "method": "m2q8", "operator": "hessian", "temporal": "pchip",
              "dtype": "float64"}
    as_json = server.post(QUERY, params=params, json={"points": pts.tolist()}, headers=BEARER)
    as_npy = server.post(QUERY, params=params, content=npy(pts),
                         headers={**BEARER, "Content-Type": "application/x-npy", "Accept": "application/x-npy"})
    float32_in = server.post(QUERY, params=params, content=npy(pts.astype(np.float32)),
                             headers={**BEARER, "Content-Type": "application/x-npy"})
    assert as_json.status_code == as_npy.status_code == float32_in.status_code == 200
    assert as_npy.headers["content-type"] == "application/x-npy"
    document = as_json.json()
    assert document["shape"] == [200, 3, 6] and document["dtype"] == "float64"
    values = np.load(io.BytesIO(as_npy.content), allow_pickle=False)
    np.testing.assert_allclose(np.array(document["values"]), values, rtol=1e-12, atol=1e-12)
    expected = local["trig"].query("velocity", pts, time=0.75, method="m2q8", operator="hessian", temporal="pchip",
                                   dtype=np.float64)
    np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.array(float32_in.json()["values"]),
                               local["trig"].query("velocity", pts.astype(np.float32), time=0.75, method="m2q8",
                                                   operator="hessian", temporal="pchip", dtype=np.float64),
                               rtol=1e-12, atol=1e-12)


def test_metadata_endpoints(server, local):
    listing = server.get("/v1/datasets", headers=BEARER).json()["datasets"]
    assert [d["name"] for d in listing] == ["other", "trig"]
    trig = server.get("/v1/datasets/trig").json()  # anonymous may read metadata
    assert trig["grid"] == [32, 32, 32] and trig["steps_present"]["velocity"] == [0, 1, 2, 3]
    assert trig["fields"]["velocity"] == {"ncomp": 3, "units": "m/s"}
    assert [d["name"] for d in server.get("/v1/datasets", headers={"Authorization": f"Bearer {OTHER_ONLY}"}).json()["datasets"]] == ["other"]


def test_cutouts_stream_in_slabs_as_npy_and_netcdf(server, local):
    before = server.metric("turbdb_cutout_chunks_total")
    params = {"field": "velocity", "time": 1.0, "x": "-3,29", "y": "2,30", "z": "0,32", "stride": 1}
    response = server.post("/v1/datasets/trig/cutout", params=params, headers=BEARER)
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-npy"
    assert int(response.headers["content-length"]) == len(response.content)
    expected = local["trig"].cutout("velocity", time=1.0, x=(-3, 29), y=(2, 30), z=(0, 32))
    np.testing.assert_array_equal(np.load(io.BytesIO(response.content)), expected.values)
    # 32 planes of 32 x 28 x 3 float32 (10.5 KiB) in 4 KiB slabs: one plane per slab.
    assert server.metric("turbdb_cutout_chunks_total") - before == 32

    netcdf = server.post("/v1/datasets/trig/cutout", params={**params, "stride": 3},
                         headers={**BEARER, "Accept": "application/x-netcdf"})
    assert netcdf.status_code == 200 and netcdf.content[:4] == b"CDF\x02"
    opened = xarray.open_dataset(io.BytesIO(netcdf.content))
    expected = local["trig"].cutout("velocity", time=1.0, x=(-3, 29), y=(2, 30), z=(0, 32), stride=3)
    np.testing.assert_array_equal(opened["velocity"].values, expected.values)
    for coord in ("x", "y", "z", "x_index", "y_index", "z_index"):
        np.testing.assert_array_equal(opened[coord].values, expected[coord].values)
    assert list(opened["component"].values) == ["ux", "uy", "uz"]
    assert opened.attrs["time_index"] == 2 and opened.attrs["dataset"] == "trig"
    assert opened["velocity"].attrs["units"] == "m/s"


def test_tracking_over_http_returns_positions_and_velocities(server, local):
    pts = random_points(5, seed=6)
    params = {"start": 0.0, "end": 1.0, "dt": 0.5, "method": "lag4"}
    positions = server.post("/v1/datasets/trig/track", params=params, json={"points": pts.tolist()}, headers=BEARER)
    assert positions.json()["shape"] == [3, 5, 3]
    both = server.post("/v1/datasets/trig/track", params={**params, "return_velocity": "true"}, content=npy(pts),
                       headers={**BEARER, "Content-Type": "application/x-npy", "Accept": "application/x-npy"})
    arrays = np.load(io.BytesIO(both.content), allow_pickle=False)
    expected = local["trig"].track(pts, start=0.0, end=1.0, dt=0.5, method="lag4", return_velocity=True)
    np.testing.assert_allclose(arrays["positions"], expected[0], rtol=1e-12)
    np.testing.assert_allclose(arrays["velocities"], expected[1], rtol=1e-12)


def test_operations_endpoints(server):
    assert server.get("/healthz").json()["status"] == "ok"
    metrics = server.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in ("turbdb_requests_total", "turbdb_request_seconds_bucket", "turbdb_points_total",
                 "turbdb_bytes_read_total", "turbdb_points_in_flight"):
        assert name in metrics.text
    assert server.metric("turbdb_bytes_read_total") > 0
    openapi = server.get("/openapi.json").json()
    for path in ("/v1/datasets", "/v1/datasets/{name}", "/v1/datasets/{name}/query", "/v1/datasets/{name}/cutout",
                 "/v1/datasets/{name}/track", "/turbulence-svc/values", "/healthz", "/metrics"):
        assert path in openapi["paths"]
    assert "application/x-npy" in openapi["paths"]["/v1/datasets/{name}/query"]["post"]["requestBody"]["content"]
    assert "swagger" in server.get("/docs").text.lower()


def test_the_fast_path_ran_and_counted_points(server):
    endpoint = "/v1/datasets/{name}/query"  # the route template, as turbdb_requests_total has it
    before = server.metric("turbdb_points_total", endpoint=endpoint)
    atoms = server.metric("turbdb_atoms_read_total")
    server.post(QUERY, params={"field": "pressure", "time": 0}, json={"points": random_points(123).tolist()}, headers=BEARER)
    assert server.metric("turbdb_points_total", endpoint=endpoint) - before == 123
    assert server.metric("turbdb_atoms_read_total") > atoms


def _object_npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buffer.getvalue()


V = {"field": "velocity", "time": 0.5}
NPY = {"Content-Type": "application/x-npy"}

# (name, method, path, params, body kwargs, headers, status, error class, words in the description)
BAD_REQUESTS = [
    ("malformed JSON", "post", QUERY, V, {"content": b'{"points": [[1, 2, 3]'}, {"Content-Type": "application/json"}, 400, "FormatError", "not valid JSON"),
    ("JSON without points", "post", QUERY, V, {"json": [[1, 2, 3]]}, {}, 400, "FormatError", '"points"'),
    ("points not numbers", "post", QUERY, V, {"json": {"points": [["a", "b", "c"]]}}, {}, 400, "InvalidRequestError", "numbers"),
    ("malformed npy", "post", QUERY, V, {"content": b"\x93NUMPY\x01\x00garbage"}, NPY, 400, "FormatError", ".npy"),
    ("not npy at all", "post", QUERY, V, {"content": b"x,y,z\n1,2,3\n"}, NPY, 400, "FormatError", "magic"),
    ("truncated npy", "post", QUERY, V, {"content": npy(np.zeros((10, 3)))[:-8]}, NPY, 400, "FormatError", "data bytes"),
    ("pickled npy", "post", QUERY, V, {"content": _object_npy()}, NPY, 400, "FormatError", "dtype object"),
    ("wrong shape JSON", "post", QUERY, V, {"json": {"points": [[1, 2]]}}, {}, 400, "InvalidRequestError", "(N, 3)"),
    ("wrong shape npy", "post", QUERY, V, {"content": npy(np.zeros((2, 3, 1)))}, NPY, 400, "InvalidRequestError", "(N, 3)"),
    ("one point flat", "post", QUERY, V, {"json": {"points": [1, 2, 3]}}, {}, 400, "InvalidRequestError", "[[x, y, z]]"),
    ("NaN in JSON", "post", QUERY, V, {"content": b'{"points": [[1, 2, 3], [1, NaN, 2]]}'}, {"Content-Type": "application/json"}, 400, "InvalidRequestError", "point 1 is not finite"),
    ("inf in npy", "post", QUERY, V, {"content": npy([[1.0, 2, np.inf]])}, NPY, 400, "InvalidRequestError", "not finite"),
    ("NaN time", "post", QUERY, {"field": "velocity", "time": "nan"}, {"json": {"points": [[1, 2, 3]]}}, {}, 400, "InvalidRequestError", "finite"),
    ("time not a number", "post", QUERY, {"field": "velocity", "time": "soon"}, {"json": {"points": []}}, {}, 400, "InvalidRequestError", "time"),
    ("missing time", "post", QUERY, {"field": "velocity"}, {"json": {"points": []}}, {}, 400, "InvalidRequestError", "time"),
    ("time out of range", "post", QUERY, {"field": "velocity", "time": 7}, {"json": {"points": [[1, 2, 3]]}}, {}, 400, "InvalidRequestError", "outside the stored range"),
    ("unknown dataset", "post", "/v1/datasets/nosuch/query", V, {"json": {"points": [[1, 2, 3]]}}, {}, 404, "UnknownNameError", "available: other, trig"),
    ("dotted dataset", "get", "/v1/datasets/.hidden", {}, {}, {}, 404, "UnknownNameError", "no dataset"),
    ("parent dataset", "get", "/v1/datasets/..", {}, {}, {}, 404, None, ""),
    ("../x encoded", "post", "/v1/datasets/..%2Fx/query", V, {"json": {"points": [[1, 2, 3]]}}, {}, 404, None, ""),
    ("../../etc/passwd", "get", "/v1/datasets/..%2F..%2Fetc%2Fpasswd", {}, {}, {}, 404, None, ""),
    ("dataset named ..x", "get", "/v1/datasets/..x", {}, {}, {}, 404, "UnknownNameError", "no dataset"),
    ("unknown field", "post", QUERY, {"field": "magnetic", "time": 0}, {"json": {"points": [[1, 2, 3]]}}, {}, 400, "UnknownNameError", "has velocity, pressure"),
    ("unknown method", "post", QUERY, {**V, "method": "lag5"}, {"json": {"points": [[1, 2, 3]]}}, {}, 400, "UnknownOptionError", "lag4, lag6"),
    ("method without operator", "post", QUERY, {**V, "method": "none", "operator": "hessian"}, {"json": {"points": [[1, 2, 3]]}}, {}, 400, "InvalidRequestError", "offers"),
    ("bad dtype", "post", QUERY, {**V, "dtype": "int8"}, {"json": {"points": [[1, 2, 3]]}}, {}, 400, "InvalidRequestError", "dtype"),
    ("body type", "post", QUERY, V, {"content": b"--x\r\n"}, {"Content-Type": "multipart/form-data; boundary=x"}, 415, "InvalidRequestError", "application/x-npy"),
    ("out of a bounded domain", "post", "/v1/datasets/other/query", {"field": "pressure", "time": 0}, {"json": {"points": [[0, 1, 2], [-3, 1, 2]]}}, {}, 400, "OutOfDomainError", "point 1"),
    ("runaway periodic point", "post", QUERY, V, {"json": {"points": [[1, 2, 3], [1e300, 1, 2]]}}, {}, 400, "OutOfDomainError", "point 1: x = 1e300 is too far"),
    ("empty cutout", "post", "/v1/datasets/trig/cutout", {**V, "x": "4,4"}, {}, {}, 400, "InvalidRequestError", "empty"),
    ("bad cutout range", "post", "/v1/datasets/trig/cutout", {**V, "x": "four"}, {}, {}, 400, "InvalidRequestError", "start,stop"),
    ("zero stride", "post", "/v1/datasets/trig/cutout", {**V, "stride": 0}, {}, {}, 400, "InvalidRequestError", "stride"),
    ("filter wider than the grid", "post", "/v1/datasets/trig/cutout", {**V, "x": "0,2", "y": "0,2", "z": "0,2", "filter_width": 1000}, {}, {}, 400, "InvalidRequestError", "wider than the grid"),
    ("bounded cutout", "post", "/v1/datasets/other/cutout", {"field": "pressure", "time": 0, "z": "0,9"}, {}, {}, 400, "OutOfDomainError", "non-periodic"),
    ("track with negative dt", "post", "/v1/datasets/trig/track", {"start": 0, "end": 1, "dt": -1}, {"json": {"points": [[1, 2, 3]]}}, {}, 400, "InvalidRequestError", "dt must be positive"),
    ("no such endpoint", "get", "/v2/everything", {}, {}, {}, 404, "InvalidRequestError", "/docs"),
    ("wrong verb", "get", QUERY, V, {}, {}, 405, "InvalidRequestError", "POST"),
    ("too many points anonymously", "post", QUERY, V, {"content": npy(np.zeros((5000, 3)))}, NPY, 413, "LimitExceededError", "personal token"),
    ("too many points for the token", "post", QUERY, V, {"json": {"points": np.zeros((101, 3)).tolist()}}, {"Authorization": f"Bearer {SMALL}"}, 413, "LimitExceededError", "batches of at most 100"),
    ("oversized body", "post", QUERY, V, {"content": b"[" + b" " * 2_000_000 + b"]"}, {"Content-Type": "application/json"}, 413, "LimitExceededError", "bytes"),
    ("cutout above the limit", "post", "/v1/datasets/trig/cutout", V, {}, {"Authorization": f"Bearer {SMALL}"}, 413, "LimitExceededError", "nodes"),
    ("filter reads above the limit", "post", "/v1/datasets/trig/cutout", {**V, "x": "0,4", "y": "0,4", "z": "0,4", "filter_width": 3}, {}, {"Authorization": f"Bearer {SMALL}"}, 413, "LimitExceededError", "asks for 216 nodes read by the box filter"),
    ("wrong token", "post", QUERY, V, {"json": {"points": [[1, 2, 3]]}}, {"Authorization": "Bearer guess"}, 401, "AccessDeniedError", "not recognised"),
    ("token for another dataset", "post", QUERY, V, {"json": {"points": [[1, 2, 3]]}}, {"Authorization": f"Bearer {OTHER_ONLY}"}, 404, "UnknownNameError", "no dataset 'trig' on this server that token"),
]


@pytest.mark.parametrize("name, verb, path, params, body, headers, status, error, words", BAD_REQUESTS,
                         ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_a_4xx_with_a_description_and_the_server_keeps_answering(
        server, name, verb, path, params, body, headers, status, error, words):
    response = getattr(server, verb)(path, params=params, headers=headers, **body)
    assert response.status_code == status, response.text
    document = response.json()
    assert isinstance(document["description"], str) and document["description"]
    if error:
        assert document["error"] == error
    assert words in document["description"]
    if status == 405:
        assert response.headers["allow"] == "POST"  # HTTP requires it
    assert server.alive()
    ok = server.post(QUERY, params=V, json={"points": [[1, 2, 3]]})
    assert ok.status_code == 200 and ok.json()["shape"] == [1, 3]


def test_tokens_by_hash_and_the_rate_limit(server):
    assert server.post(QUERY, params=V, json={"points": [[1, 2, 3]]},
                       headers={"Authorization": f"Bearer {HASHED}"}).status_code == 200
    slow = {"Authorization": f"Bearer {SLOW}"}
    statuses = [server.post(QUERY, params=V, json={"points": [[1, 2, 3]]}, headers=slow) for _ in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    refused = statuses[-1]
    assert int(refused.headers["retry-after"]) >= 1
    assert "2 requests per minute" in refused.json()["description"] and "wait" in refused.json()["description"]
    assert server.alive()


def test_errors_are_json_even_for_framework_errors(server):
    response = server.post("/v1/datasets/trig/cutout", params={"field": "velocity", "time": 0, "format": "tiff"})
    assert response.status_code == 400 and "format" in response.json()["description"]
    assert json.loads(server.get("/nowhere").content)["status"] == 404
