"""Saving a cutout (the DataArray of :meth:`turbdb.Dataset.cutout`) where other tools read it:
NetCDF, Zarr, HDF5 with an XDMF description (ParaView and VisIt open the ``.xmf``, as they
open JHTDB's cutouts) and ``.npy``. :func:`write` picks the format from the file name."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from .exceptions import InvalidRequestError
from .output_files import check_room, check_writable, replacing, save_npy

if TYPE_CHECKING:
    import xarray

#: File name endings and the format each writes.
FORMATS = {
    ".nc": "NetCDF-4",
    ".netcdf": "NetCDF-4",
    ".zarr": "Zarr format 2, consolidated (a directory)",
    ".h5": "HDF5 + XDMF (.xmf beside it, for ParaView/VisIt)",
    ".hdf5": "HDF5 + XDMF (.xmf beside it, for ParaView/VisIt)",
    ".xmf": "XDMF + HDF5 (.h5 beside it, for ParaView/VisIt)",
    ".xdmf": "XDMF + HDF5 (.h5 beside it, for ParaView/VisIt)",
    ".npy": "NumPy .npy (the values only)",
}
# XDMF's name for a node value of n components. Other counts are written one Scalar per
# component: VTK read a "Matrix" of 2 components on a 16³ grid as 256 tuples of 32, and
# expanded "Tensor6" to nine with a symmetric layout the field need not have.
_ATTRIBUTE_TYPES = {1: "Scalar", 3: "Vector", 9: "Tensor"}


def format_of(path: str | os.PathLike[str]) -> str:
    """The file ending of ``path`` if turbdb can write it, else a clear error listing them."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        known = ", ".join(f"{s} ({f})" for s, f in FORMATS.items())
        raise InvalidRequestError(f"cannot tell the format of {str(path)!r} from its ending {suffix or '(none)'!r}; "
                                  f"use one of {known}")
    return suffix


def check_target(path: str | os.PathLike[str]) -> str:
    """The format of ``path`` (:func:`format_of`), if writing there loses nothing: a Zarr
    output replaces the whole directory, so an existing one must be a Zarr store (one that
    an earlier cutout wrote); a directory of anything else is refused, not emptied."""
    suffix = format_of(path)
    path = Path(path).expanduser()
    if suffix == ".zarr" and path.exists():
        if not path.is_dir():
            raise InvalidRequestError(f"{str(path)!r} is a file, and a Zarr output is a directory; remove it or "
                                      "choose another name")
        if not (path / ".zgroup").is_file() or (path / "zarr.json").exists():
            raise InvalidRequestError(f"the directory {str(path)!r} exists and is not a cutout written before: "
                                      "writing the Zarr store there would delete what it holds; remove it or choose "
                                      "another name")
    elif path.is_dir():
        raise InvalidRequestError(f"{str(path)!r} is a directory; give a file name")
    check_writable(path)
    if suffix in (".h5", ".hdf5", ".xmf", ".xdmf"):
        check_hdf5_reference(path.with_suffix(".h5").name if suffix in (".xmf", ".xdmf") else path.name)
    companion = {".h5": ".xmf", ".hdf5": ".xmf", ".xmf": ".h5", ".xdmf": ".h5"}.get(suffix)
    if companion and path.with_suffix(companion).is_dir():  # found only after the first file was written
        raise InvalidRequestError(f"{str(path.with_suffix(companion))!r}, written beside {str(path)!r}, is a "
                                  "directory; choose another name")
    return suffix


