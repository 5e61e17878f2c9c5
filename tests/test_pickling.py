"""Databases and datasets, local and remote, travel by pickle (a spawn-based
multiprocessing Pool sends them so): they are opened again where they are unpickled, with
an engine of the same settings, and answer the same. Before, a dataset pickled only until
its first query (its stores and engine are Rust objects)."""

import pickle

import numpy as np
import pytest

import turbdb
from turbdb.database import create_dataset


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    root = tmp_path_factory.mktemp("db")
    dataset = create_dataset(root, "box", grid=(16, 16, 16), times=[0.0, 0.1],
                             fields={"velocity": {"ncomp": 3}})
    rng = np.random.default_rng(0)
    for t in range(2):
        dataset.write("velocity", t, rng.standard_normal((16, 16, 16, 3)).astype(np.float32))
    return root


POINTS = np.random.default_rng(1).uniform(0.0, 6.0, (50, 3))


@pytest.mark.parametrize("engine", [{}, {"scheduler": "jaws", "cache_bytes": "8MiB", "cache_policy": "lru"}])
def test_a_queried_database_and_dataset_pickle_and_answer_the_same(database, engine):
    db = turbdb.open(database, **engine)
    expected = db["box"].query("velocity", POINTS, time=0.05, temporal="pchip")
    for copy in (pickle.loads(pickle.dumps(db))["box"], pickle.loads(pickle.dumps(db["box"]))):
        np.testing.assert_array_equal(copy.query("velocity", POINTS, time=0.05, temporal="pchip"), expected)
        assert (copy.engine is None) == (not engine)
        if engine:
            assert copy.engine is db.engine, "same settings in one process: the one shared engine"


def test_a_remote_database_and_dataset_pickle_with_their_settings():
    remote = turbdb.connect("http://127.0.0.1:9", "secret-token", timeout=7.0, retries=1)
    copy = pickle.loads(pickle.dumps(remote))
    assert (copy.url, copy._token, copy.timeout, copy.retries) == (remote.url, "secret-token", 7.0, 1)


def test_a_shallow_copy_shares_what_is_open_and_reads_nothing(database):
    # The service copies a dataset per request: with __reduce__ alone, copy.copy opened it again.
    import copy

    dataset = turbdb.open(database)["box"]
    dataset.query("velocity", POINTS, time=0.0)
    clone = copy.copy(dataset)
    assert clone._stores is dataset._stores and clone.metadata is dataset.metadata


def test_cluster_objects_refuse_pickling_instead_of_arriving_as_local_ones():
    from turbdb.cluster.mediator import ClusterDatabase, ClusterDataset

    for cls in (ClusterDatabase, ClusterDataset):
        with pytest.raises(TypeError, match="cannot be pickled: open"):
            pickle.dumps(object.__new__(cls))
