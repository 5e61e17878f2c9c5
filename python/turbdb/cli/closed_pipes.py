"""A reader of the program's output that stops early (``| head -3``, ``| true``) ends the
output, never the work: from the first write it refuses, that stream goes to /dev/null, the
command finishes (a simulation stores every step, a query writes its file) and exits with
the status it would have had. Before, the first line written after the reader left raised
BrokenPipeError: ``error: Broken pipe``, status 2, a simulation stopped half-way."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any


class _WithoutReader:
    """A text stream (stdout, stderr), except that a write or flush its reader no longer
    takes (EPIPE) sends its file descriptor, and so everything written after, to /dev/null."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _discard(self._stream)
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _discard(self._stream)

    @property
    def buffer(self) -> Any:
        """The binary stream below, the same way: click writes there when the text stream's
        encoding is ASCII (``PYTHONIOENCODING=ascii``)."""
        return _WithoutReader(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, …
        return getattr(self._stream, name)


def _discard(stream: Any) -> None:
    """Points the stream's descriptor at /dev/null: what is still buffered goes there, as
    does what comes (and the flush at exit, which would otherwise fail once more)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)
    with contextlib.suppress(OSError):
        stream.flush()


def keep_working_when_readers_leave() -> None:
    """Makes the program's stdout and stderr streams whose readers may leave (see the
    module's docstring): ``turbdb … 2>&1 | head`` closes both."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _WithoutReader):
            setattr(sys, name, _WithoutReader(stream))
