"""The binary transport of the service: ``.npy`` bodies encoded without copies and decoded
with size and type checks (never pickles), plus a streamed NetCDF-3 writer for cutouts."""

from __future__ import annotations

import ast
import math
import io
import re
import struct
from typing import Any

import numpy as np

from ..exceptions import FormatError, LimitExceededError

NPY = "application/x-npy"
NETCDF = "application/x-netcdf"
MAGIC = b"\x93NUMPY"
# Float and integer dtypes only: an object dtype would need pickle, which is never loaded.
_ACCEPTED_KINDS = "fiu"
_NUMPY_HEADER = re.compile(
    rb"\{'descr': '(?P<descr>[<>|=]?[fiu][0-9]{1,2})', 'fortran_order': (?P<fortran>True|False), "
    rb"'shape': \((?P<shape>[0-9, ]*)\), \} *\n")


def npy_header(dtype: Any, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header of a C-ordered array, byte for byte what ``np.save`` writes before
    the data: a stream can send it first and the data in slabs after it."""
    out = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
              "shape": tuple(int(n) for n in shape)}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue()


def encode_npy(array: np.ndarray) -> bytes:
    """An array as ``.npy`` bytes (one copy: header and data joined)."""
    array = np.asarray(array)
    array = array if array.flags.c_contiguous else array.copy(order="C")
    return npy_header(array.dtype, array.shape) + array.reshape(-1).view(np.uint8).data


def decode_npy(body: bytes | bytearray | memoryview, *, max_bytes: int | None = None) -> np.ndarray:
    """Reads an ``.npy`` body into an array without copying the data. Refuses anything but
    a plain numeric array whose declared size matches the body."""
    view = memoryview(body)
    if max_bytes is not None and len(view) > max_bytes:
        raise LimitExceededError(f"the .npy body has {len(view)} bytes; this request may send at most {max_bytes}")
    if len(view) < 10 or bytes(view[:6]) != MAGIC:
        raise FormatError("the body is not a .npy file (it must start with the \\x93NUMPY magic; write it with np.save)")
    major = view[6]
    if major == 1:
        header_len, start = struct.unpack("<H", view[8:10])[0], 10
    elif major in (2, 3):
        if len(view) < 12:
            raise FormatError("the .npy header is truncated")
        header_len, start = struct.unpack("<I", view[8:12])[0], 12
    else:
        raise FormatError(f"unsupported .npy format version {major}.{view[7]}")
    if header_len > 65536 or start + header_len > len(view):
        raise FormatError("the .npy header is truncated or too long")
    text = bytes(view[start:start + header_len])
    fast = _NUMPY_HEADER.fullmatch(text)
    try:
        if fast:  # what np.save writes: skip the Python parser (a tenth of a millisecond)
            dtype = np.dtype(fast["descr"].decode())
            shape = tuple(int(n) for n in fast["shape"].split(b",") if n.strip())
            fortran = fast["fortran"] == b"True"
        else:
            header = ast.literal_eval(text.decode("latin1" if major < 3 else "utf8"))
            dtype = np.dtype(np.lib.format.descr_to_dtype(header["descr"]))
            shape = tuple(int(n) for n in header["shape"])
            fortran = bool(header["fortran_order"])
    except (ValueError, SyntaxError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise FormatError(f"the .npy header does not parse ({type(e).__name__}); write the file with np.save") from None
    if dtype.kind not in _ACCEPTED_KINDS or dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise FormatError(f"the .npy array has dtype {dtype}; send float64 or float32 numbers")
    if any(n < 0 for n in shape):
        raise FormatError(f"the .npy array has a negative dimension {shape}")
    data = view[start + header_len:]
    expected = math.prod(shape) * dtype.itemsize  # exact: int64 would wrap for a shape like (2**62, 4)
    if len(data) != expected:
        raise FormatError(f"the .npy body holds {len(data)} data bytes; its header {shape} {dtype} needs {expected}")
    array = np.frombuffer(data, dtype=dtype)
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


def load_npy_bytes(body: bytes) -> np.ndarray:
    """Client side: an ``.npy`` answer as a writable array of its own (like a local answer)."""
    return decode_npy(body).copy()


# -- NetCDF-3 (64-bit offset, "CDF-2") written as a stream --------------------------------------
#
# A classic NetCDF file is a header followed by each variable's values in turn, big-endian.
# The header only needs the shapes, so a cutout can be sent header first and then slab by
# slab, never held whole in memory. The big data variable goes last: in CDF-2 the last
# fixed-size variable may exceed 4 GiB.

_NC_BYTE, _NC_CHAR, _NC_INT, _NC_FLOAT, _NC_DOUBLE = 1, 2, 4, 5, 6
_NC_DIMENSION, _NC_VARIABLE, _NC_ATTRIBUTE = 10, 11, 12
_NC_TYPES = {np.dtype(">f4"): _NC_FLOAT, np.dtype(">f8"): _NC_DOUBLE, np.dtype(">i4"): _NC_INT, np.dtype("S1"): _NC_CHAR}


def _nc_name(name: str) -> bytes:
    raw = name.encode()
    return struct.pack(">i", len(raw)) + raw + b"\0" * (-len(raw) % 4)


def _nc_attrs(attrs: dict[str, Any]) -> bytes:
    if not attrs:
        return struct.pack(">ii", 0, 0)
    out = struct.pack(">ii", _NC_ATTRIBUTE, len(attrs))
    for key, value in attrs.items():
        out += _nc_name(key)
        if isinstance(value, str):
            raw = value.encode()
            out += struct.pack(">ii", _NC_CHAR, len(raw)) + raw + b"\0" * (-len(raw) % 4)
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            out += struct.pack(">iii", _NC_INT, 1, int(value))
        elif isinstance(value, (list, tuple)):  # integers, as a stride of three (1, 2, 2)
            out += struct.pack(f">ii{len(value)}i", _NC_INT, len(value), *map(int, value))
        else:
            out += struct.pack(">iid", _NC_DOUBLE, 1, float(value))
    return out


class NetCDFStream:
    """Writes a NetCDF-3 file of fixed-size variables as a header and then each variable's
    big-endian bytes in declaration order. ``variables`` maps a name to
    ``(dims, dtype, attrs)``; all but the last are given whole with :meth:`small_data`,
    the last is sent in slabs along its first dimension by the caller."""

    def __init__(self, dims: dict[str, int], variables: dict[str, tuple[tuple[str, ...], Any, dict]],
                 attrs: dict[str, Any]):
        self.dims = dims
        self.variables = {n: (d, np.dtype(t).newbyteorder(">") if np.dtype(t).kind != "S" else np.dtype("S1"), a)
                          for n, (d, t, a) in variables.items()}
        self.attrs = attrs

    def _vsize(self, name: str) -> int:
        dims, dtype, _ = self.variables[name]
        return int(np.prod([self.dims[d] for d in dims], dtype=np.int64)) * dtype.itemsize

    def header(self) -> bytes:
        dim_index = {d: i for i, d in enumerate(self.dims)}
        head = b"CDF\x02" + struct.pack(">i", 0)
        head += struct.pack(">ii", _NC_DIMENSION, len(self.dims))
        for d, n in self.dims.items():
            head += _nc_name(d) + struct.pack(">i", n)
        head += _nc_attrs(self.attrs)
        entries = []
        for name, (dims, dtype, attrs) in self.variables.items():
            entry = _nc_name(name) + struct.pack(">i", len(dims)) + b"".join(struct.pack(">i", dim_index[d]) for d in dims)
            entry += _nc_attrs(attrs) + struct.pack(">i", _NC_TYPES[dtype])
            entries.append((name, entry))
        var_list = struct.pack(">ii", _NC_VARIABLE, len(entries))
        # Each entry ends with vsize (4 bytes) and begin (8 bytes, CDF-2): lay out offsets.
        offset = len(head) + len(var_list) + sum(len(e) + 12 for _, e in entries)
        tail = b""
        for name, entry in entries:
            size = self._vsize(name)
            padded = size + (-size % 4)
            vsize = padded if padded < 2**32 - 4 else 2**32 - 1
            tail += entry + struct.pack(">Iq", vsize, offset)
            offset += padded
        return head + var_list + tail

    def small_data(self, name: str, values: Any) -> bytes:
        """A whole (small) variable's bytes, padded to 4 bytes."""
        dims, dtype, _ = self.variables[name]
        if dtype.kind == "S":
            width = self.dims[dims[-1]]
            raw = b"".join(str(v).encode()[:width].ljust(width, b"\0") for v in values)
        else:
            raw = np.ascontiguousarray(values, dtype=dtype).tobytes()
        return raw + b"\0" * (-len(raw) % 4)

    def total_bytes(self) -> int:
        return len(self.header()) + sum(self._vsize(n) + (-self._vsize(n) % 4) for n in self.variables)
