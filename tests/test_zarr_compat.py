"""Stored fields are plain Zarr v3: zarr-python and xarray read back exactly what was
written, shards hold their atoms in Morton order, and arrays written by other Zarr tools
(zstd-compressed) pass turbdb's checks."""

import json
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

import turbdb
from turbdb import _core


@pytest.fixture
def dataset(tmp_path):
    ds = turbdb.create_dataset(
        tmp_path, "flow", grid=(70, 33, 65), times=[0.0, 0.1, 0.2], fields={"velocity": 3, "pressure": 1},
        atom=8, partition=32,
    )
    rng = np.random.default_rng(7)
    u = rng.standard_normal((2, 65, 33, 70, 3)).astype(np.float32)
    p = rng.standard_normal((2, 65, 33, 70))
    for t in range(2):
        ds.write("velocity", t, u[t])
        ds.write("pressure", t, p[t])
    return ds, u, p.astype(np.float32)


def test_zarr_python_reads_every_field_exactly_including_partial_edge_shards(dataset):
    ds, u, p = dataset
    velocity = zarr.open_array(ds.path / "velocity", mode="r")
    assert velocity.shape == (3, 65, 33, 70, 3) and velocity.dtype == np.float32
    np.testing.assert_array_equal(velocity[:2], u)
    assert np.isnan(velocity[2]).all(), "an unwritten step reads as the NaN fill value"
    np.testing.assert_array_equal(zarr.open_array(ds.path / "pressure", mode="r")[:2, ..., 0], p)
    # a window straddling shard and atom edges
    np.testing.assert_array_equal(velocity[1, 30:40, 5:33, 60:70, 1], u[1, 30:40, 5:33, 60:70, 1])


def test_xarray_opens_the_dataset_with_coordinates(dataset):
    ds, u, p = dataset
    with xr.open_zarr(ds.path, consolidated=False) as opened:
        np.testing.assert_array_equal(opened.velocity.isel(time=slice(0, 2)).values, u)
        np.testing.assert_array_equal(opened.pressure.isel(time=1).values[..., 0], p[1])
        np.testing.assert_allclose(opened.x.values, np.arange(70) * 2 * np.pi / 70)
        np.testing.assert_allclose(opened.time.values, [0.0, 0.1, 0.2])
        assert opened.velocity.dims == ("time", "z", "y", "x", "velocity_component")


def test_xarray_opens_a_dataset_without_warnings_and_sees_appended_times_and_fields(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "flow", grid=(16, 16, 16), times=[0.0, 0.1])
    ds.write("velocity", 0, np.ones((16, 16, 16, 3)))

    def opened_sizes():
        # No "failed to open with consolidated metadata" RuntimeWarning, nothing else either.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with xr.open_zarr(ds.path) as opened:
                return dict(opened.sizes), sorted(opened.data_vars), opened.time.values.tolist()

    assert opened_sizes() == ({"time": 2, "z": 16, "y": 16, "x": 16, "pressure_component": 1,
                               "velocity_component": 3}, ["pressure", "velocity"], [0.0, 0.1])
    ds.append_times([0.2, 0.3])
    ds.add_field("temperature", 1)
    sizes, variables, times = opened_sizes()
    assert sizes["time"] == 4 and variables == ["pressure", "temperature", "velocity"] and times == [0.0, 0.1, 0.2, 0.3]
    # zarr-python trusts the consolidated copy: it must follow every change of the arrays.
    group = json.loads((ds.path / "zarr.json").read_text())
    consolidated = group["consolidated_metadata"]["metadata"]
    for name in ("velocity", "pressure", "temperature", "time", "x"):
        assert consolidated[name] == json.loads((ds.path / name / "zarr.json").read_text())
    assert zarr.open_group(ds.path, mode="r")["velocity"].shape == (4, 16, 16, 16, 3)


