"""``turbdb cutout``: a box of stored values, at one time or a range of times, strided per
axis and optionally box-filtered, saved as NetCDF, Zarr, HDF5 + XDMF or .npy."""

from __future__ import annotations

from pathlib import Path

import click

from .group import main
from .inputs import ExpandedPath, FiniteFloat, database, existing_dataset_name, int_list, token_option
from .interrupts import work_done


def _range(text: str | None, option: str) -> tuple[int, int] | None:
    if text is None:
        return None
    values = int_list(text.replace(":", ","), option, example="0,64")
    if values is None or len(values) != 2:
        raise click.BadParameter(f"expected start,stop grid indices (half-open), e.g. 0,64; got {text!r}",
                                 param_hint=option)
    if values[1] <= values[0]:
        raise click.BadParameter(f"{text} holds no node: start,stop is half-open, so stop comes after start "
                                 f"(e.g. {values[1]},{values[0]})" if values[1] < values[0] else
                                 f"{text} holds no node: start,stop is half-open (e.g. {values[0]},{values[0] + 1} "
                                 "is one node)", param_hint=option)
    return values  # type: ignore[return-value]


def _stride(text: str) -> object:
    values = int_list(text, "--stride", example="2 or 1,2,2")
    if values is None or len(values) not in (1, 3):
        raise click.BadParameter(f"expected one stride or three (x,y,z), e.g. 2 or 1,2,2; got {text!r}",
                                 param_hint="--stride")
    if min(values) < 1:
        raise click.BadParameter(f"strides are positive (1 takes every node), e.g. 2 or 1,2,2; got {text!r}",
                                 param_hint="--stride")
    return values[0] if len(values) == 1 else values


def stored_times(times, time: float | None, ts: float | None, te: float | None, stridet: int) -> list[float] | float:
    """The times to cut out: ``--time`` (the nearest stored step), or the stored steps from
    ``--ts`` to ``--te`` (inclusive), every ``--stridet``-th."""
    import numpy as np

    if time is not None:
        if ts is not None or te is not None:
            raise click.UsageError("give either --time, or --ts and --te, not both")
        if stridet != 1:
            raise click.UsageError(f"--stridet {stridet} takes every K-th stored step of a range (--ts, --te); "
                                   "--time cuts out one time: drop --stridet, or give a range")
        return time
    if ts is None or te is None:
        raise click.UsageError("give --time T (one time), or --ts T0 --te T1 [--stridet K] (a range of stored times)")
    if te < ts:
        raise click.BadParameter(f"--te ({te:g}) comes before --ts ({ts:g})", param_hint="--te")
    stored = np.asarray(times, dtype=np.float64)
    # Relative to the stored times, as the engine's (interp/time.rs): an absolute 1e-9 took
    # every step of times 1e-10 apart.
    extent = [abs(float(stored[-1] - stored[0])), abs(float(stored[0])), abs(float(stored[-1]))] if len(stored) else []
    tolerance = 1e-9 * max(abs(ts), abs(te), *extent)
    if len(stored) > 1:  # and well below the closest two steps (1e-4 apart at t = 1e6)
        tolerance = min(tolerance, 1e-3 * float(np.min(np.diff(stored))))
    chosen = [float(t) for t in stored if ts - tolerance <= t <= te + tolerance][::stridet]
    if not chosen:
        span = f"{stored[0]:g} … {stored[-1]:g}" if len(stored) else "none"
        raise click.BadParameter(f"no stored time lies in [{ts:g}, {te:g}]; the stored times are {span}",
                                 param_hint="--ts/--te")
    return chosen


