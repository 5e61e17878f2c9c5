"""Jobs, cutouts and cancellation through the node engine from Python: declared jobs (and
tracks, which are jobs by construction) are gated together under JAWS and still get the
lone answers; cutouts through the engine equal the standalone read and share its cache; a
query can be cancelled and the engine goes on."""

import threading
import time

import numpy as np
import pytest

import turbdb
from turbdb import _core
from turbdb.exceptions import InvalidRequestError, LimitExceededError, QueryCancelledError
from turbdb.jobs import MAX_JOB_QUERIES

TIMES = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """A smooth periodic 32³ velocity (6 steps), atoms of 8³ in shards of 16³."""
    path = tmp_path_factory.mktemp("engine-jobs")
    ds = turbdb.create_dataset(path, "box", grid=(32, 32, 32), times=TIMES, fields={"velocity": 3},
                               atom=8, partition=16)
    axis = np.arange(32) * 2 * np.pi / 32
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    for t, time in enumerate(TIMES):
        u = np.stack([np.sin(x) * np.cos(y) * (1 + time), np.cos(z) * np.sin(x), np.sin(y + z) - time], -1)
        ds.write("velocity", t, u.astype(np.float32))
    # A bounded box whose flow carries particles out through the wall at x = 15.
    wall = turbdb.create_dataset(path, "wall", grid=(16, 16, 16), times=TIMES, fields={"velocity": 3}, atom=8,
                                 partition=16, periodic=(False, False, False), spacing=(1.0, 1.0, 1.0))
    for t in range(len(TIMES)):
        wall.write("velocity", t, np.broadcast_to(np.float32([40.0, 0.0, 0.0]), (16, 16, 16, 3)).copy())
    return path


