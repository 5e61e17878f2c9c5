"""JHTDB's Python client API over turbdb: ``turb_dataset``, ``getData`` and ``getCutout`` with
givernylocal's (3.6.4) argument names, value names, shapes and outputs — a list of pandas
DataFrames per time for getData, an ``xarray.Dataset`` for getCutout — working on a local
database directory or a turbdb server. A JHTDB script runs by changing its imports::

    from turbdb.jhtdb import *      # instead of givernylocal.turbulence_dataset / _toolkit
    dataset = turb_dataset(dataset_title="isotropic64", output_path="out", auth_token=token,
                           url="http://127.0.0.1:8000")           # or url="data", a directory

givernylocal itself, unmodified, reaches a turbdb server after one line,
``turbdb.jhtdb.redirect("http://127.0.0.1:8000")`` (:mod:`turbdb.jhtdb.redirect`), or with
``python -m turbdb.jhtdb http://127.0.0.1:8000 script.py``."""

from __future__ import annotations

import csv
import os
import sys
import time as _time
from pathlib import Path
from typing import Any

import numpy as np

from ..arguments import finite_number
from ..exceptions import InvalidRequestError, UnknownNameError
from ..output_files import replacing
from ..size_limit import check_result_bytes
from .metadata import DECIMALS, PLACEHOLDER, TESTING_TOKEN, as_loaded, check_position_arguments, document
from .redirect import redirect

__all__ = ["turb_dataset", "getData", "getCutout", "write_interpolation_tsv_file", "write_cutout_hdf5_and_xmf_files",
           "redirect"]


