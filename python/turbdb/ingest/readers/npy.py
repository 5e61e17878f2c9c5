"""Reads ``.npy`` files through a memory map, so a multi-step file is read one step at a time."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from turbdb.exceptions import FormatError
from turbdb.ingest.axes import Layout, resolve_axes
from turbdb.ingest.format_spec import Format
from turbdb.ingest.source import MemmapSource, float_dtype

__all__ = ["FORMAT", "NpySource"]


def read_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran_order, dtype, data offset) from an .npy header."""
    try:
        with path.open("rb") as f:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = npy_format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                # Version 3 differs from 2 only in allowing utf-8 field names, which a float
                # array never has.
                shape, fortran, dtype = npy_format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            return shape, fortran, dtype, f.tell()
    except (ValueError, EOFError, SyntaxError) as e:
        raise FormatError(
            f"{path} is not a readable .npy file ({e}); re-write it with numpy.save or pass "
            "format= if it is something else"
        ) from e


class NpySource(MemmapSource):
    """One array in an .npy file; with a t axis it holds several steps."""

    format = "npy"

    def __init__(self, path: Path, *, axes: str | None = None) -> None:
        shape, fortran, dtype, offset = read_header(path)
        what = str(path)
        native = float_dtype(dtype, what=what)
        expected = offset + math.prod(shape) * dtype.itemsize
        size = path.stat().st_size
        if size < expected:
            raise FormatError(
                f"{path} is truncated: its header promises shape {shape} of {dtype} "
                f"({expected} bytes with the header) but the file has {size}; copy or "
                "write it again"
            )
        if size > expected:
            raise FormatError(
                f"{path} has {size - expected} bytes after its array of shape {shape} "
                f"({dtype}); it may hold several arrays saved one after another — save "
                "them as one array with a time axis instead"
            )
        layout = Layout(resolve_axes(axes, shape, what=what), shape)
        super().__init__(path, key="", layout=layout, dtype=native)
        self._file_dtype = dtype
        self._offset = offset
        self._order = "F" if fortran else "C"


FORMAT = Format(
    name="npy",
    label="npy",
    open=NpySource,
    extensions=(".npy",),
    signature=lambda head: head.startswith(b"\x93NUMPY"),
)
