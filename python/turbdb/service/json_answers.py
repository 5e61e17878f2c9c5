"""Arrays answered as JSON, encoded a slice at a time. ``json.dumps(values.tolist())`` of a
10⁵-point float64 gradient held 900 000 Python floats and the whole text at once: about
117 MiB of server memory against 22 MiB for the same answer as ``.npy``. The text here is
byte for byte what ``json.dumps`` writes (each number the ``repr`` of its float64 value, so
a float32 reads back exactly), sent in pieces of about :data:`CHUNK_VALUES` numbers.
orjson writes the numbers, about 30× faster than ``json.dumps(values.tolist())`` (0.5 s for
a 10⁵-point gradient, ten times the time of the query itself); the text differs from
``json.dumps``'s only in its separators and exponents (``,`` for ``, ``, ``0.00001`` for
``1e-05``): the same numbers.

JSON has no NaN or infinities: ``json.dumps`` wrote ``NaN`` and ``Infinity``, which
``JSON.parse``, jq and Go refuse. Non-finite values are written as ``null``; a turbdb answer
then says how many (``"non_finite"``) and how to keep them, and a JHTDB answer (a bare
array, as givernylocal reads it) says so in the ``X-Turbdb-Non-Finite`` header."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import numpy as np
import orjson
from starlette.responses import Response, StreamingResponse

JSON = "application/json"
#: Numbers encoded at a time: about 1.5 MB of text, a few MB of Python floats.
CHUNK_VALUES = 65_536
NON_FINITE_HEADER = "X-Turbdb-Non-Finite"
NON_FINITE_NOTE = ("values that are not finite (NaN, or beyond float32 and so infinite) are written as null, since "
                   "JSON has no such numbers; dtype=float64 keeps what only overflowed float32, and .npy (Accept: "
                   "application/x-npy) keeps every value as computed")
# A non-finite number as json.dumps writes it in a list: never inside a plain name or a number.
_NON_FINITE_TOKEN = re.compile(r"(?:^|(?<=[\[ ,]))(?:-?Infinity|NaN)(?=[\],]|$)")


def non_finite_count(values: np.ndarray) -> int:
    """How many of ``values`` JSON cannot write as numbers."""
    if values.dtype.kind not in "fc":
        return 0
    return int(values.size - np.count_nonzero(np.isfinite(values)))


def with_nulls(text: str) -> str:
    """``json.dumps`` text of lists of numbers with its NaN and infinities written as null."""
    return _NON_FINITE_TOKEN.sub("null", text)


def array_chunks(values: np.ndarray) -> Iterator[bytes]:
    """``{"shape": […], "dtype": "…", "values": […]}``, the form of an array in turbdb's JSON answers."""
    head = f'{{"shape": {json.dumps(list(values.shape))}, "dtype": {json.dumps(str(values.dtype))}, '
    missing = non_finite_count(values)
    if missing:  # absent when none, as a Go struct's zero or a JS undefined reads it
        head += f'"non_finite": {missing}, "non_finite_note": {json.dumps(NON_FINITE_NOTE)}, '
    yield (head + '"values": ').encode()
    yield from list_chunks(values, nulls=missing > 0)
    yield b"}"


def list_text(values: np.ndarray, nulls: bool = False) -> bytes:
    """The numbers of ``json.dumps(values.tolist())`` as JSON text, non-finite ones null
    (``nulls``: some are not finite)."""
    if values.ndim and values.size and values.dtype.kind in "fiub":  # orjson refuses empty arrays, lists a scalar
        # float32 as its float64 value, which tolist gave.
        wide = np.float64 if values.dtype.kind == "f" else None
        try:
            return orjson.dumps(np.ascontiguousarray(values, dtype=wide), option=orjson.OPT_SERIALIZE_NUMPY)
        except orjson.JSONEncodeError:  # a dtype orjson does not take (float16, uint64 past int64): as before
            pass
    text = json.dumps(values.tolist())
    return (with_nulls(text) if nulls else text).encode()


def list_chunks(values: np.ndarray, nulls: bool = False) -> Iterator[bytes]:
    """``json.dumps(values.tolist())``'s numbers (:func:`list_text`), in pieces: rows of the
    first axis a chunk's worth at a time, or each row in pieces when one row holds more than a
    chunk. ``nulls``: some values are not finite, written as null."""
    if values.ndim == 0 or values.size <= CHUNK_VALUES:
        yield list_text(values, nulls)
        return
    yield b"["
    per_row = values[0].size
    if per_row > CHUNK_VALUES:
        for i, row in enumerate(values):
            if i:
                yield b","
            yield from list_chunks(row, nulls)
    else:
        rows = CHUNK_VALUES // max(1, per_row)
        for start in range(0, len(values), rows):
            text = list_text(values[start:start + rows], nulls)[1:-1]  # the rows, without the list's brackets
            yield b"," + text if start else text
    yield b"]"


def answer(chunks: Iterator[bytes], values: int, headers: dict[str, str] | None = None) -> Response:
    """The response of ``chunks`` that encode ``values`` numbers: whole when they fit in one
    chunk (a small answer pays no thread hops), else streamed, each piece encoded in a
    worker thread as the client reads."""
    if values <= CHUNK_VALUES:
        return Response(b"".join(chunks), media_type=JSON, headers=headers)
    return StreamingResponse(chunks, media_type=JSON, headers=headers)


def list_answer(values: np.ndarray) -> Response:
    """An array as a bare JSON list (JHTDB's answers), its non-finite values null and counted
    in the :data:`NON_FINITE_HEADER` header."""
    missing = non_finite_count(values)
    headers = {NON_FINITE_HEADER: str(missing)} if missing else None
    return answer(list_chunks(values, nulls=missing > 0), values.size, headers)


def array_answer(values: np.ndarray) -> Response:
    """An array as turbdb's JSON answer."""
    return answer(array_chunks(values), values.size)
