"""Opening input files as Sources: pick the format (given or detected), check the options
given against those it declares, and call its reader."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from turbdb.exceptions import FormatError, InvalidRequestError, StorageError, TurbdbError
from turbdb.ingest import formats
from turbdb.ingest.source import Source

__all__ = ["open_source", "open_sources"]


def open_source(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    axes: str | None = None,
    **options: Any,
) -> Source:
    """Open one input file (or Zarr store) as a :class:`Source` of time steps.

    ``format`` is one of npy, raw, hdf5, netcdf, zarr, or None to detect it (extension
    first, then the file's first bytes; a directory is a Zarr store; anything unrecognised
    is raw). ``axes`` names the array's axes as numpy sees it with letters from t, z, y, x, c.
    The other options belong to formats: ``dtype``, ``shape`` and ``order`` ("C" or "F")
    describe raw binary files only, ``shape`` being the whole file's array in ``order``;
    ``dataset_path`` picks an HDF5 dataset (or the group holding ``variables``);
    ``variables`` picks one variable, or several ("u,v,w") stacked as components (HDF5,
    netCDF, Zarr). ``turbdb.ingest.formats.option_uses()`` lists them all.
    """
    p = Path(os.fspath(path)).expanduser().resolve()
    if not p.exists():
        if any(c in p.name for c in "*?["):
            raise StorageError(f"input {p} does not exist: turbdb does not expand patterns; leave {p.name} "
                               "unquoted so that the shell lists the files it matches")
        raise StorageError(f"input {p} does not exist; check the path")
    try:
        mode = p.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a FIFO: reading it waited forever
            raise StorageError(f"input {p} is not a regular file (a FIFO, socket or device): turbdb reads inputs in "
                               "place, by offset; write the data to a file first")
        return _open(p, format=format, axes=axes, options=options)
    except TurbdbError:
        raise
    except OSError as e:
        raise StorageError(f"could not read input {p}: {e}; check that it is readable") from e


def _open(p: Path, *, format: str | None, axes: str | None, options: dict[str, Any]) -> Source:
    fmt = formats.get_format(format) if format is not None else formats.get_format(formats.detect_format(p))
    declared = {use.option.name: use.option for use in formats.option_uses()}
    unknown = sorted(set(options) - set(declared))
    if unknown:
        raise InvalidRequestError(
            f"unknown option(s) {', '.join(unknown)}; the input formats take "
            f"{', '.join(sorted(declared))}"
        )
    parsed = {k: declared[k].parse(v) for k, v in options.items() if v is not None}
    # An option left at its default was not really given, so any format accepts it.
    given = {k: v for k, v in parsed.items() if v != declared[k].default}
    own = {o.name for o in fmt.options}
    extra = sorted(k for k in given if k not in own)
    if extra:
        raise InvalidRequestError(
            f"{p} is read as {fmt.name}, which does not take {', '.join(extra)} "
            f"({'it records its own layout' if not fmt.options else 'those are for other formats'}); "
            "drop them, or pass format= if the format was detected wrongly"
        )
    if p.is_dir() and not fmt.directory:
        raise FormatError(
            f"{p} is a directory, which only a Zarr store may be; pass a file or format='zarr'"
        )
    return fmt.open(p, axes=axes, **{o.name: parsed.get(o.name, o.default) for o in fmt.options})


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
