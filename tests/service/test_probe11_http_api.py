"""The eleventh probe's HTTP findings: what the HTTP API did where Python and the command
line refuse or answer otherwise. Unknown query parameters and JSON members were ignored
(a typo answered with the defaults, status 200); the server's own result size limit was
missing from /v1/limits and its 413 named a Python function; each JHTDB endpoint read one
spelling of the token; a cutout's two times got pydantic's words; dtype and format took one
spelling each."""

import contextlib
import io

import anyio
import httpx
import numpy as np
import pytest
from fastapi.routing import APIRoute

from turbdb.service.app import create_app
from turbdb.service.known_parameters import STRICT_PREFIXES
from turbdb.service.tokens import JHTDB_TESTING_TOKEN, Tokens

from servicekit import FULL, SMALL, random_points, running_server

QUERY = "/v1/datasets/trig/query"
CUTOUT = "/v1/datasets/trig/cutout"
JHTDB_VALUES = "/turbulence-svc/values"
JHTDB_CUTOUT = "/turbulence-svc/cutout/api/local"
BEARER = {"Authorization": f"Bearer {FULL}"}
ONE_POINT = {"points": [[0.1, 0.2, 0.3]]}
BOX = {"dataset": "trig", "function": "velocity", "xs": 1, "xe": 16, "ys": 1, "ye": 16, "zs": 1, "ze": 1}


def refusal(response):
    assert response.status_code == 400, response.text
    return response.json()["description"]


# --- unknown query parameters and body members ---------------------------------------------


@pytest.mark.parametrize("params, unknown, meant", [
    ({"time": 0.25, "temporl": "pchip"}, "temporl", "temporal"),  # answered without pchip
    ({"time": 0, "Method": "lag4"}, "Method", "method"),           # answered with lag6
    ({"time": 0, "sint": "lag4"}, "sint", "method"),               # JHTDB's name, on v1
    ({"time": 0, "operater": "gradient"}, "operater", "operator"),  # answered the field
])
def test_a_misspelt_query_parameter_is_refused_naming_it_and_the_one_meant(server, params, unknown, meant):
    description = refusal(server.post(QUERY, params={"field": "velocity", **params}, json=ONE_POINT, headers=BEARER))
    assert f"'{unknown}'" in description and f"'{meant}'" in description
    assert "field, time, method, operator, temporal, dtype, strategy, job" in description  # what it takes


def test_a_cutout_refuses_strides_and_a_token_in_the_address_is_sent_to_the_header(server):
    # strides=2 answered the whole box, unstrided.
    description = refusal(server.post(CUTOUT, params={"field": "velocity", "time": 0, "x": "0,4", "y": "0,4",
                                                      "z": "0,4", "strides": 2}, headers=BEARER))
    assert "'strides' (did you mean 'stride'?)" in description
    description = refusal(server.post(QUERY, params={"field": "velocity", "time": 0, "token": FULL}, json=ONE_POINT))
    assert "Authorization: Bearer" in description


def test_a_json_body_member_other_than_points_is_refused(server):
    # {"points": …, "time": 0.01} answered at the query string's time.
    description = refusal(server.post(QUERY, params={"field": "velocity", "time": 0}, headers=BEARER,
                                      json={**ONE_POINT, "time": 0.5}))
    assert "'time'" in description and "query string" in description
    track = server.post("/v1/datasets/trig/track", params={"start": 0, "end": 0.5, "dt": 0.25}, headers=BEARER,
                        json={"point": [[0.1, 0.2, 0.3]], "points": [[0.1, 0.2, 0.3]]})
    assert "'point' (did you mean 'points'?)" in refusal(track)


def test_every_v1_and_jhtdb_route_refuses_a_parameter_it_does_not_take(service_db):
    # One mechanism for every route, future ones too: each is asked with a parameter it
    # does not take, and must name it (never answer, and never ignore it).
    app = create_app(service_db, Tokens.from_document({"token": [{"token": FULL, "name": "full"}]}))
    routes = [(method, route.path) for route in _every_route(app.routes) if isinstance(route, APIRoute)
              and route.path.startswith(STRICT_PREFIXES) for method in sorted(route.methods)]
    assert len(routes) >= 12

    async def ask():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turbdb") as client:
            return [await client.request(method, path.replace("{name}", "trig").replace("{job}", "1"),
                                         params={"zzz_unknown": "1"}, headers=BEARER) for method, path in routes]

    for (method, path), answer in zip(routes, anyio.run(ask)):
        assert answer.status_code == 400, (method, path, answer.text)
        assert "'zzz_unknown'" in answer.json()["description"], (method, path)
    outside = anyio.run(_get, app, "/healthz?v=2")  # probes and browsers may add their own
    assert outside.status_code == 200


