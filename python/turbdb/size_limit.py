"""The most bytes one call may return in this process — a cutout, a query's values, a
trajectory — so that a request too large for the machine is refused with a way to split it
before anything is allocated, instead of exhausting memory. Default: half the machine's
memory, or the environment variable ``TURBDB_MAX_RESULT_BYTES``. The engine checks the
same limit for what it allocates (``turbdb._core``)."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from . import _core
from .byte_size import parse_byte_size
from .exceptions import InvalidRequestError, LimitExceededError

ENVIRONMENT = "TURBDB_MAX_RESULT_BYTES"
_seen: list[str | None] = [None]  # the value last read (rewritten as plain bytes)


def _read_environment(*, warn: bool = True) -> None:
    """``TURBDB_MAX_RESULT_BYTES`` as people write sizes (``8GiB``, ``1e9``): the engine reads
    a plain positive number of bytes, so it is handed one; a value that is no such size is
    named, not silently ignored for the default. Parsed only when the value changed: it is
    asked on every query's path. ``warn=False`` (at import) leaves a bad value to be named by
    the first call that asks for the limit: warned at import, it came before the ``turbdb``
    program could make it one line."""
    value = os.environ.get(ENVIRONMENT)
    if not value or value == _seen[0]:  # unset, or set empty: the default
        return
    try:
        nbytes = parse_byte_size(value, ENVIRONMENT)
        if nbytes == 0:
            raise InvalidRequestError(f"{ENVIRONMENT} must be a positive number of bytes, not {value!r}")
    except InvalidRequestError as e:
        if warn:
            _seen[0] = value
            warnings.warn(f"{e}; the default limit (half the machine's memory) applies", stacklevel=3)
        return
    _seen[0] = value
    if value != str(nbytes):
        os.environ[ENVIRONMENT] = _seen[0] = str(nbytes)


def max_result_bytes() -> int:
    """The most bytes one call may return."""
    _read_environment()  # the engine reads the variable at each call: it may have been set since import
    return int(_core.get_max_result_bytes())


def set_max_result_bytes(nbytes: Any) -> None:
    """Sets the most bytes one call may return (a positive integer); ``None`` restores the
    default (half the machine's memory, or ``TURBDB_MAX_RESULT_BYTES``)."""
    if nbytes is not None and (not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool)
                               or not 0 < nbytes < 2**64):
        raise InvalidRequestError(f"the result size limit must be a positive number of bytes, not {nbytes!r}")
    _core.set_max_result_bytes(None if nbytes is None else int(nbytes))


def check_result_bytes(nbytes: int, what: str, split: str) -> None:
    """Refuses an answer of ``nbytes`` (``what`` it holds) above the limit; ``split`` says
    how to ask for it in pieces."""
    _check(nbytes, f"{what} would take", "return", split)


def check_answer_bytes(points: int, values: int, dtype: Any, times: int = 1, *,
                       summed_in_float64: bool = False) -> None:
    """Refuses a point query's answer — ``times`` × ``points`` × ``values`` (per point) of
    ``dtype`` — above the limit, saying how many points a call may take.
    ``summed_in_float64``: the local engine also refuses a query whose float64 sums at one
    time (8 bytes a value, whatever the answer's dtype) exceed the limit; checked here first,
    so that its refusal says how to raise the limit and sizes the answer in its own dtype."""
    dtype = np.dtype(dtype)
    limit = max_result_bytes()
    answer = times * points * values * dtype.itemsize
    sums = points * values * 8 if summed_in_float64 else 0
    if max(answer, sums) <= limit:
        return
    at = f" at {times:,} times" if times > 1 else ""
    said = f"the answer for {points:,} points{at} would take {human_bytes(answer)} of {dtype.name}"
    if sums > answer:
        said += f", and the engine sums it in float64 ({human_bytes(sums)})"
    most = limit // max(times * values * dtype.itemsize, values * 8 if summed_in_float64 else 0)
    if most >= 1:
        advice = f"send batches of at most {most:,} points" + (", or fewer times" if times > 1 else "")
    elif times > 1:
        advice = "ask for fewer times per call"
    else:
        advice = "raise the limit"
    raise LimitExceededError(f"{said}; one call may return at most {human_bytes(limit)} (turbdb.set_max_result_bytes): "
                             f"{advice}")


def check_work_bytes(nbytes: int, what: str, smaller: str) -> None:
    """Refuses work space of ``nbytes`` (``what`` needs it) above the same limit: a request
    with a small answer can still need too much memory on the way."""
    _check(nbytes, f"{what} needs", "use", smaller, " of memory at once")


def _check(nbytes: int, needs: str, verb: str, advice: str, at_once: str = "") -> None:
    limit = max_result_bytes()
    if nbytes > limit:
        raise LimitExceededError(f"{needs} {human_bytes(nbytes)}{at_once}; one call may {verb} at most {human_bytes(limit)} "
                                 f"(turbdb.set_max_result_bytes): {advice}")


def human_bytes(nbytes: int) -> str:
    """``nbytes`` in the largest binary unit below it, e.g. 2.0 TiB."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{float(nbytes):.3g} B"


_read_environment(warn=False)
