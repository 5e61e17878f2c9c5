"""Reads a field from a netCDF file through xarray (CF decoding, dimension names), one
variable or one per component; only one time step is read at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from turbdb.exceptions import FormatError
from turbdb.ingest.source import ArraySource, Layout, choose_arrays, float_dtype, resolve_axes

__all__ = ["NetcdfSource"]

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _engine(path: Path) -> str | None:
    """h5netcdf for netCDF-4 (a turbdb dependency); for netCDF-3 whichever xarray finds."""
    with path.open("rb") as f:
        return "h5netcdf" if f.read(8) == _HDF5_SIGNATURE else None


class NetcdfSource(ArraySource):
    """A field in a netCDF file, chosen by ``variables``."""

    format = "netcdf"

    def __init__(
        self, path: Path, *, variables: list[str] | None = None, axes: str | None = None
    ) -> None:
        self._engine = _engine(path)
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
        self.names = names
        super().__init__(path, key=",".join(names), layout=layout, dtype=np.result_type(*dtypes))

    def _open(self, path: Path) -> xr.Dataset:
        try:
            # Times are not needed and decoding them can fail on exotic calendars.
            return xr.open_dataset(
                path, engine=self._engine, decode_times=False, decode_timedelta=False, cache=False
            )
        except (OSError, ValueError) as e:
            raise FormatError(
                f"{path} could not be opened as netCDF ({e}); check the file, install netCDF4 "
                "for netCDF-3 files, or pass format= if it is something else"
            ) from e

    def _read_blocks(self, key: tuple[int | slice, ...]) -> list[np.ndarray]:
        # Opened per step: an ingest of many files must not hold them all open.
        with self._open(self.path) as ds:
            return [np.asarray(ds.variables[n][key]) for n in self.names]