class turb_dataset:  # noqa: N801 - givernylocal's name
    """A dataset to query, as givernylocal's ``turb_dataset``. ``url``: a turbdb server
    (``http://…``) or a local database directory; default ``$TURBDB_URL``, else ``data``.
    ``auth_token`` is sent to a server as the token (JHTDB's public testing token counts as
    none). ``json_url`` is accepted and ignored: the metadata comes from the dataset itself."""

    def __init__(self, dataset_title: str = "", output_path: str = "", auth_token: str = "",
                 json_url: str | None = None, *, url: str | os.PathLike[str] | None = None):
        location = str(url if url is not None else os.environ.get("TURBDB_URL", "data"))
        if location.startswith(("http://", "https://")):
            from ..remote import connect

            self.db: Any = connect(location, token=auth_token or None)
        else:
            from ..database import open as open_db

            self.db = open_db(location)
        if dataset_title not in self.db:
            raise UnknownNameError(f"'{dataset_title}' (case-sensitive) is not a dataset at {location}: "
                                   f"{', '.join(self.db.datasets) or 'none'}")
        self.dataset = self.db[dataset_title]
        self.metadata = as_loaded(document([self.dataset.metadata], source=location))
        self.dataset_title = dataset_title
        if not str(output_path).strip():
            raise InvalidRequestError("output_path cannot be an empty string ('')")
        self.output_path = Path(str(output_path).strip())
        if self.output_path.exists() and not self.output_path.is_dir():
            raise InvalidRequestError(f"output_path {str(self.output_path)!r} is a file; give a directory to write in")
        self.output_path.mkdir(parents=True, exist_ok=True)
        self.auth_token = auth_token
        self.url = location
        # What givernylocal's dataset object carries and its gizmos (cutout_values,
        # contour_plot) read: the grid spacing and origin, the coordinates' rounding.
        info = self.dataset.metadata
        self.dx, self.dy, self.dz = (float(d) for d in info.spacing)
        self.coor_offsets = np.asarray(info.origin, dtype=np.float64)
        self.decimals = DECIMALS
        self.var, self.num_values_per_datapoint = "", 0
        self._forget_query()

    def _forget_query(self) -> None:
        """No getData settings: a cutout has none (givernylocal's getCutout resets them too)."""
        self.timepoint_original, self.timepoint_end, self.delta_t = PLACEHOLDER, PLACEHOLDER, PLACEHOLDER
        self.sint, self.tint, self.sop = "none", "none", "field"

    def close(self) -> None:
        """Closes the connection to a server (also done when the object is collected)."""
        close = getattr(self.__dict__.get("db"), "close", None)
        if close is not None:
            close()

    def __enter__(self) -> turb_dataset:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def getData(cube: turb_dataset, var: str, timepoint_original: float, temporal_method: str, spatial_method_original: str,
            spatial_operator: str, points: Any, option: Any = (PLACEHOLDER, PLACEHOLDER), return_times: bool = False,
            trace_memory: bool = False, verbose: bool = True) -> Any:
    """Interpolates or differentiates ``var`` at ``points`` (``(N, 3)``): one pandas DataFrame
    per time, JHTDB's columns (``ux uy uz``, ``duxdx …``), index named ``index``, float32.
    ``option = [timepoint_end, delta_t]`` asks for a time series (times
    ``arange(t, timepoint_end, delta_t)`` plus ``timepoint_end`` when a step lands on it) or,
    with ``var="position"``, tracks particles from ``t`` to ``timepoint_end``
    (JHTDB's GetPosition: RK2, PCHIP in time). ``return_times`` also returns the times.
    ``trace_memory`` is accepted and ignored."""
    import pandas as pd

    from ..service.jhtdb import jhtdb_name, series_length, series_times
    from .columns import columns

    started = _time.perf_counter()
    _say(verbose, "getData is processing...")
    ds = cube.dataset
    method = jhtdb_name("sint", spatial_method_original)
    operator = jhtdb_name("sop", spatial_operator)
    temporal = jhtdb_name("tint", temporal_method)
    t = _number(timepoint_original, "timepoint_original")
    end, delta_t = _option(option)
    points = np.asarray(points)
    if var == "position":
        if end == PLACEHOLDER or delta_t == PLACEHOLDER:
            raise InvalidRequestError("'time_end' and 'delta_t' (option = [time_end, delta_t]) must be specified for "
                                      "the 'position' variable")
        check_position_arguments(method, operator, temporal, delta_t)
        times = np.array([t])
        positions = ds.track(points, start=t, end=end, dt=delta_t, method=method)
        values = np.asarray(positions[-1], dtype=np.float32)[np.newaxis]
        names = ["x", "y", "z"]
    else:
        if var not in ds.metadata.fields:
            raise UnknownNameError(f"'{var}' (case-sensitive) is not a valid variable for '{cube.dataset_title}': "
                                   f"{', '.join([*ds.metadata.fields, 'position'])}")
        names = columns(var, ds.metadata.fields[var].ncomp, operator)
        # Counted before the times are made: a tiny delta_t asked for TiB.
        count = series_length(t, end, delta_t)
        check_result_bytes(count * (8 + len(points) * len(names) * 4), f"a series of {count:,} times at "
                           f"{len(points):,} points", "use a larger delta_t, a shorter span or fewer points")
        times = series_times(t, end, delta_t)
        answer = ds.query(var, points, time=[float(s) for s in times], method=method, operator=operator,
                          temporal=temporal)
        values = answer.reshape(len(times), len(points), len(names)).astype(np.float32, copy=False)
    # Kept as a number, as given if it is one: the writers add to it (text was kept as text).
    given = timepoint_original if isinstance(timepoint_original, (int, float, np.number)) else t
    cube.var, cube.timepoint_original, cube.timepoint_end, cube.delta_t = var, given, end, delta_t
    cube.sint, cube.tint, cube.sop = method, temporal, operator
    results = []
    for block in values:
        frame = pd.DataFrame(data=block, columns=names)
        frame.index.name = "index"
        results.append(frame)
    _finish(verbose, started)
    return (results, times) if return_times else results


def _number(value: Any, name: str) -> float:
    """:func:`finite_number`, taking a number written as text too (as JHTDB's clients send)."""
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        number = value  # refused below, named as given
    return finite_number(name, number)


def _option(option: Any) -> tuple[float, float]:
    """``option = [timepoint_end, delta_t]``, two numbers."""
    try:
        end, delta_t = option
    except (TypeError, ValueError):
        raise InvalidRequestError(f"option must be [timepoint_end, delta_t], two numbers, not {option!r}") from None
    return _number(end, "option's timepoint_end"), _number(delta_t, "option's delta_t")


