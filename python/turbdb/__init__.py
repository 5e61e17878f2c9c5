"""turbdb: a turbulence database. Store the whole space-time history of a simulation as
Zarr v3 shards of Morton-ordered atoms and answer batch queries where the data lives."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("turbdb")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+local"

from ._core import kernel_path, kernel_paths
from .database import Database, create_dataset, open
from .dataset import Dataset
from .exceptions import (
    AccessDeniedError,
    CorruptDataError,
    DamagedMetadataError,
    DatasetBusyError,
    DatasetExistsError,
    EngineBusyError,
    Float32PrecisionWarning,
    FormatError,
    InvalidRequestError,
    LimitExceededError,
    OutOfDomainError,
    QueryCancelledError,
    ServiceError,
    StorageError,
    TurbdbError,
    UnknownNameError,
    UnknownOptionError,
)
from .info import DatasetInfo, FieldInfo
from .size_limit import max_result_bytes, set_max_result_bytes

#: The name pairing ``set_max_result_bytes`` (and the extension's own): the same as ``max_result_bytes``.
get_max_result_bytes = max_result_bytes

__all__ = [
    "__version__",
    "open",
    "connect",
    "create_dataset",
    "kernel_path",
    "kernel_paths",
    "Database",
    "Dataset",
    "DatasetInfo",
    "FieldInfo",
    "max_result_bytes",
    "get_max_result_bytes",
    "set_max_result_bytes",
    "TurbdbError",
    "Float32PrecisionWarning",
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
    "EngineBusyError",
    "LimitExceededError",
    "QueryCancelledError",
    "ServiceError",
]


def __getattr__(name: str):
    # The HTTP client (httpx) loads on first use of turbdb.connect, not on import turbdb.
    if name == "connect":
        from .remote import connect

        return connect
    raise AttributeError(f"module 'turbdb' has no attribute {name!r}")


def __dir__() -> list[str]:
    # connect comes from __getattr__; listed so that dir(), tab completion and help() show it.
    return sorted(set(globals()) | {"connect"})