def write(cut: xarray.DataArray, path: str | os.PathLike[str]) -> list[Path]:
    """Writes ``cut`` to ``path`` in the format its ending names (:data:`FORMATS`); returns
    the files written (two for HDF5 + XDMF). An existing file is replaced once the new one
    is complete (:func:`turbdb.output_files.replacing`: an interrupted write leaves it as
    it was); a directory that is not a Zarr store written before is refused
    (:func:`check_target`)."""
    suffix = check_target(path)  # in any case: .NPY is .npy
    path = Path(path).expanduser()
    if suffix in (".h5", ".hdf5"):
        return xdmf(cut, path.with_suffix(".xmf"), h5=path)
    if suffix in (".xmf", ".xdmf"):
        return xdmf(cut, path)
    with replacing(path) as (temporary,):
        if suffix in (".nc", ".netcdf"):
            write_netcdf4(cut, temporary)
        elif suffix == ".zarr":
            # Format 2 with consolidated metadata: every Zarr and xarray version opens it without
            # a warning (format 3 has no specified string type yet for the component names).
            from .zarr_writes import StoppableStore, stopped_if_failed  # zarr takes a while to import

            store = StoppableStore(temporary)
            with stopped_if_failed(store):
                cut.to_dataset(name=cut.name or "values").to_zarr(store, mode="w-", zarr_format=2,
                                                                  consolidated=True)
        else:
            save_npy(temporary, cut.values)
    return [path]


def write_netcdf4(data: xarray.DataArray | xarray.Dataset, path: str | os.PathLike[str]) -> None:
    """Writes ``data`` to ``path`` as NetCDF-4 (through h5netcdf, as
    ``to_netcdf(engine="h5netcdf")``), in place. The HDF5 file is opened and closed here,
    not by h5netcdf: on a full disk h5netcdf's close failed half-way, and when its file
    object was collected it flushed the half-closed file again, which crashed the process
    (a segmentation fault after the error: h5py issues 914 and 2160). Given an open file,
    h5netcdf leaves closing it to its owner, which never touches it after a failed close."""
    import h5py

    check_room(path, _file_bytes(data))
    with _hdf5_errors(path), h5py.File(path, "w", track_order=True) as f:  # track_order: as h5netcdf opens it
        data.to_netcdf(f, engine="h5netcdf")


def _file_bytes(data: xarray.DataArray | xarray.Dataset, values_bytes: int | None = None, datasets: int = 0) -> int:
    """A generous bound on the size of the HDF5 file of ``data``: its values
    (``values_bytes`` if they are written in another type) and coordinates, and room for
    the file's metadata and that of each variable (and of ``datasets`` more)."""
    arrays = list(data.variables.values()) if hasattr(data, "data_vars") else [data, *data.coords.values()]
    if values_bytes is not None:
        arrays = arrays[1:]
    return sum(a.nbytes for a in arrays) + (values_bytes or 0) + 32 * 1024 + 4 * 1024 * (len(arrays) + datasets)


# HDF5's own report of a failed write: "... errno = 28, error message = 'No space left ..."
_HDF5_ERRNO = re.compile(r"\berrno = (\d+)")


@contextlib.contextmanager
def _hdf5_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """An HDF5 write or close that the operating system refused (h5py raises some of them as
    a bare ``RuntimeError``, "Disable slist on flush dest failure failed") is the
    ``OSError`` of its errno, on ``path``: a full disk says so, in one line, as the other
    formats do."""
    try:
        yield
    except (RuntimeError, OSError) as e:
        found = _HDF5_ERRNO.search(str(e))
        number = (e.errno if isinstance(e, OSError) else None) or (int(found[1]) if found else None)
        if number in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(number, os.strerror(number), str(path)) from None
        if number is not None and isinstance(e, RuntimeError):
            raise OSError(number, f"{os.strerror(number)} ({str(e).splitlines()[0]})", str(path)) from None
        raise


def check_hdf5_reference(h5_name: str) -> None:
    """Refuses an HDF5 file name that XDMF cannot refer to: its data items say
    ``file.h5:/dataset``, and readers (VTK, so ParaView and VisIt) split that at the first
    colon, so ``run_12:30.h5`` was written whole and could not be opened."""
    if ":" in h5_name:
        raise InvalidRequestError(f"the HDF5 file {h5_name!r} has a ':' in its name, which XDMF readers (ParaView, "
                                  "VisIt) take as the end of the file name in 'file.h5:/dataset': choose a name "
                                  "without ':'")


