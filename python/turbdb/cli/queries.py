"""Commands that ask questions of a dataset, local or on a server: query, track, stats."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..arguments import METHOD_ALIASES, METHODS, OPERATOR_ALIASES, OPERATORS, TEMPORAL_ALIASES, TEMPORALS
from ..progress_bars import bar_disabled
from .group import main
from ..times import format_time, nearest_stored_index
from .inputs import (ExpandedPath, FiniteFloat, Named, Times, database, existing_dataset_name, is_url, local_path,
                     option_given, output_file, read_points, token_option)
from .interrupts import work_done


def _names(valid: tuple[str, ...], aliases: dict[str, str]) -> str:
    """The names an option takes, each with its aliases: none (alias nearest), lag4, …"""
    also: dict[str, list[str]] = {}
    for alias, name in aliases.items():
        also.setdefault(name, []).append(alias)
    return ", ".join(f"{v} (alias {', '.join(also[v])})" if v in also else v for v in valid)


_METHOD_HELP = f"Spatial interpolation: {_names(METHODS, METHOD_ALIASES)}."
_OPERATOR_HELP = f"What to evaluate: {_names(OPERATORS, OPERATOR_ALIASES)}."
_TEMPORAL_HELP = (f"Interpolation in time: {_names(TEMPORALS, TEMPORAL_ALIASES)}; none takes the nearest stored "
                  "time.")
_METHOD = Named("method", METHODS, METHOD_ALIASES)
_OPERATOR = Named("operator", OPERATORS, OPERATOR_ALIASES)
_TEMPORAL = Named("temporal method", TEMPORALS, TEMPORAL_ALIASES)


@main.command()
@click.argument("db_or_url")
@click.argument("name", callback=existing_dataset_name)
@click.option("--field", required=True, help="Field to evaluate, e.g. velocity or pressure.")
@click.option("--points", "points_file", required=True,
              type=ExpandedPath(dir_okay=False, exists=True, allow_dash=True, path_type=Path),
              help="Points in physical coordinates x, y, z (not grid indices, which cutout's --x takes): an .npy "
                   "array (N, 3), a .json list of [x, y, z], or a text file (.csv, .txt) of x,y,z rows (commas, "
                   "semicolons, tabs or blanks); - reads them from stdin, and a pipe (<(…)) works too.")
@click.option("--time", "time_", type=Times(), required=True,
              help="Physical time, or several separated by commas (a time series, e.g. 0,0.01,0.02): one answer "
                   "per time, stacked, as Dataset.query(time=[…]).")
@click.option("--method", type=_METHOD, default="lag6", show_default=True, help=_METHOD_HELP)
@click.option("--operator", type=_OPERATOR, default="field", show_default=True, help=_OPERATOR_HELP)
@click.option("--temporal", type=_TEMPORAL, default="none", show_default=True, help=_TEMPORAL_HELP)
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True, help="Type of the values written.")
@click.option("--out", type=ExpandedPath(dir_okay=False, path_type=Path), required=True,
              help="Where to write the answer: .npy, the array Dataset.query returns — (N, …), or (T, N, …) for T "
                   "times; or .csv, one row per point with JHTDB's column names — for T times a first column "
                   "time and T blocks of N rows, time by time.")
@token_option
@click.option("--quiet", is_flag=True,
              help="No progress bar (a server's answer comes in batches; a bar is drawn only on a terminal).")
def query(db_or_url: str, name: str, field: str, points_file: Path, time_: float | list[float], method: str,
          operator: str, temporal: str, dtype: str, out: Path, token: str | None, quiet: bool) -> None:
    """Evaluate FIELD (or its gradient, Hessian, Laplacian) of dataset NAME at the points in
    --points, at one time or a series of times, and write the answer to --out.

    DB_OR_URL is a database directory, or the http:// address of a turbdb server (turbdb
    serve), which evaluates the points where the data lives.
    """
    output_file(out, (".npy", ".csv"))
    import numpy as np

    from ..arguments import as_points
    from ..output_files import replacing, save_npy

    given = read_points(points_file)
    points = as_points(given)
    dataset = database(db_or_url, token, progress=False if quiet else None)[name]
    # The points as read: float32 ones on a wall are put on it (turbdb.query.query_points).
    values = dataset.query(field, given, time=time_, method=method, operator=operator, temporal=temporal, dtype=dtype)
    series = isinstance(time_, list)
    with replacing(out) as (temporary,):
        if out.suffix.lower() == ".csv":
            from ..jhtdb.columns import columns

            names = columns(field, values.shape[1 + series], operator)
            # Enough digits to read back the same value: 9 for float32, 17 for float64.
            digits = ["%.17g" if values.dtype == np.float64 else "%.9g"] * len(names)
            rows = values.reshape(-1, len(names))
            if series:  # the time of each row first (as given), then the values
                stamp = np.repeat(np.asarray(time_, dtype=np.float64), len(points))[:, np.newaxis]
                rows, names, digits = np.hstack([stamp, rows]), ["time", *names], ["%.15g", *digits]
            np.savetxt(temporary, rows, delimiter=",", header=",".join(names), comments="", fmt=digits)
        else:
            save_npy(temporary, values)
    work_done()
    click.echo(f"{name}: {operator} of {field} at {len(points)} points, {_when(dataset, time_, temporal)}, "
               f"{method} in space, {temporal} in time: wrote {out} {values.shape} {values.dtype}")


def _when(dataset, time_: float | list[float], temporal: str) -> str:
    """The times of a query as the summary says them, with the stored steps that answered
    where they are not the times asked (temporal none takes the nearest)."""
    import numpy as np

    asked = time_ if isinstance(time_, list) else [time_]
    when = (f"t = {format_time(asked[0])}" if len(asked) == 1
            else f"{len(asked)} times, t = {', '.join(format_time(t) for t in asked)}" if len(asked) <= 4
            else f"{len(asked)} times, t = {format_time(asked[0])} … {format_time(asked[-1])}")
    if temporal != "none":
        return when
    times = np.asarray(dataset.metadata.times, dtype=float)
    stored = [float(times[nearest_stored_index(times, t)]) for t in asked]  # the later on a tie, as the engine reads
    if stored == asked:
        return when
    if len(asked) == 1:
        return f"{when} (the nearest stored step, t = {format_time(stored[0])})"
    shown = ", ".join(format_time(t) for t in stored) if len(stored) <= 4 else \
        f"{format_time(stored[0])} … {format_time(stored[-1])}"
    return f"{when} (the nearest stored steps, t = {shown})"


def _positive_step(ctx: click.Context, param: click.Parameter, dt: float | None) -> float | None:
    """--dt as the API takes it: a length, positive (its sign is no direction)."""
    if dt is not None and dt <= 0:
        raise click.BadParameter(f"{dt:g} is not positive: give the length of a step; the direction comes from "
                                 "--start and --end (an --end before --start tracks backward)", ctx=ctx, param=param)
    return dt


@main.command()
@click.argument("db_or_url")
@click.argument("name", callback=existing_dataset_name)
@click.option("--points", "points_spec", required=True,
              help="A number of particles placed uniformly at random (--seed), or a file of their physical x,y,z: an "
                   ".npy array (N, 3), a .json list of [x, y, z], or .csv/.txt rows; - reads the file from stdin.")
@click.option("--start", type=FiniteFloat(), required=True, help="Time the particles are released.")
@click.option("--end", type=FiniteFloat(), required=True, help="Time to track to (before --start tracks backward).")
@click.option("--dt", type=FiniteFloat(), required=True, callback=_positive_step,
              help="Integration step (positive; the last step lands on --end).")
@click.option("--method", type=_METHOD, default="lag6", show_default=True, help=_METHOD_HELP)
@click.option("--field", default="velocity", show_default=True, help="Vector field advecting the particles.")
@click.option("--integrator", type=click.Choice(["rk2", "euler"]), default="rk2", show_default=True,
              help="rk2: Heun's method, as JHTDB's GetPosition.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True,
              help="Seed of random particle positions (with --points N).")
@click.option("--out", type=ExpandedPath(dir_okay=False, path_type=Path), required=True,
              help="Where to write the positions, a .npy array (steps+1, N, 3), unwrapped.")
@click.option("--velocity", "with_velocity", is_flag=True, help="Also write the velocities to OUT with .velocity.npy.")
@token_option
@click.option("--quiet", is_flag=True, help="No progress bar (one is drawn only on a terminal).")
def track(db_or_url: str, name: str, points_spec: str, start: float, end: float, dt: float, method: str, field: str,
          integrator: str, seed: int, out: Path, with_velocity: bool, token: str | None, quiet: bool) -> None:
    """Track fluid particles through dataset NAME from --start to --end (Heun RK2, pchip in
    time), evaluated in the engine, and save their trajectories to --out.

    DB_OR_URL is a database directory, or the http:// address of a turbdb server: then the
    whole trajectory is computed there, in batches of particles within your token's limits.

    Positions are continuous (not wrapped into the periodic box); np.mod(p - origin, L)
    puts them back in the box.
    """
    output_file(out, (".npy",))
    import time

    import numpy as np

    from ..output_files import replacing, save_npy
    from ..stats import random_points

    if not points_spec.isdigit() and option_given("seed"):
        raise click.UsageError("--seed places random particles (--points N); the particles of a points file are "
                               "where the file says: drop --seed, or give a number of particles")
    if points_spec.isdigit() and int(points_spec) == 0:
        raise click.BadParameter("track at least one particle", param_hint="--points")
    given = None if points_spec.isdigit() else read_points(points_spec, or_count=True)
    dataset = database(db_or_url, token, progress=False if quiet else None)[name]
    points = random_points(dataset.metadata, int(points_spec), seed) if given is None else given
    # The server reports no progress; progress=True draws wherever it is asked, so the
    # command asks only where its bars belong (a terminal, not --quiet or $TQDM_DISABLE).
    options = {} if is_url(db_or_url) else {"progress": bar_disabled(quiet) is None and sys.stderr.isatty()}
    began = time.perf_counter()
    result = dataset.track(points, start=start, end=end, dt=dt, method=method, field=field, integrator=integrator,
                           return_velocity=with_velocity, **options)
    seconds = time.perf_counter() - began
    positions, velocities = result if with_velocity else (result, None)
    written = [out]
    if velocities is not None:  # t.npy: t.velocity.npy; T.NPY: T.velocity.NPY
        written.append(out.with_name(f"{out.stem}.velocity{out.suffix}"))
    with replacing(*written) as temporaries:
        for temporary, values in zip(temporaries, (positions, velocities)):
            save_npy(temporary, values)
    work_done()
    steps = len(positions) - 1
    rate = steps * len(points) / seconds if seconds > 0 else float("inf")
    click.echo(f"tracked {len(points)} particles from t = {format_time(start)} to {format_time(end)} in {steps} steps: {seconds:.2f} s, "
               f"{rate / 1e6:.3f} M particle-steps/s")
    if len(points):
        displacement = np.linalg.norm(positions[-1] - positions[0], axis=1)
        click.echo(f"mean displacement {displacement.mean():.4g}, max {displacement.max():.4g}")
    click.echo("wrote " + ", ".join(str(p) for p in written))


@main.group()
def stats() -> None:
    """Statistics of a stored time step: the R–Q joint PDF and the energy spectrum."""


_stats_out = click.option(
    "--out", type=ExpandedPath(file_okay=False, path_type=Path), default=None,
    help="Directory for the PNG, .npz and .json (default NAME-stats in the database directory, or here for a server).")
_stats_quiet = click.option("--quiet", is_flag=True,
                            help="No progress bar (a server's answer comes in batches; a bar is drawn only on a "
                                 "terminal).")


def _stats_folder(db_or_url: str, name: str) -> Path:
    """Where a statistic is written by default: beside the dataset, or here for a server."""
    return Path(f"{name}-stats") if is_url(db_or_url) else local_path(db_or_url) / f"{name}-stats"


@stats.command("rq")
@click.argument("db_or_url")
@click.argument("name", callback=existing_dataset_name)
@click.option("--time", "time_", type=FiniteFloat(), required=True, help="Time (the nearest stored step is used).")
@click.option("--points", type=click.IntRange(2), default=100_000, show_default=True, help="Random sample points.")
@click.option("--method", type=_METHOD, default="lag6", show_default=True,
              help="Gradient method: lag4, lag6, lag8, fd4noint, fd6noint, fd8noint, fd4lag4, m1q4, m2q8.")
@click.option("--field", default="velocity", show_default=True, help="Velocity-like field.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Seed of the sample points.")
@_stats_out
@token_option
@_stats_quiet
def stats_rq(db_or_url: str, name: str, time_: float, points: int, method: str, field: str, seed: int,
             out: Path | None, token: str | None, quiet: bool) -> None:
    """Joint PDF of the velocity-gradient invariants R and Q of NAME at --time, normalised
    by <Q_w>, from gradients queried at random points: a plot and the data. DB_OR_URL is a
    database directory or the http:// address of a turbdb server."""
    from .. import stats as st

    dataset = database(db_or_url, token, progress=False if quiet else None)[name]
    result = st.rq_pdf(dataset, time=time_, points=points, method=method, field=field, seed=seed)
    out = out or _stats_folder(db_or_url, name)
    paths = result.save(out / f"rq_t{format_time(result.time)}_{method}")
    work_done()
    f = result.fractions
    click.echo(f"{name}: R–Q at t = {format_time(result.time)}, {points} points, {method}; <Q_w> = {result.qw_mean:.4g}")
    click.echo(f"  P(Q<0,R>0) = {f['Q<0,R>0']:.3f}  P(Q<0,R<0) = {f['Q<0,R<0']:.3f}  ratio {result.asymmetry:.2f}"
               f"  P(Q>0,R>0) = {f['Q>0,R>0']:.3f}  P(Q>0,R<0) = {f['Q>0,R<0']:.3f}")
    click.echo("wrote " + ", ".join(str(p) for p in paths))


