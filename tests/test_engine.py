"""The node engine from Python: ``turbdb.open(path, scheduler=...)`` gives every thread (and
every open of the database with the same options) one shared engine whose answers equal
lone queries, whose co-scheduled queries share reads,
and whose bad options are refused with a message."""

import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import turbdb

SCHEDULERS = ("noshare", "liferaft", "jaws")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """A 64³ random field (4 steps) with atoms of 8³ in shards of 32³."""
    path = tmp_path_factory.mktemp("engine")
    times = [0.0, 0.1, 0.2, 0.3]
    ds = turbdb.create_dataset(path, "box", grid=(64, 64, 64), times=times, fields={"velocity": 3},
                               atom=8, partition=32)
    rng = np.random.default_rng(7)
    for t in range(len(times)):
        ds.write("velocity", t, rng.standard_normal((64, 64, 64, 3), dtype=np.float32))
    return path


@pytest.fixture(autouse=True)
def fresh_engines():
    """Opens with the same options share a live engine: collect each test's engines after
    it, so that a reference cycle cannot carry one (and its counters) into the next test."""
    yield
    gc.collect()


def asks(count, seed):
    """Queries of a shared region of interest: clustered points, mixed methods and times."""
    rng = np.random.default_rng(seed)
    kinds = [("lag4", "field", "none"), ("lag8", "gradient", "pchip"), ("fd4lag4", "laplacian", "none"),
             ("m2q8", "hessian", "pchip"), ("none", "field", "none")]
    out = []
    for i in range(count):
        method, operator, temporal = kinds[i % len(kinds)]
        points = rng.uniform(1.0, 2.0, (int(rng.integers(1, 400)), 3))
        out.append(dict(points=points, time=float(rng.uniform(0.0, 0.3)), method=method, operator=operator,
                        temporal=temporal))
    return out


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_threads_querying_through_one_engine_get_the_lone_answers(database, scheduler):
    lone = turbdb.open(database)["box"]
    shared = turbdb.open(database, scheduler=scheduler, cache_bytes=2 << 20, cache_policy="slru")
    work = asks(24, seed=1)
    answers: dict[int, np.ndarray] = {}

    def client(indices):
        ds = shared["box"]
        for i in indices:
            answers[i] = ds.query("velocity", dtype=np.float64, **work[i])

    threads = [threading.Thread(target=client, args=(range(k, len(work), 6),)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, ask in enumerate(work):
        expected = lone.query("velocity", dtype=np.float64, **ask)
        np.testing.assert_allclose(answers[i], expected, rtol=1e-9, atol=1e-9)
    stats = shared.engine_stats()
    assert stats["completed"] == len(work) and stats["pending"] == 0
    assert stats["scheduler"] == scheduler and stats["cache_bytes"] <= 2 << 20


def test_float32_answers_through_the_engine_are_the_lone_float32_answers(database):
    # A float32 answer lets the engine sum a field's rows in float32, as a lone query does:
    # both are within float32 rounding of the float64 answer, dense points and sparse ones.
    rng = np.random.default_rng(3)
    lone = turbdb.open(database)["box"]
    ds = turbdb.open(database, scheduler="jaws", cache_bytes=4 << 20)["box"]
    for method, operator in [("lag4", "field"), ("lag6", "field"), ("lag8", "field"), ("lag6", "gradient"),
                             ("lag8", "gradient")]:
        for points in (rng.uniform(1.0, 1.5, (3000, 3)), rng.uniform(0.0, 2 * np.pi, (200, 3))):
            got = ds.query("velocity", points, time=0.1, method=method, operator=operator)
            exact = lone.query("velocity", points, time=0.1, method=method, operator=operator, dtype=np.float64)
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, exact, rtol=0, atol=1e-6 * np.abs(exact).max())
            np.testing.assert_allclose(got, lone.query("velocity", points, time=0.1, method=method,
                                                       operator=operator), rtol=0, atol=1e-6 * np.abs(exact).max())


def test_pchip_answers_through_the_engine_are_the_lone_answers_to_float32_rounding(database):
    # What docs/queries.md says: the engine sums each time level apart (atom by atom) and
    # blends the sums; the lone executor blends a float32 block of the levels' values first.
    # Both are within float32 rounding of the float64 answer, so of each other.
    points = np.random.default_rng(4).uniform(0.0, 2 * np.pi, (2000, 3))
    lone = turbdb.open(database)["box"]
    ds = turbdb.open(database, scheduler="jaws", cache_bytes=4 << 20)["box"]
    times = lone.info.times
    for method in ("lag4", "lag8"):
        between = dict(time=times[1] + 0.37 * (times[2] - times[1]), method=method, temporal="pchip")
        exact = lone.query("velocity", points, dtype=np.float64, **between)
        for got in (ds.query("velocity", points, **between), lone.query("velocity", points, **between)):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, exact, rtol=0, atol=1e-6 * np.abs(exact).max())


