"""The shared-memory hand-off between the mediator and workers on its machine, on real
files in /dev/shm: arrays come back as they went, files are reused only when no worker can
write into them any more, nothing is left behind when a query ends, and a worker never
creates a file its query already removed."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from turbdb.cluster import handoff
from turbdb.cluster.handoff import Exchange, Pool, SharedArray, write_into

pytestmark = pytest.mark.skipif(not handoff.SHARED_DIR.is_dir(), reason="no /dev/shm on this machine")


def _ours() -> set[str]:
    return {p.name for p in handoff.SHARED_DIR.glob(f"{handoff.PREFIX}{socket.gethostname()}-{os.getpid()}-*")}


@pytest.fixture()
def pool():
    pool = Pool()
    yield pool
    pool.close()
    assert not _ours()


def test_points_and_answers_cross_unchanged(pool):
    exchange = Exchange(pool)
    points = np.random.default_rng(0).uniform(0, 6.3, (100_000, 3))
    shared = exchange.points(1, points)
    np.testing.assert_array_equal(shared.load(), points)
    assert exchange.points(1, points) is shared  # a retry reads the same file
    answer = np.random.default_rng(1).normal(size=(100_000, 3)).astype(np.float32)
    written = write_into(exchange.answer_file(answer.nbytes), answer)
    got = exchange.take(written)
    np.testing.assert_array_equal(got, answer)
    exchange.close()
    del got


def test_an_answer_is_a_view_of_its_file_until_the_last_array_goes(pool):
    nbytes = 2 << 20
    exchange = Exchange(pool)
    path = exchange.answer_file(nbytes)
    answer = np.arange(nbytes // 8, dtype=np.float64)
    got = exchange.take(write_into(path, answer))
    assert not got.flags.owndata  # no copy: the caller reads the file
    part = got[10:20].reshape(2, 5)  # views of the answer keep its file out of the pool
    del got
    exchange.close()
    assert pool.kept() == []
    again = Exchange(pool)
    other = again.answer_file(nbytes)
    assert other != path  # still looked into: a new file, not this one
    part[0, 0] = -1.0  # the caller's to write
    np.testing.assert_array_equal(part.ravel()[1:], answer[11:20])
    del part  # the last view: the file goes back to the pool
    assert [str(p) for p in pool.kept()] == [path]
    assert again.answer_file(nbytes) == path
    again.close()


def test_an_answer_held_past_the_pools_close_removes_its_file(pool):
    exchange = Exchange(pool)
    path = exchange.answer_file(1 << 20)
    got = exchange.take(write_into(path, np.ones((1 << 20) // 8)))
    exchange.close()
    pool.close()  # the database closed while the caller still holds its answer
    assert os.path.exists(path) and got.sum() == (1 << 20) // 8
    del got
    assert not os.path.exists(path)


def test_small_arrays_ride_in_the_task(pool):
    assert Exchange(pool).points(1, np.zeros((1000, 3))) is None


def test_files_are_reused_only_once_no_worker_writes_into_them(pool):
    nbytes = 2 << 20
    answer = np.ones(nbytes // 8)
    exchange = Exchange(pool)
    read_back = exchange.answer_file(nbytes)
    left_running = exchange.answer_file(nbytes)  # a task whose answer was never fetched
    exchange.take(write_into(read_back, answer))
    exchange.close()
    assert not os.path.exists(left_running)
    again = Exchange(pool)
    assert again.answer_file(nbytes) == read_back  # from the pool
    assert again.answer_file(nbytes) != left_running
    again.close()


def test_the_pool_keeps_a_bounded_number_of_bytes(pool, monkeypatch):
    monkeypatch.setattr(handoff, "KEEP_BYTES", 4 << 20)
    exchange = Exchange(pool)
    for key in range(4):
        exchange.points(key, np.zeros((1 << 20) // 8))  # ≥ MIN_BYTES
    exchange.close()
    assert len(_ours()) == 4  # 1 MiB each, all four kept
    exchange = Exchange(pool)
    for key in range(4):
        exchange.points(key, np.zeros((3 << 20) // 8))  # 4 MiB capacity each: none fits any more
    exchange.close()
    assert sum(os.path.getsize(handoff.SHARED_DIR / name) for name in _ours()) <= 4 << 20


def test_a_worker_does_not_recreate_a_file_its_query_removed(tmp_path):
    gone = tmp_path / "answer"
    assert write_into(str(gone), np.ones(4)) is None
    assert not gone.exists()


def test_an_answer_file_not_handed_out_by_the_query_is_refused(pool, tmp_path):
    stranger = SharedArray(str(tmp_path / "answer"), "<f8", (4,))
    with pytest.raises(RuntimeError, match="not an answer file this query handed out"):
        Exchange(pool).take(stranger)


def test_files_of_a_mediator_killed_outright_are_removed_by_the_next(tmp_path):
    # A process that makes a pool file and dies without cleaning up.
    code = ("import numpy as np, os; from turbdb.cluster.handoff import Exchange, Pool; "
            "Exchange(Pool()).points(0, np.zeros(1 << 18)); print(os.getpid(), flush=True); os._exit(0)")
    pid = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    orphans = list(handoff.SHARED_DIR.glob(f"{handoff.PREFIX}{socket.gethostname()}-{pid}-*"))
    assert orphans
    handoff._remove_orphans()
    assert not any(p.exists() for p in orphans)


def _file(tmp_path, name: str, nbytes: int) -> str:
    path = tmp_path / name
    path.write_bytes(bytes(nbytes))
    return str(path)


def test_a_worker_maps_a_live_file_once(tmp_path):
    mappings = handoff.Mappings()
    path = _file(tmp_path, "a", 1 << 16)
    first = mappings.view(path, "<f8", (100,))
    first[:] = 7.0
    again = mappings.view(path, "<f4", (10,))
    assert np.shares_memory(first, again)  # the same mapping, not a new one
    shared = SharedArray(path, "<f8", (100,))
    np.testing.assert_array_equal(shared.load(), np.full(100, 7.0))
    assert not shared.load().flags.writeable  # points are the mediator's


def test_a_worker_drops_the_mapping_of_a_removed_or_replaced_file(tmp_path):
    mappings = handoff.Mappings()
    removed, replaced, other = (_file(tmp_path, n, 1 << 16) for n in ("removed", "replaced", "other"))
    old = mappings.view(replaced, "<f8", (4,))
    mappings.view(removed, "<f8", (4,))
    os.unlink(removed)
    os.unlink(replaced)
    _file(tmp_path, "replaced", 1 << 16)
    mappings.view(other, "<f8", (4,))  # any use sweeps
    assert mappings.mapped() == [other]
    assert not np.shares_memory(old, mappings.view(replaced, "<f8", (4,)))
    assert mappings.view(removed, "<f8", (4,)) is None
    assert not os.path.exists(removed)


def test_a_worker_keeps_a_bounded_number_of_bytes_mapped(tmp_path):
    mappings = handoff.Mappings(keep_bytes=3 << 16)
    paths = [_file(tmp_path, str(i), 1 << 16) for i in range(5)]
    for path in paths:
        mappings.view(path, "<f8", (4,))
    mappings.view(paths[2], "<f8", (4,))  # used again: the most recent
    assert mappings.mapped() == [paths[3], paths[4], paths[2]]
    assert mappings.view(paths[0], "<f8", (1 << 13,)) is not None  # unmapped, mapped again on use
    assert mappings.view(paths[0], "<f8", (1 << 14,)) is None  # larger than its file
