"""Requests the outside fault and abuse probe (issue 13) sent that did not hold: each must
now be refused with a 4xx and a message, quickly, without allocating what it asks for, and
the server must keep answering."""

import os
import time
from pathlib import Path

import httpx
import pytest

from turbdb.exceptions import InvalidRequestError, LimitExceededError
from turbdb.service.jhtdb import series_length, series_times
from turbdb.service.redaction import redact
from turbdb.track import step_count, step_times

from servicekit import FULL, OTHER_ONLY, SMALL, running_serve, running_server

TESTING_TOKEN = "edu.jhu.pha.turbulence.testing-201406"


def test_a_time_series_is_counted_exactly_as_it_is_listed_at_most_one_more():
    for t, end, dt in ((0.0, 1.0, 0.1), (0.5, 1.0, 0.25), (0.0, 0.3, 0.07), (0.1, 0.11, 1e-3)):
        assert len(series_times(t, end, dt)) <= series_length(t, end, dt) <= len(series_times(t, end, dt)) + 1


def test_a_series_of_absurdly_many_times_is_refused_before_it_is_listed():
    with pytest.raises(LimitExceededError, match="delta_t"):
        series_length(0.0, 1.0, 1e-300)
    with pytest.raises(InvalidRequestError):
        series_length(0.0, 1.0, -1.0)


def test_step_count_agrees_with_step_times_without_listing_them():
    for start, end, dt in ((0.0, 1.0, 0.1), (1.0, 0.0, 0.3), (0.0, 0.25, 0.25), (0.2, 0.9, 0.07)):
        assert step_count(start, end, dt) == len(step_times(start, end, dt)) - 1
    with pytest.raises(LimitExceededError, match="larger dt"):
        step_count(0.0, 1e300, 1.0)


def test_a_one_point_series_with_a_tiny_delta_t_is_refused_at_once_and_the_server_keeps_answering(server):
    began = time.monotonic()
    response = server.post("/turbulence-svc/values",
                           params={"authToken": TESTING_TOKEN, "dataset": "trig", "function": "GetVariable",
                                   "var": "velocity", "t": 0, "sint": "lag4", "sop": "field", "tint": "none",
                                   "timepoint_end": 1.44, "delta_t": 2e-9},
                           content="0.1\t0.2\t0.3\n")
    assert response.status_code == 413, response.text
    assert "point-times" in response.json()["description"]
    assert time.monotonic() - began < 5, "the limit must be checked before the times are listed"
    assert server.alive()


@pytest.mark.parametrize("params, status", [
    ({"start": 0, "end": 1.44, "dt": 5e-9}, 413),
    ({"start": 0, "end": 1e300, "dt": 1}, 400),  # outside the stored times, checked first
    ({"start": 0, "end": 1.44, "dt": 1e-5}, 413),  # 144 000 steps of one particle: within the rows, not the steps
])
def test_tracking_over_absurdly_many_steps_is_refused_at_once(server, params, status):
    began = time.monotonic()
    response = server.post("/v1/datasets/trig/track", params=params, json={"points": [[0.1, 0.2, 0.3]]},
                           headers={"Authorization": f"Bearer {FULL}"})
    assert response.status_code == status, response.text
    assert response.json()["description"]
    assert time.monotonic() - began < 5
    assert server.alive()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_track_whose_client_went_away_stops_without_a_node_engine(server):
    # 90 000 steps of one particle: tens of seconds of work, which a client gone stops.
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/datasets/trig/track", params={"start": 0, "end": 0.9, "dt": 1e-5, "method": "lag4"},
                   json={"points": [[0.1, 0.2, 0.3]]}, headers={"Authorization": f"Bearer {FULL}"},
                   timeout=httpx.Timeout(30, read=1.0))
    time.sleep(1.0)
    before = _cpu_seconds(server.process.pid)
    time.sleep(1.5)
    assert _cpu_seconds(server.process.pid) - before < 0.5, "the track went on after its client left"
    assert server.alive()


