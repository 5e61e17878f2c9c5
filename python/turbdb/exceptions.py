"""The exceptions turbdb raises.

Every error is a ``TurbdbError``; each one also subclasses the builtin a Python user would
catch for that kind of problem, so ``except KeyError`` works as well as
``except turbdb.UnknownNameError``::

    TurbdbError (Exception)
    ├── InvalidRequestError (ValueError)      bad arguments: shapes, NaN points, bools or strings as numbers
    │   └── OutOfDomainError                  a point outside a non-periodic axis, or too far
    │                                         from a periodic one to wrap onto it
    ├── UnknownNameError (KeyError)           no such dataset, field, input format, …
    │   └── UnknownOptionError                no such method, operator, temporal method or strategy:
    │                                         also an InvalidRequestError (ValueError), as numpy and
    │                                         scipy raise ValueError for a bad option value
    ├── FormatError (ValueError)              input or stored data of the wrong shape, dtype or layout
    │   └── DamagedMetadataError              a dataset's stored metadata is unreadable or inconsistent
    ├── CorruptDataError (OSError)            a checksum that fails, an atom that does not decode or
    │                                         does not belong where it is stored
    ├── StorageError (OSError)                the store could not be read or written (full or read-only disk)
    │   └── DatasetBusyError                  another process is writing the dataset (ingest, simulate), or
    │                                         a read waited 5 s for rewrites of a step it reads
    ├── DatasetExistsError (FileExistsError)  creating a dataset that is already there
    ├── AccessDeniedError (PermissionError)   the service refused the token (missing, unknown, not for that dataset)
    ├── LimitExceededError (ValueError)       a request above a limit: the token's (points, requests per
    │                                         minute) or the size one call may return (set_max_result_bytes)
    ├── EngineBusyError (OSError)             the node engine's queue is full; retry after ``retry_after`` s
    ├── QueryCancelledError (CancelledError)  the query was cancelled (``cancel=`` was set) before it ended
    └── ServiceError (OSError)                the service could not be reached or failed (remote use)

Over HTTP (``turbdb.connect``) the server names the class of each error it reports and
the client raises that same class, so code written against ``turbdb.open`` catches the
same exceptions remotely.
"""

from __future__ import annotations

from concurrent.futures import CancelledError

__all__ = [
    "TurbdbError",
    "InvalidRequestError",
    "OutOfDomainError",
    "UnknownNameError",
    "UnknownOptionError",
    "FormatError",
    "DamagedMetadataError",
    "CorruptDataError",
    "StorageError",
    "DatasetBusyError",
    "DatasetExistsError",
    "AccessDeniedError",
    "LimitExceededError",
    "EngineBusyError",
    "QueryCancelledError",
    "ServiceError",
]


class TurbdbError(Exception):
    """Base class of every error turbdb raises."""


class InvalidRequestError(TurbdbError, ValueError):
    """The request's arguments are invalid (shape, NaN, range)."""


class OutOfDomainError(InvalidRequestError):
    """A point lies outside the domain on a non-periodic axis, or more than 2³¹ grid
    spacings from it on a periodic one (too far for a float64 to say where in its cell it is)."""


class UnknownNameError(TurbdbError, KeyError):
    """A dataset, field, method, operator or other name that does not exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class UnknownOptionError(UnknownNameError, InvalidRequestError):
    """A method, operator, temporal method or strategy that does not exist: a ``KeyError``
    like every unknown name, and a ``ValueError`` like numpy's and scipy's bad option values."""


class FormatError(TurbdbError, ValueError):
    """Input or stored data has the wrong shape, dtype or layout."""


class DamagedMetadataError(FormatError):
    """A dataset's stored metadata (a ``zarr.json``) cannot be read or contradicts itself
    (a negative grid, say): the store is damaged, not the request. A server answers 500."""


class CorruptDataError(TurbdbError, OSError):
    """Stored data failed a checksum or could not be decoded."""


class StorageError(TurbdbError, OSError):
    """The store could not be read or written."""


class DatasetBusyError(StorageError):
    """Another process is writing the dataset (``turbdb ingest``, ``turbdb simulate``): one
    writer per dataset at a time. Also a read that waited 5 s for a rewrite of a step it
    reads to end (:mod:`turbdb.step_versions`): retry."""


class DatasetExistsError(TurbdbError, FileExistsError):
    """A dataset of that name already exists."""


class AccessDeniedError(TurbdbError, PermissionError):
    """The service refused the request's token: missing, unknown, or not allowed that dataset.
    ``status`` is the HTTP status: 401 (no or unknown token) or 403 (not for this dataset)."""

    def __init__(self, message: str, status: int = 403):
        super().__init__(message)
        self.status = status


class LimitExceededError(TurbdbError, ValueError):
    """A request above a limit: the token's (too many points, too many requests per minute)
    or the size one call may return in this process (:func:`turbdb.set_max_result_bytes`).
    The message says how to split the request. ``retry_after`` is the seconds to wait when
    waiting helps, else ``None``."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class EngineBusyError(TurbdbError, OSError):
    """The node engine holds as much pending work as it may (its queue is full).
    ``retry_after`` is the seconds after which a retry is likely to be admitted."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class QueryCancelledError(TurbdbError, CancelledError):
    """The query was cancelled before it ended (the ``cancel`` event given to
    :meth:`turbdb.Dataset.query` was set): its pending work in the node engine was dropped.
    A ``concurrent.futures.CancelledError``, as a cancelled future raises."""


class ServiceError(TurbdbError, OSError):
    """The remote service could not be reached, or failed while answering."""


class Float32PrecisionWarning(UserWarning):
    """Float64 values written lose what they hold in float32, the type turbdb stores: their
    variation, or values too small for it (see docs/format.md)."""
