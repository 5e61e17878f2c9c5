"""A request whose points are in its body waits for its admission before the body is read:
read first, the bodies of waiting requests were memory outside the points-in-flight budget
(16 waiting 10⁶-point queries took 700 MB against a budget of one). Driven at the ASGI
level, so that the test sees when the server asks for the body."""

import asyncio
import io
import json
import time

import numpy as np
import pytest

from turbdb.service.app import create_app

from servicekit import Exchange, npy_body

QUERY = "/v1/datasets/trig/query"


@pytest.fixture
def app(service_db):
    return create_app(service_db, max_points_in_flight=1000, queue_timeout=0.6)


def test_a_waiting_query_leaves_its_body_unread_until_it_is_admitted(app):
    points = np.random.default_rng(0).uniform(0, 6, (500, 3))
    limiter = app.state.backend.limiter

    async def scenario():
        held = limiter.admission(1000)  # another request holds the whole budget
        await held.acquire()
        exchange = Exchange(app, QUERY, "field=velocity&time=0&method=lag4", npy_body(points), "application/x-npy")
        task = asyncio.ensure_future(exchange.run())
        await asyncio.sleep(0.3)
        unread_while_waiting = exchange.first_read is None and len(limiter._queue) == 1
        held.release()
        await asyncio.wait_for(task, 30)
        return exchange, unread_while_waiting

    exchange, unread_while_waiting = asyncio.run(scenario())
    assert unread_while_waiting
    assert exchange.status == 200 and exchange.sent == len(exchange.body)
    assert np.load(io.BytesIO(exchange.answer)).shape == (500, 3)
    assert limiter.used == 0


def test_one_that_waits_too_long_gets_503_after_its_body_is_read_and_dropped(app):
    limiter = app.state.backend.limiter
    body = json.dumps({"points": np.random.default_rng(1).uniform(0, 6, (800, 3)).tolist()}).encode()

    async def scenario():
        held = limiter.admission(1000)
        await held.acquire()
        exchange = Exchange(app, QUERY, "field=velocity&time=0", body, "application/json")
        await asyncio.wait_for(exchange.run(), 30)
        held.release()
        return exchange

    exchange = asyncio.run(scenario())
    # The whole body was taken (a client still sending sees a broken connection, not the 503).
    assert exchange.status == 503 and exchange.sent == len(body)
    assert "at capacity" in json.loads(exchange.answer)["description"]
    assert limiter.used == 0 and not limiter._queue


def test_an_admission_resized_to_the_points_read_lets_the_next_request_in(app):
    limiter = app.state.backend.limiter

    async def scenario():
        first = limiter.admission(900)  # the estimate before the body
        await first.acquire()
        second = asyncio.ensure_future(limiter._acquire(500))
        await asyncio.sleep(0.05)
        waiting = not second.done()
        first.resize(400)  # what the body held
        await asyncio.wait_for(second, 1)
        used = limiter.used
        first.release()
        limiter._release(500)
        return waiting, used

    waiting, used = asyncio.run(scenario())
    assert waiting and used == 900 and limiter.used == 0


@pytest.mark.parametrize("headers, status", [
    ({"content-type": "text/plain"}, 415),
    ({"content-length": str(10 ** 9)}, 413),  # more than the anonymous 4 096 points can take
], ids=["wrong type", "too long"])
def test_what_the_headers_refuse_is_answered_without_waiting_for_admission(app, headers, status):
    limiter = app.state.backend.limiter

    async def scenario():
        held = limiter.admission(1000)
        await held.acquire()
        exchange = Exchange(app, QUERY, "field=velocity&time=0", b'{"points": [[1, 2, 3]]}', "application/json")
        exchange.scope["headers"] = [(k, v) for k, v in exchange.scope["headers"]
                                     if k.decode() not in headers] + [(k.encode(), v.encode()) for k, v in headers.items()]
        start = time.monotonic()
        await asyncio.wait_for(exchange.run(), 30)
        held.release()
        return exchange, time.monotonic() - start

    exchange, took = asyncio.run(scenario())
    assert exchange.status == status and took < 0.5  # the queue timeout is 0.6 s


def test_a_chunked_body_waits_as_a_small_one_and_is_resized_once_read(service_db):
    app = create_app(service_db, max_points_in_flight=100_000, queue_timeout=0.6)
    limiter = app.state.backend.limiter
    body = json.dumps({"points": [[1, 2, 3]] * 10}).encode()

    async def scenario():
        held = limiter.admission(98_000)  # 2 000 left: less than the anonymous 4 096 points
        await held.acquire()
        exchange = Exchange(app, QUERY, "field=velocity&time=0", body, "application/json")
        exchange.scope["headers"] = [(k, v) for k, v in exchange.scope["headers"] if k != b"content-length"]
        await asyncio.wait_for(exchange.run(), 30)
        held.release()
        return exchange

    exchange = asyncio.run(scenario())
    assert exchange.status == 200 and limiter.used == 0
