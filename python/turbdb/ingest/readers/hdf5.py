"""Reads a field from an HDF5 file: one dataset, or one dataset per component stacked along c;
only the hyperslab of each step is read."""

from __future__ import annotations

import itertools
import math
import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from turbdb.exceptions import FormatError, UnknownNameError
from turbdb.ingest.axes import Layout, resolve_axes
from turbdb.ingest.coordinates import coordinate_note
from turbdb.ingest.format_spec import Format, Option
from turbdb.ingest.missing_values import DEFAULT_FILL, check_default_fill, check_missing, declared_missing
from turbdb.ingest.source import ArraySource, float_dtype
from turbdb.ingest.variables import VARIABLES, choose_arrays

if TYPE_CHECKING:
    import h5py

__all__ = ["FORMAT", "HDF5_SIGNATURE", "Hdf5Source"]

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.size == 1:
        return _text(value.item())
    return value if isinstance(value, str) else None


def _dimension_names(ds: h5py.Dataset) -> tuple[list[str | None], list[str | None]]:
    """Each axis's name (its label, else its attached dimension scale, as netCDF-4 writes)
    and the scale's CF ``axis`` attribute."""
    names: list[str | None] = []
    cf_axes: list[str | None] = []
    for dim in ds.dims:
        scale = dim[0] if len(dim) else None
        label = dim.label or (posixpath.basename(scale.name) if scale is not None else None)
        names.append(label or None)
        cf_axes.append(_text(scale.attrs.get("axis")) if scale is not None else None)
    return names, cf_axes


class Hdf5Source(ArraySource):
    """A field in an HDF5 file, chosen by ``dataset_path`` and/or ``variables``."""

    format = "hdf5"

    def __init__(
        self,
        path: Path,
        *,
        dataset_path: str | None = None,
        variables: list[str] | None = None,
        axes: str | None = None,
    ) -> None:
        import h5py

        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise FormatError(
                f"{path} is not a readable HDF5 file ({e}); check the file, or pass format= "
                "if it is something else"
            ) from e
        with f:
            names = self._choose(f, path, dataset_path, variables)
            datasets = [f[n] for n in names]
            first = datasets[0]
            shapes = {ds.name: ds.shape for ds in datasets}
            if len(set(shapes.values())) > 1:
                raise FormatError(
                    f"the component datasets of {path} differ in shape: "
                    + ", ".join(f"{n} {s}" for n, s in shapes.items())
                    + "; components stacked along c must have one shape"
                )
            labelled = {ds.name: _dimension_names(ds)[0] for ds in datasets}
            # The same labels in another order: a component stored transposed. Other labels
            # (staggered grids: xu, yv, zw) say nothing of the order.
            named = [tuple(d) for d in labelled.values() if all(d)]
            if len(set(named)) > 1 and len({tuple(sorted(d)) for d in named}) == 1:
                raise FormatError(
                    f"the component datasets of {path} differ in dimensions: "
                    + ", ".join(f"{n} {tuple(d)}" for n, d in labelled.items())
                    + "; components stacked along c must have the same dimensions (transpose the "
                    "odd one in the file, or ingest the components one at a time)"
                )
            dtypes = [float_dtype(ds.dtype, what=f"dataset {ds.name} of {path}") for ds in datasets]
            self._written = {ds.name: _written_chunks(ds, path) for ds in datasets}
            dims, cf_axes = _dimension_names(first)
            what = f"dataset {first.name} of {path}"
            stacked = len(datasets) > 1
            layout = Layout(
                resolve_axes(axes, first.shape, what=what, stacked=stacked, dims=dims, cf_axes=cf_axes),
                first.shape,
                n_stacked=len(datasets),
            )
            self.names = [ds.name for ds in datasets]
            # A netCDF-4 file not named .nc is read here: its markers of missing values too.
            self._missing = {ds.name: _missing_values(ds, path) for ds in datasets}
            try:  # a note only: never the reason an ingest fails
                coordinates, time_units = _coordinates(f, first, layout.n_steps)
                note = coordinate_note(str(path), coordinates, time_units=time_units)
            except (ValueError, TypeError, OSError, KeyError):
                note = None
        super().__init__(
            path, key=",".join(self.names), layout=layout, dtype=np.result_type(*dtypes)
        )
        self.notes = (note,) if note else ()

    def _read_blocks(self, key: tuple[int | slice, ...]) -> list[np.ndarray]:
        import h5py

        # Opened per step: an ingest of many files must not hold them all open.
        with h5py.File(self.path, "r") as f:
            blocks = []
            for n in self.names:
                _check_written(f[n], key, self._written[n], self.path)
                block = np.asarray(f[n][key])
                markers, netcdf_default = self._missing[n]
                check_missing(block, markers, what=f"dataset {n} of {self.path}")
                if netcdf_default:
                    check_default_fill(block, what=f"dataset {n} of {self.path}")
                blocks.append(block)
            return blocks

    @staticmethod
    def _choose(
        f: h5py.File, path: Path, dataset_path: str | None, variables: list[str] | None
    ) -> list[str]:
        import h5py

        group: h5py.Group = f
        if dataset_path is not None:
            node = f.get(dataset_path)
            if node is None:
                raise UnknownNameError(
                    f"{path} has no dataset or group {dataset_path!r}; it holds "
                    f"{', '.join(_all_datasets(f)) or 'no datasets'}"
                )
            if isinstance(node, h5py.Dataset):
                if variables is not None:
                    raise FormatError(
                        f"dataset_path {dataset_path!r} of {path} is a dataset, so variables= "
                        "cannot pick datasets inside it; make dataset_path the group holding them"
                    )
                return [node.name]
            group = node
        candidates = {name: (ds.shape, ds.dtype) for name, ds in _datasets(group)}
        where = f"{path}" if group.name == "/" else f"group {group.name} of {path}"
        option = "variables" if dataset_path is not None else "dataset_path"
        requested = [v.lstrip("/") for v in variables] if variables is not None else None
        chosen = choose_arrays(candidates, requested, where=where, kind="dataset", option=option)
        return [group[n].name for n in chosen]


