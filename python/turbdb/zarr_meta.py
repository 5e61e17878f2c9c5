"""Zarr v3 metadata documents of a turbdb database, written atomically (aside, then rename)
so that a reader never sees half a ``zarr.json``."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .exceptions import FormatError, StorageError

ZARR_JSON = "zarr.json"

#: Codecs of one atom (inner chunk): raw little-endian float32 followed by a crc32c, so a
#: flipped byte anywhere in a shard is found by ``turbdb verify``.
ATOM_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
INDEX_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]


def write_json_atomic(path: Path, document: dict[str, Any]) -> None:
    """Writes ``document`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".turbdb-tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=2, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any]:
    """Reads a ``zarr.json``; a missing or unparsable one is a clear error."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise StorageError(f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"{path} is not valid JSON ({e}); the metadata is damaged") from None


def group_document(attributes: dict[str, Any], consolidated: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Zarr v3 group, with the consolidated metadata of its children when given."""
    document: dict[str, Any] = {"zarr_format": 3, "node_type": "group", "attributes": attributes}
    if consolidated is not None:
        document["consolidated_metadata"] = consolidated
    return document


def consolidated_metadata(group: Path) -> dict[str, Any]:
    """The ``consolidated_metadata`` entry of a group's ``zarr.json`` as zarr-python 3 writes
    it: every child array's document, inline. xarray opens a consolidated group with one
    read and without its "failed to open with consolidated metadata" warning. Not part of
    the Zarr v3 specification; readers that ignore it read the children instead."""
    children = {}
    for child in sorted(p for p in group.iterdir() if (p / ZARR_JSON).is_file()):
        document = read_json(child / ZARR_JSON)
        if document.get("node_type") == "array":
            children[child.name] = document
    return {"kind": "inline", "must_understand": False, "metadata": children}


def field_document(
    *, nt: int, grid: tuple[int, int, int], ncomp: int, atom: int, partition: int, field: str
) -> dict[str, Any]:
    """A field array ``(nt, nz, ny, nx, ncomp)`` sharded by partition, chunked by atom."""
    nx, ny, nz = grid
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [nt, nz, ny, nx, ncomp],
        "data_type": "float32",
        "chunk_grid": {
            "name": "regular",
            "configuration": {"chunk_shape": [1, partition, partition, partition, ncomp]},
        },
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [1, atom, atom, atom, ncomp],
                    "codecs": ATOM_CODECS,
                    "index_codecs": INDEX_CODECS,
                    "index_location": "end",
                },
            }
        ],
        "attributes": {},
        "dimension_names": ["time", "z", "y", "x", f"{field}_component"],
    }


def coordinate_document(name: str, length: int) -> dict[str, Any]:
    """A 1-D float64 coordinate array stored as one uncompressed chunk."""
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [length],
        "data_type": "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(length, 1)]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
        "dimension_names": [name],
    }


def write_coordinate(group: Path, name: str, values: np.ndarray) -> None:
    """Writes (or rewrites) the coordinate array ``name`` of a dataset group."""
    values = np.asarray(values, dtype="<f8")
    directory = group / name
    chunk = directory / "c" / "0"
    chunk.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".turbdb-tmp-", dir=chunk.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(values.tobytes())
    os.replace(tmp, chunk)
    write_json_atomic(directory / ZARR_JSON, coordinate_document(name, len(values)))


def parse_atom_codecs(document: dict[str, Any], path: Path) -> dict[str, Any]:
    """The layout of a field array as the Rust reader needs it: atom and partition sizes,
    whether atoms are zstd-compressed or checksummed, where the index sits. Arrays written
    by other Zarr tools are accepted when the engine can read them."""
    try:
        shape = document["shape"]
        shard = document["chunk_grid"]["configuration"]["chunk_shape"]
        (sharding,) = [c for c in document["codecs"] if c["name"] == "sharding_indexed"]
        config = sharding["configuration"]
        inner = config["chunk_shape"]
        codecs = [c["name"] for c in config["codecs"]]
    except (KeyError, ValueError, TypeError):
        raise FormatError(f"{path} is not a sharded turbdb field array") from None
    if document.get("data_type") != "float32" or len(shape) != 5:
        raise FormatError(f"{path}: fields must be float32 arrays (t, z, y, x, c)")
    if not (shard[0] == inner[0] == 1 and shard[1] == shard[2] == shard[3] and inner[1] == inner[2] == inner[3]):
        raise FormatError(f"{path}: shards and atoms must be cubes of one time step")
    supported = {"bytes", "zstd", "crc32c"}
    if not set(codecs) <= supported or codecs[0] != "bytes":
        raise FormatError(f"{path}: atom codecs {codecs} are not supported (bytes, zstd, crc32c)")
    endian = config["codecs"][0].get("configuration", {}).get("endian", "little")
    if endian != "little":
        raise FormatError(f"{path}: big-endian fields are not supported")
    return {
        "atom": inner[1],
        "partition": shard[1],
        "zstd": "zstd" in codecs,
        "crc32c": "crc32c" in codecs,
        "index_at_end": config.get("index_location", "end") == "end",
    }
