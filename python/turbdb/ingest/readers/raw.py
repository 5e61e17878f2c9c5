"""Reads raw binary arrays (C or Fortran order, either byte order), including Fortran
unformatted sequential files, whose records are framed by length markers."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from turbdb.exceptions import FormatError, InvalidRequestError
from turbdb.ingest.axes import Layout, resolve_axes
from turbdb.ingest.format_spec import Format, Option
from turbdb.ingest.source import MemmapSource, Source, float_dtype

__all__ = ["FORMAT", "RawSource", "fortran_records"]

# Walking more records than this is not worth it: no simulation writes that many.
_MAX_RECORDS = 1_000_000


def fortran_records(path: Path, size: int, byteorder: str) -> list[tuple[int, int]] | None:
    """The (offset, length) of each record's data if ``path`` is a Fortran unformatted
    sequential file, else None.

    Each record is framed by its length before and after, in 4-byte integers (gfortran,
    ifort) or 8-byte ones (old gfortran). A record over 2 GiB is split into subrecords whose
    markers are negative; their data simply follow one another.
    """
    found = fortran_markers(path, size, byteorder)
    return found[0] if found else None


def fortran_markers(path: Path, size: int, byteorder: str) -> tuple[list[tuple[int, int]], str] | None:
    """:func:`fortran_records` and the byte order of the markers that frame them."""
    orders = ("big", "little") if byteorder == "big" else ("little", "big")
    with path.open("rb") as f:
        for marker in (4, 8):
            for order in orders:
                records = _walk(f, size, marker, order)
                if records is not None:
                    return records, order
    return None


def _walk(f: BinaryIO, size: int, marker: int, order: str) -> list[tuple[int, int]] | None:
    records: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        if pos + 2 * marker > size or len(records) >= _MAX_RECORDS:
            return None
        f.seek(pos)
        n = abs(int.from_bytes(f.read(marker), order, signed=True))
        end = pos + marker + n
        # Empty records are rare in simulation output but common by chance in zero-filled data.
        if n == 0 or end + marker > size:
            return None
        f.seek(end)
        if abs(int.from_bytes(f.read(marker), order, signed=True)) != n:
            return None
        records.append((pos + marker, n))
        pos = end + marker
    return records or None


class RawSource(MemmapSource):
    """A headerless array of known dtype and shape; with a t axis it holds several steps."""

    format = "raw"

    def __init__(
        self,
        path: Path,
        *,
        dtype: np.dtype,
        shape: tuple[int, ...],
        order: str = "C",
        axes: str | None = None,
    ) -> None:
        what = f"raw file {path}"
        native = float_dtype(dtype, what=what)
        layout = Layout(resolve_axes(axes, shape, what=what, order=order), shape)
        expected = math.prod(shape) * dtype.itemsize
        size = path.stat().st_size
        self._file_dtype = dtype
        self._order = order
        self._offset = 0
        self._records: list[tuple[int, int]] | None = None
        if size != expected:
            byteorder = {">": "big", "<": "little"}.get(dtype.byteorder, sys.byteorder)
            found = fortran_markers(path, size, byteorder)
            records = found[0] if found else None
            if found and found[1] != byteorder and dtype.itemsize > 1:
                # A compiler writes the markers and the values in one byte order: values read
                # in the other are finite garbage for smooth data, stored without a word.
                wanted = dtype.newbyteorder(">" if found[1] == "big" else "<").str
                raise FormatError(
                    f"{what} is a Fortran sequential file whose record markers are {found[1]}-endian, but "
                    f"--dtype {dtype.str!r} reads its values as {byteorder}-endian: give --dtype {wanted!r} "
                    "(compilers write both in one byte order, e.g. gfortran -fconvert=big-endian)"
                )
            payload = sum(n for _, n in records) if records else size
            if payload != expected:
                raise FormatError(
                    _size_message(what, size, records, payload, layout, dtype, order, path=path)
                )
            if len(records) == 1:
                self._offset = records[0][0]
            else:
                slowest = layout.axes[0] if order == "C" else layout.axes[-1]
                if layout.n_steps > 1 and slowest != "t":
                    raise FormatError(
                        f"{what} is a Fortran sequential file of {len(records)} records, which "
                        "turbdb reads only when time is the slowest axis (the last one in "
                        f"Fortran order); its axes are {layout.axes!r} — rewrite it as one record "
                        "or with time last"
                    )
                self._records = records
        super().__init__(path, key="", layout=layout, dtype=native)

    def _read_blocks(self, key: tuple[int | slice, ...]) -> list[np.ndarray]:
        if self._records is not None:
            return [self._gather(key)]
        return super()._read_blocks(key)

    def _gather(self, key: tuple[int | slice, ...]) -> np.ndarray:
        """One step read across record markers (time is the slowest axis here)."""
        step = next((k for k in key if isinstance(k, int)), 0)
        nbytes = math.prod(self.layout.step_shape) * self._file_dtype.itemsize
        start, stop = step * nbytes, (step + 1) * nbytes
        buf = np.empty(nbytes, dtype=np.uint8)
        at = 0  # position in the concatenated record data
        with self.path.open("rb") as f:
            for offset, n in self._records or ():
                lo, hi = max(start, at), min(stop, at + n)
                if lo < hi:
                    f.seek(offset + lo - at)
                    if f.readinto(memoryview(buf)[lo - start : hi - start]) != hi - lo:
                        raise OSError(f"{self.path} ended early")
                at += n
                if at >= stop:
                    break
        return buf.view(self._file_dtype).reshape(self.layout.step_shape, order=self._order)


def _size_message(
    what: str,
    size: int,
    records: list[tuple[int, int]] | None,
    payload: int,
    layout: Layout,
    dtype: np.dtype,
    order: str,
    *,
    path: Path,
) -> str:
    shape, axes = layout.shape, layout.axes
    expected = math.prod(shape) * dtype.itemsize
    msg = f"{what} has {size} bytes but shape {shape} of {dtype} needs {expected}"
    if records:
        msg += (
            f" (it is a Fortran sequential file whose {len(records)} record(s) hold "
            f"{payload} bytes of data: {_record_sizes([n for _, n in records])})"
        )
        # write(10) nx, ny, nz before write(10) u: no shape or dtype reads past such a record.
        stripped = _strip_records(records, expected, path)
        if stripped:
            return f"{msg}; {stripped}"
    hints = []
    step_bytes = expected // layout.n_steps
    if payload % step_bytes == 0 and payload > step_bytes:
        k = payload // step_bytes
        if "t" in axes:
            t = axes.index("t")
            new_shape, new_axes = shape[:t] + (k,) + shape[t + 1 :], axes
        elif order == "F":
            new_shape, new_axes = shape + (k,), axes + "t"
        else:
            new_shape, new_axes = (k,) + shape, "t" + axes
        hints.append(
            f"if it holds {k} steps of {layout.step_shape}, pass shape {new_shape} with axes "
            f"{new_axes!r} (--shape {','.join(map(str, new_shape))} --axes {new_axes})"
        )
    fits = [
        name
        for name in ("float16", "float32", "float64")
        if np.dtype(name).itemsize != dtype.itemsize
        and payload == math.prod(shape) * np.dtype(name).itemsize
    ]
    if fits:
        hints.append(f"if it holds {fits[0]} data, pass dtype {fits[0]} (--dtype)")
    if not hints and records:
        return (f"{msg}; turbdb reads only files whose records all hold field data (one record, one per step or one "
                "per component): if some hold a header or the time, write the file without them; else check "
                "--shape/--dtype")
    if not hints:
        return f"{msg}; check --shape/--dtype"
    return f"{msg}; {'; or '.join(hints)}"


def _record_sizes(sizes: list[int], shown: int = 8) -> str:
    """``12 + 16384`` or ``8 + 3 x 16384 + …``: the sizes of consecutive records."""
    groups: list[list[int]] = []
    for n in sizes:
        if groups and groups[-1][0] == n:
            groups[-1][1] += 1
        else:
            groups.append([n, 1])
    terms = [f"{count} x {n}" if count > 1 else str(n) for n, count in groups[:shown]]
    return " + ".join(terms) + (" + …" if len(groups) > shown else "") + " bytes"


def _strip_records(records: list[tuple[int, int]], expected: int, path: Path) -> str | None:
    """What to do with a file whose first or last few records are no field data (a header of
    nx, ny, nz, the time) and whose others hold just what the shape needs; None if it is not
    such a file."""
    marker = records[0][0]
    count = len(records)
    total = sum(n for _, n in records)
    for dropped in range(1, min(count - 1, 6) + 1):
        for head in range(dropped + 1):
            tail = dropped - head
            kept = records[head : count - tail]
            dropped_sizes = [n for _, n in records[:head] + records[count - tail :]]
            # A header is shorter than any record of field data; a record as long is a step or component.
            if total - sum(dropped_sizes) != expected or max(dropped_sizes) >= min(n for _, n in kept):
                continue
            start, end = kept[0][0] - marker, kept[-1][0] + kept[-1][1] + marker
            others = [f"record {i + 1} ({n} bytes)" for i, (_, n) in enumerate(records)
                      if not head <= i < count - tail]
            out = f"{path.stem}_field{path.suffix}"
            if tail == 0:
                command = f"tail -c +{start + 1} {path.name} > {out}"
            elif head == 0:
                command = f"head -c {end} {path.name} > {out}"
            else:
                command = f"tail -c +{start + 1} {path.name} | head -c {end - start} > {out}"
            return (f"turbdb reads only files whose records all hold field data, and {', '.join(others)} "
                    f"{'does' if len(others) == 1 else 'do'} not (a header such as nx, ny, nz or the time?): "
                    f"write the file without {'it' if len(others) == 1 else 'them'}, or strip "
                    f"{'it' if len(others) == 1 else 'them'} ({command}) and ingest {out}")
    return None


def _parse_dtype(dtype: Any) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError as e:
        raise InvalidRequestError(
            f"dtype {dtype!r} is not a numpy dtype; use e.g. float32, <f8 or >f4 (big-endian)"
        ) from e


def _parse_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, str):
        parts = [p for p in re.split(r"[,x×\s]+", shape.strip("()[] ")) if p]
    else:
        try:
            parts = list(shape)
        except TypeError:
            parts = [shape]
    try:
        dims = tuple(int(p) for p in parts)
        exact = all(int(p) == float(p) for p in parts)
    except (TypeError, ValueError):
        dims, exact = (), False
    if not dims or not exact or min(dims) < 1:
        raise InvalidRequestError(
            f"shape {shape!r} is not a list of positive integers; give e.g. (nz, ny, nx, 3) "
            "or '64,64,64,3'"
        )
    return dims


def _parse_order(order: Any) -> str:
    norm = order.upper() if isinstance(order, str) else order
    if norm not in ("C", "F"):
        raise InvalidRequestError(f"order must be 'C' or 'F' (Fortran); got {order!r}")
    return norm


def _open(
    path: Path, *, dtype: np.dtype | None, shape: tuple[int, ...] | None, order: str, axes: str | None
) -> Source:
    # A file is often read as raw because nothing recognised it: say what is missing.
    if dtype is None or shape is None:
        lacking = " and ".join(k for k, v in (("dtype", dtype), ("shape", shape)) if v is None)
        raise InvalidRequestError(
            f"{path} is read as raw binary, which needs {lacking} (e.g. dtype='float32', "
            "shape=(nz, ny, nx, 3)); pass them, or pass format= if it is another format"
        )
    return RawSource(path, dtype=dtype, shape=shape, order=order, axes=axes)


FORMAT = Format(
    name="raw",
    label="raw binary",
    open=_open,
    options=(
        Option("dtype", "value type, e.g. float32, <f8, >f4 (big-endian Fortran).", _parse_dtype),
        Option("shape", "array shape as declared by the writer, e.g. 64,64,64,3.", _parse_shape),
        Option(
            "order", "C (row-major) or F (Fortran, column-major).", _parse_order,
            default="C", choices=("C", "F"),
        ),
    ),
    aliases=("bin", "binary"),
    fallback=True,
)
