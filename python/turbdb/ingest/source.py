"""What ``turbdb ingest`` reads: an input file seen as a lazy sequence of time steps, each
an array of shape (nz, ny, nx, ncomp), and the machinery every file reader shares."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from turbdb.exceptions import FormatError, InvalidRequestError, StorageError, TurbdbError
from turbdb.ingest.axes import Layout

__all__ = ["ArraySource", "MemmapSource", "Source", "StepRef", "fingerprint", "float_dtype"]


@dataclass(frozen=True)
class StepRef:
    """One time step of input: which file, which dataset in it, which step, and the file's
    size and modification time, so that a resumed ingest can tell whether it already stored
    this step from this very file."""

    source: str
    key: str
    index: int
    size: int
    mtime_ns: int

    def ident(self) -> str:
        """A stable string naming this step of this version of the input."""
        # JSON keeps the fields unambiguous whatever characters the path or key contains.
        return json.dumps(
            [self.source, self.key, self.index, self.size, self.mtime_ns],
            separators=(",", ":"),
            ensure_ascii=False,
        )


class Source(ABC):
    """A sequence of time steps that all share one grid, component count and dtype."""

    format: ClassVar[str]
    path: Path
    key: str
    grid: tuple[int, int, int]  # (nx, ny, nz)
    ncomp: int
    dtype: np.dtype
    n_steps: int
    #: What the user should know about the input (printed by the ingest): found on opening
    #: it, and some only on reading a step (a reader adds those as it reads them).
    notes: tuple[str, ...] = ()

    @abstractmethod
    def refs(self) -> list[StepRef]:
        """The steps of this source, in time order."""

    @abstractmethod
    def read(self, ref: StepRef) -> np.ndarray:
        """One step as a new C-contiguous array (nz, ny, nx, ncomp) of ``self.dtype``."""

    def __repr__(self) -> str:
        key = f" key={self.key!r}" if self.key else ""
        return (
            f"<{type(self).__name__} {self.path}{key} grid(nx,ny,nz)={self.grid} "
            f"ncomp={self.ncomp} dtype={self.dtype} n_steps={self.n_steps}>"
        )


def float_dtype(dtype: Any, *, what: str) -> np.dtype:
    """The native-byte-order float dtype data of ``dtype`` is read as, or FormatError."""
    dt = np.dtype(dtype)
    if dt.kind == "f" and dt.itemsize in (2, 4, 8):
        return dt.newbyteorder("=")
    kinds = {
        "i": "integer", "u": "unsigned integer", "c": "complex", "b": "boolean",
        "V": "compound", "O": "object", "S": "string", "U": "string", "f": "extended-precision",
    }
    hint = ""
    if dt.kind in "iu":
        hint = " (if it is packed, unpack it with its scale_factor/add_offset first)"
    raise FormatError(
        f"{what} has {kinds.get(dt.kind, 'non-float')} dtype {dt}; turbdb ingests float16, "
        f"float32 or float64 fields — convert the data to floating point first{hint}"
    )


def fingerprint(path: Path) -> tuple[int, int]:
    """(size, mtime_ns) of a file; for a directory store, the total size and latest mtime of
    everything in it, since its chunks may change while its top directory does not."""
    st = path.stat()
    if not path.is_dir():
        return st.st_size, st.st_mtime_ns
    size, mtime = 0, st.st_mtime_ns
    for root, dirs, files in os.walk(path):
        for name in dirs:
            mtime = max(mtime, os.stat(os.path.join(root, name)).st_mtime_ns)
        for name in files:
            s = os.stat(os.path.join(root, name))
            size += s.st_size
            mtime = max(mtime, s.st_mtime_ns)
    return size, mtime


class ArraySource(Source):
    """A source whose steps are cut out of one stored array, or out of several same-shaped
    arrays (one per component) stacked along c. Readers say how to open the arrays."""

    def __init__(self, path: Path, *, key: str, layout: Layout, dtype: np.dtype) -> None:
        if 0 in layout.shape:
            raise FormatError(
                f"{path}{f' ({key})' if key else ''} holds an empty array of shape "
                f"{layout.shape}; there is nothing to ingest"
            )
        self.path = path
        self.key = key
        self.layout = layout
        self.axes = layout.axes
        self.grid = layout.grid
        self.ncomp = layout.ncomp
        self.n_steps = layout.n_steps
        self.dtype = dtype
        self.size, self.mtime_ns = fingerprint(path)

    def refs(self) -> list[StepRef]:
        return [
            StepRef(str(self.path), self.key, i, self.size, self.mtime_ns)
            for i in range(self.n_steps)
        ]

    def read(self, ref: StepRef) -> np.ndarray:
        self._check_ref(ref)
        try:
            blocks = self._read_blocks(self.layout.step_key(ref.index))
        except OSError as e:
            raise StorageError(
                f"could not read step {ref.index} of {self.path}: {e}; check that the file "
                "is complete and readable"
            ) from e
        except (MemoryError, TurbdbError):
            raise
        except Exception as e:  # a codec's error on a damaged chunk (zstd, zlib, blosc …): a traceback before
            raise FormatError(
                f"could not decode step {ref.index} of {self.path} ({type(e).__name__}: {e}); a chunk of it is "
                "damaged: copy the file again from where it was written"
            ) from e
        return self.layout.to_zyxc(blocks, self.dtype)

    @abstractmethod
    def _read_blocks(self, key: tuple[int | slice, ...]) -> list[np.ndarray]:
        """Index every stored array with ``key``; one block per stacked variable."""

    def _check_ref(self, ref: StepRef) -> None:
        if ref.source != str(self.path) or ref.key != self.key:
            raise InvalidRequestError(
                f"step {ref.ident()} belongs to another source than {self.path}"
                f"{f' ({self.key})' if self.key else ''}; read it from the source it came from"
            )
        if not 0 <= ref.index < self.n_steps:
            raise InvalidRequestError(
                f"step index {ref.index} is out of range: {self.path} has {self.n_steps} step(s)"
            )
        if (ref.size, ref.mtime_ns) != (self.size, self.mtime_ns):
            raise InvalidRequestError(
                f"step {ref.ident()} refers to another version of {self.path}; take refs "
                "from this source's refs()"
            )
        # Walking a directory store for every step would cost more than the check is worth.
        if not self.path.is_dir():
            try:
                st = self.path.stat()
            except OSError as e:
                raise StorageError(f"input {self.path} is no longer readable: {e}") from e
            if (st.st_size, st.st_mtime_ns) != (self.size, self.mtime_ns):
                raise StorageError(
                    f"input {self.path} changed after it was opened (size {self.size} -> "
                    f"{st.st_size} bytes); open it again and restart the ingest"
                )


class MemmapSource(ArraySource):
    """An array stored raw at an offset of one file (npy, raw binary), read through a
    memory map so that only the requested step is touched."""

    _file_dtype: np.dtype
    _offset: int
    _order: str

    def _read_blocks(self, key: tuple[int | slice, ...]) -> list[np.ndarray]:
        mm = np.memmap(
            self.path,
            dtype=self._file_dtype,
            mode="r",
            offset=self._offset,
            shape=self.layout.shape,
            order=self._order,
        )
        return [mm[key]]