@stats.command("spectrum")
@click.argument("db_or_url")
@click.argument("name", callback=existing_dataset_name)
@click.option("--time", "time_", type=FiniteFloat(), required=True, help="Time (the nearest stored step is used).")
@click.option("--field", default="velocity", show_default=True, help="Vector field.")
@_stats_out
@token_option
@_stats_quiet
def stats_spectrum(db_or_url: str, name: str, time_: float, field: str, out: Path | None, token: str | None,
                   quiet: bool) -> None:
    """Shell-summed energy spectrum E(k) of NAME at --time, from a cutout of the whole
    (periodic) box: a plot and the data. For a turbdb DNS (its viscosity is in the
    provenance) the plot is in Kolmogorov units over the resolved shells, with the
    compensated spectrum k^(5/3)E(k)/ε^(2/3) against kη and its inertial range, if any.
    DB_OR_URL is a database directory or the http:// address of a turbdb server."""
    from .. import stats as st

    dataset = database(db_or_url, token, progress=False if quiet else None)[name]
    result = st.energy_spectrum(dataset, time=time_, field=field)
    out = out or _stats_folder(db_or_url, name)
    paths = result.save(out / f"spectrum_t{format_time(result.time)}")
    work_done()
    from ..plots import spectrum_statement

    click.echo(f"{name}: energy spectrum at t = {format_time(result.time)}, {len(result.resolved()[0])} resolved "
               f"shells, energy {result.energy:.4g}")
    click.echo(f"  {spectrum_statement(result)}")
    click.echo("wrote " + ", ".join(str(p) for p in paths))
