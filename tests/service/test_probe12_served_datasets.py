"""A real server over a database of many datasets, and of directories that are not plain
datasets (twelfth probe): its first `GET /v1/datasets` froze every answer, /healthz
included, for 20-47 s (N² zarr.json reads on the event loop); a 404 listed every dataset
(11 KB); a dataset deleted while served stayed mapped for good; one directory the server's
account may not enter kept it from starting; a directory named 'café' was listed, then
refused as "no dataset 'café'; available: café, …"."""

import shutil
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest

from servicekit import _running
from test_probe12_many_datasets import AS_READER, copies_of_one, needs_reader, out_of_reach

MANY = 200


@pytest.fixture(scope="module")
def many_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("served-many") / "db"
    copies_of_one(db, MANY)
    for odd in ("run 2", "café"):
        shutil.copytree(db / "case_000", db / odd)
    return db


def _serve(db: Path, log: Path, *prefix: str):
    return _running([*prefix, sys.executable, "-m", "turbdb.cli", "serve", str(db), "--port", "0", "--log-level",
                     "warning"], log)


def test_the_first_listing_of_many_datasets_leaves_the_server_answering(many_db, tmp_path):
    with _serve(many_db, tmp_path / "server.log") as server:
        slowest, done = [0.0], threading.Event()

        def health():
            with httpx.Client(base_url=server.url, timeout=60) as client:
                while not done.is_set():
                    started = time.perf_counter()
                    assert client.get("/healthz").status_code == 200
                    slowest[0] = max(slowest[0], time.perf_counter() - started)
                    time.sleep(0.01)

        watcher = threading.Thread(target=health)
        watcher.start()
        try:
            listed = httpx.get(server.url + "/v1/datasets", timeout=120)
        finally:
            done.set()
            watcher.join()
        assert listed.status_code == 200
        entries = {entry["name"]: entry for entry in listed.json()["datasets"]}
        assert len(entries) == MANY + 2
        assert entries["case_199"]["grid"] == [8, 8, 8]
        assert slowest[0] < 1.0, f"/healthz waited {slowest[0]:.1f} s behind the listing"

        # Named apart, as not served: the listing, the 404 and the "available:" list agree.
        for odd in ("café", "run 2"):
            assert entries[odd]["error"] == "UnknownNameError"
            assert entries[odd]["description"].startswith(f"directory name '{odd}' is not a valid dataset name")
            refused = httpx.get(f"{server.url}/v1/datasets/{urllib.parse.quote(odd)}", timeout=30)
            assert refused.status_code == 404
            assert refused.json()["description"] == entries[odd]["description"]

        unknown = httpx.get(server.url + "/v1/datasets/nope", timeout=30)
        assert unknown.status_code == 404
        message = unknown.json()["description"]
        assert f"and {MANY - 20} more ({MANY} in all: GET /v1/datasets lists them)" in message
        assert "café" not in message and len(unknown.content) < 1000


def _deleted_mappings(pid: int, under: Path) -> int:
    return sum(str(under) in line and "(deleted)" in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the server's mappings from /proc")
@pytest.mark.parametrize("page", ["/turbulence-svc/metadata", "/"])
def test_the_jhtdb_metadata_and_home_page_list_off_the_event_loop(tmp_path, page):
    # Both listed the datasets (the metadata document opening every one) on the event loop,
    # every other answer waiting behind them. A listing held up shows it: /healthz answers
    # while it is, at once, instead of after it.
    import asyncio

    from turbdb.service.app import create_app

    copies_of_one(tmp_path / "db", 3)
    app = create_app(tmp_path / "db")
    backend, release = app.state.backend, threading.Event()
    names = backend.names
    backend.names = lambda: (release.wait(5), names())[1]

    async def exchange():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            listing = asyncio.ensure_future(client.get(page, headers={"Accept": "application/json"}))
            started = time.perf_counter()  # before the loop runs the listing: it may hold the loop
            await asyncio.sleep(0.2)
            health = await client.get("/healthz")
            waited = time.perf_counter() - started
            release.set()
            return await listing, health, waited

    try:
        listed, health, waited = asyncio.run(exchange())
    finally:
        app.state.backend.close()
    assert health.status_code == 200 and listed.status_code == 200
    assert len(listed.json()["datasets"]) == 3
    assert waited < 2.5, f"/healthz waited {waited:.1f} s behind {page}"


def test_a_dataset_deleted_while_served_is_unmapped_once_found_gone(tmp_path):
    db = tmp_path / "db"
    copies_of_one(db, 3)
    with _serve(db, tmp_path / "server.log") as server:
        def query(name: str) -> int:
            return httpx.post(f"{server.url}/v1/datasets/{name}/query", params={"field": "velocity", "time": 0},
                              json={"points": [[0.1, 0.2, 0.3]]}, timeout=30).status_code

        assert [query(n) for n in ("case_000", "case_001", "case_002")] == [200] * 3
        shutil.rmtree(db / "case_001")
        assert _deleted_mappings(server.process.pid, db / "case_001") > 0
        assert query("case_001") == 404
        assert _deleted_mappings(server.process.pid, db / "case_001") == 0  # its space is freed
        assert query("case_002") == 200


@needs_reader
def test_a_dataset_directory_the_server_may_not_enter_is_named_and_the_rest_served(tmp_path):
    db = tmp_path / "db"
    copies_of_one(db, 3)
    out_of_reach(db / "case_001")
    try:
        with _serve(db, tmp_path / "server.log", *AS_READER) as server:
            listed = httpx.get(server.url + "/v1/datasets", timeout=30)
            home = httpx.get(server.url + "/", timeout=30)
            served = httpx.get(server.url + "/v1/datasets/case_002", timeout=30)
            unreadable = httpx.get(server.url + "/v1/datasets/case_001", timeout=30)
    finally:
        (db / "case_001").chmod(0o755)
    assert listed.status_code == 200 and home.status_code == 200 and served.status_code == 200
    entries = {entry["name"]: entry for entry in listed.json()["datasets"]}
    assert entries["case_000"]["grid"] == [8, 8, 8]
    assert "permission denied" in entries["case_001"]["description"]
    assert "ask its owner" in entries["case_001"]["description"]
    assert "permission denied" in unreadable.json()["description"]
    assert home.json()["datasets"] == ["case_000", "case_001", "case_002"]
