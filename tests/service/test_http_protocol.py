"""HTTP as clients other than ours speak it: HEAD on every GET endpoint, the Accept header
read with its quality values, and request heads too long to read answered in JSON."""

import io
import json
import re
import socket
import subprocess
import sys
from urllib.parse import urlsplit

import numpy as np
import pytest

from turbdb.service.connections import MAX_HEAD_BYTES
from turbdb.service.head_requests import allowed_methods

from servicekit import FULL, OTHER_ONLY, running_server

QUERY = "/v1/datasets/trig/query"
V = {"field": "velocity", "time": 0}
BEARER = {"Authorization": f"Bearer {FULL}"}


@pytest.mark.parametrize("path", ["/", "/healthz", "/v1/datasets", "/v1/datasets/trig", "/v1/limits", "/metrics"])
def test_head_answers_as_get_without_the_body(server, path):
    get, head = server.get(path), server.request("HEAD", path)
    assert head.status_code == get.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    if path != "/metrics":  # its counters moved between the two
        assert head.headers["content-length"] == get.headers["content-length"]


def test_a_405_names_head_beside_get_and_the_method_the_client_sent(server):
    refused = server.request("DELETE", "/healthz")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
    assert "DELETE is not allowed" in refused.json()["description"]
    head_on_post = server.request("HEAD", QUERY)
    assert head_on_post.status_code == 405 and head_on_post.headers["allow"] == "POST"


def test_allowed_methods_adds_head_only_beside_get():
    assert allowed_methods("GET") == "GET, HEAD"
    assert allowed_methods("GET, POST") == "GET, POST, HEAD"
    assert allowed_methods("POST") == "POST"
    assert allowed_methods("GET, HEAD") == "GET, HEAD"


@pytest.mark.parametrize("accept, npy", [
    ("application/x-npy", True),
    ("application/x-npy;q=0, application/json", False),  # q=0 is "not this"
    ("application/json;q=0.5, application/x-npy", True),
    ("application/json, application/x-npy;q=0.9", False),
    ("*/*", False),
    ("text/csv", False),  # nothing offered is acceptable: the default, not a 406
    ("", False),
])
def test_the_accept_header_is_read_with_its_quality_values(server, accept, npy):
    response = server.post(QUERY, params=V, json={"points": [[1, 2, 3]]}, headers={**BEARER, "Accept": accept})
    assert response.status_code == 200, response.text
    if npy:
        assert response.headers["content-type"] == "application/x-npy"
        assert np.load(io.BytesIO(response.content)).shape == (1, 3)
    else:
        assert response.headers["content-type"] == "application/json"
        assert response.json()["shape"] == [1, 3]


def test_the_home_page_is_html_for_a_browser_and_json_when_html_is_refused(server):
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    assert server.get("/", headers={"Accept": browser}).headers["content-type"].startswith("text/html")
    assert server.get("/", headers={"Accept": "text/html;q=0, */*"}).headers["content-type"] == "application/json"


def test_listings_show_only_the_datasets_the_caller_may_read(server, service_db, tmp_path):
    other_only = {"Authorization": f"Bearer {OTHER_ONLY}"}
    assert server.get("/", headers={**other_only, "Accept": "application/json"}).json()["datasets"] == ["other"]

    def described(response):
        return sorted(d["name"] for d in response.json()["datasets"])

    assert described(server.get("/turbulence-svc/metadata", headers=other_only)) == ["other"]
    assert described(server.get("/turbulence-svc/metadata", params={"authToken": OTHER_ONLY})) == ["other"]
    assert described(server.get("/turbulence-svc/metadata")) == ["other", "trig"]
    # Anonymous use off: the home page names none without a token; the JHTDB metadata,
    # which givernylocal downloads before it knows a token, still describes them all.
    closed = tmp_path / "closed.toml"
    closed.write_text(f'[anonymous]\nallowed = false\n\n[[token]]\ntoken = "{OTHER_ONLY}"\nname = "o"\n'
                      'datasets = ["other"]\n')
    with running_server(service_db, tmp_path / "closed.log", "--tokens", str(closed)) as shut:
        home = shut.get("/", headers={"Accept": "application/json"}).json()
        assert home["datasets"] == [] and "needs a token" in home["token_needed"]
        assert "shown with a token" in shut.get("/", headers={"Accept": "text/html"}).text
        assert shut.get("/", headers={**other_only, "Accept": "application/json"}).json()["datasets"] == ["other"]
        assert described(shut.get("/turbulence-svc/metadata")) == ["other", "trig"]
        assert described(shut.get("/turbulence-svc/metadata", headers=other_only)) == ["other"]
        # An unknown token is no reason for a 401 on the home page.
        assert shut.get("/", headers={"Authorization": "Basic xyz", "Accept": "application/json"}).status_code == 200
    # Anonymous use limited to one dataset: givernylocal, which downloads the metadata
    # without a token, must still see the datasets its token may read.
    limited = tmp_path / "limited.toml"
    limited.write_text(f'[anonymous]\ndatasets = ["other"]\n\n[[token]]\ntoken = "{FULL}"\nname = "f"\n')
    with running_server(service_db, tmp_path / "limited.log", "--tokens", str(limited)) as some:
        assert described(some.get("/turbulence-svc/metadata")) == ["other", "trig"]
        assert some.get("/", headers={"Accept": "application/json"}).json()["datasets"] == ["other"]