def _node_array(cut: xarray.DataArray) -> xarray.DataArray:
    """``cut`` with dims ``([time,] z, y, x, component)``: one component where it has no
    component dim (``cut.sel(component="ux")``, a scalar computed from a cutout), a single
    node where x, y or z is only a scalar coordinate (``cut.isel(z=0)``, a plane)."""
    cut = cut.expand_dims([a for a in "zyx" if a not in cut.dims and a in cut.coords])
    if "component" not in cut.dims:
        cut = cut.expand_dims("component", axis=cut.ndim)
    wanted = ("time",) * ("time" in cut.dims) + ("z", "y", "x", "component")
    if set(cut.dims) != set(wanted):
        extra, missing = sorted(set(cut.dims) - set(wanted)), sorted(set(wanted) - set(cut.dims))
        raise InvalidRequestError(
            f"HDF5/XDMF holds arrays of dims ([time,] z, y, x[, component]); this one has dims {tuple(cut.dims)}"
            + (f" (no {', '.join(missing)})" if missing else "")
            + (f": select or reduce {', '.join(extra)} first (.isel/.sel/.mean)" if extra else "")
            + ", or save it as .nc or .zarr, which hold any dims")
    return cut.transpose(*wanted)


def _labels(cut: xarray.DataArray) -> list[tuple[int, float]] | None:
    """(stored step, time) of every time in the cutout, from its ``time_index`` and ``time``
    coordinates (xarray carries these through isel, sel, arithmetic and concat, and drops
    them where a result has no single time: a mean over time, a difference of two times).
    None for an array without them, which is written unlabelled. The ``time`` attributes
    are not read: xarray copies them unchanged, so a mean over a concatenation of cutouts
    still says the first one's time."""
    index, time = cut.coords.get("time_index"), cut.coords.get("time")
    if "time" in cut.dims:
        if index is None or index.dims != ("time",) or time is None:
            raise InvalidRequestError(
                "the cutout's time dimension has no time_index coordinate along it, which names its steps in HDF5 "
                "(velocity_0001 for stored step 0): concatenate cutouts with xarray.concat(cuts, dim='time', "
                "coords='different'), which keeps it, or set it: cut.assign_coords(time_index=('time', steps))")
        return [(int(i), float(t)) for i, t in zip(index.values, time.values)]
    if index is None and time is None:
        return None
    if index is None or time is None or index.ndim or time.ndim:
        raise InvalidRequestError(
            f"the cutout has a {'time' if index is None else 'time_index'} coordinate but no single "
            f"{'time_index' if index is None else 'time'}: set both "
            "(cut.assign_coords(time=t, time_index=step)), or drop both to write it without a time")
    return [(int(index), float(time))]


def _field_label(cut: xarray.DataArray) -> str:
    """The name the field's HDF5 datasets and XDMF attribute take: the array's, with the
    component where one was selected (``cut.sel(component="uy")``: ``velocity_uy``; the file
    said only ``velocity``)."""
    field = str(cut.name or "values")
    component = cut.coords.get("component")
    if "component" not in cut.dims and component is not None and component.ndim == 0:
        return f"{field}_{component.item()}"
    return field


def _value_dtype(cut: xarray.DataArray) -> np.dtype:
    """float64 for values that float32 would round (float64, large integers), else float32,
    the size of a stored field: a float64 result lost its 1e-9 detail, and 1e39 became inf."""
    return np.dtype(np.float64 if np.result_type(cut.dtype, np.float32) == np.float64 else np.float32)


def _steps(cut: xarray.DataArray, field: str) -> list[tuple[str, float | None, np.ndarray]]:
    """(HDF5 dataset name, time, values (z, y, x, component)) of every time in ``cut`` (a
    :func:`_node_array`); one unlabelled step, named ``field``, if it has no time."""
    labels = _labels(cut)
    if labels is None:
        return [(field, None, cut.values)]
    values = cut.values if "time" in cut.dims else cut.values[np.newaxis]
    return [(_dataset_name(field, i), t, v) for (i, t), v in zip(labels, values)]


def _dataset_name(field: str, t_index: int) -> str:
    """JHTDB's naming, which counts stored steps from 1: the first step is velocity_0001
    (as turbdb.jhtdb's getCutout and the JHTDB endpoint name it)."""
    return f"{field}_{t_index + 1:04d}"