@main.command()
@click.argument("db_or_url")
@click.argument("name", callback=existing_dataset_name)
@click.option("--field", required=True, help="Field to cut out, e.g. velocity or pressure.")
@click.option("--time", "time_", type=FiniteFloat(), default=None, help="One time (the nearest stored step).")
@click.option("--ts", type=FiniteFloat(), default=None, help="First time of a range (stored steps from --ts to --te).")
@click.option("--te", type=FiniteFloat(), default=None, help="Last time of a range (inclusive).")
@click.option("--stridet", type=click.IntRange(1), default=1, show_default=True, help="Every stridet-th stored step of the range.")
@click.option("--x", "x", default=None,
              help="Node range start,stop along x, in grid indices (half-open, wraps on periodic axes); default: all.")
@click.option("--y", "y", default=None, help="Node range along y.")
@click.option("--z", "z", default=None, help="Node range along z.")
@click.option("--stride", default="1", show_default=True, help="Every stride-th node: one stride, or three (x,y,z) such as 1,2,2.")
@click.option("--filter-width", type=click.IntRange(1), default=1, show_default=True,
              help="JHTDB's box filter: average each node's box of W³ nodes (centred; wraps; truncated at walls) before the stride.")
@click.option("--out", type=ExpandedPath(dir_okay=True, path_type=Path), required=True,
              help="Where to write, by ending: .nc (NetCDF-4), .zarr (Zarr), .h5/.hdf5 or .xmf/.xdmf "
                   "(HDF5 + XDMF: open the .xmf in ParaView or VisIt), .npy (the values only).")
@token_option
@click.option("--quiet", is_flag=True,
              help="No progress bar (a server's cutout is read in batches; a bar is drawn only on a terminal).")
def cutout(db_or_url: str, name: str, field: str, time_: float | None, ts: float | None, te: float | None,
           stridet: int, x: str | None, y: str | None, z: str | None, stride: str, filter_width: int, out: Path,
           token: str | None, quiet: bool) -> None:
    """Cut out FIELD of dataset NAME on a box of nodes and save it to --out.

    DB_OR_URL is a database directory (or a dataset's directory), or the http:// address of
    a turbdb server, which reads the box where the data lives (in batches within your
    token's limits). One time (--time) gives dims (z, y, x, component); a range (--ts,
    --te, --stridet) adds a leading time dim. Strides apply per axis; --filter-width
    averages boxes of nodes first, as JHTDB's cutout service.
    """
    from .. import export
    from ..exceptions import InvalidRequestError

    try:  # an ending no format has is a bad --out, as for query and track
        export.format_of(out)
    except InvalidRequestError as e:
        raise click.BadParameter(str(e), param_hint="--out") from None
    export.check_target(out)  # refuse a directory it would empty before reading anything
    ranges = {axis: _range(text, f"--{axis}") for axis, text in (("x", x), ("y", y), ("z", z))}
    dataset = database(db_or_url, token=token, progress=False if quiet else None)[name]
    times = stored_times(dataset.metadata.times, time_, ts, te, stridet)
    cut = dataset.cutout(field, time=times, stride=_stride(stride), filter_width=filter_width, **ranges)
    written = export.write(cut, out)  # whole, or the earlier file left as it was
    work_done()
    sizes = " × ".join(f"{cut.sizes[a]}" for a in "xyz")
    click.echo(f"{name}: {field} on {sizes} nodes, {_times_text(cut)}, stride {_stride_text(cut.attrs['stride'])}, "
               f"filter width {filter_width}: wrote {', '.join(str(p) for p in written)}")


def _times_text(cut) -> str:
    """The times of a cutout: t = 0; or 3 times, t = 0 … 0.2."""
    if "time" not in cut.dims:
        return f"t = {cut.attrs['time']:g}"
    first, last, count = float(cut.time[0]), float(cut.time[-1]), cut.sizes["time"]
    return f"1 time, t = {first:g}" if count == 1 else f"{count} times, t = {first:g} … {last:g}"


def _stride_text(stride: object) -> str:
    """A stride as --stride takes it: 2, or 1,1,2 (not the list [1, 1, 2])."""
    values = list(stride) if isinstance(stride, (list, tuple)) else [stride]
    return str(values[0]) if len(set(values)) == 1 else ",".join(map(str, values))
