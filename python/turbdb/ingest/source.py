"""Input sources for ``turbdb ingest``: a simulation output file seen as a lazy sequence of
time steps, each an array of shape (nz, ny, nx, ncomp), plus format detection and axes.
"""

from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from turbdb.exceptions import (
    FormatError,
    InvalidRequestError,
    StorageError,
    TurbdbError,
    UnknownNameError,
)

__all__ = [
    "FORMATS",
    "ArraySource",
    "Layout",
    "MemmapSource",
    "Source",
    "StepRef",
    "detect_format",
    "open_source",
    "open_sources",
]

FORMATS = ("npy", "raw", "hdf5", "netcdf", "zarr")

_FORMAT_ALIASES = {
    "h5": "hdf5",
    "hdf": "hdf5",
    "nc": "netcdf",
    "nc4": "netcdf",
    "netcdf4": "netcdf",
    "bin": "raw",
    "binary": "raw",
}

_EXTENSIONS = {
    ".npy": "npy",
    ".h5": "hdf5",
    ".hdf5": "hdf5",
    ".hdf": "hdf5",
    ".he5": "hdf5",
    # NetCDF-4 is HDF5 inside: the extension is the only thing that tells them apart.
    ".nc": "netcdf",
    ".nc4": "netcdf",
    ".netcdf": "netcdf",
    ".cdf": "netcdf",
    ".zarr": "zarr",
}

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

# More components than this under the *default* axes almost always means the axis is time
# (a 3x3 tensor such as the velocity gradient is the largest field a DNS stores).
_MAX_DEFAULT_NCOMP = 9

# At most this many candidates are listed in an error message.
_MAX_LISTED = 20


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


# ---------------------------------------------------------------------------------------
# Axes: which axis of a stored array is time, z, y, x or component.


