"""Saving a cutout (the DataArray of :meth:`turbdb.Dataset.cutout`) where other tools read it:
NetCDF, Zarr, HDF5 with an XDMF description (ParaView and VisIt open the ``.xmf``, as they
open JHTDB's cutouts) and ``.npy``. :func:`write` picks the format from the file name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from .exceptions import InvalidRequestError
from .output_files import replacing, save_npy

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
# XDMF's name for a node value of n components.
_ATTRIBUTE_TYPES = {1: "Scalar", 3: "Vector", 6: "Tensor6", 9: "Tensor"}


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
            cut.to_netcdf(temporary, engine="h5netcdf")
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


def _steps(cut: xarray.DataArray) -> list[tuple[int, float, np.ndarray]]:
    """(time index, time, values (z, y, x, component)) of every time in the cutout."""
    if "time" in cut.dims:
        return [(int(i), float(t), cut.values[k])
                for k, (i, t) in enumerate(zip(cut["time_index"].values, cut["time"].values))]
    return [(int(cut.attrs.get("time_index", 0)), float(cut.attrs.get("time", 0.0)), cut.values)]


def _dataset_name(field: str, t_index: int) -> str:
    """JHTDB's naming, which counts stored steps from 1: the first step is velocity_0001
    (as turbdb.jhtdb's getCutout and the JHTDB endpoint name it)."""
    return f"{field}_{t_index + 1:04d}"


def hdf5(cut: xarray.DataArray, path: str | os.PathLike[str]) -> list[Path]:
    """Writes the cutout as plain HDF5: ``xcoor``, ``ycoor``, ``zcoor`` (physical node
    coordinates), ``time`` and one dataset per time step, ``<field>_<time index + 1:04d>``,
    shaped ``(nz, ny, nx, ncomp)`` (``(nz, ny, nx)`` for a scalar), as JHTDB's cutouts.
    An existing file is replaced once the new one is complete."""
    with replacing(path) as (temporary,):
        _write_hdf5(cut, temporary)
    return [Path(path)]


def _write_hdf5(cut: xarray.DataArray, path: Path) -> None:
    import h5py

    field = str(cut.name or "values")
    steps = _steps(cut)
    repeated = sorted({i for i, _, _ in steps if sum(j == i for j, _, _ in steps) > 1})
    if repeated:
        raise InvalidRequestError(f"the cutout holds time step(s) {', '.join(map(str, repeated))} more than once, and "
                                  "HDF5 names its datasets by step: ask for each time once")
    with h5py.File(path, "w") as f:
        for axis in "xyz":
            f.create_dataset(f"{axis}coor", data=np.asarray(cut[axis].values, dtype=np.float64))
        f.create_dataset("time", data=np.array([t for _, t, _ in steps]))
        for t_index, _, values in steps:
            data = values[..., 0] if values.shape[-1] == 1 else values
            f.create_dataset(_dataset_name(field, t_index), data=np.ascontiguousarray(data, dtype=np.float32))
        for key, value in cut.attrs.items():
            f.attrs[key] = value


def xdmf(cut: xarray.DataArray, path: str | os.PathLike[str], h5: str | os.PathLike[str] | None = None) -> list[Path]:
    """Writes the cutout for ParaView and VisIt: the HDF5 file ``h5`` (:func:`hdf5`;
    default ``path`` with ``.h5``) and its XDMF description ``path`` (open this one): a
    temporal collection of 3DRectMesh grids, node coordinates from
    ``xcoor``/``ycoor``/``zcoor``, the field as a node-centred attribute. Returns both paths.
    Both are written under temporary names and renamed into place once complete, the
    ``.h5`` first."""
    path = Path(path)
    h5 = Path(h5) if h5 is not None else path.with_suffix(".h5")
    h5_name = h5.name if h5.parent.resolve() == path.parent.resolve() else str(h5.resolve())
    field = str(cut.name or "values")
    steps = [(_dataset_name(field, t_index), time) for t_index, time, _ in _steps(cut)]
    shape = tuple(cut.sizes[a] for a in "zyx")
    ncomp = cut.sizes["component"]
    with replacing(h5, path) as (h5_temporary, xmf_temporary):
        _write_hdf5(cut, h5_temporary)
        xmf_temporary.write_text(xdmf_text(field, shape + ((ncomp,) if ncomp > 1 else ()), steps, h5_name))
    return [h5, path]


def xdmf_text(field: str, value_shape: tuple[int, ...], steps: list[tuple[str, float]], h5_name: str,
              coordinates: tuple[str, str, str] = ("xcoor", "ycoor", "zcoor"), coordinate_precision: int = 8) -> str:
    """The XDMF document of an HDF5 file holding the node coordinates ``coordinates`` (x, y,
    z; 1-D) and, per time step, a dataset of ``value_shape``, ``(nz, ny, nx[, ncomp])``:
    ``steps`` lists each one's name and time."""
    nz, ny, nx = value_shape[:3]
    h5_name = escape(h5_name)  # a file named a&b<c.h5 made the document not XML
    kind = _ATTRIBUTE_TYPES.get(value_shape[3] if len(value_shape) > 3 else 1, "Matrix")
    value_dims = " ".join(map(str, value_shape))
    lines = ['<?xml version="1.0" ?>', '<!DOCTYPE Xdmf SYSTEM "Xdmf.dtd" []>', '<Xdmf Version="3.0">', "  <Domain>",
             f'    <Grid Name={quoteattr(field)} GridType="Collection" CollectionType="Temporal">']
    for name, time in steps:
        lines += [
            f"      <Grid Name={quoteattr(name)} GridType=\"Uniform\">",
            f'        <Time Value="{time!r}"/>',
            f'        <Topology TopologyType="3DRectMesh" Dimensions="{nz} {ny} {nx}"/>',
            '        <Geometry GeometryType="VXVYVZ">',
            *(f'          <DataItem Name="{c}" Dimensions="{n}" NumberType="Float" '
              f'Precision="{coordinate_precision}" Format="HDF">{h5_name}:/{c}</DataItem>'
              for c, n in zip(coordinates, (nx, ny, nz))),
            "        </Geometry>",
            f'        <Attribute Name={quoteattr(field)} AttributeType="{kind}" Center="Node">',
            f'          <DataItem Dimensions="{value_dims}" NumberType="Float" Precision="4" Format="HDF">'
            f"{h5_name}:/{name}</DataItem>",
            "        </Attribute>",
            "      </Grid>",
        ]
    lines += ["    </Grid>", "  </Domain>", "</Xdmf>", ""]
    return "\n".join(lines)