def test_getposition_with_a_tiny_delta_t_is_refused_at_once(server):
    began = time.monotonic()
    response = httpx.post(f"{server.url}/turbulence-svc/values", timeout=30,
                          params={"authToken": TESTING_TOKEN, "dataset": "trig", "function": "GetVariable",
                                  "var": "position", "t": 0, "sint": "lag4", "sop": "field", "tint": "pchip",
                                  "timepoint_end": 1.44, "delta_t": 5e-9},
                          content="0.1\t0.2\t0.3\n")
    assert response.status_code == 413, response.text
    assert time.monotonic() - began < 5
    assert server.alive()


def test_a_404_lists_only_the_datasets_the_token_may_read(server):
    response = server.get("/v1/datasets/nonexistent", headers={"Authorization": f"Bearer {OTHER_ONLY}"})
    assert response.status_code == 404, response.text
    description = response.json()["description"]
    assert "other" in description and "trig" not in description


def test_the_jhtdb_endpoint_accepts_a_bearer_token(server):
    # SMALL allows 100 points, anonymous use 4096: 200 points sent with SMALL as Bearer are
    # refused with SMALL's limit only if the header is read.
    params = {"dataset": "trig", "function": "GetVariable", "var": "velocity", "t": 0.5, "sint": "lag4",
              "sop": "field", "tint": "none"}
    body = "0.1\t0.2\t0.3\n" * 200
    anonymous = server.post("/turbulence-svc/values", params=params, content=body)
    assert anonymous.status_code == 200, anonymous.text
    bearer = server.post("/turbulence-svc/values", params=params, content=body,
                         headers={"Authorization": f"Bearer {SMALL}"})
    assert bearer.status_code == 413 and "100" in bearer.json()["description"], bearer.text
    unknown = server.post("/turbulence-svc/values", params=params, content=body,
                          headers={"Authorization": "Bearer not-a-token"})
    assert unknown.status_code == 401


def test_redact_hides_every_kind_of_token():
    line = 'GET /turbulence-svc/values?dataset=trig&authToken=s3cret&t=0 Authorization: Bearer abc.def token=xyz'
    redacted = redact(line)
    assert "s3cret" not in redacted and "abc.def" not in redacted and "xyz" not in redacted
    assert "dataset=trig" in redacted and "&t=0" in redacted


@pytest.mark.parametrize("level", ["info", "warning"])  # asked for, the access log shows at any level
def test_the_access_log_never_shows_a_token(service_db, tokens_file, tmp_path, level):
    log = tmp_path / "access.log"
    with running_server(service_db, log, "--tokens", str(tokens_file), "--access-log", "--log-level", level) as s:
        response = s.post("/turbulence-svc/values", params={"authToken": FULL, "dataset": "trig",
                                                            "function": "GetVariable", "var": "velocity", "t": 0.5},
                          content="0.1\t0.2\t0.3\n")
        assert response.status_code == 200, response.text
        s.get("/v1/datasets", headers={"Authorization": f"Bearer {FULL}"})
        # The name percent-encoded: the server reads authToken, the log showed the token (the review).
        s.get(f"/turbulence-svc/metadata?auth%54oken={FULL}")
    text = log.read_text()
    assert "turbulence-svc/values" in text, "the access log must still name the request"
    assert FULL not in text


