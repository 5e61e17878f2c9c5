"""The HTTP clients that a remote database spreads its threads over."""

import threading

import httpx
import pytest

import turbdb
from turbdb.http_clients import ClientStripes


def test_a_thread_keeps_its_client_and_threads_spread_over_several():
    stripes = ClientStripes(httpx.Client, stripes=8)
    mine = stripes.get()
    assert stripes.get() is mine
    seen: list[httpx.Client] = []
    lock = threading.Lock()
    start = threading.Barrier(32)

    def ask() -> None:
        start.wait()  # alive together: no thread id is reused
        client = stripes.get()
        assert stripes.get() is client
        with lock:
            seen.append(client)
        start.wait()

    threads = [threading.Thread(target=ask) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    distinct = {id(c) for c in seen}
    assert 4 <= len(distinct) <= 8, f"32 threads used {len(distinct)} of 8 clients"
    assert {id(c) for c in stripes.made()} == distinct | {id(mine)}
    stripes.close()
    assert all(c.is_closed for c in seen)
    with pytest.raises(turbdb.InvalidRequestError, match="closed"):
        stripes.get()


def test_made_clients_come_from_the_factory_once_per_stripe():
    made = []

    def make() -> httpx.Client:
        made.append(httpx.Client())
        return made[-1]

    stripes = ClientStripes(make, stripes=1)
    threads = [threading.Thread(target=stripes.get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and stripes.made() == made
    stripes.close()
