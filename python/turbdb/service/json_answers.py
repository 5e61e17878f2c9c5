"""Arrays answered as JSON, encoded a slice at a time. ``json.dumps(values.tolist())`` of a
10⁵-point float64 gradient held 900 000 Python floats and the whole text at once: about
117 MiB of server memory against 22 MiB for the same answer as ``.npy``. The text here is
byte for byte what ``json.dumps`` writes (each number the ``repr`` of its float64 value, so
a float32 reads back exactly), sent in pieces of about :data:`CHUNK_VALUES` numbers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
from starlette.responses import Response, StreamingResponse

JSON = "application/json"
#: Numbers encoded at a time: about 1.5 MB of text, a few MB of Python floats.
CHUNK_VALUES = 65_536


def array_chunks(values: np.ndarray) -> Iterator[bytes]:
    """``{"shape": […], "dtype": "…", "values": […]}``, the form of an array in turbdb's JSON answers."""
    yield f'{{"shape": {json.dumps(list(values.shape))}, "dtype": {json.dumps(str(values.dtype))}, "values": '.encode()
    yield from list_chunks(values)
    yield b"}"


def list_chunks(values: np.ndarray) -> Iterator[bytes]:
    """``json.dumps(values.tolist())``, in pieces: rows of the first axis a chunk's worth at a
    time, or each row in pieces when one row holds more than a chunk."""
    if values.ndim == 0 or values.size <= CHUNK_VALUES:
        yield json.dumps(values.tolist()).encode()
        return
    yield b"["
    per_row = values[0].size
    if per_row > CHUNK_VALUES:
        for i, row in enumerate(values):
            if i:
                yield b", "
            yield from list_chunks(row)
    else:
        rows = CHUNK_VALUES // max(1, per_row)
        for start in range(0, len(values), rows):
            text = json.dumps(values[start:start + rows].tolist())[1:-1]  # the rows, without the list's brackets
            yield (", " + text if start else text).encode()
    yield b"]"


def answer(chunks: Iterator[bytes], values: int) -> Response:
    """The response of ``chunks`` that encode ``values`` numbers: whole when they fit in one
    chunk (a small answer pays no thread hops), else streamed, each piece encoded in a
    worker thread as the client reads."""
    if values <= CHUNK_VALUES:
        return Response(b"".join(chunks), media_type=JSON)
    return StreamingResponse(chunks, media_type=JSON)


def array_answer(values: np.ndarray) -> Response:
    """An array as turbdb's JSON answer."""
    return answer(array_chunks(values), values.size)