def hdf5(cut: xarray.DataArray, path: str | os.PathLike[str]) -> list[Path]:
    """Writes the cutout as plain HDF5: ``xcoor``, ``ycoor``, ``zcoor`` (physical node
    coordinates), ``time`` and one dataset per time step, ``<field>_<time index + 1:04d>``,
    shaped ``(nz, ny, nx, ncomp)`` (``(nz, ny, nx)`` for a scalar), as JHTDB's cutouts.
    The steps are read from the ``time_index`` and ``time`` coordinates; an array without
    them (a mean over time) is one dataset named after the field, with no ``time``. Each
    carries its ``units`` where the cutout has them; float64 values stay float64 (a
    selected component is named with it: ``velocity_uy_0001``). An existing file is
    replaced once the new one is complete; a disk without room for it is refused first."""
    field = _field_label(cut)
    cut = _node_array(cut)
    with replacing(path) as (temporary,):
        _write_hdf5(cut, field, temporary)
    return [Path(path)]


def _write_hdf5(cut: xarray.DataArray, field: str, path: Path) -> None:
    import h5py

    steps = _steps(cut, field)
    names = [name for name, _, _ in steps]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidRequestError(f"the cutout holds time step(s) {', '.join(repeated)} more than once, and "
                                  "HDF5 names its datasets by step: ask for each time once")
    dtype = _value_dtype(cut)
    check_room(path, _file_bytes(cut, cut.size * dtype.itemsize, len(steps)))
    with _hdf5_errors(path), h5py.File(path, "w") as f:
        for axis in "xyz":
            node = f.create_dataset(f"{axis}coor", data=np.asarray(cut[axis].values, dtype=np.float64))
            _copy_units(cut[axis].attrs, node)
        if steps[0][1] is not None:
            _copy_units(cut["time"].attrs, f.create_dataset("time", data=np.array([t for _, t, _ in steps])))
        for name, _, values in steps:
            data = values[..., 0] if values.shape[-1] == 1 else values
            _copy_units(cut.attrs, f.create_dataset(name, data=np.ascontiguousarray(data, dtype=dtype)))
        # The time attributes are those of the steps written (a concatenation keeps the first
        # cutout's; a mean over time keeps them with no time left).
        for key, value in cut.attrs.items():
            if key not in ("time", "time_index"):
                f.attrs[key] = value
        labels = _labels(cut)
        if labels is not None and len(labels) == 1:
            f.attrs["time_index"], f.attrs["time"] = labels[0]


def _copy_units(attrs: dict, node: object) -> None:
    """The ``units`` attribute of ``attrs``, if any, on the HDF5 dataset ``node``."""
    if attrs.get("units"):
        node.attrs["units"] = str(attrs["units"])  # type: ignore[attr-defined]


def xdmf(cut: xarray.DataArray, path: str | os.PathLike[str], h5: str | os.PathLike[str] | None = None) -> list[Path]:
    """Writes the cutout for ParaView and VisIt: the HDF5 file ``h5`` (:func:`hdf5`;
    default ``path`` with ``.h5``) and its XDMF description ``path`` (open this one): a
    temporal collection of 3DRectMesh grids, node coordinates from
    ``xcoor``/``ycoor``/``zcoor``, the field as a node-centred attribute; an array without
    a time (a mean over time) is one grid with no ``<Time>``. Returns both paths.
    Both are written under temporary names and renamed into place once complete, the
    ``.h5`` first."""
    path = Path(path)
    h5 = Path(h5) if h5 is not None else path.with_suffix(".h5")
    h5_name = h5.name if h5.parent.resolve() == path.parent.resolve() else str(h5.resolve())
    field = _field_label(cut)
    cut = _node_array(cut)
    steps = [(name, time) for name, time, _ in _steps(cut, field)]
    shape = tuple(cut.sizes[a] for a in "zyx")
    ncomp = cut.sizes["component"]
    check_hdf5_reference(h5_name)
    with replacing(h5, path) as (h5_temporary, xmf_temporary):
        _write_hdf5(cut, field, h5_temporary)
        xmf_temporary.write_text(xdmf_text(field, shape + ((ncomp,) if ncomp > 1 else ()), steps, h5_name,
                                           precision=_value_dtype(cut).itemsize,
                                           components=[str(c) for c in cut["component"].values]))
    return [h5, path]