@dataclass(frozen=True)
class Layout:
    """The axes of one stored array (letters from "tzyxc"), its shape, and how many
    separately stored variables are stacked as its components."""

    axes: str
    shape: tuple[int, ...]
    n_stacked: int = 1

    def _size(self, letter: str) -> int:
        return self.shape[self.axes.index(letter)]

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self._size("x"), self._size("y"), self._size("z"))

    @property
    def ncomp(self) -> int:
        return self._size("c") if "c" in self.axes else self.n_stacked

    @property
    def n_steps(self) -> int:
        return self._size("t") if "t" in self.axes else 1

    @property
    def step_shape(self) -> tuple[int, ...]:
        """The shape of one step as stored, i.e. without the time axis."""
        return tuple(n for a, n in zip(self.axes, self.shape, strict=True) if a != "t")

    def step_key(self, index: int) -> tuple[int | slice, ...]:
        """A basic-indexing key that cuts step ``index`` out of the stored array."""
        return tuple(index if a == "t" else slice(None) for a in self.axes)

    def to_zyxc(self, blocks: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
        """Put one step (one block per stacked variable, in stored order without the time
        axis) into a new C-contiguous (nz, ny, nx, ncomp) array of ``dtype``."""
        rest = self.axes.replace("t", "")
        perm = [rest.index(a) for a in "zyxc" if a in rest]
        nx, ny, nz = self.grid
        if len(blocks) == 1:
            view = blocks[0].transpose(perm)
            if "c" not in rest:
                view = view[..., np.newaxis]
            # A freshly read block that is already in place needs no second copy; anything
            # else (notably a view into a memory map) is copied so the caller owns the result.
            if view.flags.c_contiguous and view.dtype == dtype and blocks[0].flags.owndata:
                return view
            return np.array(view, dtype=dtype, order="C")
        out = np.empty((nz, ny, nx, len(blocks)), dtype=dtype)
        for c, block in enumerate(blocks):
            out[..., c] = block.transpose(perm)
        return out


def default_axes(ndim: int, *, order: str = "C", stacked: bool = False) -> str | None:
    """The axes assumed when none are given and the file names none, or None if there is
    no sensible default for ``ndim``."""
    if order == "F":
        # A Fortran u(nx, ny, nz, 3, nt) read with order="F" keeps that index order.
        table = {3: "xyz", 4: "xyzt"} if stacked else {3: "xyz", 4: "xyzc", 5: "xyzct"}
    else:
        table = {3: "zyx", 4: "tzyx"} if stacked else {3: "zyx", 4: "zyxc", 5: "tzyxc"}
    return table.get(ndim)


def check_axes(
    axes: Any, shape: tuple[int, ...], *, what: str, order: str = "C", stacked: bool = False
) -> str:
    """Validate user-given ``axes`` against an array of ``shape``; return them normalised."""
    if not isinstance(axes, str):
        raise InvalidRequestError(
            f"axes must be a string of letters from t, z, y, x, c such as 'zyxc'; got {axes!r}"
        )
    norm = axes.strip().lower()
    unknown = sorted(set(norm) - set("tzyxc"))
    if unknown:
        raise InvalidRequestError(
            f"axes {axes!r} contains {', '.join(map(repr, unknown))}; use only the letters "
            "t (time), z, y, x and c (component), one per array axis, e.g. 'zyxc'"
        )
    repeated = sorted({a for a in norm if norm.count(a) > 1})
    if repeated:
        raise InvalidRequestError(
            f"axes {axes!r} names {', '.join(map(repr, repeated))} more than once; "
            "each letter may appear only once"
        )
    missing = [a for a in "xyz" if a not in norm]
    if missing:
        raise InvalidRequestError(
            f"axes {axes!r} lacks {', '.join(map(repr, missing))}; x, y and z must each "
            "appear once (turbdb stores 3-D fields)"
        )
    if stacked and "c" in norm:
        raise InvalidRequestError(
            f"axes {axes!r} has 'c', but the components come from separate variables; "
            "describe one variable, e.g. 'zyx' or 'tzyx'"
        )
    if len(norm) != len(shape):
        example = default_axes(len(shape), order=order, stacked=stacked)
        hint = f", e.g. {example!r}" if example else ""
        raise InvalidRequestError(
            f"axes {axes!r} names {len(norm)} axes but {what} has {len(shape)} "
            f"(shape {shape}); give one letter per axis{hint}"
        )
    return norm


_T_NAMES = frozenset(
    {"t", "time", "times", "nt", "it", "step", "steps", "timestep", "timesteps", "tstep",
     "record", "records", "rec", "snapshot", "snapshots"}
)
_C_NAMES = frozenset(
    {"c", "comp", "comps", "component", "components", "ncomp", "ncomps", "nc", "icomp",
     "vec", "vector", "dir", "direction", "nvar"}
)
# x, y or z with a prefix or suffix seen in simulation output: nx, ix, xc (centres),
# xf (faces), xh (half-grid), x_dim, x_axis.
_SPATIAL = re.compile(r"(?:n|i|num)?([xyz])(?:dim|axis|grid|c|f|h|s|pos|coord)?")


def axis_letter(name: str | None, cf_axis: str | None = None) -> str | None:
    """The axis letter a dimension name (or its CF ``axis`` attribute) stands for, if any."""
    if isinstance(cf_axis, str) and cf_axis.strip().upper() in ("X", "Y", "Z", "T"):
        return cf_axis.strip().lower()
    if not name:
        return None
    found = set()
    for token in re.split(r"[^a-z0-9]+", name.lower()):
        if token in _T_NAMES:
            found.add("t")
        elif token in _C_NAMES:
            found.add("c")
        elif m := _SPATIAL.fullmatch(token):
            found.add(m.group(1))
    return found.pop() if len(found) == 1 else None


def resolve_axes(
    axes: str | None,
    shape: tuple[int, ...],
    *,
    what: str,
    order: str = "C",
    stacked: bool = False,
    dims: Sequence[str | None] | None = None,
    cf_axes: Sequence[str | None] | None = None,
) -> str:
    """The axes of an array: as given, else from its dimension names, else the default for
    its number of dimensions — validated in every case."""
    if axes is not None:
        return check_axes(axes, shape, what=what, order=order, stacked=stacked)
    ndim = len(shape)
    letters: list[str | None] = [None] * ndim
    if dims is not None and len(dims) == ndim:
        cf = list(cf_axes) if cf_axes is not None else [None] * ndim
        letters = [axis_letter(d, a) for d, a in zip(dims, cf, strict=True)]
    named = _complete_from_names(letters, dims, what=what, stacked=stacked)
    if named is not None:
        return check_axes(named, shape, what=what, stacked=stacked)
    guess = default_axes(ndim, order=order, stacked=stacked)
    if guess is None:
        allowed = "3 or 4 (each a scalar, optionally with time)" if stacked else "3 to 5"
        raise FormatError(
            f"{what} has {ndim} dimensions (shape {shape}); turbdb reads arrays with {allowed} "
            "dimensions: z, y, x, optionally time and components"
        )
    clash = [
        f"{d!r} looks like {letter!r}"
        for d, letter, g in zip(dims or [None] * ndim, letters, guess, strict=True)
        if letter is not None and letter != g
    ]
    if clash:
        raise FormatError(
            f"{what} has dimensions {tuple(dims or ())}: {', '.join(clash)}, which contradicts "
            f"the default axes {guess!r}; pass axes naming each dimension in order"
        )
    if "c" in guess and shape[guess.index("c")] > _MAX_DEFAULT_NCOMP:
        n = shape[guess.index("c")]
        if "t" in guess:
            instead = "pass axes naming each dimension in order"
        else:
            as_time = guess.replace("c", "t") if order == "F" else "t" + guess.replace("c", "")
            instead = f"if an axis is time, pass e.g. axes={as_time!r}"
        raise FormatError(
            f"{what} has shape {shape}: with the default axes {guess!r} it would have {n} "
            f"components, which is unlikely; {instead}. If it really holds {n} components, "
            f"pass axes={guess!r}"
        )
    return guess


def _complete_from_names(
    letters: list[str | None], dims: Sequence[str | None] | None, *, what: str, stacked: bool
) -> str | None:
    """Axes from recognised dimension names, or None if the names do not tell."""
    known = [a for a in letters if a is not None]
    if len(known) != len(set(known)):
        raise FormatError(
            f"{what} has dimensions {tuple(dims or ())}, several of which look like the same "
            "axis; pass axes naming each dimension in order, e.g. 'tzyxc'"
        )
    if not set("xyz") <= set(known):
        return None
    unknown = [i for i, a in enumerate(letters) if a is None]
    if not unknown:
        return "".join(known)
    if len(unknown) > 1:
        return None
    spare = [a for a in "tc" if a not in known and not (stacked and a == "c")]

    def filled(letter: str) -> str:
        return "".join(letter if a is None else a for a in letters)

    if len(spare) != 1:
        dim = dims[unknown[0]] if dims else None
        raise FormatError(
            f"{what} has dimensions {tuple(dims or ())}: cannot tell whether {dim!r} is time "
            f"or components; pass axes={filled('t')!r} if it is time, or axes={filled('c')!r} "
            "if it holds components"
        )
    return filled(spare[0])


# ---------------------------------------------------------------------------------------
# Shared checks.


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


def parse_variables(variables: str | Iterable[str] | None) -> list[str] | None:
    """``"u,v,w"`` or ``["u", "v", "w"]`` as a list of names; None stays None."""
    if variables is None:
        return None
    names = variables.split(",") if isinstance(variables, str) else list(variables)
    if not all(isinstance(n, str) for n in names):
        raise InvalidRequestError(f"variables must be names (strings); got {variables!r}")
    names = [n.strip() for n in names]
    if not names or not all(names):
        raise InvalidRequestError(
            f"variables {variables!r} contains an empty name; give e.g. 'u' or 'u,v,w'"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidRequestError(f"variables {variables!r} repeats {', '.join(repeated)}")
    return names


def choose_arrays(
    candidates: dict[str, tuple[tuple[int, ...], np.dtype]],
    requested: list[str] | None,
    *,
    where: str,
    kind: str,
    option: str,
) -> list[str]:
    """The names of the arrays to read: ``requested`` if they all exist, else the only
    floating-point array of three or more dimensions."""

    def listing(names: Iterable[str]) -> str:
        names = list(names)
        shown = [f"{n} {candidates[n][0]} {candidates[n][1]}" for n in names[:_MAX_LISTED]]
        more = f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else ""
        return "; ".join(shown) + more if shown else "none"

    fields = [n for n, (shape, _) in candidates.items() if len(shape) >= 3]
    if requested is not None:
        missing = [n for n in requested if n not in candidates]
        if missing:
            raise UnknownNameError(
                f"{where} has no {kind} {', '.join(map(repr, missing))}; "
                f"it holds {listing(fields or candidates)}"
            )
        return requested
    floats = [n for n in fields if candidates[n][1].kind == "f"]
    if len(floats) == 1:
        return floats
    if not floats:
        raise FormatError(
            f"{where} holds no floating-point {kind} with 3 or more dimensions "
            f"(found: {listing(fields or candidates)}); name one with {option}= if it is there"
        )
    alike = [n for n in floats if candidates[n][0] == candidates[floats[0]][0]]
    stack = f", or stack per-component {kind}s with variables='{','.join(alike[:3])}'"
    raise FormatError(
        f"{where} holds several floating-point {kind}s with 3 or more dimensions: "
        f"{listing(floats)}. Choose one with {option}={floats[0]!r}"
        f"{stack if len(alike) > 1 else ''}"
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


# ---------------------------------------------------------------------------------------
# Arrays stored in files: the common machinery of every reader.


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


# ---------------------------------------------------------------------------------------
# Opening.


def detect_format(path: Path) -> str:
    """The format of ``path`` from its extension, else its first bytes; "raw" if neither
    tells."""
    if path.is_dir():
        return "zarr"
    by_extension = _EXTENSIONS.get(path.suffix.lower())
    if by_extension is not None:
        return by_extension
    with path.open("rb") as f:
        head = f.read(8)
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(_HDF5_SIGNATURE):
        return "hdf5"
    if head[:3] == b"CDF" and head[3:4] in (b"\x01", b"\x02", b"\x05"):
        return "netcdf"
    if head.startswith(b"PK\x03\x04"):
        raise FormatError(
            f"{path} is a zip archive (.npz or zipped store), which turbdb does not read; "
            "extract the arrays first (e.g. np.save each member of an .npz)"
        )
    return "raw"


def _normalise_format(format: str | None, path: Path) -> str:
    if format is None:
        return detect_format(path)
    name = _FORMAT_ALIASES.get(format.lower(), format.lower())
    if name not in FORMATS:
        raise UnknownNameError(
            f"unknown input format {format!r}; use one of {', '.join(FORMATS)} "
            "or leave it unset to detect it from the file"
        )
    return name


def _parse_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, str):
        parts = [p for p in re.split(r"[,x×\s]+", shape.strip("()[] ")) if p]
    else:
        try:
            parts = list(shape)
        except TypeError:
            parts = [shape]
    try:
        dims = tuple(int(p) for p in parts)
        exact = all(int(p) == float(p) for p in parts)
    except (TypeError, ValueError):
        dims, exact = (), False
    if not dims or not exact or min(dims) < 1:
        raise InvalidRequestError(
            f"shape {shape!r} is not a list of positive integers; give e.g. (nz, ny, nx, 3) "
            "or '64,64,64,3'"
        )
    return dims


def open_source(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    dtype: Any = None,
    shape: Any = None,
    order: str = "C",
    axes: str | None = None,
    dataset_path: str | None = None,
    variables: str | Iterable[str] | None = None,
) -> Source:
    """Open one input file (or Zarr store) as a :class:`Source` of time steps.

    ``format`` is one of npy, raw, hdf5, netcdf, zarr, or None to detect it (extension
    first, then the file's first bytes; a directory is a Zarr store; anything unrecognised
    is raw). ``dtype``, ``shape`` and ``order`` ("C" or "F") describe raw binary files only;
    ``shape`` is the whole file's array in ``order``. ``axes`` names the array's axes as
    numpy sees it with letters from t, z, y, x, c. ``dataset_path`` picks an HDF5 dataset
    (or the group holding ``variables``); ``variables`` picks one variable, or several
    ("u,v,w") stacked as components (HDF5, netCDF, Zarr).
    """
    p = Path(os.fspath(path)).expanduser().resolve()
    if not p.exists():
        raise StorageError(f"input {p} does not exist; check the path")
    try:
        return _open(
            p, format=format, dtype=dtype, shape=shape, order=order, axes=axes,
            dataset_path=dataset_path, variables=variables,
        )
    except TurbdbError:
        raise
    except OSError as e:
        raise StorageError(f"could not read input {p}: {e}; check that it is readable") from e


def _open(
    p: Path,
    *,
    format: str | None,
    dtype: Any,
    shape: Any,
    order: str,
    axes: str | None,
    dataset_path: str | None,
    variables: str | Iterable[str] | None,
) -> Source:
    """Detect the format, check the options apply to it, and open the reader."""
    fmt = _normalise_format(format, p)
    order_norm = order.upper() if isinstance(order, str) else order
    if order_norm not in ("C", "F"):
        raise InvalidRequestError(f"order must be 'C' or 'F' (Fortran); got {order!r}")
    given = {"dtype": dtype, "shape": shape, "dataset_path": dataset_path, "variables": variables}
    allowed = {
        "raw": {"dtype", "shape"},
        "npy": set(),
        "hdf5": {"dataset_path", "variables"},
        "netcdf": {"variables"},
        "zarr": {"variables"},
    }[fmt]
    if order_norm != "C" and fmt != "raw":
        given["order"] = order
    extra = [k for k, v in given.items() if v is not None and k not in allowed]
    if extra:
        raise InvalidRequestError(
            f"{p} is read as {fmt}, which does not take {', '.join(extra)} "
            f"({'it records its own layout' if fmt == 'npy' else 'those are for other formats'}); "
            "drop them, or pass format= if the format was detected wrongly"
        )
    if p.is_dir() and fmt != "zarr":
        raise FormatError(
            f"{p} is a directory, which only a Zarr store may be; pass a file or format='zarr'"
        )
    names = parse_variables(variables)
    if fmt == "raw":
        from turbdb.ingest.raw_source import RawSource

        if dtype is None or shape is None:
            lacking = " and ".join(k for k in ("dtype", "shape") if given[k] is None)
            raise InvalidRequestError(
                f"{p} is not npy, HDF5, netCDF or Zarr, so it is read as raw binary, which "
                f"needs {lacking} (e.g. dtype='float32', shape=(nz, ny, nx, 3)); or pass format="
            )
        try:
            raw_dtype = np.dtype(dtype)
        except TypeError as e:
            raise InvalidRequestError(
                f"dtype {dtype!r} is not a numpy dtype; use e.g. float32, <f8 or >f4 "
                "(big-endian)"
            ) from e
        return RawSource(
            p, dtype=raw_dtype, shape=_parse_shape(shape), order=order_norm, axes=axes
        )
    if fmt == "npy":
        from turbdb.ingest.npy_source import NpySource

        return NpySource(p, axes=axes)
    if fmt == "hdf5":
        from turbdb.ingest.hdf5_source import Hdf5Source

        return Hdf5Source(p, dataset_path=dataset_path, variables=names, axes=axes)
    if fmt == "netcdf":
        from turbdb.ingest.netcdf_source import NetcdfSource

        return NetcdfSource(p, variables=names, axes=axes)
    from turbdb.ingest.zarr_source import ZarrSource

    return ZarrSource(p, variables=names, axes=axes)


def open_sources(paths: Iterable[str | os.PathLike[str]], **options: Any) -> list[Source]:
    """Open several inputs with the same options and check that they agree on grid and
    number of components (the dtype may differ: the writer converts)."""
    sources: list[Source] = []
    seen: set[Path] = set()
    for path in paths:
        source = open_source(path, **options)
        if source.path in seen:
            raise InvalidRequestError(f"input {source.path} is given twice; list each file once")
        seen.add(source.path)
        if sources:
            first = sources[0]
            if (source.grid, source.ncomp) != (first.grid, first.ncomp):
                raise FormatError(
                    f"{source.path} has grid (nx, ny, nz) = {source.grid} with {source.ncomp} "
                    f"component(s), but the first input {first.path} has {first.grid} with "
                    f"{first.ncomp}; all inputs of one ingest must agree"
                )
        sources.append(source)
    if not sources:
        raise InvalidRequestError("no input files given; pass at least one path")
    return sources


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

