"""Zarr v3 metadata documents of a turbdb database, written atomically (aside, then rename)
so that a reader never sees half a ``zarr.json``. A file rewritten keeps its permissions
and group (the writer's umask would narrow them: :mod:`turbdb.permissions`); a new file is
created with the process's umask, like the shards of a new dataset."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from .exceptions import DamagedMetadataError, FormatError, StorageError
from .permissions import keep_permissions, unreadable

TEMP_PREFIX = ".turbdb-tmp-"

ZARR_JSON = "zarr.json"

#: Array attribute saying that every shard starts with the header binding it to its place
#: (docs/format.md); arrays without it (written before headers existed) may lack headers.
SHARD_HEADER_ATTRIBUTE = "turbdb_shard_header"
#: Array attribute: the field's random 64-bit id (16 hex digits), which every shard header
#: carries, so that a shard copied from another dataset of the same grid is refused.
#: Fields made before ids existed have none.
FIELD_ID_ATTRIBUTE = "turbdb_field_id"
#: Codecs of one atom (inner chunk): raw little-endian float32 followed by a crc32c, so a
#: flipped byte anywhere in a shard is found by ``turbdb verify``.
ATOM_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
INDEX_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]


@contextlib.contextmanager
def replacing(path: Path, mode: str = "w", *, like: Path | None = None) -> Iterator[IO[Any]]:
    """A file to write ``path``'s new content to: created beside it with the permissions
    and group of ``path`` where it exists, else of ``like`` (a sibling) where given and
    there, else mode 0o666 less the umask; renamed over ``path`` when the block ends,
    removed if it fails. A full or read-only disk is a :class:`StorageError` that says so."""
    tmp = path.parent / f"{TEMP_PREFIX}{path.name}-{secrets.token_hex(6)}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, mode) as f:
            keep_permissions(fd, path if os.path.lexists(path) or like is None else like)
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, StorageError):
            raise storage_error(e, path) from None
        raise


def storage_error(error: OSError, path: Path) -> StorageError:
    """An operating-system error while writing ``path``, as a StorageError that says what to do."""
    reason = error.strerror or str(error)
    hint = {errno.ENOSPC: "the disk is full: free some space", errno.EROFS: "the file system is read-only",
            errno.EACCES: "check the permissions", errno.EPERM: "check the permissions",
            errno.EFBIG: "the file size limit is reached", errno.EDQUOT: "the disk quota is reached"}.get(error.errno)
    return StorageError(f"cannot write {path}: {reason}" + (f" ({hint})" if hint else ""))


def write_json_atomic(path: Path, document: dict[str, Any]) -> None:
    """Writes ``document`` to ``path`` through a temporary file and a rename. Encoded by
    orjson: the standard encoder runs in pure Python once indenting, and a dataset's
    ``zarr.json`` is written again at every step stored (14 of 18 ms a step at 4 000
    times). Integer keys are written as strings, as ``json`` does; what orjson cannot encode
    (numpy scalars in user attributes, integers past 64 bits) is written by ``json``."""
    try:
        data = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError too
        data = json.dumps(document, indent=2, allow_nan=False).encode()
    with replacing(path, "wb") as f:
        f.write(data)


def read_json(path: Path) -> dict[str, Any]:
    """Reads a ``zarr.json``; a missing or unparsable one is a clear error."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StorageError(f"{path} does not exist") from None
    except PermissionError:  # not missing, not damaged: said as what it is
        raise unreadable(path) from None
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e.strerror or e}") from None
    return parse_json(data, path)


def parse_json(data: bytes, path: Path) -> dict[str, Any]:
    """The document of the ``zarr.json`` at ``path`` whose bytes are ``data``; an
    unparsable one is a clear error. Parsed by orjson (a dataset's metadata is read again
    after every step another process stores); what it refuses (NaN literals, deep nesting)
    by ``json``, which says what is wrong. (Integers past 64 bits come back as floats:
    turbdb writes none.)"""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        document = None
    try:
        if document is None:
            document = json.loads(data.decode())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise DamagedMetadataError(f"{path} is not valid JSON ({e}); the metadata is damaged") from None
    if not isinstance(document, dict):
        raise DamagedMetadataError(f"{path} holds a JSON {type(document).__name__}, not an object; the metadata is damaged")
    return document


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
    """A field array ``(nt, nz, ny, nx, ncomp)`` sharded by partition, chunked by atom, with
    a new random id."""
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
        "attributes": {SHARD_HEADER_ATTRIBUTE: 1, FIELD_ID_ATTRIBUTE: secrets.token_hex(8)},
        "dimension_names": ["time", "z", "y", "x", f"{field}_component"],
    }


