"""How the v1 endpoints read the type of their answer: a query's ``dtype`` and a cutout's
``format``, in any case and under the names Python takes (``f4``, ``f8``; ``nc`` for
NetCDF, as the file's suffix), as ``method`` and ``strategy`` already were; ``Float64``
and ``nc`` were 400s."""

from __future__ import annotations

import numpy as np

from ..exceptions import InvalidRequestError

#: A query's ``dtype``, by its names in lower case (numpy's, which Dataset.query takes).
DTYPES = {"float32": np.dtype(np.float32), "f4": np.dtype(np.float32),
          "float64": np.dtype(np.float64), "f8": np.dtype(np.float64)}
#: A cutout's ``format``, by its names in lower case.
CUTOUT_FORMATS = {"npy": "npy", "netcdf": "netcdf", "nc": "netcdf"}


def answer_dtype(text: str) -> np.dtype:
    """``dtype=``: float32 (``f4``) or float64 (``f8``), in any case."""
    dtype = DTYPES.get(text.strip().lower())
    if dtype is None:
        raise InvalidRequestError(f"dtype must be float32 (or f4) or float64 (or f8), not {text[:40]!r}")
    return dtype


def cutout_format(text: str | None) -> str | None:
    """``format=``: npy, or netcdf (``nc``), in any case; None when not given."""
    if text is None:
        return None
    fmt = CUTOUT_FORMATS.get(text.strip().lower())
    if fmt is None:
        raise InvalidRequestError(f"format must be npy or netcdf (or nc), not {text[:40]!r}")
    return fmt
