"""Values a file marks as missing (CF ``_FillValue`` and ``missing_value``, netCDF's default
fill): a reader that returns the stored numbers, as the Zarr and HDF5 ones do, would ingest
them as data (-9999 where a cell was never written), so a step holding one is refused."""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping

import numpy as np

from turbdb.exceptions import FormatError

__all__ = ["DEFAULT_FILL", "check_default_fill", "check_missing", "declared_missing", "missing_message"]

# netCDF's default fill value of float and double variables (NC_FILL_FLOAT, NC_FILL_DOUBLE):
# what a record or chunk never written reads as when the variable declares no _FillValue.
DEFAULT_FILL = 9.9692099683868690e36


def declared_missing(attrs: Mapping[str, object]) -> list[tuple[str, float]]:
    """(attribute, value) of each number ``attrs`` declares missing, ``missing_value`` first
    (xarray masks it before the ``_FillValue``); NaN ones are left out, since a NaN in the
    data is refused anyway."""
    found = []
    for attribute in ("missing_value", "_FillValue"):
        for value in np.ravel(np.asarray(_number(attrs.get(attribute)), dtype=object)):
            if isinstance(value, (int, float, np.integer, np.floating)) and not np.isnan(value):
                found.append((attribute, float(value)))
    return found


def _number(value: object) -> object:
    """An attribute as the number it stands for: xarray writes a Zarr v3 float ``_FillValue``
    as the base64 of its 8 little-endian bytes."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        return struct.unpack("<d", raw)[0] if len(raw) == 8 else None
    return value


def check_missing(block: np.ndarray, markers: list[tuple[str, float, str]], *, what: str) -> None:
    """Refuses a step of stored values holding one of ``markers``: (attribute, value, and
    what to do if the values equal to it are data)."""
    if block.dtype.kind != "f":
        return
    for attribute, value, remedy in markers:
        with np.errstate(over="ignore"):
            marker = block.dtype.type(value)
        if not np.isfinite(marker):  # beyond the dtype's range (-1e30 in float16): no value equals it
            continue
        count = int(np.count_nonzero(block == marker))
        if count:
            raise FormatError(missing_message(what, attribute, str(marker), count, remedy))  # str: -1e+30 in float32


def missing_message(what: str, attribute: str, value: object, count: int, remedy: str) -> str:
    return (f"{what} holds its {attribute} ({value}) at {count} of this step's values, which netCDF and xarray "
            f"mark as missing (never written, or data equal to the {attribute} by chance); if they are data, "
            f"{remedy} and ingest again")


def check_default_fill(block: np.ndarray, *, what: str) -> None:
    """Refuses netCDF's default fill value, which a file declaring no ``_FillValue`` holds
    where it was never written."""
    if block.dtype.kind != "f":
        return
    with np.errstate(over="ignore"):
        marker = block.dtype.type(DEFAULT_FILL)
    filled = int(np.count_nonzero(block == marker)) if np.isfinite(marker) else 0
    if filled:
        raise FormatError(
            f"{what} holds netCDF's default fill value (9.97e+36) at {filled} of this step's values: they were "
            "never written; the file is incomplete — was its writer stopped?")
