"""The files of a Zarr directory store, checked before zarr-python opens them: what would
make it wait forever (a FIFO in place of a chunk) or read damaged data without a word (a
truncated Blosc chunk)."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

from turbdb.exceptions import FormatError

__all__ = ["check_blosc_chunks", "check_regular_files"]

#: The documents of a Zarr node: every other file below an array's directory is a chunk.
METADATA_FILES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
#: Blosc's frame header: version, versionlz, flags, typesize, then nbytes, blocksize and
#: cbytes (the frame's whole length) as little-endian uint32.
_BLOSC_HEADER = struct.Struct("<BBBBIII")


def check_regular_files(store: Path) -> None:
    """Refuses a store holding anything but directories and regular files: opening a FIFO
    waits for a writer that never comes (an ingest hung, and left a half-made dataset)."""
    strange = []
    for directory, _, files in os.walk(store):
        for name in files:
            path = os.path.join(directory, name)
            try:
                mode = os.stat(path).st_mode
            except OSError as e:  # a dangling link, say: named with the rest
                strange.append(f"{path} ({e.strerror or e})")
                continue
            if not stat.S_ISREG(mode):
                strange.append(f"{path} ({_kind(mode)})")
    if strange:
        listed = ", ".join(strange[:3]) + (f" and {len(strange) - 3} more" if len(strange) > 3 else "")
        raise FormatError(f"{store} holds {len(strange)} file(s) that are not regular files: {listed}; reading them "
                          "could wait forever, so nothing was read: replace them with the chunk files they stand for")


def check_blosc_chunks(array_dir: Path, *, what: str = "") -> None:
    """Refuses a Blosc chunk shorter than its header says: numcodecs decompresses a truncated
    one without a word, into whatever memory held before (other codecs fail on it).
    ``what``: the array, where the store holds several."""
    of = f" of {what}" if what else ""
    for directory, _, files in os.walk(array_dir):
        for name in files:
            if name in METADATA_FILES or name.startswith("."):
                continue
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                header = f.read(_BLOSC_HEADER.size)
                size = os.fstat(f.fileno()).st_size
            if len(header) < _BLOSC_HEADER.size:
                raise FormatError(f"chunk {path}{of} is {size} bytes, too short for a Blosc chunk: it is "
                                  "damaged (truncated); copy the store again from where it was written")
            cbytes = _BLOSC_HEADER.unpack(header)[6]
            if size < cbytes:
                raise FormatError(f"chunk {path}{of} is {size} bytes, but its Blosc header says {cbytes}: it is "
                                  "truncated (an interrupted copy or write); copy the store again from where it was "
                                  "written")


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")
