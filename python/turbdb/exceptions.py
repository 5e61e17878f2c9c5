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
    └── DatasetExistsError (FileExistsError)  creating a dataset that is already there
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