def _written_chunks(ds: h5py.Dataset, path: Path) -> set[tuple[int, ...]] | None:
    """The offsets of the chunks of ``ds`` that hold data, or None when all of them do. HDF5
    reads a chunk never written (a writer stopped halfway) as the fill value, which would be
    stored as data without a word."""
    import h5py

    if ds.size == 0:
        return None
    if ds.chunks is None:
        plist = ds.id.get_create_plist()
        contiguous = plist.get_layout() == h5py.h5d.CONTIGUOUS and plist.get_external_count() == 0
        if contiguous and ds.id.get_offset() is None:
            raise FormatError(f"dataset {ds.name} of {path} was never written (HDF5 reads it as its fill value); "
                              "is the file complete?")
        return None
    expected = math.prod(-(-n // c) for n, c in zip(ds.shape, ds.chunks))
    count = ds.id.get_num_chunks()
    if count >= expected:
        return None
    return {tuple(ds.id.get_chunk_info(i).chunk_offset) for i in range(count)}


def _check_written(ds: h5py.Dataset, key: tuple[int | slice, ...], written: set[tuple[int, ...]] | None,
                   path: Path) -> None:
    """Refuses a step that needs a chunk never written (see :func:`_written_chunks`)."""
    if written is None:
        return
    spans = []
    for k, n, c in zip(key + (slice(None),) * (ds.ndim - len(key)), ds.shape, ds.chunks):
        start, stop = (k, k + 1) if isinstance(k, (int, np.integer)) else k.indices(n)[:2]
        spans.append(range(start // c * c, stop, c))
    missing = sum(offset not in written for offset in itertools.product(*spans))
    if missing:
        raise FormatError(
            f"dataset {ds.name} of {path}: {missing} of the chunks this step needs were never written "
            f"(HDF5 would read them as the fill value {ds.fillvalue}); the file is incomplete — was its "
            "writer stopped?")


def _missing_values(ds: h5py.Dataset, path: Path) -> tuple[list[tuple[str, float, str]], bool]:
    """The values netCDF marks as missing in ``ds``, with how to undo each, and whether it
    is a netCDF-4 variable that declares none, whose cells never written hold netCDF's
    default fill value (the HDF5 fill value netCDF gives it)."""
    markers = [(attribute, value, f"remove the attribute (python -c \"import h5py; "
                                  f"del h5py.File({str(path)!r}, 'r+')[{ds.name!r}].attrs[{attribute!r}]\")")
               for attribute, value in declared_missing(ds.attrs)]
    netcdf_default = not markers and "_FillValue" not in ds.attrs and ds.dtype.kind == "f" and np.isclose(
        float(ds.fillvalue), DEFAULT_FILL, rtol=1e-6, atol=0)
    return markers, netcdf_default


def _coordinates(f: h5py.File, ds: h5py.Dataset, n_steps: int) -> tuple[dict[str, np.ndarray], object]:
    """The node coordinates and times of the steps of ``ds``, beside it or at the root, as
    turbdb and JHTDB cutouts write them (``xcoor``, ``ycoor``, ``zcoor``, ``time``) or
    netCDF-4 (``x``, ``y``, ``z``, ``time``), and the times' ``units``."""
    import h5py

    def vector(name: str) -> h5py.Dataset | None:
        for group in (ds.parent, f):
            node = group.get(name)
            # netCDF-4 keeps a dimension without coordinates as an empty scale: no coordinates.
            if isinstance(node, h5py.Dataset) and node.ndim == 1 and node.dtype.kind in "iuf" and not (
                    _text(node.attrs.get("NAME")) or "").startswith("This is a netCDF dimension but not"):
                return node
        return None

    found: dict[str, np.ndarray] = {}
    for axis in "xyz":
        node = next((n for n in (vector(f"{axis}coor"), vector(axis)) if n is not None), None)
        if node is not None:
            found[axis] = node[...]
    times = vector("time")
    units = _text(times.attrs.get("units")) if times is not None else None
    steps = _step_index(ds)
    if times is not None and len(times) == n_steps:
        found["time"] = times[...]
    elif times is not None and steps is not None and n_steps == 1 and len(times) == steps[1]:
        found["time"] = times[steps[0]:steps[0] + 1]  # one <field>_NNNN dataset of a cutout's several
    elif n_steps == 1 and isinstance(time := f.attrs.get("time"), (int, float, np.integer, np.floating)):
        found["time"] = np.array([time])
    return found, units


def _step_index(ds: h5py.Dataset) -> tuple[int, int] | None:
    """Where ``ds``, named ``<field>_NNNN``, comes among its field's step datasets, and
    how many there are."""
    import h5py

    field = re.fullmatch(r"(.+)_\d{4,}", posixpath.basename(ds.name))
    if field is None:
        return None
    siblings = sorted(n for n, node in ds.parent.items()
                      if isinstance(node, h5py.Dataset) and re.fullmatch(rf"{re.escape(field[1])}_\d{{4,}}", n))
    return siblings.index(posixpath.basename(ds.name)), len(siblings)


def _datasets(group: h5py.Group) -> list[tuple[str, h5py.Dataset]]:
    """Every dataset below ``group``, by path relative to it."""
    import h5py

    found: list[tuple[str, h5py.Dataset]] = []

    def visit(name: str, node: object) -> None:
        if isinstance(node, h5py.Dataset):
            found.append((name, node))

    group.visititems(visit)
    return found


def _all_datasets(f: h5py.File) -> list[str]:
    return [f"/{n} {ds.shape}" for n, ds in _datasets(f)][:20]


FORMAT = Format(
    name="hdf5",
    label="HDF5",
    open=Hdf5Source,
    options=(Option("dataset_path", "path of the dataset inside the file."), VARIABLES),
    aliases=("h5", "hdf"),
    extensions=(".h5", ".hdf5", ".hdf", ".he5"),
    signature=lambda head: head.startswith(HDF5_SIGNATURE),
)