def test_a_cutout_chooses_netcdf_only_when_it_is_preferred(server):
    params = {**V, "x": "0,2", "y": "0,2", "z": "0,2"}
    netcdf = server.post("/v1/datasets/trig/cutout", params=params, headers={**BEARER, "Accept": "application/x-netcdf"})
    assert netcdf.headers["content-type"] == "application/x-netcdf"
    npy = server.post("/v1/datasets/trig/cutout", params=params,
                      headers={**BEARER, "Accept": "application/x-netcdf;q=0.1, application/x-npy"})
    assert npy.headers["content-type"] == "application/x-npy"


def _raw(server, request: bytes) -> bytes:
    address = urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _status_and_body(answer: bytes) -> tuple[int, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_a_request_line_too_long_to_parse_gets_a_json_400_saying_to_post(server):
    answer = _raw(server, b"GET /healthz?x=" + b"1" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    status, body = _status_and_body(answer)
    assert status == 400 and b"content-type: application/json" in answer
    assert json.loads(body)["error"] == "InvalidRequestError" and "POST body" in json.loads(body)["description"]
    assert server.alive()


@pytest.mark.parametrize("headers", [
    b"X-Big: " + b"a" * (MAX_HEAD_BYTES + 1000) + b"\r\n",  # one header, complete
    b"".join(b"X-%d: %s\r\n" % (i, b"a" * 1000) for i in range(MAX_HEAD_BYTES // 1000 + 10)),  # many
])
def test_a_request_head_over_the_limit_gets_a_431_and_the_server_keeps_serving(server, headers):
    answer = _raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"Connection: close\r\n\r\n")
    status, body = _status_and_body(answer)
    assert status == 431 and json.loads(body)["error"] == "LimitExceededError"
    assert server.alive()


def test_a_head_that_never_ends_is_cut_at_the_limit(server):
    address = urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        sent = 0
        try:
            while sent < 8 * MAX_HEAD_BYTES:
                sock.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass  # the server closed the connection: what we want
        answer = sock.recv(65536)
    assert _status_and_body(answer)[0] == 431  # the head never ended: only the byte count can refuse it
    assert server.alive()


def test_a_large_body_sent_with_its_head_is_not_taken_for_head(server):
    points = np.random.default_rng(0).uniform(0, 6, (4000, 3))
    body = _npy(points)
    response = server.post(QUERY, params=V, content=body,
                           headers={**BEARER, "Content-Type": "application/x-npy"})
    assert len(body) > MAX_HEAD_BYTES / 4 and response.status_code == 200, response.text


def _npy(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values)
    return buffer.getvalue()


def test_a_client_gone_before_its_whole_body_counts_as_499_not_a_bad_request(server):
    import time

    labels = {"endpoint": "/v1/datasets/{name}/query", "status": "499"}
    before = server.metric("turbdb_requests_total", **labels)
    body = _npy(np.zeros((20_000, 3)))
    address = urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/datasets/trig/query?field=velocity&time=0 HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/x-npy\r\nAuthorization: Bearer " + FULL.encode() +
                     b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:len(body) // 2])
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while server.metric("turbdb_requests_total", **labels) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.metric("turbdb_requests_total", **labels) == before + 1
    assert server.alive()


def test_a_trailing_slash_gets_a_404_naming_the_endpoint_never_an_empty_redirect(server):
    # A 307 with an empty body: `curl -f -X POST …/cutout/?…` saved 0 bytes as box.npy and exited 0.
    answer = server.post("/v1/datasets/trig/cutout/", params={**V, "x": "0,4", "y": "0,4", "z": "0,4"})
    assert answer.status_code == 404 and answer.content
    assert "the endpoint is '/v1/datasets/trig/cutout', without the trailing slash" in answer.json()["description"]
    unknown = server.get("/v2/nothing/")
    assert unknown.status_code == 404 and "without the trailing slash" not in unknown.json()["description"]


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_json_body_must_say_it_is_json(server, kind):
    # text/plain, forms and no type are what a web page may send across origins without the
    # browser asking the server first: read as JSON, any page could spend its visitors' quota.
    headers = {"Content-Type": kind} if kind else {}
    for path, params, body in ((QUERY, V, {"points": [[1, 2, 3]]}),
                               ("/v1/jobs", {}, {"queries": [{"dataset": "trig", "field": "velocity", "time": 0}]})):
        answer = server.post(path, params=params, content=json.dumps(body), headers=headers)
        assert answer.status_code == 415, answer.text
        assert "Content-Type: application/json" in answer.json()["description"]
        assert server.post(path, params=params, json=body).status_code == 200


def test_browsers_may_call_the_api_only_from_the_origins_the_server_allows(server, service_db, tmp_path):
    preflight = {"Origin": "https://lab.example.org", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    refused = server.request("OPTIONS", QUERY, headers=preflight)
    assert "access-control-allow-origin" not in refused.headers
    with running_server(service_db, tmp_path / "cors.log", "--allow-origin", "https://lab.example.org") as s:
        allowed = s.request("OPTIONS", QUERY, headers=preflight)
        assert allowed.status_code == 200, allowed.text
        assert allowed.headers["access-control-allow-origin"] == "https://lab.example.org"
        assert "POST" in allowed.headers["access-control-allow-methods"]
        cutout = s.post("/v1/datasets/trig/cutout", params={**V, "x": "0,2", "y": "0,2", "z": "0,2"},
                        headers={"Origin": "https://lab.example.org"})
        assert cutout.headers["access-control-allow-origin"] == "https://lab.example.org"
        assert "x-turbdb-time-index" in cutout.headers["access-control-expose-headers"].lower()
        other = s.request("OPTIONS", QUERY, headers={**preflight, "Origin": "https://elsewhere.example"})
        assert "access-control-allow-origin" not in other.headers


def test_an_allowed_origin_must_be_a_web_origin(service_db):
    from turbdb.exceptions import InvalidRequestError
    from turbdb.service.app import create_app

    with pytest.raises(InvalidRequestError, match="without a path or trailing slash"):
        create_app(service_db, allow_origins=["https://lab.example.org/"])
    # Compared as browsers send them: https://Lab.Example.org:443 matched no real page.
    from turbdb.service.app import _origins

    assert _origins(["https://Lab.Example.org:443", "http://localhost:80", "http://localhost:8080"]) == [
        "https://lab.example.org", "http://localhost", "http://localhost:8080"]


def test_the_limits_need_no_token_where_anonymous_use_is_off(service_db):
    # docs/service.md says /v1/limits never needs a token (the home page links it); it answered 401.
    import anyio
    import httpx

    from turbdb.service.app import create_app
    from turbdb.service.tokens import Tokens

    tokens = Tokens.from_document({"anonymous": {"allowed": False}, "token": [{"token": FULL, "name": "full"}]})
    app = create_app(service_db, tokens)

    async def ask():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://turbdb") as client:
            return [await client.get(path, headers=headers) for path, headers in (
                ("/v1/limits", {}), ("/v1/datasets", {}), ("/v1/limits", BEARER),
                ("/v1/limits", {"Authorization": "Bearer unknown"}))]

    closed, listing, mine, unknown = anyio.run(ask)
    assert closed.status_code == 200, closed.text
    document = closed.json()
    assert document["allowed"] is False and document["max_points"] == 0 and document["datasets"] == []
    assert "this server needs a token" in document["description"]
    assert listing.status_code == 401
    assert mine.json()["allowed"] is True and mine.json()["token"] == "full"
    assert unknown.status_code == 401


def test_metrics_count_the_bytes_sent_and_points_under_the_route_template(server):
    # A HEAD's body, dropped, was counted in turbdb_response_bytes_total; turbdb_points_total
    # said "track" where turbdb_requests_total says /v1/datasets/{name}/track.
    page = "/v1/datasets/{name}"
    sent = server.metric("turbdb_response_bytes_total", endpoint=page)
    assert server.request("HEAD", "/v1/datasets/trig").status_code == 200
    assert server.metric("turbdb_response_bytes_total", endpoint=page) == sent
    got = server.get("/v1/datasets/trig")
    assert server.metric("turbdb_response_bytes_total", endpoint=page) - sent == len(got.content) > 0
    track = "/v1/datasets/{name}/track"
    for options, evaluations in (({}, 2 * 2), ({"integrator": "euler", "return_velocity": "true"}, 2 + 1)):
        before = server.metric("turbdb_points_total", endpoint=track)
        answer = server.post("/v1/datasets/trig/track", params={"start": 0, "end": 0.5, "dt": 0.25, **options},
                             json={"points": [[1, 2, 3]] * 3}, headers=BEARER)
        assert answer.status_code == 200, answer.text
        # Particles × velocity evaluations: two steps, each of two (rk2) or one (euler), one more for the velocities.
        assert server.metric("turbdb_points_total", endpoint=track) - before == 3 * evaluations
    assert server.metric("turbdb_points_total", endpoint="track") == 0
    assert server.metric("turbdb_requests_total", endpoint=track, status="200") >= 2


def test_every_log_line_starts_with_its_time_and_an_access_line_gives_the_size_and_duration(service_db, tmp_path):
    # uvicorn's access lines had no time, size or duration (written when the answer started);
    # a 499's ended with a space; errors (every "busy" 503) had no time, path or client.
    with running_server(service_db, tmp_path / "logged.log", "--access-log", "--log-level", "info") as s:
        health = s.get("/healthz")
        assert s.get("/v1/nothing").status_code == 404
        assert s.request("HEAD", "/v1/limits").status_code == 200
    lines = [line for line in s.log.read_text().splitlines() if not line.startswith("turbdb: ")]
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO|WARNING|ERROR): +"
    assert lines and all(re.match(stamp, line) for line in lines), lines
    access = [re.sub(stamp, "", line) for line in lines if " HTTP/1.1" in line]
    assert any(re.fullmatch(rf'127\.0\.0\.1:\d+ - "GET /healthz HTTP/1\.1" 200 OK {len(health.content)} B '
                            r'\d+\.\d{3} s', line) for line in access), access
    assert any(re.fullmatch(r'127\.0\.0\.1:\d+ - "GET /v1/nothing HTTP/1\.1" 404 Not Found \d+ B \d+\.\d{3} s',
                            line) for line in access), access
    assert any(re.fullmatch(r'127\.0\.0\.1:\d+ - "HEAD /v1/limits HTTP/1\.1" 200 OK 0 B \d+\.\d{3} s', line)
               for line in access), access


def test_other_loggers_lines_get_the_time_and_lose_their_tokens_too():
    # asyncio's and the engine's own lines fell to logging's last resort: no time, a token
    # in clear (the review; a logger's filter does not see what its children pass up).
    script = ("import logging, logging.config\n"
              "from turbdb.service import logs\n"
              "logging.config.dictConfig(logs.logging_config('info', False))\n"
              "logging.getLogger('turbdb.engine_completions').warning('a callback failed token=SECRET2')\n"
              "logging.getLogger('asyncio').error('Task exception was never retrieved ?authToken=SECRET3')\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    lines = run.stderr.splitlines()
    assert len(lines) == 2 and "SECRET" not in run.stderr, run.stderr
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (WARNING|ERROR): ", line) for line in lines), lines


def test_a_5xx_is_logged_with_the_request_and_its_client(caplog):
    from starlette.requests import Request

    from turbdb.exceptions import CorruptDataError
    from turbdb.service.admission import BusyError
    from turbdb.service.errors import turbdb_error_response

    scope = {"type": "http", "method": "POST", "path": "/v1/datasets/trig/query", "query_string": b"field=velocity",
             "client": ("203.0.113.5", 4000), "http_version": "1.1", "headers": []}
    with caplog.at_level("INFO", logger="turbdb.service"):
        turbdb_error_response(BusyError("the server is at capacity", retry_after=1.0), request=Request(scope))
        turbdb_error_response(CorruptDataError("atom 3 of velocity is damaged"), request=Request(scope))
    line = '203.0.113.5:4000 - "POST /v1/datasets/trig/query?field=velocity HTTP/1.1" answered'
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"{line} 503: BusyError: the server is at capacity"),
        ("ERROR", f"{line} 500: CorruptDataError: atom 3 of velocity is damaged")]
