"""turbdb: a turbulence database. Store the whole space-time history of a simulation as
Zarr v3 shards of Morton-ordered atoms and answer batch queries where the data lives."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("turbdb")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+local"

from .database import Database, create_dataset, open
from .dataset import Dataset
from .exceptions import (
    CorruptDataError,
    DatasetExistsError,
    FormatError,
    InvalidRequestError,
    OutOfDomainError,
    StorageError,
    TurbdbError,
    UnknownNameError,
)
from .info import DatasetInfo, FieldInfo

__all__ = [
    "__version__",
    "open",
    "create_dataset",
    "Database",
    "Dataset",
    "DatasetInfo",
    "FieldInfo",
    "TurbdbError",
    "InvalidRequestError",
    "OutOfDomainError",
    "UnknownNameError",
    "FormatError",
    "CorruptDataError",
    "StorageError",
    "DatasetExistsError",
]
