"""Reads a field from a Zarr v2 or v3 store (written by xarray, zarr-python or turbdb itself):
one array or one per component; only the chunks of one time step are read at a time."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from turbdb.exceptions import FormatError
from turbdb.ingest.axes import Layout, resolve_axes
from turbdb.ingest.coordinates import AXES, coordinate_note
from turbdb.ingest.format_spec import Format
from turbdb.ingest.missing_values import check_missing, declared_missing
from turbdb.ingest.source import ArraySource, float_dtype
from turbdb.ingest.store_files import check_blosc_chunks, check_regular_files
from turbdb.ingest.variables import VARIABLES, choose_arrays

if TYPE_CHECKING:
    import zarr

__all__ = ["FORMAT", "ZarrSource"]

# CF packing attributes that xarray would apply on reading; this reader does not.
_PACKING = ("scale_factor", "add_offset")


def _dimension_names(array: zarr.Array) -> list[str | None] | None:
    """Zarr v3 ``dimension_names``, or xarray's ``_ARRAY_DIMENSIONS`` attribute in v2."""
    if array.metadata.zarr_format == 3:
        names = array.metadata.dimension_names
    else:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    if not names or len(names) != array.ndim:
        return None
    return [str(n) if n is not None else None for n in names]


class ZarrSource(ArraySource):
    """A field in a Zarr store: the store's root array, or arrays chosen by ``variables``."""

    format = "zarr"

    def __init__(
        self, path: Path, *, variables: list[str] | None = None, axes: str | None = None
    ) -> None:
        import zarr

        check_regular_files(path)
        # zarr-python rather than xarray: xarray refuses a whole store if one of its arrays
        # lacks dimension names, which stores not written by xarray usually do. Consolidated
        # metadata is a copy that appending (use_consolidated=False, zarr-python's default)
        # leaves stale: it would hide the new steps and arrays, so the arrays' own are read.
        try:
            node = zarr.open(store=str(path), mode="r", use_consolidated=False)
        except (OSError, ValueError) as e:
            raise FormatError(
                f"{path} is not a Zarr store ({e}); a directory input must contain zarr.json "
                "(v3) or .zgroup/.zarray (v2)"
            ) from e
        if isinstance(node, zarr.Array):
            if variables is not None:
                raise FormatError(
                    f"{path} is a single Zarr array, not a group, so variables= has nothing to "
                    "choose from; drop it"
                )
            names, arrays, group = [""], [node], None
        else:
            group = node
            members = {p: a for p, a in group.members(max_depth=None) if isinstance(a, zarr.Array)}
            candidates = {p: (a.shape, a.dtype) for p, a in members.items()}
            requested = [v.strip("/") for v in variables] if variables is not None else None
            names = choose_arrays(
                candidates, requested, where=str(path), kind="array", option="variables"
            )
            arrays = [members[n] for n in names]
        label = f"array {names[0]!r} of {path}" if names[0] else f"Zarr array {path}"
        for n, a in zip(names, arrays, strict=True):
            packed = [k for k in _PACKING if k in a.attrs]
            if packed:
                raise FormatError(
                    f"array {n!r} of {path} is CF-packed ({', '.join(packed)}), which this reader "
                    "does not decode; store it unpacked as floating point"
                )
        for n, a in zip(names, arrays, strict=True):
            if _chunks_are_blosc_frames(a):
                check_blosc_chunks(path / n if n else path, what=f"array {n!r}" if n else "")
        dims = _dimension_names(arrays[0])
        if len({(a.shape, tuple(_dimension_names(a) or ())) for a in arrays}) > 1:
            raise FormatError(
                f"the component arrays of {path} differ in shape or dimensions: "
                + ", ".join(f"{n} {a.shape}" for n, a in zip(names, arrays, strict=True))
                + "; components stacked along c must have the same shape"
            )
        dtypes = [
            float_dtype(a.dtype, what=f"array {n!r} of {path}" if n else label)
            for n, a in zip(names, arrays, strict=True)
        ]
        cf_axes = None
        if dims is not None and group is not None:
            cf_axes = [_cf_axis(group, posixpath.dirname(names[0]), d) for d in dims]
        shape = tuple(arrays[0].shape)
        layout = Layout(
            resolve_axes(
                axes, shape, what=label, stacked=len(names) > 1, dims=dims, cf_axes=cf_axes
            ),
            shape,
            n_stacked=len(names),
        )
        self.names = names
        self._missing = {n: _missing_values(path, n, a) for n, a in zip(names, arrays, strict=True)}
        super().__init__(path, key=",".join(names), layout=layout, dtype=np.result_type(*dtypes))
        self.notes = tuple(_absent_chunks(n or str(path), a) for n, a in zip(names, arrays, strict=True)
                           if a.nchunks_initialized < a.nchunks)
        # Said once a step read holds a zero, not for every such array: most hold none.
        self._zero_notes = {n: note for n, a in zip(names, arrays, strict=True)
                            if (note := _zero_fill_note(n or str(path), a))}
        if group is not None:
            try:  # a note only: never the reason an ingest fails
                coordinates = {n: group[n] for n in (*AXES, "time") if n in group and isinstance(group[n], zarr.Array)}
                note = coordinate_note(str(path), {n: a[...] for n, a in coordinates.items() if a.ndim == 1},
                                       time_units=coordinates["time"].attrs.get("units") if "time" in coordinates
                                       else None)
            except (ValueError, TypeError, OSError, KeyError):
                note = None
            self.notes += (note,) if note else ()

    def _read_blocks(self, key: tuple[int | slice, ...]) -> list[np.ndarray]:
        import zarr

        blocks = []
        for n in self.names:
            array = zarr.open_array(store=str(self.path), path=n, mode="r")
            block = np.asarray(array[key])
            check_missing(block, self._missing[n], what=f"array {n!r} of {self.path}" if n else f"Zarr array {self.path}")
            if n in self._zero_notes and block.dtype.kind == "f" and not block.all():
                self.notes += (self._zero_notes.pop(n),)
            blocks.append(block)
        return blocks