def _every_route(routes):
    """The routes, those of included routers among them (FastAPI keeps a router as one entry)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        yield from _every_route(included.routes) if included is not None else [route]


async def _get(app, path, **kwargs):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turbdb") as client:
        return await client.get(path, **kwargs)


def test_the_jhtdb_endpoints_refuse_a_misspelt_parameter_and_take_what_givernylocal_sends(server, local):
    refused = server.post(JHTDB_VALUES, params={"dataset": "trig", "var": "velocity", "t": 0, "snit": "lag4"},
                          content="0.1\t0.2\t0.3\n")
    assert "'snit' (did you mean 'sint'?)" in refusal(refused)
    refused = server.get(JHTDB_CUTOUT, params={**BOX, "stride": 2})
    assert "'stride' (this endpoint's name for it is 'stridex')" in refusal(refused)
    # givernylocal's getData request, every parameter of it (test_givernylocal.py runs the client itself).
    sent = server.post(JHTDB_VALUES, content="0.1\t0.2\t0.3\n", params={
        "authToken": JHTDB_TESTING_TOKEN, "dataset": "trig", "function": "GetVariable", "var": "velocity", "t": 0.5,
        "sint": "lag4", "sop": "field", "tint": "none", "timepoint_end": -999.9, "delta_t": -999.9})
    assert sent.status_code == 200
    np.testing.assert_array_equal(sent.json(), local["trig"].query("velocity", [[0.1, 0.2, 0.3]], time=0.5,
                                                                    method="lag4"))


# --- the server's result size limit -------------------------------------------------------


@pytest.fixture(scope="module")
def limited_server(service_db, tmp_path_factory):
    """A server whose operator set TURBDB_MAX_RESULT_BYTES=2000."""
    folder = tmp_path_factory.mktemp("limited")
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as patch:  # the server's environment, not this process's
            patch.setenv("TURBDB_MAX_RESULT_BYTES", "2000")
            server = stack.enter_context(running_server(service_db, folder / "limited.log"))
        yield server


def test_the_result_size_limit_is_in_v1_limits_and_its_413_says_what_an_http_caller_can_do(limited_server):
    assert limited_server.get("/v1/limits").json()["max_result_bytes"] == 2000
    track = limited_server.post("/v1/datasets/trig/track", params={"start": 0, "end": 0.5, "dt": 0.25},
                                json={"points": random_points(500).tolist()})
    jhtdb = limited_server.get(JHTDB_CUTOUT, params=BOX)
    for refused in (track, jhtdb):
        assert refused.status_code == 413, refused.text
        description = refused.json()["description"]
        assert "set_max_result_bytes" not in description and "one call" not in description, description
        assert "one request to this server may return at most 2.0 KiB" in description
        assert "$TURBDB_MAX_RESULT_BYTES" in description and "max_result_bytes" in description
    assert "track fewer particles per request" in track.json()["description"]


# --- tokens on the JHTDB endpoints --------------------------------------------------------


def test_both_jhtdb_endpoints_take_authtoken_and_token_alike(service_db):
    tokens = Tokens.from_document({"anonymous": {"allowed": False}, "token": [
        {"token": FULL, "name": "full"}, {"token": SMALL, "name": "small", "max_points": 100}]})
    app = create_app(service_db, tokens)
    values = {"dataset": "trig", "var": "velocity", "t": 0}
    body = "\n".join("\t".join(map(str, p)) for p in random_points(200))

    async def ask():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turbdb") as client:
            answers = {}
            for spelling in ("authToken", "token"):
                answers["cutout", spelling] = await client.get(JHTDB_CUTOUT, params={**BOX, spelling: FULL})
                answers["values", spelling] = await client.post(JHTDB_VALUES, params={**values, spelling: FULL},
                                                                content=body)
                # The small token's limit applies: read, not anonymous use (which allows 4096).
                answers["small cutout", spelling] = await client.get(JHTDB_CUTOUT, params={**BOX, spelling: SMALL})
                answers["small values", spelling] = await client.post(JHTDB_VALUES, content=body,
                                                                      params={**values, spelling: SMALL})
            answers["bearer"] = await client.get(JHTDB_CUTOUT, params=BOX, headers=BEARER)
            answers["two"] = await client.get(JHTDB_CUTOUT, params={**BOX, "token": FULL, "authToken": SMALL})
            return answers

    answers = anyio.run(ask)
    for spelling in ("authToken", "token"):
        assert answers["cutout", spelling].status_code == 200, answers["cutout", spelling].text
        assert answers["values", spelling].status_code == 200, answers["values", spelling].text
        for endpoint in ("small cutout", "small values"):
            refused = answers[endpoint, spelling]
            assert refused.status_code == 413 and "token 'small'" in refused.json()["description"], refused.text
    assert answers["bearer"].status_code == 200
    assert "two different tokens" in refusal(answers["two"])


# --- a cutout's time, dtype and format ----------------------------------------------------


def test_a_cutout_of_several_times_says_it_takes_one_a_request(server):
    description = refusal(server.post(CUTOUT, params={"field": "velocity", "time": "0,0.5", "x": "0,4"},
                                      headers=BEARER))
    assert "one time per request" in description and "Input should be" not in description


@pytest.mark.parametrize("spelling, dtype", [("F8", "float64"), ("Float64", "float64"), ("f4", "float32"),
                                             ("FLOAT32", "float32")])
def test_dtype_takes_pythons_spellings_in_any_case(server, spelling, dtype):
    answer = server.post(QUERY, params={"field": "velocity", "time": 0, "dtype": spelling}, json=ONE_POINT)
    assert answer.status_code == 200 and answer.json()["dtype"] == dtype, answer.text
    assert "float32 (or f4) or float64 (or f8)" in refusal(
        server.post(QUERY, params={"field": "velocity", "time": 0, "dtype": "float16"}, json=ONE_POINT))


@pytest.mark.parametrize("spelling", ["nc", "NetCDF", "NC"])
def test_a_cutouts_format_takes_nc_in_any_case(server, spelling):
    answer = server.post(CUTOUT, params={"field": "pressure", "time": 0, "x": "0,4", "y": "0,4", "z": "0,4",
                                         "format": spelling})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-netcdf", answer.text
    assert answer.content[:3] in (b"CDF", b"\x89HD")
    npy = server.post(CUTOUT, params={"field": "pressure", "time": 0, "x": "0,4", "y": "0,4", "z": "0,4",
                                      "format": "NPY"})
    assert np.load(io.BytesIO(npy.content)).shape == (4, 4, 4, 1)