def test_concurrent_queries_share_reads_under_jaws_where_noshare_rereads(database):
    work = asks(16, seed=2)
    runs = []
    # jaws usually reads 220–390 atoms here against noshare's 1 012; once in a full suite
    # on a busy machine it read 512 (threads that reach the engine late find it has read
    # alone for those that came first), so a run may be repeated, twice at most.
    for attempt in range(3):
        read = {}
        for scheduler in ("noshare", "jaws"):
            ds = turbdb.open(database, scheduler=scheduler, cache_bytes=0, io="direct")["box"]
            # Every thread asks at once: started one by one, a thread could find the engine
            # idle (its predecessors served) on a loaded machine, with nothing to share.
            ready = threading.Barrier(len(work))

            def ask_when_all_ready(ask):
                ready.wait()
                ds.query("velocity", **ask)

            threads = [threading.Thread(target=ask_when_all_ready, args=(ask,)) for ask in work]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            read[scheduler] = ds.engine.stats()["atoms_read"]
        runs.append(read)
        if 2 * read["jaws"] <= read["noshare"]:
            break
    assert 2 * read["jaws"] <= read["noshare"], runs


def test_queries_submitted_from_one_thread_run_through_the_engine_with_the_lone_answers(database):
    db = turbdb.open(database, scheduler="jaws", cache_bytes=0, io="direct")
    alone = turbdb.open(database)["box"]
    work = asks(16, seed=6)
    before = db.engine_stats()["completed"]  # the engine may be shared with an earlier open
    futures = [db["box"].submit("velocity", **ask) for ask in work]
    for future, ask in zip(futures, work):
        np.testing.assert_allclose(future.result(timeout=120), alone.query("velocity", **ask), rtol=1e-6, atol=1e-6)
    assert db.engine_stats()["completed"] - before == len(work)
    bad = db["box"].submit("velocity", np.array([[np.nan, 0.0, 0.0]]), time=0.0)
    with pytest.raises(turbdb.InvalidRequestError, match="not finite|NaN|nan"):
        bad.result(timeout=60)


def test_small_queries_in_one_region_are_summed_from_shared_blocks_with_the_lone_answers(database):
    # Each query has a dozen points in a region of two atoms: too few for a block of its
    # own, enough with the others. Asked at once, they wait together and share batches.
    lone = turbdb.open(database)["box"]
    rng = np.random.default_rng(3)
    work = [rng.uniform(1.2, 1.6, (12, 3)) for _ in range(24)]
    for attempt in range(3):
        db = turbdb.open(database, scheduler="jaws", cache_bytes=0, io="direct")
        ds = db["box"]
        ready = threading.Barrier(len(work))
        answers = {}

        def ask(i):
            ready.wait()
            answers[i] = ds.query("velocity", work[i], time=0.1, method="lag8", dtype=np.float64)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(work))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, points in enumerate(work):
            expected = lone.query("velocity", points, time=0.1, method="lag8", dtype=np.float64)
            np.testing.assert_allclose(answers[i], expected, rtol=1e-9, atol=1e-9)
        stats = db.engine_stats()
        assert stats["block_points_shared"] <= stats["block_points"]
        if stats["block_points_shared"] > 0:
            break
    else:
        pytest.fail(f"no block served two queries in three bursts of {len(work)}: {stats}")


def test_a_warm_cache_answers_a_repeated_query_without_reading(database):
    db = turbdb.open(database, cache_policy="lru")
    ds = db["box"]
    ask = asks(1, seed=3)[0]
    first = ds.query("velocity", **ask)
    read = db.engine_stats()["atoms_read"]
    again = ds.query("velocity", **ask)
    np.testing.assert_array_equal(first, again)
    stats = db.engine_stats()
    assert stats["atoms_read"] == read
    assert ds.last_query_stats["cache_hits"] == ds.last_query_stats["atoms"] > 0
    # Served at submission from the cache, without a batch, and counted like any query.
    assert ds.last_query_stats["batches"] == 0
    assert stats["served_from_cache"] == 1 and stats["completed"] == 2


