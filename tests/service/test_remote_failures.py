"""turbdb.connect when the network, or what answers in the server's place, misbehaves: what
is sent again and what is not, how long a request may take, and what the user is told."""

import io
import json
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import numpy as np
import pytest

import turbdb
from turbdb import remote, remote_batches

from servicekit import FULL

LIMITS = {"max_points": 1000, "requests_per_minute": 1e6, "burst": 1e6, "max_track_rows": 10**7,
          "max_track_steps": 10**5}


def answering(answer, **options):
    """A client whose server knows its limits and answers every other request with ``answer(request)``."""
    seen = []

    def handle(request):
        seen.append(f"{request.method} {request.url.path}")
        if request.url.path == "/v1/limits":
            return httpx.Response(200, json=LIMITS)
        return answer(request)

    options = {"backoff": 0.001, **options}
    return turbdb.connect("http://turbdb.test", transport=httpx.MockTransport(handle), **options), seen


def test_a_job_declaration_whose_answer_was_lost_is_not_sent_again():
    # A proxy that closed the connection after the server declared the job: sent again, it
    # was declared over and over, locking the token's planned queries for 600 s.
    def lost(request):
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)

    db, seen = answering(lost)
    with pytest.raises(turbdb.ServiceError) as failed:
        db.job([("trig", "velocity", 0.0)] * 3)
    assert seen.count("POST /v1/jobs") == 1
    message = str(failed.value)
    assert "may have been declared" in message and "db.open_jobs()" in message and "is `turbdb serve` running" \
        not in message
    with pytest.raises(turbdb.ServiceError, match="may have been closed"):
        remote.RemoteJob(db, 7, 3, False).close()
    assert seen.count("DELETE /v1/jobs/7") == 1
    # A read is sent again: repeating it is harmless.
    db, seen = answering(lost)
    with pytest.raises(turbdb.ServiceError, match="cannot get an answer .* broke after the request was sent"):
        db.datasets  # noqa: B018
    assert seen.count("GET /v1/datasets") == db.retries + 1


def test_open_jobs_lists_the_tokens_jobs_so_that_a_lost_one_can_be_closed(server):
    with turbdb.connect(server.url, token=FULL) as db:
        declared = [db.job([("trig", "velocity", t)] * 2) for t in (0.0, 0.5)]
        ids = {j.id for j in declared}
        # Other tests on this server with this token may have left jobs open: only these count.
        assert [(j.id, j.queries) for j in db.open_jobs() if j.id in ids] == [(j.id, 2) for j in declared]
        for job in db.open_jobs():
            if job.id in ids:
                job.close()
        assert not {j.id for j in db.open_jobs()} & ids
    # Anonymous callers have jobs of their own (other tests on this server may have left some).
    assert not {j["job"] for j in server.get("/v1/jobs").json()["jobs"]} & {j.id for j in declared}


class Trickle(httpx.SyncByteStream):
    """An answer that never ends, a byte at a time."""

    def __iter__(self):
        while True:
            time.sleep(0.1)
            yield b" "


def test_an_answer_that_trickles_in_fails_at_the_timeout_instead_of_never():
    db, _ = answering(lambda request: httpx.Response(200, headers={"Content-Type": "application/json"},
                                                      stream=Trickle()), timeout=1)
    started = time.monotonic()
    with pytest.raises(turbdb.ServiceError, match="did not answer within 1 s"):
        db.datasets  # noqa: B018
    assert time.monotonic() - started < 5


def test_a_failed_batch_is_raised_without_waiting_for_earlier_batches_in_flight():
    hung = threading.Event()

    def first():
        hung.wait(60)

    def second():
        raise turbdb.InvalidRequestError("the second batch is wrong")

    started = time.monotonic()
    try:
        with pytest.raises(turbdb.InvalidRequestError, match="second batch"):
            remote_batches.run([first, second, first], concurrency=2, progress=False, sizes=[1, 1, 1], unit="x",
                               description="x")
        assert time.monotonic() - started < 20
    finally:
        hung.set()


