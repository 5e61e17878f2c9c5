"""Point queries awaited on an event loop through the engine's completion queue (the
server's path): many at once on one loop with the lone answers, one that the engine
served before it was awaited, large ones handed over in a thread, and one whose client
goes away, which the engine then drops."""

import asyncio
import gc
import threading
import time

import numpy as np
import pytest

import turbdb
from turbdb import _core
from turbdb.exceptions import QueryCancelledError
from turbdb.query import point_call
from turbdb.service import engine_waits
from turbdb.service.engine_waits import EngineWaits, watch


class Connected:
    """A request whose client stays until ``leave`` is set (only ``receive`` is used)."""

    def __init__(self):
        self.leave = asyncio.Event()

    async def receive(self):
        await self.leave.wait()
        return {"type": "http.disconnect"}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("waits")
    ds = turbdb.create_dataset(path, "box", grid=(32, 32, 32), times=[0.0, 0.1], fields={"velocity": 3},
                               atom=8, partition=16)
    rng = np.random.default_rng(11)
    for t in range(2):
        ds.write("velocity", t, rng.standard_normal((32, 32, 32, 3), dtype=np.float32))
    yield path
    gc.collect()


def asks(count, seed):
    rng = np.random.default_rng(seed)
    return [dict(points=rng.uniform(0.5, 2.5, (int(rng.integers(1, 300)), 3)), time=float(rng.choice([0.0, 0.1])),
                 method=["lag4", "lag8", "fd4lag4"][i % 3], operator=["field", "gradient", "laplacian"][i % 3])
            for i in range(count)]


def test_queries_awaited_together_on_one_loop_get_the_lone_answers(database, monkeypatch):
    db = turbdb.open(database, scheduler="jaws", cache_bytes=1 << 20, io="direct")
    lone = turbdb.open(database)["box"]
    work = asks(40, seed=2)
    # Half of them large enough to be handed to the engine, and answered, in a thread.
    monkeypatch.setattr(engine_waits, "INLINE_POINTS", 150)
    waits = EngineWaits(db.engine)

    async def main():
        ds = db["box"]
        calls = [point_call(ds, "velocity", dtype=np.float64, **ask) for ask in work]
        async with watch(Connected()) as gone:  # one listener for all of a request's queries
            return await asyncio.gather(*(waits.query(ds, call, gone) for call in calls))

    answers = asyncio.run(main())
    for answer, ask in zip(answers, work):
        np.testing.assert_allclose(answer, lone.query("velocity", dtype=np.float64, **ask), rtol=1e-6, atol=1e-6)


def test_a_query_the_engine_served_before_it_was_awaited_is_answered(database):
    db = turbdb.open(database, scheduler="jaws", cache_bytes=8 << 20, io="direct")
    ds = db["box"]
    ask = dict(points=np.array([[1.0, 1.1, 1.2]]), time=0.1, method="lag6")
    expected = turbdb.open(database)["box"].query("velocity", **ask)
    ds.query("velocity", **ask)  # its atoms are cached now: the next one is served at submission
    waits = EngineWaits(db.engine)
    served = db.engine_stats()["served_from_cache"]

    async def main():
        async with watch(Connected()) as gone:
            return await asyncio.wait_for(waits.query(ds, point_call(ds, "velocity", **ask), gone), 30)

    np.testing.assert_allclose(asyncio.run(main()), expected, rtol=1e-6)
    assert db.engine_stats()["served_from_cache"] == served + 1


def test_a_client_that_goes_away_cancels_its_query_in_the_engine(database):
    db = turbdb.open(database, scheduler="jaws", cache_bytes=0, io="direct")
    ds = db["box"]
    # Two jobs over the same step: the first one's query waits at its gate for the second's,
    # which never comes, so it is still pending when its client leaves.
    first = db.job([("box", "velocity", 0.1, "none")] * 2)
    db.job([("box", "velocity", 0.1, "none")] * 2)
    waits = EngineWaits(db.engine)
    before = db.engine_stats()["cancelled"]

    async def main():
        request = Connected()
        call = point_call(ds, "velocity", np.full((5_000, 3), 1.5), time=0.1, method="lag8", job=first)
        async with watch(request) as gone:
            query = asyncio.ensure_future(waits.query(ds, call, gone))
            await asyncio.sleep(0.05)
            assert not query.done()
            request.leave.set()
            with pytest.raises(QueryCancelledError, match="went away"):
                await asyncio.wait_for(query, 30)

    asyncio.run(main())
    # The cancel reaches the engine through its inbox: its thread counts it when it next
    # wakes, which on a busy machine can come after the client has its error.
    deadline = time.monotonic() + 10
    while True:
        stats = db.engine_stats()
        if (stats["cancelled"], stats["pending"]) == (before + 1, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert stats["cancelled"] == before + 1 and stats["pending"] == 0


def test_the_completion_queue_reports_ids_and_closes(database):
    queue = _core.CompletionQueue()
    assert queue.wait(0.01) == []
    with pytest.raises(turbdb.InvalidRequestError, match="timeout"):
        queue.wait(-1.0)
    db = turbdb.open(database, scheduler="jaws", cache_bytes=0, io="direct")
    ds = db["box"]
    pending = [point_call(ds, "velocity", **ask).submit(db.engine, notify=queue) for ask in asks(5, seed=3)]
    reported: list[int] = []
    deadline = time.monotonic() + 30
    while len(reported) < len(pending) and time.monotonic() < deadline:
        reported += queue.wait(1.0)
    assert sorted(reported) == sorted(p.id for p in pending)  # each query once, when it ended
    assert all(p.done for p in pending)
    queue.close()
    assert queue.wait(1.0) is None


def test_one_thread_per_engine_calls_back_once_and_survives_a_callback_that_fails(database):
    from turbdb import engine_completions

    db = turbdb.open(database, scheduler="jaws", cache_bytes=0, io="direct")
    ds = db["box"]
    completions = engine_completions.of(db.engine)
    assert engine_completions.of(db.engine) is completions  # shared by the server and Dataset.submit
    calls = []
    ended, entered, go_on = threading.Event(), threading.Event(), threading.Event()

    def broken(pending):
        calls.append(pending.id)
        entered.set()
        go_on.wait(30)  # holds the waiting thread until the next query is forgotten
        raise RuntimeError("a waiter's bug")

    work = asks(6, seed=9)
    first = completions.submit(point_call(ds, "velocity", **work[0]), broken)
    assert entered.wait(30)
    # Forgotten before it can be called back: the waiting thread is held in `broken`, and
    # the query is large enough (2 × 10⁵ points) not to have ended when `submit` looks.
    big = dict(work[1], points=np.random.default_rng(1).uniform(0.5, 2.5, (200_000, 3)))
    forgotten = completions.submit(point_call(ds, "velocity", **big), lambda p: calls.append("forgotten"))
    completions.forget(forgotten.id)
    go_on.set()
    last = completions.submit(point_call(ds, "velocity", **work[2]), lambda p: ended.set())
    assert ended.wait(30), "the waiting thread stopped after a callback raised"
    for pending in (first, forgotten, last):
        assert pending.wait(30)
    time.sleep(0.05)
    assert calls == [first.id]
