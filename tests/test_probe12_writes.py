"""Writes that meet other writers of the same process or another (twelfth probe): a dataset
created again between a write's opening of its field and its writer lock, a replacement
under way while another thread writes, and two threads writing one stored step."""

import concurrent.futures
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

import turbdb
from turbdb import database as database_module
from turbdb.dataset import Dataset
from turbdb.rewrites import REWRITING_KEY

GRID = 16


def make(db, times=(0.0, 0.1, 0.2)):
    ds = turbdb.create_dataset(db, "a", grid=(GRID,) * 3, times=list(times), fields={"c": 1}, atom=4, partition=8)
    ds.write("c", 0, flat(0.0))
    return ds


def flat(value):
    return np.full((GRID,) * 3, value, np.float32)


REPLACE = ("turbdb.create_dataset({db!r}, 'a', grid=({n}, {n}, {n}), times=[0.0, 0.1, 0.2], fields={{'c': 1}}, atom=4, "
           "partition=8, overwrite=True)")


def replace(db):
    eval(REPLACE.format(db=str(db), n=GRID))


def problems(db):
    return [message for _, _, message in turbdb.open(db)["a"].verify()["c"]["problems"]]


class ReplacedWhileConverted:
    """Data whose conversion (inside ``Dataset.write``, after it opened the field's store and
    before its writer lock) creates the dataset again: in another process, or in another
    thread of this one."""

    def __init__(self, db, where):
        self.db, self.where = db, where

    def __array__(self, dtype=None, copy=None):
        if self.where == "process":
            subprocess.run([sys.executable, "-c", "import turbdb; " + REPLACE.format(db=str(self.db), n=GRID)],
                           check=True)
        else:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pool.submit(replace, self.db).result()
        return np.ones((GRID,) * 3, np.float32)


@pytest.mark.parametrize("where", ["process", "thread"])
@pytest.mark.parametrize("step", [0, 1], ids=["rewrite", "first-write"])
def test_a_write_refuses_a_dataset_created_again_before_it_took_the_lock(tmp_path, where, step):
    # Its store writes by path: it wrote the old field's shards into the new dataset ("shard
    # was written for a field of id X but this field has id Y"), or recorded the step there.
    ds = make(tmp_path)
    with pytest.raises(turbdb.DatasetBusyError, match="dataset 'a' in .* was created again while this write began, "
                                                      "so nothing was written"):
        ds.write("c", step, ReplacedWhileConverted(tmp_path, where))
    assert problems(tmp_path) == []
    assert turbdb.open(tmp_path)["a"].info.steps_present("c") == []
    assert not (tmp_path / "a" / "c" / "c" / str(step)).exists()
    ds.write("c", step, flat(3.0))  # written again, the write goes to the new dataset
    assert problems(tmp_path) == [] and turbdb.open(tmp_path)["a"].info.steps_present("c") == [step]


def test_a_write_of_another_thread_is_refused_while_the_dataset_is_being_created_again(tmp_path, monkeypatch):
    # A replacement held the writer lock, and a write of another thread joined its hold:
    # written into the dataset being replaced, said to be stored, and lost with it.
    ds = make(tmp_path)
    outcomes = []
    coordinate = database_module.write_coordinate

    def write_coordinate(target, axis, values, **options):  # the replacement under way, its lock held
        if axis == "time":
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                try:
                    outcomes.append(pool.submit(ds.write, "c", 1, flat(5.0)).result())
                except turbdb.TurbdbError as e:
                    outcomes.append(e)
        return coordinate(target, axis, values, **options)

    monkeypatch.setattr(database_module, "write_coordinate", write_coordinate)
    replace(tmp_path)
    assert len(outcomes) == 1 and isinstance(outcomes[0], turbdb.DatasetBusyError), outcomes
    assert "another thread of this process is replacing dataset 'a'" in str(outcomes[0])
    monkeypatch.undo()
    assert problems(tmp_path) == [] and turbdb.open(tmp_path)["a"].info.steps_present("c") == []
    ds.write("c", 1, flat(5.0))  # once it is done, the write goes through


class PausesInWriteStep:
    """A field's store whose ``write_step`` waits for ``go`` in the thread named ``first``:
    that thread's write is under way (a rewrite: announced) while another thread writes."""

    def __init__(self, store, inside, go):
        self.store, self.inside, self.go = store, inside, go

    def write_step(self, *args):
        if threading.current_thread().name == "first":
            self.inside.set()
            assert self.go.wait(30)
        return self.store.write_step(*args)

    def __getattr__(self, name):
        return getattr(self.store, name)


def paused_first_write(monkeypatch, ds, step):
    """Starts thread ``first`` writing 1.0 into ``step`` and returns it once its write is
    under way, with the event that lets it go on."""
    inside, go = threading.Event(), threading.Event()
    opened = Dataset.field_store
    monkeypatch.setattr(Dataset, "field_store", lambda self, field: PausesInWriteStep(opened(self, field), inside, go))
    first = threading.Thread(target=ds.write, args=("c", step, flat(1.0)), name="first")
    first.start()
    assert inside.wait(30)
    return first, go


def rewrites_marked(db):
    return json.loads((db / "a" / "zarr.json").read_text())["attributes"]["turbdb"].get(REWRITING_KEY, {})


def test_threads_rewriting_one_step_take_turns_and_it_stays_marked_until_both_end(tmp_path, monkeypatch):
    # The second to start finished first and cleared the mark (one per process) while the
    # first still wrote: readers took the step for settled and read both versions. The
    # shards' temporaries are named by process, so one thread also removed the other's.
    ds = make(tmp_path)
    first, go = paused_first_write(monkeypatch, ds, 0)
    second = threading.Thread(target=ds.write, args=("c", 0, flat(2.0)))
    second.start()
    second.join(0.5)
    try:
        assert second.is_alive(), "the second rewrite of the step went through while the first was under way"
        assert list(rewrites_marked(tmp_path).get("c", {})) == ["0"]
    finally:
        go.set()
        first.join(30)
        second.join(30)
    assert rewrites_marked(tmp_path) == {} and problems(tmp_path) == []
    nodes = np.stack(np.meshgrid(*[np.arange(0, GRID, 3) * 2 * np.pi / GRID] * 3), -1).reshape(-1, 3)
    np.testing.assert_array_equal(turbdb.open(tmp_path)["a"].query("c", nodes, time=0.0, method="none"), 2.0)


def test_threads_writing_other_steps_do_not_wait_for_each_other(tmp_path, monkeypatch):
    ds = make(tmp_path)
    first, go = paused_first_write(monkeypatch, ds, 0)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert pool.submit(ds.write, "c", 1, flat(2.0)).result(timeout=30) > 0
    finally:
        go.set()
        first.join(30)
    assert turbdb.open(tmp_path)["a"].info.steps_present("c") == [0, 1] and problems(tmp_path) == []