def _npy_header_only(shape):
    header = repr({"descr": "<f8", "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


@pytest.mark.parametrize("path, kwargs", [
    ("/v1/datasets/trig/query?field=velocity&time=0.5",
     {"content": _npy_header_only((2**62, 4)), "headers": {"Content-Type": "application/x-npy"}}),
    ("/v1/datasets/trig/query?field=velocity&time=0.5", {"content": b'{"points":' + b"[" * 100_000}),
    ("/v1/datasets/trig/cutout?field=velocity&time=0.5&x=0,18446744073709551616", {}),
    ("/v1/datasets/trig/cutout?field=velocity&time=0.5&stride=18446744073709551616", {}),
    ("/turbulence-svc/values?dataset=trig&function=GetVariable&var=velocity&t=0.5", {"content": b""}),
])
def test_bad_input_answers_4xx_and_keeps_the_connection(server, path, kwargs):
    headers = {"Authorization": f"Bearer {FULL}", **kwargs.pop("headers", {})}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.post(path, headers=headers, **kwargs)
        assert 400 <= response.status_code < 500, response.text
        assert response.json()["description"]
        assert response.headers.get("connection", "keep-alive") != "close"
        assert client.get("/healthz").status_code == 200  # the same connection still answers


def test_json_points_are_counted_before_the_body_is_parsed(server):
    # 1000 compact points, above SMALL's limit of 100, and a body that would not even parse:
    # the count must refuse it first (413), without parsing (which would say 400).
    body = b'{"points": [' + b"[0,0,0]," * 1000 + b"[0,0,0]] oops"
    response = server.post("/v1/datasets/trig/query", params={"field": "velocity", "time": 0.5}, content=body,
                           headers={"Authorization": f"Bearer {SMALL}", "Content-Type": "application/json"})
    assert response.status_code == 413, response.text
    assert "100" in response.json()["description"]


def test_slowloris_connections_are_cut_and_the_server_answers_again(service_db, tmp_path):
    import socket
    from urllib.parse import urlsplit

    from turbdb.service.connections import HEADER_TIMEOUT_SECONDS

    with running_server(service_db, tmp_path / "slow.log") as s:
        host, port = urlsplit(s.url).hostname, urlsplit(s.url).port
        sockets = []
        try:
            for _ in range(600):  # what the probe sent: half a header each, never the rest
                sock = socket.create_connection((host, port), timeout=5)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                sockets.append(sock)
            time.sleep(HEADER_TIMEOUT_SECONDS + 1.5)
            still_open = 0
            for sock in sockets:
                sock.settimeout(3)
                try:
                    while sock.recv(4096):
                        pass
                except (TimeoutError, socket.timeout):
                    still_open += 1
                except OSError:
                    pass
            assert still_open == 0, f"{still_open} half-sent requests still hold a connection"
            assert s.get("/healthz").status_code == 200
        finally:
            for sock in sockets:
                sock.close()


def test_a_dataset_with_damaged_metadata_is_a_server_error_without_paths_and_the_rest_still_serve(tmp_path):
    import json

    import turbdb

    db = tmp_path / "db"
    turbdb.create_dataset(db, "good", grid=(8, 8, 8), times=[0.0], atom=4, partition=8)
    bad = turbdb.create_dataset(db, "bad", grid=(8, 8, 8), times=[0.0], atom=4, partition=8)
    document = json.loads((bad.path / "zarr.json").read_text())
    document["attributes"]["turbdb"]["grid"] = [-8, 8, 8]
    (bad.path / "zarr.json").write_text(json.dumps(document))
    with running_server(db, tmp_path / "damaged.log") as s, httpx.Client(base_url=s.url, timeout=30) as client:
        response = client.get("/v1/datasets/bad")
        assert response.status_code == 500 and response.json()["error"] == "DamagedMetadataError", response.text
        assert "damaged" in response.json()["description"]
        assert str(db) not in response.text and str(db.resolve()) not in response.text
        assert client.get("/v1/datasets/good").status_code == 200  # same connection, other dataset


@pytest.mark.parametrize("root", ["data", "db", "/srv/turbulence/data"])
def test_hiding_the_database_path_leaves_the_words_around_it_whole(root):
    from turbdb.service.errors import hide_path

    words = ("no dataset 'nope' on this server; available: database, metadata, db2; start it with turbdb serve DB "
             "--cluster ADDRESS")
    assert hide_path(words, root) == words
    assert hide_path(f"{root}/iso/velocity/c/1/0/0/0/0 is truncated", root) == "iso/velocity/c/1/0/0/0/0 is truncated"
    assert hide_path(f"cannot read '{root}': gone", root) == "cannot read 'the database': gone"


def _uniform(db, grid, value):
    """Dataset 'run' of a constant velocity ``value``, created (again) over any old one."""
    import numpy as np

    import turbdb

    ds = turbdb.create_dataset(db, "run", grid=(grid,) * 3, times=[0.0], fields={"velocity": 3}, atom=4,
                               partition=8, overwrite=True)
    ds.write("velocity", 0, np.full((grid,) * 3 + (3,), value, np.float32))


@pytest.mark.parametrize("scheduler", [None, "jaws"])
def test_a_dataset_created_again_over_an_open_one_answers_with_its_new_data(tmp_path, scheduler):
    # The open Dataset (and a node engine) kept the old stores: the old values, NaN, or a
    # panic on the old grid, until the process restarted.
    import numpy as np

    import turbdb

    _uniform(tmp_path, 16, 1.0)
    ds = turbdb.open(tmp_path, scheduler=scheduler)["run"]
    box = {"x": (0, 16), "y": (0, 2), "z": (0, 2)}
    for grid, value in ((16, 1.0), (16, 2.0), (32, 3.0)):
        if value > 1.0:  # the same grid with new values, then another grid
            _uniform(tmp_path, grid, value)
        np.testing.assert_allclose(ds.query("velocity", [[1.0, 2.0, 3.0]], time=0.0), [[value] * 3], rtol=1e-6)
        cut = ds.cutout("velocity", time=0.0, **box)
        assert cut.shape == (2, 2, 16, 3) and (cut.values == value).all()


def test_a_server_answers_with_a_dataset_created_again_over_one_it_served(tmp_path):
    _uniform(tmp_path / "db", 16, 1.0)
    query = {"params": {"field": "velocity", "time": 0.0}, "json": {"points": [[1.0, 2.0, 3.0]]}}
    with running_server(tmp_path / "db", tmp_path / "over.log", "--scheduler", "jaws") as s:
        assert s.post("/v1/datasets/run/query", **query).json()["values"][0] == pytest.approx([1.0] * 3, rel=1e-6)
        _uniform(tmp_path / "db", 32, 2.0)
        answer = s.post("/v1/datasets/run/query", **query)
        assert answer.status_code == 200, answer.text
        assert answer.json()["values"][0] == pytest.approx([2.0] * 3, rel=1e-6)
        cut = s.post("/v1/datasets/run/cutout", params={"field": "velocity", "time": 0.0, "x": "16,32", "y": "0,1",
                                                        "z": "0,1", "format": "npy"})
        assert cut.status_code == 200, cut.text


FORWARDED_TOKENS = "[anonymous]\nmax_points = 4096\nrequests_per_minute = 3\n"


def test_x_forwarded_for_from_a_peer_not_trusted_as_a_proxy_changes_nothing(service_db, tmp_path):
    # uvicorn trusted X-Forwarded-For from 127.0.0.1 by default: any process on the server's
    # machine escaped the anonymous rate limit with a new address each time, and chose the
    # address it was logged (and owned anonymous jobs) under.
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(FORWARDED_TOKENS)
    with running_server(service_db, tmp_path / "forged.log", "--tokens", str(tokens), "--access-log") as s:
        statuses = [s.get("/v1/datasets", headers={"X-Forwarded-For": f"203.0.113.{k}"}).status_code for k in range(5)]
        jobs = s.get("/v1/jobs", headers={"X-Forwarded-For": "203.0.113.9"})
    assert statuses == [200, 200, 200, 429, 429] and jobs.status_code == 429
    log = s.log.read_text()
    assert "203.0.113" not in log and log.count('127.0.0.1:') >= 5, log


def test_behind_a_trusted_proxy_the_rate_limit_and_the_log_count_the_client_it_forwards(service_db, tmp_path):
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(FORWARDED_TOKENS)
    with running_serve(service_db, tmp_path / "proxied.log", tokens=str(tokens), forwarded_allow_ips="127.0.0.1",
                       access_log=True) as s:
        def through_the_proxy(claimed: str, client: str) -> int:
            # The proxy appends the address it got the request from to what the client claimed.
            return s.get("/v1/datasets", headers={"X-Forwarded-For": f"{claimed}, {client}"}).status_code

        first = [through_the_proxy(f"6.6.6.{k}", "203.0.113.5") for k in range(4)]
        other = through_the_proxy("6.6.6.6", "203.0.113.6")
    assert first == [200, 200, 200, 429] and other == 200  # by the client's address, whatever it claims
    log = s.log.read_text()
    assert log.count('203.0.113.5:0 - "GET /v1/datasets HTTP/1.1"') == 4 and "6.6.6" not in log, log
    assert "trusted proxies: 127.0.0.1/32" in log


def test_behind_a_trusted_proxy_the_connection_cap_counts_the_client_it_forwards():
    # The cap of connections per client counted the proxy (the TCP peer) while the rate limit
    # counted the forwarded client: one client through the proxy took the whole cap.
    import socket
    import threading

    import uvicorn

    from turbdb.service.connections import GuardedHttpProtocol
    from turbdb.service.proxies import TrustedProxies

    async def app(scope, receive, send):  # any app: the cap answers before it
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    protocol = GuardedHttpProtocol.configured(per_client=2, trusted_proxies=TrustedProxies("127.0.0.1"))
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, http=protocol, proxy_headers=False, lifespan="off",
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    port = listening.getsockname()[1]

    def sending(client: str) -> socket.socket:
        """A request of ``client``'s through the proxy, its body still to come."""
        sock = socket.create_connection(("127.0.0.1", port), timeout=1)
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\nContent-Length: 4\r\n\r\n"
                     % client.encode())
        return sock

    def answer(sock: socket.socket) -> bytes:
        try:
            return sock.recv(65536)
        except TimeoutError:
            return b""

    try:
        under_way = [sending("203.0.113.5"), sending("203.0.113.5")]
        third = sending("203.0.113.5")
        assert answer(third).startswith(b"HTTP/1.1 503") and answer(under_way[0]) == b""
        another = sending("203.0.113.6")  # another client through the same proxy
        assert answer(another) == b""
        another.sendall(b"done")
        assert answer(another).startswith(b"HTTP/1.1 200")
        under_way[0].sendall(b"done")  # one of the client's requests ends: the client may send another
        assert answer(under_way[0]).startswith(b"HTTP/1.1 200")
        fourth = sending("203.0.113.5")
        fourth.sendall(b"done")
        assert answer(fourth).startswith(b"HTTP/1.1 200")
        for sock in (*under_way, third, another, fourth):
            sock.close()
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_client_of_a_trusted_proxy_is_the_last_address_it_does_not_trust():
    from turbdb.service.proxies import TrustedProxies

    proxies = TrustedProxies("127.0.0.1, 10.0.0.0/8")
    forwarded = [(b"x-forwarded-for", b"6.6.6.6, 203.0.113.5"), (b"x-forwarded-for", b"10.1.2.3"),
                 (b"x-forwarded-proto", b"https")]
    # The client wrote 6.6.6.6; the first proxy appended the client's address, the second the first proxy's.
    assert proxies.client(("127.0.0.1", 5000), forwarded) == (("203.0.113.5", 0), "https")
    assert proxies.client(("::ffff:10.0.0.7", 5000), forwarded)[0] == ("203.0.113.5", 0)  # a server bound to ::
    assert proxies.client(("198.51.100.1", 5000), forwarded) == (("198.51.100.1", 5000), None)  # not a proxy
    assert proxies.client(("127.0.0.1", 5000), []) == (("127.0.0.1", 5000), None)
    assert proxies.client(("127.0.0.1", 5000), [(b"x-forwarded-for", b"[2001:db8::1]:4711")])[0] == ("2001:db8::1", 4711)
    assert TrustedProxies("*").client(("198.51.100.1", 1), forwarded)[0] == ("10.1.2.3", 0)
    # A hop that is no address ends the chain (the review: "unknown" and a port of 20 digits
    # became the client, keying its rate limit and its jobs).
    for text in (b"unknown", b"1.2.3.4:99999999999999999999", b"secret-token"):
        assert proxies.client(("127.0.0.1", 5000), [(b"x-forwarded-for", text)])[0] == ("127.0.0.1", 5000)
    assert proxies.client(("127.0.0.1", 5000), [(b"x-forwarded-for", b"unknown, 10.9.9.9")])[0] == ("10.9.9.9", 0)
    for bad in ("localhost", "10.0.0.0/33", " , "):
        with pytest.raises(InvalidRequestError, match="forwarded_allow_ips"):
            TrustedProxies(bad)