def getCutout(cube: turb_dataset, var: str, xyzt_axes_ranges_original: Any, xyzt_strides: Any,
              trace_memory: bool = False, verbose: bool = True, filter_width: int = 1) -> Any:
    """The stored values of ``var`` on a box of nodes, as givernylocal's getCutout: an
    ``xarray.Dataset`` with a variable ``<var>_<step:04d>`` per time step, dims
    ``(zcoor, ycoor, xcoor, values)``. ``xyzt_axes_ranges_original``: 1-based inclusive
    ``[first, last]`` for x, y, z (wrapping on periodic axes) and the stored steps
    ``[ts, te]`` (1…n); ``xyzt_strides``: x, y, z, t. ``filter_width`` > 1 box-filters first
    (JHTDB's cutout service; givernylocal always sends 1)."""
    import xarray

    from .cutout import attributes, check_request, giverny_cutout

    started = _time.perf_counter()
    _say(verbose, "getCutout is processing...")
    space, time_range, strides = check_request(xyzt_axes_ranges_original, xyzt_strides)
    result = giverny_cutout(cube.dataset, var, space, time_range, strides, filter_width)
    result = xarray.Dataset(result.data_vars, coords=result.coords,
                            attrs=attributes(cube.dataset_title, space, time_range, strides, filter_width))
    cube._forget_query()
    cube.var = var
    cube.timepoint_original = int(time_range[1])  # the last step, as givernylocal keeps it
    cube.num_values_per_datapoint = cube.dataset.metadata.fields[var].ncomp
    _finish(verbose, started)
    return result


def write_interpolation_tsv_file(cube: turb_dataset, points: Any, interpolation_data: Any, output_filename: str) -> Path:
    """Writes getData's answer as givernylocal does: ``<output_path>/<output_filename>.tsv``,
    a header line, then ``time x_point y_point z_point <columns>`` rows per time."""
    path = cube.output_path / f"{output_filename}.tsv"
    points = np.asarray(points)
    series = cube.var == "position" or (cube.timepoint_end != PLACEHOLDER and cube.delta_t != PLACEHOLDER)
    header = (f"dataset: {cube.dataset_title}, variable: {cube.var}, time: {cube.timepoint_original}, "
              + (f"time end: {cube.timepoint_end}, delta t: {cube.delta_t}, " if series else "")
              + f"temporal method: {cube.tint}, spatial method: {cube.sint}, spatial operator: {cube.sop}")
    with replacing(path) as (temporary,), open(temporary, "w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, delimiter="\t")
        writer.writerow([header])
        writer.writerow(["time", "x_point", "y_point", "z_point", *interpolation_data[0].columns])
        for k, frame in enumerate(interpolation_data):
            time = cube.timepoint_original + k * (cube.delta_t if series else 0)
            rows = np.column_stack([np.full(len(points), time), points, frame.to_numpy()])
            writer.writerows(rows.tolist())
    return path


def write_cutout_hdf5_and_xmf_files(cube: turb_dataset, output_data: Any, output_filename: str) -> list[Path]:
    """Writes getCutout's answer as givernylocal does: ``<output_filename>.h5`` (NetCDF-4,
    which is HDF5) and ``<output_filename>.xmf``, which ParaView and VisIt open. Both
    replace earlier files of those names only once both are complete."""
    from ..export import check_hdf5_reference, write_netcdf4, xdmf_text

    h5 = cube.output_path / f"{output_filename}.h5"
    xmf = cube.output_path / f"{output_filename}.xmf"
    names = list(output_data.data_vars)
    first = output_data[names[0]]
    shape = tuple(first.sizes[d] for d in ("zcoor", "ycoor", "xcoor", "values"))
    # The time of each variable is its stored step, as JHTDB labels them.
    steps = [(name, float(int(name.rsplit("_", 1)[1]))) for name in names]
    field = cube.dataset.metadata.fields.get(cube.var)
    check_hdf5_reference(h5.name)
    with replacing(h5, xmf) as (h5_temporary, xmf_temporary):
        write_netcdf4(output_data, h5_temporary)
        xmf_temporary.write_text(xdmf_text(cube.var, shape, steps, h5.name, precision=first.dtype.itemsize,
                                           components=field.components if field is not None else None))
    return [h5, xmf]


def _say(verbose: bool, text: str) -> None:
    if verbose:
        print("\n-----\n" + text, flush=True)


def _finish(verbose: bool, started: float) -> None:
    if verbose:
        seconds = _time.perf_counter() - started
        print(f"\ntotal time elapsed = {seconds:0.3f} seconds ({seconds / 60:0.3f} minutes)\n\n"
              "query completed successfully.\n-----", file=sys.stdout, flush=True)
