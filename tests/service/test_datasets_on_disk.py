"""A running server whose datasets are deleted, renamed and made again on disk by another
process: it answers for what is on disk now, not for what it opened before."""

import shutil

import numpy as np
import pytest

import turbdb

from servicekit import running_server


def flat(db, name, value):
    ds = turbdb.create_dataset(db, name, grid=(8, 8, 8), times=[0.0], fields={"velocity": 3}, atom=4, partition=8,
                               overwrite=True)
    ds.write("velocity", 0, np.full((8, 8, 8, 3), value, np.float32))


@pytest.fixture
def server(tmp_path):
    for name, value in (("gone", 1.0), ("moving", 2.0)):
        flat(tmp_path / "db", name, value)
    with running_server(tmp_path / "db", tmp_path / "server.log") as s:
        yield s


def query(server, name):
    return server.post(f"/v1/datasets/{name}/query", params={"field": "velocity", "time": 0, "method": "none"},
                       json={"points": [[0.5, 0.5, 0.5]]})


def test_a_dataset_deleted_or_renamed_under_the_server_is_not_found_and_one_made_again_is_read(server, tmp_path):
    db = tmp_path / "db"
    assert query(server, "gone").json()["values"] == [[1.0, 1.0, 1.0]]
    assert query(server, "moving").status_code == 200  # both opened (and kept) by the server

    shutil.rmtree(db / "gone")
    answer = query(server, "gone")
    assert (answer.status_code, answer.json()["error"]) == (404, "UnknownNameError")
    assert "available: moving" in answer.json()["description"]

    (db / "moving").rename(db / "moved")
    assert query(server, "moving").status_code == 404
    assert server.get("/v1/datasets/moving").status_code == 404
    assert query(server, "moved").json()["values"] == [[2.0, 2.0, 2.0]]

    flat(db, "gone", 3.0)
    assert query(server, "gone").json()["values"] == [[3.0, 3.0, 3.0]]
    assert [d.get("error") for d in server.get("/v1/datasets").json()["datasets"]] == [None, None]