def test_ctrl_c_during_batches_ends_the_program_without_waiting_for_requests_in_flight():
    # The requests hang as before a server that never answers: ThreadPoolExecutor's workers
    # were joined at exit, so the program ended only at their timeout.
    script = textwrap.dedent("""
        import os, signal, threading
        from turbdb import remote_batches
        hung = threading.Event()
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            remote_batches.run([lambda: hung.wait(120)] * 4, concurrency=2, progress=False, sizes=[1] * 4,
                               unit="x", description="x")
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    started = time.monotonic()
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "interrupted" in ended.stdout, ended.stderr
    assert time.monotonic() - started < 30


def npy(values):
    buffer = io.BytesIO()
    np.save(buffer, values)
    return buffer.getvalue()


@pytest.mark.parametrize("answer, words", [
    (lambda r: httpx.Response(301, headers={"Location": f"https://turbdb.test:8443{r.url.path}"}, text="<html>"),
     "connect to https://turbdb.test:8443 instead"),
    (lambda r: httpx.Response(200, html="<html><body>Please log in to the campus network</body></html>"),
     "not from a turbdb server .*text/html.*captive portal"),
    (lambda r: httpx.Response(502, html="<center>nginx</center>"), "HTTP 502 Bad Gateway .* not an answer of turbdb's"),
    (lambda r: httpx.Response(200, content=json.dumps({"datasets": []}).encode()[:10],
                              headers={"Content-Type": "application/json"}), "cut short"),
])
def test_answers_that_are_not_turbdbs_are_service_errors_that_say_so(answer, words):
    db, _ = answering(answer)
    db.retries = 0
    with pytest.raises(turbdb.ServiceError, match=words):
        db.datasets  # noqa: B018


def test_an_npy_answer_cut_short_is_the_transports_fault_not_the_callers(local):
    def handle(request):
        if request.url.path == "/v1/datasets/trig":
            return httpx.Response(200, json=local["trig"].metadata.to_attrs())
        return httpx.Response(200, content=npy(np.zeros((5, 1), np.float32))[:100],
                              headers={"Content-Type": "application/x-npy"})

    db, _ = answering(handle)
    with pytest.raises(turbdb.ServiceError, match="damaged .* cut short or changed on the way"):
        db["trig"].query("pressure", np.ones((5, 3)), time=0.0)


def test_gateway_errors_are_retried_for_reads_and_never_for_a_job_declaration():
    gateway = iter([502, 503, 502])

    def handle(request):
        if request.method == "POST":
            return httpx.Response(502, html="bad gateway")
        status = next(gateway, 200)
        return httpx.Response(status, html="restarting") if status != 200 else httpx.Response(200, json={"datasets": []})

    db, seen = answering(handle)
    assert db.datasets == []
    assert seen.count("GET /v1/datasets") == 4
    with pytest.raises(turbdb.ServiceError, match="HTTP 502"):
        db.job([("trig", "velocity", 0.0)])
    assert seen.count("POST /v1/jobs") == 1


def test_the_default_retries_outlast_a_server_restart():
    # A restart took 1–6.5 s; the retries used to give up after about 3.75 s.
    waits = sum(remote.DEFAULT_BACKOFF * 2**k for k in range(remote.DEFAULT_RETRIES))
    assert waits >= 15
    assert turbdb.connect("http://127.0.0.1:9").retries == remote.DEFAULT_RETRIES
    # A refused connection is tried again for longer than a server's longest graceful
    # shutdown and its start (1.5–7.5 s): 16 s gave up on a server that waited its 30 s for one
    # slow client, and calls made during the restart failed.
    from turbdb.service.server import GRACEFUL_SHUTDOWN_SECONDS, STRAGGLER_SECONDS

    assert remote.DEFAULT_RESTART_SECONDS >= GRACEFUL_SHUTDOWN_SECONDS + STRAGGLER_SECONDS + 10
    assert turbdb.connect("http://127.0.0.1:9").restart_seconds == remote.DEFAULT_RESTART_SECONDS


def test_a_refused_connection_is_tried_again_past_the_retries_until_the_server_is_back(server):
    real = httpx.HTTPTransport()
    back = time.monotonic() + 1.0
    tries = []

    def restarting(request):
        tries.append(request.url.path)
        if time.monotonic() < back:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return real.handle_request(request)

    with real, turbdb.connect(server.url, token=FULL, retries=2, backoff=0.01, restart_seconds=3,
                              transport=httpx.MockTransport(restarting)) as db:
        assert db.datasets == ["other", "trig"]  # refused for 1 s: past its 2 retries, within its 3 s
    assert len(tries) > 4
    started = time.monotonic()
    with turbdb.connect("http://127.0.0.1:9", retries=2, backoff=0.01, restart_seconds=1) as db, \
            pytest.raises(turbdb.ServiceError, match=r"could not connect .* attempts over \d+ s; is `turbdb serve`"):
        db.datasets  # noqa: B018
    assert 1 <= time.monotonic() - started < 5
    started = time.monotonic()
    with turbdb.connect("http://127.0.0.1:9", retries=0) as db, pytest.raises(turbdb.ServiceError, match="after 1 "):
        db.datasets  # noqa: B018
    assert time.monotonic() - started < 1  # retries=0: sent once


def test_only_a_refusal_is_waited_out_it_is_said_once_and_the_wait_can_be_set(monkeypatch, caplog):
    # A name that does not resolve is no restart: the review found it waited 45 s, silently.
    started = time.monotonic()
    with turbdb.connect("http://no-such-host.invalid:9", retries=1, backoff=0.01, restart_seconds=30) as db, \
            pytest.raises(turbdb.ServiceError, match="after 2 attempts"):
        db.datasets  # noqa: B018
    assert time.monotonic() - started < 10
    caplog.clear()
    monkeypatch.setenv("TURBDB_RESTART_SECONDS", "0.5")
    with caplog.at_level("WARNING", logger="turbdb.remote"), \
            turbdb.connect("http://127.0.0.1:9", retries=1, backoff=0.01) as db:
        assert db.restart_seconds == 0.5
        for _ in range(2):
            with pytest.raises(turbdb.ServiceError, match="could not connect"):
                db.datasets  # noqa: B018
    said = [r.getMessage() for r in caplog.records if r.name == "turbdb.remote"]
    assert len(said) == 1 and "trying again" in said[0] and "may be restarting" in said[0]
    monkeypatch.setenv("TURBDB_RESTART_SECONDS", "soon")
    with pytest.raises(turbdb.InvalidRequestError, match="TURBDB_RESTART_SECONDS is 'soon'"):
        turbdb.connect("http://127.0.0.1:9")


def test_an_https_address_of_a_plain_http_server_fails_at_once_saying_so(server):
    address = server.url.replace("http://", "https://")
    started = time.monotonic()
    with pytest.raises(turbdb.ServiceError, match=f"does not speak TLS.*connect to {server.url}"):
        turbdb.connect(address).datasets  # noqa: B018
    assert time.monotonic() - started < 3  # not retried


@pytest.mark.parametrize("arguments, words", [
    ({"retries": None}, "retries must be a whole number"),
    ({"retries": -1}, "retries must be a whole number"),
    ({"retries": 2.5}, "retries must be a whole number"),
    ({"backoff": -1}, "backoff must be a finite number of seconds, zero or more"),
    ({"restart_seconds": float("inf")}, "restart_seconds must be a finite number of seconds, zero or more"),
    ({"timeout": -1}, "timeout must be a finite number of seconds, more than zero"),
    ({"timeout": 0}, "timeout must be"),
    ({"timeout": float("nan")}, "timeout must be"),
    ({"concurrency": 0}, "concurrency must be a whole number of at least 1"),
    ({"progress": "yes"}, "progress is True, False or None"),
])
def test_connect_refuses_arguments_that_would_retry_forever_or_fail_later(arguments, words):
    with pytest.raises(turbdb.InvalidRequestError, match=words):
        turbdb.connect("http://127.0.0.1:9", **arguments)


def test_connect_takes_any_case_of_scheme_and_refuses_the_address_of_a_page(server):
    with turbdb.connect(server.url.replace("http://", "HTTP://") + " ", token=FULL) as db:
        assert db.url == server.url and db.datasets == ["other", "trig"]
    for page in ("/v1", "/docs/", "/v1/datasets", "/turbulence-svc"):
        with pytest.raises(turbdb.InvalidRequestError, match=f"page .* connect to {server.url}$"):
            turbdb.connect(server.url + page)
    # A path a proxy serves the server under is kept.
    assert turbdb.connect("https://example.org/turbdb/").url == "https://example.org/turbdb"
    with pytest.raises(turbdb.InvalidRequestError, match="add the scheme, http://127.0.0.1:8000"):
        turbdb.connect("127.0.0.1:8000")


def test_a_server_that_needs_a_token_says_so_when_the_client_asks_its_limits():
    closed = {**LIMITS, "allowed": False, "description": "this server needs a token: pass …", "max_points": 0}
    db = turbdb.connect("http://turbdb.test", transport=httpx.MockTransport(lambda r: httpx.Response(200, json=closed)))
    with pytest.raises(turbdb.AccessDeniedError, match="this server needs a token") as refused:
        db.datasets  # noqa: B018
    assert refused.value.status == 401


def test_a_gateway_timeout_is_not_sent_again():
    # 504: the query outlasted the gateway's wait; each of seven retries computed it again.
    db, seen = answering(lambda request: httpx.Response(504, html="gateway timeout"))
    with pytest.raises(turbdb.ServiceError, match="HTTP 504"):
        db.datasets
    assert seen.count("GET /v1/datasets") == 1


def test_a_proxy_prefix_that_contains_a_page_name_is_accepted():
    for url in ("https://gateway.example.org/api/v1/turbdb", "https://example.org/docs/turbdb-demo",
                "https://hub.example.org/metrics/turbdb"):
        assert turbdb.connect(url).url == url
    with pytest.raises(turbdb.InvalidRequestError):
        turbdb.connect("http://127.0.0.1:8000/v1/datasets")


def test_batches_waiting_when_the_call_ends_send_nothing_more():
    # Four requests reached the server after a Ctrl-C: threads waiting on the rate limit
    # woke up and sent theirs.
    import threading

    from turbdb import remote_batches

    sent = []
    release = threading.Event()

    def task(k):
        def run():
            if k == 0:
                raise turbdb.ServiceError("the first batch failed")
            release.wait(5)
            remote_batches.pause(0.01)  # the pacer's wait, woken by the stop
            sent.append(k)
            return k
        return run

    with pytest.raises(turbdb.ServiceError, match="first batch failed"):
        remote_batches.run([task(k) for k in range(4)], concurrency=4, progress=False, sizes=[1] * 4, unit="pt",
                           description="test")
    release.set()
    import time

    time.sleep(0.3)
    assert sent == []