def test_a_large_query_on_an_idle_engine_runs_alone_with_the_lone_answer(database):
    points = np.random.default_rng(5).uniform(0.0, 2 * np.pi, (20_000, 3))
    db = turbdb.open(database, scheduler="jaws")
    ds = db["box"]
    got = ds.query("velocity", points, time=0.15, method="lag8", temporal="pchip", dtype=np.float64)
    alone = turbdb.open(database)["box"].query("velocity", points, time=0.15, method="lag8", temporal="pchip",
                                               dtype=np.float64)
    np.testing.assert_array_equal(got, alone)
    stats = db.engine_stats()
    assert stats["served_alone"] == 1 and stats["completed"] == 1 and stats["batches"] == 0
    # What it read is the engine's (it was left out of the engine's figures).
    read = ds.last_query_stats["atoms_read"]
    assert stats["atoms_read"] == read > 0 and stats["read_requests"] > 0
    assert stats["bytes_read"] == read * (8**3 * 3 * 4 + 4)  # atoms of 8³, velocity, a crc32c each
    # Reading past the page cache, the engine's cache must be the only one: no query runs alone.
    direct = turbdb.open(database, scheduler="jaws", io="direct")
    np.testing.assert_allclose(direct["box"].query("velocity", points, time=0.15, method="lag8", temporal="pchip",
                                                   dtype=np.float64), alone, rtol=1e-12, atol=1e-12)
    assert direct.engine_stats()["served_alone"] == 0


def test_the_same_points_at_another_time_reuse_their_cut_and_a_moved_point_does_not(database):
    db = turbdb.open(database, cache_policy="lru")
    ds = db["box"]
    ask = dict(asks(1, seed=4)[0], method="lag6", operator="gradient", temporal="none")
    points = ask.pop("points")
    alone = turbdb.open(database)["box"]
    for time in (0.0, 0.1, 0.2):
        answer = ds.query("velocity", points, **dict(ask, time=time))
        np.testing.assert_allclose(answer, alone.query("velocity", points, **dict(ask, time=time)), rtol=1e-6, atol=1e-6)
    assert db.engine_stats()["cuts_reused"] == 2
    moved = points.copy()
    moved[-1, 2] = np.nextafter(moved[-1, 2], 3.0)
    ds.query("velocity", moved, **dict(ask, time=0.2))
    assert db.engine_stats()["cuts_reused"] == 2
    ds.query("velocity", points, **dict(ask, time=0.2, method="lag4"))
    assert db.engine_stats()["cuts_reused"] == 2


@pytest.mark.parametrize(
    "options, error, message",
    [
        (dict(scheduler="fifo"), turbdb.UnknownNameError, "valid schedulers: noshare, liferaft, jaws"),
        (dict(cache_policy="arc"), turbdb.UnknownNameError, "valid cache policy names: lru, lruk, slru, urc"),
        (dict(io="mmap"), turbdb.UnknownNameError, "valid io modes: buffered, direct"),
        (dict(cache_bytes=-1), turbdb.InvalidRequestError, "must not be negative"),
        # Only None means the default: these made a jaws/urc/buffered engine for someone meaning none.
        (dict(scheduler=False), turbdb.UnknownNameError, "unknown scheduler False"),
        (dict(scheduler=""), turbdb.UnknownNameError, "unknown scheduler ''"),
        (dict(scheduler=0), turbdb.UnknownNameError, "unknown scheduler 0"),
        (dict(cache_policy=""), turbdb.UnknownNameError, "unknown cache policy name ''"),
        (dict(io=False), turbdb.UnknownNameError, "unknown io mode False"),
    ],
)
def test_bad_engine_options_are_refused_with_a_message(database, options, error, message):
    with pytest.raises(error, match=message):
        turbdb.open(database, **options)