def field_id(document: dict[str, Any], path: Path) -> int | None:
    """The id a field array's attributes give it (``None``: made before ids existed)."""
    value = (document.get("attributes") or {}).get(FIELD_ID_ATTRIBUTE)
    if value is None:
        return None
    if isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value):
        return int(value, 16)
    raise DamagedMetadataError(f"{path}: {FIELD_ID_ATTRIBUTE} must be 16 hex digits, not {value!r}; the metadata is damaged")


def coordinate_document(name: str, length: int, chunk: int | None = None) -> dict[str, Any]:
    """A 1-D float64 coordinate array in uncompressed chunks of ``chunk`` values (default:
    one chunk)."""
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [length],
        "data_type": "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk or max(length, 1)]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
        "dimension_names": [name],
    }


#: Values per chunk of the time coordinate. A fixed size (the last chunk padded with NaN)
#: keeps a chunk's size the same as steps are appended: a reader holding the metadata of
#: before an append reads the grown chunk as it read the old one, where a chunk as long as
#: the array made it fail ("cannot reshape") while a dataset grew.
TIME_CHUNK = 1024


def write_coordinate(group: Path, name: str, values: np.ndarray, *, chunk: int | None = None) -> None:
    """Writes (or rewrites) the coordinate array ``name`` of a dataset group: in one chunk,
    or in chunks of ``chunk`` values (the last padded with NaN). The chunks are written
    before the array's ``zarr.json``, and chunks past the new end are removed last."""
    values = np.asarray(values, dtype="<f8")
    directory = group / name
    size = chunk or max(len(values), 1)
    count = max(-(-len(values) // size), 1)
    for i in range(count):
        piece = values[i * size:(i + 1) * size]
        if chunk:  # every chunk whole: the last padded
            piece = np.pad(piece, (0, size - len(piece)), constant_values=np.nan)
        # A chunk the time axis grows into takes chunk 0's permissions, as a rewrite keeps them.
        with replacing(directory / "c" / str(i), "wb", like=directory / "c" / "0") as f:
            f.write(piece.tobytes())
    write_json_atomic(directory / ZARR_JSON, coordinate_document(name, len(values), size))
    for stale in (directory / "c").glob("*"):
        if stale.name.isdigit() and int(stale.name) >= count:
            stale.unlink(missing_ok=True)


def parse_atom_codecs(document: dict[str, Any], path: Path) -> dict[str, Any]:
    """The layout of a field array as the Rust reader needs it: atom and partition sizes,
    whether atoms are zstd-compressed or checksummed, where the index sits, whether every
    shard carries a header, the field's id. Arrays written by other Zarr tools are accepted
    when the engine can read them; a document that does not parse is a
    :class:`DamagedMetadataError`."""
    try:
        shape = document["shape"]
        shard = document["chunk_grid"]["configuration"]["chunk_shape"]
        (sharding,) = [c for c in document["codecs"] if c["name"] == "sharding_indexed"]
        config = sharding["configuration"]
        inner = config["chunk_shape"]
        codecs = [c["name"] for c in config["codecs"]]
        endian = config["codecs"][0].get("configuration", {}).get("endian", "little")
        cubes = shard[0] == inner[0] == 1 and shard[1] == shard[2] == shard[3] and inner[1] == inner[2] == inner[3]
        layout = {
            "atom": int(inner[1]),
            "partition": int(shard[1]),
            "zstd": "zstd" in codecs,
            "crc32c": "crc32c" in codecs,
            "index_at_end": config.get("index_location", "end") == "end",
            "headers_required": (document.get("attributes") or {}).get(SHARD_HEADER_ATTRIBUTE) == 1,
            "field_id": field_id(document, path),
        }
    except (KeyError, ValueError, TypeError, AttributeError, IndexError):
        raise DamagedMetadataError(f"{path} is not a sharded turbdb field array; the metadata is damaged") from None
    if document.get("data_type") != "float32" or len(shape) != 5:
        raise FormatError(f"{path}: fields must be float32 arrays (t, z, y, x, c)")
    if not cubes:
        raise FormatError(f"{path}: shards and atoms must be cubes of one time step")
    supported = {"bytes", "zstd", "crc32c"}
    if not set(codecs) <= supported or codecs[0] != "bytes":
        raise FormatError(f"{path}: atom codecs {codecs} are not supported (bytes, zstd, crc32c)")
    if endian != "little":
        raise FormatError(f"{path}: big-endian fields are not supported")
    return layout
