"""Datasets across turbdb versions (thirteenth probe): every addition to the format since
its first version was made under format_version 1, so a turbdb of format 1 (which refuses
later formats) wrote into datasets it misread — rerunning an ingest stored every step again
at new times, new steps got shard headers the field's id refused, a rewrite went unseen by
readers of the current format. A dataset this turbdb writes is now of format 2."""

import json

import numpy as np
import pytest

import turbdb
from turbdb.info import FORMAT_VERSION


def metadata(path):
    return json.loads((path / "zarr.json").read_text())["attributes"]["turbdb"]


def set_format(path, version):
    document = json.loads((path / "zarr.json").read_text())
    document["attributes"]["turbdb"]["format_version"] = version
    (path / "zarr.json").write_text(json.dumps(document))


def test_new_datasets_and_databases_are_of_the_current_format(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "a", grid=(8, 8, 8), times=[0.0], fields={"s": 1}, atom=4, partition=8)
    assert FORMAT_VERSION == 2
    assert metadata(ds.path)["format_version"] == 2
    assert json.loads((tmp_path / "zarr.json").read_text())["attributes"]["turbdb_database"]["format_version"] == 2


@pytest.mark.parametrize("write", ["step", "rewrite", "attrs", "field"])
def test_a_format_1_dataset_reads_and_is_marked_format_2_by_its_first_write(tmp_path, write):
    ds = turbdb.create_dataset(tmp_path, "a", grid=(8, 8, 8), times=[0.0, 1.0], fields={"s": 1}, atom=4, partition=8)
    ds.write("s", 0, np.full((8, 8, 8), 3.0))
    set_format(ds.path, 1)
    old = turbdb.open(tmp_path)["a"]
    assert old.query("s", [[1.0, 2.0, 3.0]], time=0.0, method="none")[0, 0] == 3.0
    assert metadata(ds.path)["format_version"] == 1  # reading changes nothing
    if write == "step":
        old.write("s", 1, np.full((8, 8, 8), 4.0))
    elif write == "rewrite":
        old.write("s", 0, np.full((8, 8, 8), 5.0))
    elif write == "attrs":
        old.update_attrs(lambda attrs: attrs["attrs"].__setitem__("note", "x"))
    else:
        old.add_field("p", 1)
    assert metadata(ds.path)["format_version"] == 2


def test_a_dataset_of_a_later_format_is_refused_saying_to_upgrade(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "a", grid=(8, 8, 8), times=[0.0], fields={"s": 1}, atom=4, partition=8)
    set_format(ds.path, FORMAT_VERSION + 1)
    for use in (lambda: turbdb.open(tmp_path)["a"].metadata, lambda: turbdb.open(tmp_path)["a"].info,
                lambda: turbdb.open(tmp_path)["a"].write("s", 0, np.zeros((8, 8, 8)))):
        with pytest.raises(turbdb.TurbdbError, match="has format version 3; upgrade turbdb to read it"):
            use()


def test_the_service_serves_format_1_documents_a_format_1_client_reads(tmp_path, monkeypatch):
    # (review) Documents were labelled with this turbdb's format, so a turbdb 0.1 client
    # refused every dataset of a 0.2 server, though the documents hold format 1's keys only.
    import asyncio

    import httpx

    from turbdb import info as info_module
    from turbdb.service.app import create_app

    new = turbdb.create_dataset(tmp_path, "new", grid=(8, 8, 8), times=[0.0], fields={"s": 1}, atom=4, partition=8)
    old = turbdb.create_dataset(tmp_path, "old", grid=(8, 8, 8), times=[0.0], fields={"s": 1}, atom=4, partition=8)
    set_format(old.path, 1)
    assert turbdb.open(tmp_path)["new"].metadata.to_attrs()["format_version"] == 2  # as stored, locally
    assert turbdb.open(tmp_path)["old"].metadata.to_attrs()["format_version"] == 1
    app = create_app(tmp_path)

    async def documents_served():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [(await client.get("/v1/datasets/new")).json(),
                    (await client.get("/v1/datasets/new?steps=true")).json(),
                    *(await client.get("/v1/datasets")).json()["datasets"]]

    try:
        documents = asyncio.run(documents_served())
    finally:
        app.state.backend.close()
    assert [d["format_version"] for d in documents] == [1, 1, 1, 1]
    monkeypatch.setattr(info_module, "FORMAT_VERSION", 1)  # a client of format 1 reads them
    for document in documents:
        info_module.DatasetInfo.from_attrs({k: v for k, v in document.items() if k != "steps_present"})
    assert new.path.exists()