def xdmf_text(field: str, value_shape: tuple[int, ...], steps: list[tuple[str, float | None]], h5_name: str,
              coordinates: tuple[str, str, str] = ("xcoor", "ycoor", "zcoor"), coordinate_precision: int = 8,
              precision: int = 4, components: Sequence[str] | None = None) -> str:
    """The XDMF document of an HDF5 file holding the node coordinates ``coordinates`` (x, y,
    z; 1-D) and, per time step, a dataset of ``value_shape``, ``(nz, ny, nx[, ncomp])``, of
    floats of ``precision`` bytes: ``steps`` lists each one's name and time (None: no
    ``<Time>``, for an array that has none, which ParaView shows as a single, untimed
    grid). A value of 1, 3 or 9 components is one Scalar, Vector or Tensor attribute named
    ``field``; any other count is one Scalar attribute per component, ``field_<label>``
    (``components``; default its number), read from the dataset as a hyperslab."""
    nz, ny, nx = value_shape[:3]
    check_hdf5_reference(h5_name)
    h5_name = escape(h5_name)  # a file named a&b<c.h5 made the document not XML
    ncomp = value_shape[3] if len(value_shape) > 3 else 1
    labels = list(components) if components is not None and len(components) == ncomp else list(map(str, range(ncomp)))
    value_dims = " ".join(map(str, value_shape))

    def attributes(name: str) -> list[str]:
        values = f'NumberType="Float" Precision="{precision}" Format="HDF">{h5_name}:/{escape(name)}</DataItem>'
        if ncomp in _ATTRIBUTE_TYPES:
            return [f'  <Attribute Name={quoteattr(field)} AttributeType="{_ATTRIBUTE_TYPES[ncomp]}" Center="Node">',
                    f'    <DataItem Dimensions="{value_dims}" {values}',
                    "  </Attribute>"]
        lines = []
        for k, label in enumerate(labels):
            lines += [f'  <Attribute Name={quoteattr(f"{field}_{label}")} AttributeType="Scalar" Center="Node">',
                      f'    <DataItem ItemType="HyperSlab" Dimensions="{nz} {ny} {nx} 1">',
                      f'      <DataItem Dimensions="3 4" Format="XML">0 0 0 {k} 1 1 1 1 {nz} {ny} {nx} 1</DataItem>',
                      f'      <DataItem Dimensions="{value_dims}" {values}',
                      "    </DataItem>",
                      "  </Attribute>"]
        return lines

    # An array without a time is one grid: in a temporal collection, ParaView would give it time 0.
    timed = any(time is not None for _, time in steps)
    pad = "      " if timed else "    "
    lines = ['<?xml version="1.0" ?>', '<!DOCTYPE Xdmf SYSTEM "Xdmf.dtd" []>', '<Xdmf Version="3.0">', "  <Domain>"]
    if timed:
        lines.append(f'    <Grid Name={quoteattr(field)} GridType="Collection" CollectionType="Temporal">')
    for name, time in steps:
        lines += [pad + line for line in [
            f"<Grid Name={quoteattr(name)} GridType=\"Uniform\">",
            *([] if time is None else [f'  <Time Value="{time!r}"/>']),
            f'  <Topology TopologyType="3DRectMesh" Dimensions="{nz} {ny} {nx}"/>',
            '  <Geometry GeometryType="VXVYVZ">',
            *(f'    <DataItem Name="{c}" Dimensions="{n}" NumberType="Float" '
              f'Precision="{coordinate_precision}" Format="HDF">{h5_name}:/{c}</DataItem>'
              for c, n in zip(coordinates, (nx, ny, nz))),
            "  </Geometry>",
            *attributes(name),
            "</Grid>",
        ]]
    lines += ["    </Grid>"] * timed + ["  </Domain>", "</Xdmf>", ""]
    return "\n".join(lines)
