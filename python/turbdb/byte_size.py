"""Sizes in bytes as people write them: ``4GiB``, ``512 MiB``, ``2G``, ``1.5e9``, or a plain
integer. Binary suffixes (``KiB`` … ``PiB``, and the bare ``K`` … ``P`` of GNU tools) count
in powers of 1024; ``kB`` … ``PB`` in powers of 1000, as their SI names say. (Not
``dask.utils.parse_bytes``: it truncates ``4.1GB`` to 4 099 999 999, reads ``""`` as 1 and
``-1`` as -1, and takes a fifth of a second to import on a command's start.)"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import numpy as np

from .exceptions import InvalidRequestError

_BINARY = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_SIZE = re.compile(r"(?P<number>\d+(?:\.\d*)?(?:e\d+)?|\.\d+(?:e\d+)?)\s*(?P<unit>[kmgtp]?)(?P<i>i?)(?P<b>b?)")

EXAMPLES = "e.g. 4GiB, 512MiB, 2G, 1.5e9 or 1073741824"


def parse_byte_size(value: Any, what: str = "a size") -> int:
    """``value`` (an integer, or a string with an optional unit) as a whole number of
    bytes ≥ 0; anything else raises :class:`InvalidRequestError` naming ``what``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value < 0:
            raise InvalidRequestError(f"{what} must not be negative, not {value!r}")
        if value >= 2**63:
            raise InvalidRequestError(f"{what} {value!r} is more bytes than any machine has")
        return int(value)
    if not isinstance(value, str):
        raise InvalidRequestError(f"{what} must be a number of bytes ({EXAMPLES}), not {value!r}")
    match = _SIZE.fullmatch(value.strip().lower())
    if match is None or (match["i"] and not match["unit"]):
        raise InvalidRequestError(f"{what} must be a number of bytes ({EXAMPLES}), not {value!r}")
    unit, binary = match["unit"], match["i"] or not match["b"]
    scale = 1 if not unit else (_BINARY if binary else _DECIMAL)[unit]
    nbytes = Decimal(match["number"]) * scale  # exact: 4.1GB is 4 100 000 000 bytes
    if nbytes >= 2**63:
        raise InvalidRequestError(f"{what} {value!r} is more bytes than any machine has")
    if nbytes != int(nbytes):
        raise InvalidRequestError(f"{what} {value!r} is not a whole number of bytes")
    return int(nbytes)