def test_a_reader_opened_before_an_append_still_reads_the_times(tmp_path):
    # The time coordinate's chunks keep their size as steps are appended: metadata read
    # before an append still fits the chunk written after it (it failed to reshape).
    ds = turbdb.create_dataset(tmp_path, "flow", grid=(8, 8, 8), times=[0.0, 0.1], fields={"p": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = zarr.open_group(ds.path, mode="r")["time"]
    ds.append_times(np.arange(2, 1500) / 10)
    np.testing.assert_array_equal(before[:], [0.0, 0.1])
    with xr.open_zarr(ds.path) as opened:
        np.testing.assert_array_equal(opened.time.values, np.arange(1500) / 10)
    ds.drop_unwritten_times(3)
    assert sorted(p.name for p in (ds.path / "time" / "c").iterdir()) == ["0"]
    with xr.open_zarr(ds.path) as opened:
        np.testing.assert_array_equal(opened.time.values, [0.0, 0.1, 0.2])


def test_every_shard_stores_its_atoms_in_morton_order(dataset):
    ds, _, _ = dataset
    shards = [p for p in (ds.path / "velocity" / "c").rglob("0") if p.is_file()]
    assert len(shards) == 2 * 3 * 2 * 3  # steps × shards (x: 3, y: 2, z: 3)
    n = 32 // 8
    for shard in shards:
        raw = shard.read_bytes()
        index = np.frombuffer(raw[-(n**3 * 16 + 4) : -4], dtype="<u8").reshape(n, n, n, 2)  # (az, ay, ax)
        az, ay, ax = np.nonzero(index[..., 0] != np.iinfo(np.uint64).max)
        codes = _core.morton_encode(ax.astype(np.uint32), ay.astype(np.uint32), az.astype(np.uint32))
        offsets = index[az, ay, ax, 0]
        assert np.all(np.diff(offsets[np.argsort(codes)]) > 0), f"{shard} is not in Morton order"
        # Atoms start right after the header binding the shard to its place (docs/format.md):
        # magic TURBDBSH, then its length as a little-endian u32 at bytes 12..16.
        assert raw[:8] == b"TURBDBSH"
        header = int.from_bytes(raw[12:16], "little")
        assert offsets.min() == header and np.all(index[az, ay, ax, 1] == 8**3 * 3 * 4 + 4)


def test_metadata_is_the_documented_zarr_v3_layout(dataset):
    ds, _, _ = dataset
    meta = json.loads((ds.path / "velocity" / "zarr.json").read_text())
    (sharding,) = meta["codecs"]
    assert sharding["name"] == "sharding_indexed"
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [1, 32, 32, 32, 3]
    assert sharding["configuration"]["chunk_shape"] == [1, 8, 8, 8, 3]
    assert sharding["configuration"]["index_codecs"][-1]["name"] == "crc32c"
    group = json.loads((ds.path / "zarr.json").read_text())
    assert group["attributes"]["turbdb"]["grid"] == [70, 33, 65]


def test_an_array_written_by_zarr_python_with_zstd_passes_verify(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "flow", grid=(16, 16, 16), times=[0.0], fields={"pressure": 1},
                               atom=4, partition=8)
    path = ds.path / "pressure"
    data = np.random.default_rng(0).standard_normal((1, 16, 16, 16, 1)).astype(np.float32)
    array = zarr.create_array(
        store=str(path), shape=data.shape, dtype="float32", chunks=(1, 4, 4, 4, 1), shards=(1, 8, 8, 8, 1),
        compressors=[zarr.codecs.ZstdCodec(level=3)], fill_value=np.nan, overwrite=True,
        dimension_names=["time", "z", "y", "x", "pressure_component"],
    )
    array[:] = data
    report = turbdb.open(tmp_path)["flow"].verify()["pressure"]
    assert report["problems"] == [] and report["atoms"] == 64 and report["complete_steps"] == [0]


def test_metadata_json_is_written_and_read_as_the_standard_library_would(tmp_path):
    # zarr.json is encoded and parsed by orjson (the standard encoder runs in pure Python
    # once indenting: 179 ms a stored step at 20 000 times); what orjson refuses is parsed
    # by json, and integer keys are written as strings, as json does.
    import json
    import math

    from turbdb.exceptions import DamagedMetadataError
    from turbdb.zarr_meta import parse_json, write_json_atomic

    document = {"zarr_format": 3, "attributes": {"rewrites": {"v": {3: 2}}, "times": [0.1, 1e-05, 2.5e+20]}}
    write_json_atomic(tmp_path / "zarr.json", document)
    text = (tmp_path / "zarr.json").read_text()
    assert json.loads(text) == {"zarr_format": 3, "attributes": {"rewrites": {"v": {"3": 2}}, "times": [0.1, 1e-05, 2.5e+20]}}
    assert "\n  " in text  # indented, for people who open it
    assert math.isnan(parse_json(b'{"fill_value": NaN}', tmp_path / "zarr.json")["fill_value"])  # another tool's
    with pytest.raises(DamagedMetadataError, match="is not valid JSON"):
        parse_json(b'{"a": 1', tmp_path / "zarr.json")
    with pytest.raises(DamagedMetadataError, match="not an object"):
        parse_json(b'[1, 2]', tmp_path / "zarr.json")


def test_numpy_values_in_a_datasets_attributes_are_written_as_numbers(tmp_path):
    # orjson refuses numpy scalars: a dataset made with attrs={"Re": np.float64(1000)} failed
    # after its arrays were written, leaving a half-made directory.
    ds = turbdb.create_dataset(tmp_path, "a", grid=(8, 8, 8), times=[0.0], fields={"p": 1}, atom=4, partition=8,
                               attrs={"Re": np.float64(1000.0)})
    attrs = json.loads((ds.path / "zarr.json").read_text())["attributes"]["turbdb"]
    assert (attrs.get("attrs") or attrs)["Re"] == 1000.0
