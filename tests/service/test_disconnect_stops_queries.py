"""A client that goes away stops its query's evaluation even once it has started: without a
node engine (each query alone) and with one that serves a large query alone, at once, in
the submitting thread. Both ran to their end (a probe: 1.6–2.3 s of server CPU after a
3·10⁶-point client left), logged 200. Driven at the ASGI level: the client leaves as soon
as its body is sent, and the query answers 499 instead of its values."""

import asyncio

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

    with caplog.at_level("INFO", logger="uvicorn.access"):
        left = asyncio.run(ask_and_leave())
    assert left.status == 499, left.answer[:300]
    # Logged, as uvicorn would (it writes no line for an answer it cannot send).
    assert [r.args[1:] for r in caplog.records if r.name == "uvicorn.access"] == [
        ("POST", f"{QUERY}?field=velocity&time=0&method=lag8&operator=hessian", "1.1", 499)]
    assert app.state.backend.limiter.used == 0
    if engine is not None:  # a client gone is a cancelled query, not a failed one
        stats = app.state.backend.database.engine.stats()
        assert (stats["cancelled"], stats["failed"]) == (1, 0)
