"""Reads a field from a netCDF file through xarray (CF decoding, dimension names), one
variable or one per component; only one time step is read at a time."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from turbdb.exceptions import FormatError
from turbdb.ingest.axes import Layout, resolve_axes
from turbdb.ingest.coordinates import AXES, coordinate_note
from turbdb.ingest.format_spec import Format
from turbdb.ingest.missing_values import check_default_fill, missing_message
from turbdb.ingest.readers.hdf5 import HDF5_SIGNATURE
from turbdb.ingest.netcdf_classic import check_complete
from turbdb.ingest.source import ArraySource, float_dtype
from turbdb.ingest.variables import VARIABLES, choose_arrays

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["FORMAT", "NetcdfSource"]


def _engine(path: Path) -> str | None:
    """h5netcdf for netCDF-4 (a turbdb dependency); for netCDF-3 whichever xarray finds."""
    with path.open("rb") as f:
        return "h5netcdf" if f.read(8) == HDF5_SIGNATURE else None


class NetcdfSource(ArraySource):
    """A field in a netCDF file, chosen by ``variables``."""

    format = "netcdf"

    def __init__(
        self, path: Path, *, variables: list[str] | None = None, axes: str | None = None
    ) -> None:
        self._engine = _engine(path)
        check_complete(path)
        with self._open(path) as ds:
            candidates = {str(n): (v.shape, v.dtype) for n, v in ds.data_vars.items()}
            names = choose_arrays(
                candidates, variables, where=str(path), kind="variable", option="variables"
            )
            arrays = [ds.variables[n] for n in names]
            if len({(v.dims, v.shape) for v in arrays}) > 1:
                raise FormatError(
                    f"the component variables of {path} differ in dimensions: "
                    + ", ".join(f"{n} {dict(zip(v.dims, v.shape))}" for n, v in zip(names, arrays))
                    + "; components stacked along c must have the same dimensions"
                )
            dtypes = [float_dtype(v.dtype, what=f"variable {n!r} of {path}") for n, v in zip(names, arrays)]
            first = arrays[0]
            dims = [str(d) for d in first.dims]
            cf_axes = [
                ds.variables[d].attrs.get("axis") if d in ds.variables else None for d in dims
            ]
            layout = Layout(
                resolve_axes(
                    axes,
                    first.shape,
                    what=f"variable {names[0]!r} of {path}",
                    stacked=len(names) > 1,
                    dims=dims,
                    cf_axes=cf_axes,
                ),
                first.shape,
                n_stacked=len(names),
            )
            try:  # a note only: never the reason an ingest fails
                note = coordinate_note(str(path), {str(n): ds.variables[n].values for n in ds.variables
                                                   if str(n) in (*AXES, "time") and ds.variables[n].ndim == 1},
                                       time_units=ds.variables["time"].attrs.get("units") if "time" in ds.variables
                                       else None)
            except (ValueError, TypeError, OSError, KeyError):
                note = None
        self.names = names
        super().__init__(path, key=",".join(names), layout=layout, dtype=np.result_type(*dtypes))
        self.notes = (note,) if note else ()

    def _open(self, path: Path) -> xr.Dataset:
        import xarray as xr

        try:
            # Times are not needed and decoding them can fail on exotic calendars.
            # A plain HDF5 file read as netCDF has unnamed dimensions: name them without h5netcdf's
            # warning about it, which it gave twice per file.
            extra = {"phony_dims": "access"} if self._engine == "h5netcdf" else {}
            return xr.open_dataset(
                path, engine=self._engine, decode_times=False, decode_timedelta=False, cache=False, **extra
            )
        except (OSError, ValueError, KeyError) as e:  # KeyError: h5py on a dangling link
            raise FormatError(
                f"{path} could not be opened as netCDF ({e}); check the file, install netCDF4 "
                "for netCDF-3 files, or pass format= if it is something else"
            ) from e

    def _read_blocks(self, key: tuple[int | slice, ...]) -> list[np.ndarray]:
        # Opened per step: an ingest of many files must not hold them all open.
        with self._open(self.path) as ds:
            blocks = []
            for n in self.names:
                variable = ds.variables[n]
                block = np.asarray(variable[key])
                # The value xarray masked as NaN: a declared missing_value, else a _FillValue
                # (xarray writes NaN as the _FillValue of every float variable: no mask).
                declared = [(a, v) for a in ("missing_value", "_FillValue") if (v := variable.encoding.get(a)) is not None
                            and not (isinstance(v, (float, np.floating)) and np.isnan(v))]
                _check_filled(block, n, *(declared[0] if declared else ("_FillValue", None)), self.path)
                blocks.append(block)
            return blocks


def _check_filled(block: np.ndarray, name: str, attribute: str, declared: object, path: Path) -> None:
    """Refuses values netCDF marks as never written, which would be stored as data: the
    default fill value (an incomplete file), or NaN where xarray masked a declared
    ``_FillValue`` or ``missing_value`` (``attribute``; named, since the file itself holds
    no NaN)."""
    what = f"variable {name!r} of {path}"
    if declared is None:
        check_default_fill(block, what=what)
        return
    missing = int(np.count_nonzero(np.isnan(block))) if block.dtype.kind == "f" else 0
    if missing:
        raise FormatError(missing_message(what, attribute, declared, missing,
                                          f"remove the attribute (ncatted -a {attribute},{name},d,, {path.name})"))


FORMAT = Format(
    name="netcdf",
    label="netCDF",
    open=NetcdfSource,
    options=(VARIABLES,),
    aliases=("nc", "nc4", "netcdf4"),
    # NetCDF-4 is HDF5 inside: the extension is the only thing that tells them apart.
    extensions=(".nc", ".nc4", ".netcdf", ".cdf"),
    signature=lambda head: head[:3] == b"CDF" and head[3:4] in (b"\x01", b"\x02", b"\x05"),
)
