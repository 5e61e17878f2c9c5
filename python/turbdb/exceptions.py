"""The exceptions turbdb raises.

Every error is a ``TurbdbError``; each one also subclasses the builtin a Python user would
catch for that kind of problem, so ``except KeyError`` works as well as
``except turbdb.UnknownNameError``::

    TurbdbError (Exception)
    ├── InvalidRequestError (ValueError)      bad arguments: shapes, NaN points, out-of-range times
    │   └── OutOfDomainError                  a point outside a non-periodic axis
    ├── UnknownNameError (KeyError)           no such dataset, field, method, operator, …
    ├── FormatError (ValueError)              input or stored data of the wrong shape, dtype or layout
    ├── CorruptDataError (OSError)            a shard index checksum or an atom that does not decode
    ├── StorageError (OSError)                the store could not be read or written
    ├── DatasetExistsError (FileExistsError)  creating a dataset that is already there
    ├── AccessDeniedError (PermissionError)   the service refused the token (missing, unknown, not for that dataset)
    ├── LimitExceededError (ValueError)       a request above the token's limits (points, requests per minute)
    ├── EngineBusyError (OSError)             the node engine's queue is full; retry after ``retry_after`` s
    └── ServiceError (OSError)                the service could not be reached or failed (remote use)

Over HTTP (``turbdb.connect``) the server names the class of each error it reports and
the client raises that same class, so code written against ``turbdb.open`` catches the
same exceptions remotely.
"""

from __future__ import annotations

__all__ = [
    "TurbdbError",
    "InvalidRequestError",
    "OutOfDomainError",
    "UnknownNameError",
    "FormatError",
    "CorruptDataError",
    "StorageError",
    "DatasetExistsError",
    "AccessDeniedError",
    "LimitExceededError",
    "EngineBusyError",
    "ServiceError",
]


class TurbdbError(Exception):
    """Base class of every error turbdb raises."""


class InvalidRequestError(TurbdbError, ValueError):
    """The request's arguments are invalid (shape, NaN, range)."""


class OutOfDomainError(InvalidRequestError):
    """A point lies outside the domain on a non-periodic axis."""


class UnknownNameError(TurbdbError, KeyError):
    """A dataset, field, method, operator or other name that does not exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class FormatError(TurbdbError, ValueError):
    """Input or stored data has the wrong shape, dtype or layout."""


class CorruptDataError(TurbdbError, OSError):
    """Stored data failed a checksum or could not be decoded."""


class StorageError(TurbdbError, OSError):
    """The store could not be read or written."""


class DatasetExistsError(TurbdbError, FileExistsError):
    """A dataset of that name already exists."""


class AccessDeniedError(TurbdbError, PermissionError):
    """The service refused the request's token: missing, unknown, or not allowed that dataset.
    ``status`` is the HTTP status: 401 (no or unknown token) or 403 (not for this dataset)."""

    def __init__(self, message: str, status: int = 403):
        super().__init__(message)
        self.status = status


class LimitExceededError(TurbdbError, ValueError):
    """A request above the token's limits: too many points, or too many requests per minute.
    ``retry_after`` is the seconds to wait when waiting helps, else ``None``."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class EngineBusyError(TurbdbError, OSError):
    """The node engine holds as much pending work as it may (its queue is full).
    ``retry_after`` is the seconds after which a retry is likely to be admitted."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class ServiceError(TurbdbError, OSError):
    """The remote service could not be reached, or failed while answering."""