def test_every_open_of_a_database_with_the_same_options_shares_one_engine(database):
    first = turbdb.open(database, scheduler="jaws", cache_bytes="8MiB", cache_policy="lru")
    opened = []
    threads = [threading.Thread(target=lambda: opened.append(
        turbdb.open(database, scheduler="jaws", cache_bytes=8 << 20, cache_policy="lru"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(db.engine is first.engine for db in opened)
    assert turbdb.open(database, scheduler="noshare", cache_bytes="8MiB", cache_policy="lru").engine is not first.engine
    # One cache: what one open read, another is served from.
    ask = asks(1, seed=5)[0]
    answer = first["box"].query("velocity", **ask)
    read = first.engine_stats()["atoms_read"]
    np.testing.assert_array_equal(opened[0]["box"].query("velocity", **ask), answer)
    assert opened[1].engine_stats()["atoms_read"] == read > 0 and opened[1].engine_stats()["completed"] == 2
    # When no open is left the engine goes; the next open starts a fresh one.
    del first, opened, threads
    gc.collect()
    assert turbdb.open(database, scheduler="jaws", cache_bytes="8MiB", cache_policy="lru").engine_stats()["completed"] == 0


def _query_in_child(database, ask, answers):
    db = turbdb.open(database, scheduler="jaws", cache_bytes="8MiB", cache_policy="lru")
    answers.put(db["box"].submit("velocity", **ask).result(timeout=30))


def _answer_of_forked_child(target, *args, timeout):
    """What ``target(*args, answers)``, run in a forked child, puts in ``answers``; the child
    must exit cleanly. A child that waits on threads its parent had (they do not survive
    the fork) hangs: ``answers.get`` then times out."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=target, args=(*args, answers))
    child.start()
    try:
        answer = answers.get(timeout=timeout)
        child.join(timeout=30)
    finally:
        child.kill()
    assert child.exitcode == 0
    return answer


def test_a_forked_process_gets_an_engine_and_a_submission_pool_of_its_own(database):
    parent = turbdb.open(database, scheduler="jaws", cache_bytes="8MiB", cache_policy="lru")
    first, ask = asks(2, seed=8)
    # The parent's engine threads and submission pool are running.
    parent["box"].submit("velocity", **first).result(timeout=30)
    answer = _answer_of_forked_child(_query_in_child, database, ask, timeout=30)
    np.testing.assert_array_equal(answer, parent["box"].query("velocity", **ask))


_OPENED_IN_PARENT = {}


def _query_parents_objects_in_child(ask, answers):
    database, dataset = _OPENED_IN_PARENT["database"], _OPENED_IN_PARENT["dataset"]
    answers.put((dataset.query("velocity", **ask), database["box"].submit("velocity", **ask).result(timeout=30)))


def test_a_dataset_opened_before_a_fork_queries_in_the_child_on_an_engine_of_its_own(database):
    # The everyday pattern: a database opened at module level, queried once, then a fork
    # (a multiprocessing Pool on Linux): the parent's engine has no scheduler thread in the
    # child, and every query not answered from its cache waited forever.
    parent = turbdb.open(database, scheduler="jaws", cache_bytes="8MiB", cache_policy="lru")
    first, ask = asks(2, seed=9)
    parent["box"].query("velocity", **first)
    _OPENED_IN_PARENT.update(database=parent, dataset=parent["box"])
    try:
        by_dataset, by_database = _answer_of_forked_child(_query_parents_objects_in_child, ask, timeout=30)
    finally:
        _OPENED_IN_PARENT.clear()
    expected = parent["box"].query("velocity", **ask)
    np.testing.assert_array_equal(by_dataset, expected)
    np.testing.assert_array_equal(by_database, expected)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="thread names are read from /proc")
def test_the_kernel_threads_carry_their_own_name_not_the_engines(database):
    # A fresh process: in this one another test may have started the kernel's pool already.
    script = (
        "import os, sys, numpy as np, turbdb\n"
        "db = turbdb.open(sys.argv[1], scheduler='jaws', cache_bytes='8MiB')\n"
        "points = np.random.default_rng(0).uniform(0.0, 6.0, (20000, 3))\n"
        "db['box'].query('velocity', points, time=0.1, method='lag8')\n"  # alone: the caller's thread
        "db['box'].query('velocity', points[:300], time=0.2, method='lag4')\n"  # on the engine's thread
        "print(' '.join(open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task')))\n"
    )
    names = subprocess.run([sys.executable, "-c", script, str(database)], capture_output=True, text=True,
                           timeout=120, check=True, env={**os.environ, "RAYON_NUM_THREADS": "2"}).stdout.split()
    assert sorted(n for n in names if n.startswith("turbdb-kernel-")) == ["turbdb-kernel-0", "turbdb-kernel-1"]
    assert names.count("turbdb-engine") == 1, names


def _large_queries_in_child(database, points, answers):
    alone = turbdb.open(database)["box"].query("velocity", points, time=0.1, method="lag8")
    shared = turbdb.open(database, scheduler="jaws", cache_bytes="8MiB")["box"]
    answers.put((alone, shared.query("velocity", points, time=0.2, method="lag8")))


def test_a_process_forked_after_parallel_queries_runs_them_on_a_pool_of_its_own(database):
    # Large enough that the kernel's pool sums them in parallel, in the parent first: the
    # pool's threads do not survive a fork, and a child waiting on them would hang.
    points = np.random.default_rng(3).uniform(0.5, 5.5, (20_000, 3))
    expected = (turbdb.open(database)["box"].query("velocity", points, time=0.1, method="lag8"),
                turbdb.open(database, scheduler="jaws", cache_bytes="8MiB")["box"].query(
                    "velocity", points, time=0.2, method="lag8"))
    answer = _answer_of_forked_child(_large_queries_in_child, database, points, timeout=60)
    for got, want in zip(answer, expected):
        np.testing.assert_array_equal(got, want)


def test_without_engine_options_queries_run_alone(database):
    db = turbdb.open(database)
    assert db.engine is None
    with pytest.raises(turbdb.InvalidRequestError, match="scheduler="):
        db.engine_stats()


def test_submitted_queries_are_all_in_the_engine_at_once_without_a_thread_each(database, monkeypatch):
    from turbdb import engine_futures

    db = turbdb.open(database, scheduler="jaws", cache_bytes=0, io="direct")
    alone = turbdb.open(database)["box"]
    work = asks(150, seed=8)
    threads = threading.active_count()
    futures = [db["box"].submit("velocity", **ask) for ask in work]
    # The thread pool handed over 64 at a time; here each is in the engine when submit
    # returns (none waits its turn), with no thread of its own.
    assert not engine_futures._futures[db.engine]._waiting
    assert threading.active_count() <= threads + 1  # the engine's one completion thread
    for future, ask in zip(futures, work):
        np.testing.assert_allclose(future.result(timeout=120), alone.query("velocity", **ask), rtol=1e-6, atol=1e-6)
    # Past MAX_IN_FLIGHT they wait their turn, in order, and still get their answers.
    monkeypatch.setattr(engine_futures, "MAX_IN_FLIGHT", 3)
    futures = [db["box"].submit("velocity", **ask) for ask in work[:20]]
    for future, ask in zip(futures, work):
        np.testing.assert_allclose(future.result(timeout=120), alone.query("velocity", **ask), rtol=1e-6, atol=1e-6)


def test_a_submitted_query_the_engine_refuses_comes_back_as_its_error(database):
    db = turbdb.open(database, scheduler="jaws", cache_bytes=0, io="direct")
    with pytest.raises(turbdb.UnknownNameError, match="no field"):
        db["box"].submit("vorticity", np.zeros((1, 3)), time=0.0).result(timeout=60)
    with pytest.raises(turbdb.InvalidRequestError, match="not finite|NaN|nan"):
        db["box"].submit("velocity", np.array([[0.0, np.inf, 0.0]]), time=0.0).result(timeout=60)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("grid, atom, periodic", [
    ((20, 20, 20), 8, (True, True, True)),     # 2.5 atoms a side: the last atom is short
    ((20, 12, 18), 8, (True, False, True)),
    ((18, 13, 16), 4, (True, True, True)),
])
def test_an_engine_on_a_grid_of_short_last_atoms_answers_as_lone_queries_across_the_seam(
        tmp_path, scheduler, grid, atom, periodic):
    # A box of stencils across a periodic seam was filled from the atoms of its unwrapped
    # nodes: past 20 nodes in atoms of 8, node 20 was taken for the short last atom's, not
    # node 0's, and a quarter of the points got O(1) wrong answers (the fourth probe).
    nx, ny, nz = grid
    ds = turbdb.create_dataset(tmp_path, "short", grid=grid, spacing=(1.0, 1.0, 1.0), periodic=periodic,
                               times=[0.0], fields={"f": 3}, atom=atom, partition=2 * atom)
    ds.write("f", 0, np.random.default_rng(3).standard_normal((nz, ny, nx, 3), dtype=np.float32))
    high = np.array(grid) - np.where(periodic, 0, 1)
    points = np.random.default_rng(4).uniform(0, high, (3000, 3))
    lone = turbdb.open(tmp_path)["short"]
    shared = turbdb.open(tmp_path, scheduler=scheduler, cache_bytes=8 << 20)["short"]
    for method, operator in (("lag4", "field"), ("lag8", "field"), ("lag6", "gradient")):
        for count in (3000, 200):  # a large query, and one of the small-query lane
            want = lone.query("f", points[:count], time=0.0, method=method, operator=operator, dtype=np.float64)
            got = shared.query("f", points[:count], time=0.0, method=method, operator=operator, dtype=np.float64)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * np.abs(want).max(),
                                       err_msg=f"{method} {operator}, {count} points")
    box = dict(x=(nx - 3, nx + 4), y=(0, ny), z=(nz - 5, nz + 2)) if periodic[1] else dict(x=(nx - 3, nx + 4))
    np.testing.assert_array_equal(shared.cutout("f", time=0.0, **box), lone.cutout("f", time=0.0, **box))