def wait_for(condition, seconds=10.0):
    """Whether ``condition()`` turns true within ``seconds`` (the engine publishes its
    counters after it has taken in a cancellation, a moment after the caller is told)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def points(seed, count=200):
    return np.random.default_rng(seed).uniform(0.5, 5.5, (count, 3))


def test_two_jobs_over_the_same_steps_are_gated_together_and_get_the_lone_answers(database):
    lone = turbdb.open(database)["box"]
    db = turbdb.open(database, scheduler="jaws", cache_bytes=8 << 20)
    plan = [("box", "velocity", t) for t in TIMES]
    answers: dict[tuple[int, int], np.ndarray] = {}
    jobs = [db.job(plan), db.job(plan)]
    assert all(job.id is not None for job in jobs)

    def client(k):
        ds = db["box"]
        with jobs[k]:
            for i, t in enumerate(TIMES):
                answers[k, i] = ds.query("velocity", points(10 * k + i), time=t, method="lag6", dtype=np.float64,
                                         job=jobs[k])

    threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a job deadlocked"
    for (k, i), values in answers.items():
        expected = lone.query("velocity", points(10 * k + i), time=TIMES[i], method="lag6", dtype=np.float64)
        np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-12)
    assert len(answers) == 2 * len(TIMES)
    stats = db.engine_stats()
    assert stats["gating"]["edges"] == len(TIMES)
    assert stats["gating"]["co_scheduled"] > 0
    # The jobs are closed: the engine takes the closes in a moment later.
    assert wait_for(lambda: (s := db.engine_stats())["jobs"] == 0 and s["pending"] == 0)


def test_a_job_declared_and_never_run_holds_another_job_once_not_at_every_query(database):
    # Anyone may declare a job: one that never ran held each query of another user's job
    # over the same steps for the whole gate timeout (16 queries: 17 s instead of 0.7).
    lone = turbdb.open(database)["box"]
    db = turbdb.open(database, scheduler="jaws", cache_bytes=8 << 20)
    plan = [("box", "velocity", t) for t in TIMES]
    ghost, job = db.job(plan), db.job(plan)
    ds = db["box"]
    with job:
        for i, t in enumerate(TIMES):
            # Queries over the engine's small size (1 000 points), which wait the whole gate
            # timeout; a small one is held 20 ms at most and says nothing of its partner.
            values = ds.query("velocity", points(i, 1500), time=t, method="lag6", dtype=np.float64, job=job)
            np.testing.assert_allclose(values, lone.query("velocity", points(i, 1500), time=t, method="lag6",
                                                          dtype=np.float64), rtol=1e-12, atol=1e-12)
    assert db.engine_stats()["gating"]["timeouts"] == 1, "only the first query waits for the idle job"
    ghost.close()
    assert wait_for(lambda: db.engine_stats()["jobs"] == 0)


def test_tracks_through_the_engine_are_jobs_and_equal_lone_tracks(database):
    lone = turbdb.open(database)["box"]
    db = turbdb.open(database, scheduler="jaws", cache_bytes=8 << 20)
    start = points(3, 50)
    expected = lone.track(start, start=0.0, end=0.5, dt=0.05, method="lag4")
    paths: dict[str, np.ndarray] = {}
    first_step = threading.Event()

    def after_a_step(done, total):
        # The first track waits after its first step until the second has declared its job,
        # so that the second is aligned with the first's remaining evaluations.
        if done == 1:
            first_step.set()
            assert wait_for(lambda: db.engine_stats()["jobs"] == 2)

    def first():
        paths["first"] = db["box"].track(start, start=0.0, end=0.5, dt=0.05, method="lag4", progress=after_a_step)

    thread = threading.Thread(target=first)
    thread.start()
    assert first_step.wait(30)
    paths["second"] = db["box"].track(start, start=0.0, end=0.5, dt=0.05, method="lag4")
    thread.join(60)
    for path in paths.values():
        np.testing.assert_allclose(path, expected, rtol=1e-12, atol=1e-12)
    assert len(paths) == 2
    stats = db.engine_stats()
    # Each track is 10 rk2 steps, 20 evaluations, all declared: the second was gated with the first.
    assert stats["gating"]["edges"] > 0 and stats["gating"]["co_scheduled"] > 0
    # Both jobs closed (the engine takes the closes in a moment later; a `jobs == 1` read
    # right after the tracks returned failed once under load).
    assert wait_for(lambda: (s := db.engine_stats())["jobs"] == 0 and s["completed"] >= 40)


def test_a_track_that_fails_midway_closes_its_job(database):
    db = turbdb.open(database, scheduler="jaws")
    with pytest.raises(turbdb.OutOfDomainError, match="left the domain"):
        db["wall"].track([[6.0, 8.0, 8.0]], start=0.0, end=0.5, dt=0.05, method="lag4")
    assert db.engine_stats()["completed"] >= 2  # it had made steps before the particle left
    assert wait_for(lambda: db.engine_stats()["jobs"] == 0)  # closed (the engine takes it in a moment later)
    assert db.engine_stats()["pending"] == 0


def test_job_plans_are_checked(database):
    db = turbdb.open(database, scheduler="jaws")
    with pytest.raises(InvalidRequestError, match="at least one"):
        db.job([])
    with pytest.raises(InvalidRequestError, match=r"\(dataset, field, time"):
        db.job([("box", "velocity")])
    with pytest.raises(turbdb.UnknownNameError, match="no field 'pressure'"):
        db.job([("box", "pressure", 0.0)])
    with pytest.raises(LimitExceededError, match="at most"):
        db.job([("box", "velocity", 0.0)] * (MAX_JOB_QUERIES + 1))
    with pytest.raises(InvalidRequestError, match="job must be"):
        db["box"].query("velocity", points(0), time=0.0, job="seven")
    with pytest.raises(InvalidRequestError, match="job must be"):  # an OverflowError from the engine before
        db["box"].query("velocity", points(0), time=0.0, job=10**30)
    for size in (2**70, 1 << 62):  # past any machine; past this machine's memory
        with pytest.raises(InvalidRequestError, match="more bytes than any machine has|more than the memory this process may use"):
            turbdb.open(database, scheduler="jaws", cache_bytes=size)
    # Without an engine a job is inert: queries with it answer as without.
    plain = turbdb.open(database)
    with plain.job([("box", "velocity", 0.1, "pchip")]) as job:
        assert job.id is None
        plain["box"].query("velocity", points(0), time=0.1, temporal="pchip", job=job)


@pytest.mark.parametrize("stride, width", [(1, 1), (3, 1), (1, 3)])
def test_cutouts_through_the_engine_equal_the_standalone_read_and_share_the_cache(database, stride, width):
    lone = turbdb.open(database)["box"]
    db = turbdb.open(database, scheduler="jaws", cache_bytes=8 << 20)
    box = dict(time=0.2, x=(30, 40), y=(3, 20), z=(0, 32), stride=stride, filter_width=width)
    expected = lone.cutout("velocity", **box)
    got = db["box"].cutout("velocity", **box)
    np.testing.assert_array_equal(got.values, expected.values)
    read = db.engine_stats()["atoms_read"]
    assert read > 0
    again = db["box"].cutout("velocity", **box)
    np.testing.assert_array_equal(again.values, expected.values)
    assert db.engine_stats()["atoms_read"] == read  # served from the cache


def test_a_large_cutout_goes_to_the_engine_in_slabs(database, monkeypatch):
    import turbdb.cutout as cutouts

    monkeypatch.setattr(cutouts, "ENGINE_CUTOUT_NODES", 32 * 32 * 3)
    db = turbdb.open(database, scheduler="noshare")
    got = db["box"].cutout("velocity", time=0.3, z=(-5, 27))
    expected = turbdb.open(database)["box"].cutout("velocity", time=0.3, z=(-5, 27))
    np.testing.assert_array_equal(got.values, expected.values)
    assert db.engine_stats()["submitted"] >= 32 // 3


def test_a_cancelled_query_raises_and_the_engine_goes_on(database):
    db = turbdb.open(database, scheduler="jaws")
    ds = db["box"]
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(QueryCancelledError):
        ds.query("velocity", points(0), time=0.0, cancel=cancel)
    # Cancelled while it is pending: held at the gate of a job whose partner never comes.
    plan = [("box", "velocity", 0.0)]
    first, second = db.job(plan), db.job(plan)
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    with pytest.raises(QueryCancelledError):
        ds.query("velocity", points(1, 5000), time=0.0, method="lag8", job=first, cancel=cancel)
    timer.join()
    first.close()
    second.close()
    assert wait_for(lambda: db.engine_stats()["cancelled"] == 1)
    lone = turbdb.open(database)["box"]
    np.testing.assert_allclose(ds.query("velocity", points(2), time=0.0, dtype=np.float64),
                               lone.query("velocity", points(2), time=0.0, dtype=np.float64), rtol=1e-12)
    assert db.engine_stats()["pending"] == 0


def test_a_pending_query_handle_waits_answers_once_and_cancels(database):
    db = turbdb.open(database, scheduler="noshare")
    ds = db["box"]
    store = ds.field_store("velocity")
    info = ds.metadata
    from turbdb.arguments import axes_of

    pending = db.engine.submit(store, points(4), axes=axes_of(info), times=info.times, time=0.1, method="lag4",
                               operator="field", temporal="none")
    assert isinstance(pending, _core.PendingQuery)
    assert pending.wait(30) and pending.done
    values, counters = pending.result()
    np.testing.assert_allclose(values.reshape(-1, 3), turbdb.open(database)["box"].query(
        "velocity", points(4), time=0.1, method="lag4", dtype=np.float64), rtol=1e-12)
    assert counters["atoms"] > 0
    with pytest.raises(InvalidRequestError, match="taken already"):
        pending.result()
    with pytest.raises(InvalidRequestError, match="timeout"):
        pending.wait(-1)


def test_a_cancelled_track_stops_and_closes_its_job(database):
    db = turbdb.open(database, scheduler="jaws")
    cancel = threading.Event()

    def after_a_step(done, total):
        if done == 3:
            cancel.set()

    with pytest.raises(QueryCancelledError, match="track was cancelled"):
        db["box"].track(points(5, 20), start=0.0, end=0.5, dt=0.01, method="lag4", progress=after_a_step,
                        cancel=cancel)
    assert db.engine_stats()["completed"] == 6  # three rk2 steps, then nothing more
    assert wait_for(lambda: db.engine_stats()["jobs"] == 0)  # closed (the engine takes it in a moment later)
    assert db.engine_stats()["pending"] == 0