def _chunks_are_blosc_frames(array: zarr.Array) -> bool:
    """Whether each chunk file of ``array`` is one Blosc frame, whose header gives its length:
    a Zarr v2 Blosc compressor, or Blosc the last codec of a v3 array (not sharded: a shard
    holds many frames behind an index)."""
    if array.metadata.zarr_format == 2:
        return getattr(array.metadata.compressor, "codec_id", None) == "blosc"
    codecs = [codec.to_dict().get("name") for codec in array.metadata.codecs]
    return bool(codecs) and codecs[-1] in ("blosc", "numcodecs.blosc")


def _missing_values(path: Path, name: str, array: zarr.Array) -> list[tuple[str, float, str]]:
    """What xarray would read as missing in ``array`` (and this reader would store as data),
    with how to undo it: its CF attributes and, in Zarr v2, the fill value xarray takes for
    the ``_FillValue`` of the arrays it writes."""
    where = posixpath.join(str(path), name) if name else str(path)
    markers = [(attribute, value, f"remove the attribute (python -c \"import zarr; "
                                  f"del zarr.open_array({where!r}, mode='r+').attrs[{attribute!r}]\")")
               for attribute, value in declared_missing(array.attrs)]
    # A Zarr v2 array that zarr-python made without xarray has fill value 0: no missing mark,
    # nor when the dimension names were added by hand (a wall of exact zeros is data;
    # _zero_fill_note says how xarray reads it).
    if (array.metadata.zarr_format == 2 and "_ARRAY_DIMENSIONS" in array.attrs and "_FillValue" not in array.attrs
            and not _is_zero(array.fill_value)):
        markers += [("_FillValue", value, f'set "fill_value" to "NaN" in {posixpath.join(where, ".zarray")} '
                                           "(xarray writes the _FillValue there in Zarr v2)")
                    for _, value in declared_missing({"_FillValue": array.fill_value})]
    return markers


def _is_zero(value: object) -> bool:
    try:
        return float(value) == 0.0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _zero_fill_note(name: str, array: zarr.Array) -> str | None:
    """A Zarr v2 array with dimension names (as xarray writes) and fill value 0 (as
    zarr-python gives every float array): its zeros are stored as zeros, where xarray
    would read them as missing (the note for the ingest to print once it stored one)."""
    if (array.metadata.zarr_format == 2 and "_ARRAY_DIMENSIONS" in array.attrs and "_FillValue" not in array.attrs
            and _is_zero(array.fill_value)):
        return (f"{name} has fill value 0 (zarr-python's default), which xarray reads as a _FillValue: its "
                "zeros were stored as values, where xarray would read them as missing; if they mark missing "
                "cells, remove them before ingesting")
    return None


def _absent_chunks(name: str, array: zarr.Array) -> str:
    """Zarr reads an absent chunk as the fill value, so an incomplete copy of a store reads
    as valid data with blocks of zeros; a writer also leaves out chunks that hold only the
    fill value, so it is said, not refused."""
    missing = array.nchunks - array.nchunks_initialized
    return (f"{missing:,} of {array.nchunks:,} chunks of {name} are absent and read as its fill value "
            f"{_number(array.fill_value)}: if the store was copied, check that the copy is complete")


def _number(value: object) -> str:
    try:
        return f"{float(value):g}"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return repr(value)


def _cf_axis(group: zarr.Group, parent: str, dim: str | None) -> str | None:
    """The CF ``axis`` attribute of the coordinate array named like ``dim``, if there is one."""
    if dim is None:
        return None
    try:
        coordinate = group[posixpath.join(parent, dim)]
    except KeyError:
        return None
    axis = coordinate.attrs.get("axis")
    return axis if isinstance(axis, str) else None


FORMAT = Format(
    name="zarr",
    label="Zarr",
    open=ZarrSource,
    options=(VARIABLES,),
    extensions=(".zarr",),
    directory=True,
)
