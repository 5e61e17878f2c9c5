"""A client that goes away stops its query's evaluation even once it has started: without a
node engine (each query alone) and with one that serves a large query alone, at once, in
the submitting thread. Both ran to their end (a probe: 1.6–2.3 s of server CPU after a
3·10⁶-point client left), logged 200. Driven at the ASGI level: the client leaves as soon
as its body is sent, and the query answers 499 instead of its values."""

import asyncio
import json
import logging
import re

import numpy as np
import pytest

from turbdb.service.app import create_app

from servicekit import FULL, Exchange, npy_body

QUERY = "/v1/datasets/trig/query"


@pytest.mark.parametrize("engine", [None, {"scheduler": "jaws"}], ids=["no engine", "served alone by jaws"])
def test_a_query_whose_client_left_is_stopped_not_finished(service_db, tokens_file, engine, caplog):
    app = create_app(service_db, tokens_file, engine=engine)
    points = np.random.default_rng(0).uniform(0, 6, (300_000, 3))  # alone on an idle engine: ≥ 16 384

    async def ask_and_leave():
        exchange = Exchange(app, QUERY, "field=velocity&time=0&method=lag8&operator=hessian", npy_body(points),
                            "application/x-npy", leaves=True)
        exchange.scope["headers"].append((b"authorization", f"Bearer {FULL}".encode()))
        await asyncio.wait_for(exchange.run(), 120)
        return exchange

    with caplog.at_level("INFO", logger="turbdb.access"):
        left = asyncio.run(ask_and_leave())
    assert left.status == 499, left.answer[:300]
    # Logged (uvicorn writes no line for an answer it cannot send), its status named, no trailing space.
    lines = [r.getMessage() for r in caplog.records if r.name == "turbdb.access"]
    assert len(lines) == 1 and lines[0].startswith(
        f'127.0.0.1:5000 - "POST {QUERY}?field=velocity&time=0&method=lag8&operator=hessian HTTP/1.1" 499 Client '
        'Closed Request '), lines
    assert re.fullmatch(r'.*" 499 Client Closed Request \d+ B \d+\.\d{3} s', lines[0]), lines
    assert app.state.backend.limiter.used == 0
    if engine is not None:  # a client gone is a cancelled query, not a failed one
        stats = app.state.backend.database.engine.stats()
        assert (stats["cancelled"], stats["failed"]) == (1, 0)


def test_a_request_cancelled_by_the_shutdown_is_one_503_line_not_a_500_and_a_traceback(service_db, tokens_file,
                                                                                      caplog):
    # uvicorn cancels what still runs past its graceful time (and everything on a second
    # Ctrl-C): a request still reading its body was logged as a 500 with ~70 lines of
    # traceback ("CancelledError: Task cancelled, timeout graceful shutdown exceeded") and
    # counted as a 500.
    app = create_app(service_db, tokens_file)
    exchange = Exchange(app, QUERY, "field=velocity&time=0", b"", "application/json")
    exchange.scope["headers"] = [(k, b"1000" if k == b"content-length" else v) for k, v in exchange.scope["headers"]]
    pieces = [{"type": "http.request", "body": b'{"points": [', "more_body": True}]

    async def trickle():  # the body's first bytes, then nothing more
        if pieces:
            return pieces.pop()
        await asyncio.sleep(3600)

    async def cancelled_at_the_graceful_limit():
        task = asyncio.create_task(app(exchange.scope, trickle, exchange.send))
        await asyncio.sleep(0.3)
        task.cancel("Task cancelled, timeout graceful shutdown exceeded")
        await task

    with caplog.at_level("INFO"):
        asyncio.run(cancelled_at_the_graceful_limit())
    assert exchange.status == 503 and "shutting down" in json.loads(exchange.answer)["description"]
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.name, r.levelname) for r in problems] == [("turbdb.service", "WARNING")], caplog.text
    assert not any(r.exc_info for r in caplog.records) and "cancelled" in problems[0].getMessage()
    assert ('turbdb_requests_total{endpoint="/v1/datasets/{name}/query",status="503"} 1.0'
            in app.state.backend.metrics.render().decode())
