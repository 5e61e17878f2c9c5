"""The ``turbdb`` command line: create, fill, inspect and check databases.
Every command has ``--help``; errors print one line saying what to do, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from .exceptions import TurbdbError


class _Group(click.Group):
    """Turns turbdb errors into a one-line message and exit code 2."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except TurbdbError as e:
            click.secho(f"error: {e}", fg="red", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="turbdb")
def main() -> None:
    """turbdb: a turbulence database.

    A database is a directory of datasets; each dataset is one simulation stored as Zarr v3
    shards of Morton-ordered atoms. Start with `turbdb simulate data --name isotropic64
    --grid 64 --steps 100`, then `turbdb info data`.
    """


@main.command()
@click.argument("db", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", required=True, help="Name of the dataset to create.")
@click.option("--grid", type=click.IntRange(8, 4096), default=64, show_default=True, help="Grid points per side of the periodic box [0, 2π)³.")
@click.option("--steps", type=click.IntRange(1), default=100, show_default=True, help="Time steps to store.")
@click.option("--save-every", type=click.IntRange(1), default=None, help="Solver steps between stored steps (dns; default: the solver's choice).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random initial field.")
@click.option("--kind", type=click.Choice(["dns", "synthetic"]), default="dns", show_default=True,
              help="dns: forced isotropic turbulence (pseudo-spectral); synthetic: random-phase Kolmogorov field, fast at any size, not physical.")
@click.option("--if-missing", is_flag=True, help="Do nothing if the dataset exists with all its steps (used by make demo).")
@click.option("--overwrite", is_flag=True, help="Replace an existing dataset of that name.")
@click.option("--quiet", is_flag=True, help="No progress bar or log lines.")
def simulate(db: Path, name: str, grid: int, steps: int, save_every: int | None, seed: int, kind: str,
             if_missing: bool, overwrite: bool, quiet: bool) -> None:
    """Run the built-in generator and store its time steps in DB as dataset NAME.

    Every stored step is written as soon as it is computed (while the next one is being
    computed), so the dataset can be read while it grows. The dns kind spins up from a random
    field to a statistically stationary state first and logs Re_λ, dissipation against
    injection, and the skewness and flatness of ∂u/∂x.
    """
    from .simulation_run import run_simulation

    run_simulation(db, name, grid=grid, steps=steps, save_every=save_every, seed=seed, kind=kind,
                   if_missing=if_missing, overwrite=overwrite, quiet=quiet)


@main.command()
@click.argument("db", type=click.Path(file_okay=False, path_type=Path))
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--name", required=True, help="Dataset to append to (created if missing).")
@click.option("--field", required=True, help="Field the inputs hold, e.g. velocity or pressure.")
@click.option("--format", "fmt", type=click.Choice(["npy", "raw", "hdf5", "netcdf", "zarr"]), default=None,
              help="Input format (default: from the file name).")
@click.option("--dtype", default=None, help="Raw binary: value type, e.g. float32, <f8, >f4 (big-endian Fortran).")
@click.option("--shape", default=None, help="Raw binary: array shape as declared by the writer, e.g. 64,64,64,3.")
@click.option("--order", type=click.Choice(["C", "F"]), default="C", show_default=True, help="Raw binary: C (row-major) or F (Fortran, column-major).")
@click.option("--axes", default=None, help="Axis letters of the input array as read (t z y x c), e.g. czyx; default zyxc (C) or xyzc (F).")
@click.option("--dataset-path", default=None, help="HDF5: path of the dataset inside the file.")
@click.option("--variables", default=None, help="NetCDF/Zarr/HDF5: variable(s), comma-separated ones stacked as components (u,v,w).")
@click.option("--dt", type=float, default=None, help="Time between appended steps (default: the dataset's, or 1).")
@click.option("--t0", type=float, default=0.0, show_default=True, help="Time of the first step of a new dataset.")
@click.option("--spacing", default=None, help="New dataset: grid spacing dx,dy,dz (default 2π/n: the box [0, 2π)³).")
@click.option("--origin", default="0,0,0", show_default=True, help="New dataset: position of the first node x,y,z.")
@click.option("--periodic", default="xyz", show_default=True, help="New dataset: periodic axes, e.g. xyz, xz or none.")
@click.option("--units", default="", help="Units of the field, e.g. m/s.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def ingest(db: Path, inputs: tuple[Path, ...], name: str, field: str, fmt: str | None, dtype: str | None,
           shape: str | None, order: str, axes: str | None, dataset_path: str | None, variables: str | None,
           dt: float | None, t0: float, spacing: str | None, origin: str, periodic: str, units: str, quiet: bool) -> None:
    """Append the time steps in INPUTS (in the order given) to field FIELD of dataset NAME.

    Inputs may be .npy, raw binary (--dtype, --shape, --order), HDF5 (--dataset-path),
    NetCDF, or an existing Zarr/xarray store (--variables). Each input holds one time step,
    or several along a t axis. An interrupted ingest is resumed by running the same command
    again: steps already stored are skipped, the step in progress is rewritten.
    """
    from .ingest.pipeline import ingest_inputs

    ingest_inputs(
        db, name, field, list(inputs),
        source_options={"format": fmt, "dtype": dtype, "shape": _ints(shape, "--shape"), "order": order,
                        "axes": axes, "dataset_path": dataset_path,
                        "variables": variables.split(",") if variables else None},
        dt=dt, t0=t0, spacing=_floats(spacing, "--spacing"), origin=_floats(origin, "--origin"),
        periodic=_periodic(periodic), units=units, quiet=quiet,
    )


@main.command()
@click.argument("db", type=click.Path(file_okay=False, path_type=Path))
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the metadata as JSON.")
def info(db: Path, name: str | None, as_json: bool) -> None:
    """Describe the datasets in DB (or only NAME): grid, times, fields, steps written."""
    from .database import open as open_db

    database = open_db(db)
    names = [name] if name else database.datasets
    if not names:
        click.echo(f"{db}: no datasets yet (create one with turbdb simulate or turbdb ingest)")
        return
    infos = [database[n].info for n in names]
    if as_json:
        out = {i.name: {**i.to_attrs(), "steps_present": {f: list(fi.steps_present) for f, fi in i.fields.items()}} for i in infos}
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo("\n\n".join(i.describe() for i in infos))


@main.command()
@click.argument("db", type=click.Path(file_okay=False, path_type=Path))
@click.argument("name", required=False)
def verify(db: Path, name: str | None) -> None:
    """Check every shard of every field: index checksums, chunk ranges, atom checksums.

    Names each corrupt or missing shard and exits with status 1 if anything is wrong.
    """
    from .database import open as open_db

    database = open_db(db)
    names = [name] if name else database.datasets
    bad = 0
    for n in names:
        for field, report in database[n].verify().items():
            problems = report["problems"]
            bad += len(problems)
            status = click.style("ok", fg="green") if not problems else click.style(f"{len(problems)} problem(s)", fg="red")
            click.echo(f"{n}/{field}: {report['shards']} shards, {report['atoms']} atoms, "
                       f"{len(report['complete_steps'])} complete steps: {status}")
            for path, t, message in problems:
                click.echo(f"  {path} (time step {t}): {message}")
    if bad:
        click.secho(f"{bad} problem(s) found; re-ingest or re-simulate the named time steps", fg="red", err=True)
        sys.exit(1)


@main.command()
@click.argument("db", type=click.Path(file_okay=False, path_type=Path), default="data")
@click.option("--name", default="isotropic64", show_default=True, help="Dataset to demonstrate on.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="Where to write the plots (default DB/NAME-demo).")
def demo(db: Path, name: str, out: Path | None) -> None:
    """Show what the dataset holds: its metadata, physical checks computed from the stored
    data, particles tracked forward and back, and plots of a vorticity slice, the energy
    spectrum, the trajectories and the R–Q joint PDF."""
    from .demo import run_demo

    run_demo(db, name, out)


@main.command()
@click.argument("db")
@click.argument("name")
@click.option("--points", "points_spec", required=True,
              help="A number of particles placed uniformly at random (--seed), or a .npy/.txt/.csv file of x,y,z rows.")
@click.option("--start", type=float, required=True, help="Time the particles are released.")
@click.option("--end", type=float, required=True, help="Time to track to (before --start tracks backward).")
@click.option("--dt", type=float, required=True, help="Integration step (positive; the last step lands on --end).")
@click.option("--method", default="lag6", show_default=True, help="Spatial interpolation: lag4, lag6, lag8, m2q8, …")
@click.option("--field", default="velocity", show_default=True, help="Vector field advecting the particles.")
@click.option("--integrator", type=click.Choice(["rk2", "euler"]), default="rk2", show_default=True,
              help="rk2: Heun's method, as JHTDB's GetPosition.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random particle positions.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the positions, a .npy array (steps+1, N, 3), unwrapped.")
@click.option("--velocity", "with_velocity", is_flag=True, help="Also write the velocities to OUT with .velocity.npy.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def track(db: str, name: str, points_spec: str, start: float, end: float, dt: float, method: str, field: str,
          integrator: str, seed: int, out: Path, with_velocity: bool, quiet: bool) -> None:
    """Track fluid particles through dataset NAME of DB (a database directory, or the
    http:// address of a turbdb server: then the whole trajectory is one request) from
    --start to --end (Heun RK2, pchip in time), evaluated in the engine, and save their
    trajectories to --out.

    Positions are continuous (not wrapped into the periodic box); np.mod(p - origin, L)
    puts them back in the box.
    """
    import time

    import numpy as np

    from .stats import random_points

    dataset = _database(db)[name]
    if points_spec.isdigit():
        points = random_points(dataset.metadata, int(points_spec), seed)
    else:
        points = _read_points(Path(points_spec))
    options = {} if _is_url(db) else {"progress": not quiet}  # the server reports no progress
    began = time.perf_counter()
    result = dataset.track(points, start=start, end=end, dt=dt, method=method, field=field, integrator=integrator,
                           return_velocity=with_velocity, **options)
    seconds = time.perf_counter() - began
    positions, velocities = result if with_velocity else (result, None)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, positions)
    written = [out]
    if velocities is not None:
        written.append(out.with_name(out.name.removesuffix(".npy") + ".velocity.npy"))
        np.save(written[-1], velocities)
    steps = len(positions) - 1
    rate = steps * len(points) / seconds if seconds > 0 else float("inf")
    click.echo(f"tracked {len(points)} particles from t = {start:g} to {end:g} in {steps} steps: {seconds:.2f} s, "
               f"{rate / 1e6:.3f} M particle-steps/s")
    if len(points):
        displacement = np.linalg.norm(positions[-1] - positions[0], axis=1)
        click.echo(f"mean displacement {displacement.mean():.4g}, max {displacement.max():.4g}")
    click.echo("wrote " + ", ".join(str(p) for p in written))


def _is_url(db: str) -> bool:
    return db.startswith(("http://", "https://"))


def _database(db: str) -> Any:
    """A local database directory, or a turbdb server (token from TURBDB_TOKEN)."""
    if _is_url(db):
        from .remote import connect

        return connect(db)
    from .database import open as open_db

    return open_db(Path(db))


def _read_points(path: Path) -> object:
    import numpy as np

    if not path.is_file():
        raise click.BadParameter(f"{path} is neither a number of particles nor a file", param_hint="--points")
    try:
        points = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None, ndmin=2)
    except ValueError as e:
        raise click.BadParameter(f"cannot read points from {path}: {e}", param_hint="--points") from None
    return points


@main.group()
def stats() -> None:
    """Statistics of a stored time step: the R–Q joint PDF and the energy spectrum."""


@stats.command("rq")
@click.argument("db")
@click.argument("name")
@click.option("--time", "time_", type=float, required=True, help="Time (the nearest stored step is used).")
@click.option("--points", type=click.IntRange(2), default=100_000, show_default=True, help="Random sample points.")
@click.option("--method", default="lag6", show_default=True, help="Gradient method: lag4, lag6, lag8, fd4lag4, m2q8, …")
@click.option("--field", default="velocity", show_default=True, help="Velocity-like field.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample points.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the PNG, .npz and .json (default DB/NAME-stats, or NAME-stats for a server).")
def stats_rq(db: str, name: str, time_: float, points: int, method: str, field: str, seed: int, out: Path | None) -> None:
    """Joint PDF of the velocity-gradient invariants R and Q of NAME at --time, normalised
    by <Q_w>, from gradients queried at random points: a plot and the data. DB is a database
    directory or the http:// address of a turbdb server."""
    from . import stats as st

    result = st.rq_pdf(_database(db)[name], time=time_, points=points, method=method, field=field, seed=seed)
    out = out or (Path(f"{name}-stats") if _is_url(db) else Path(db) / f"{name}-stats")
    paths = result.save(out / f"rq_t{result.time:g}_{method}")
    f = result.fractions
    click.echo(f"{name}: R–Q at t = {result.time:g}, {points} points, {method}; <Q_w> = {result.qw_mean:.4g}")
    click.echo(f"  P(Q<0,R>0) = {f['Q<0,R>0']:.3f}  P(Q<0,R<0) = {f['Q<0,R<0']:.3f}  ratio {result.asymmetry:.2f}"
               f"  P(Q>0,R>0) = {f['Q>0,R>0']:.3f}  P(Q>0,R<0) = {f['Q>0,R<0']:.3f}")
    click.echo("wrote " + ", ".join(str(p) for p in paths))


@stats.command("spectrum")
@click.argument("db", type=click.Path(file_okay=False, path_type=Path))
@click.argument("name")
@click.option("--time", "time_", type=float, required=True, help="Time (the nearest stored step is used).")
@click.option("--field", default="velocity", show_default=True, help="Vector field.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the PNG, .npz and .json (default DB/NAME-stats).")
def stats_spectrum(db: Path, name: str, time_: float, field: str, out: Path | None) -> None:
    """Shell-summed energy spectrum E(k) of NAME at --time, from a cutout of the whole
    (periodic) box: a plot and the data."""
    from . import stats as st
    from .database import open as open_db

    result = st.energy_spectrum(open_db(db)[name], time=time_, field=field)
    out = out or db / f"{name}-stats"
    paths = result.save(out / f"spectrum_t{result.time:g}")
    click.echo(f"{name}: energy spectrum at t = {result.time:g}, {len(result.k)} shells, "
               f"energy {result.summary()['energy']:.4g}")
    click.echo("wrote " + ", ".join(str(p) for p in paths))


@main.command()
@click.argument("db", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: any free one; the address is printed).")
@click.option("--tokens", "tokens_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="TOML file of tokens and their limits (see docs/service.md). Without it only anonymous use, "
                   "with JHTDB's limit of 4096 points per request.")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Engine calls run at once, in threads of this one process (each call also uses every core). "
                   "Default: the number of cores.")
@click.option("--max-inflight-points", type=click.IntRange(1), default=None,
              help="Points admitted at once over all requests (memory bound); others wait their turn. Default 4000000.")
@click.option("--cutout-chunk-bytes", type=click.IntRange(1024), default=None, hidden=True,
              help="Size of the slabs cutouts are streamed in (default 16 MiB).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True, help="Server log level.")
@click.option("--access-log", is_flag=True, help="Log one line per request.")
def serve(db: Path, host: str, port: int, tokens_file: Path | None, workers: int | None, max_inflight_points: int | None,
          cutout_chunk_bytes: int | None, log_level: str, access_log: bool) -> None:
    """Serve the datasets in DB over HTTP until interrupted (Ctrl-C or SIGTERM let the
    requests in progress finish).

    The API is /v1/datasets (metadata), /v1/datasets/NAME/query, /cutout and /track (JSON or
    .npy), the JHTDB-compatible /turbulence-svc/values, /healthz and /metrics; its
    interactive documentation is at /docs. Use it from Python with turbdb.connect(URL, token)
    or from the shell with turbdb query URL NAME ….
    """
    from .service import serve as run_server

    run_server(db, host=host, port=port, tokens=str(tokens_file) if tokens_file else None, workers=workers,
               max_points_in_flight=max_inflight_points, cutout_chunk_bytes=cutout_chunk_bytes, log_level=log_level,
               access_log=access_log)


@main.command()
@click.argument("db_or_url")
@click.argument("name")
@click.option("--field", required=True, help="Field to evaluate, e.g. velocity or pressure.")
@click.option("--points", "points_file", required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Points: an .npy array (N, 3), or a .csv/.txt file of x,y,z rows.")
@click.option("--time", "time_", type=float, required=True, help="Physical time.")
@click.option("--method", default="lag6", show_default=True, help="none, lag4, lag6, lag8, fd4noint, fd6noint, fd8noint, fd4lag4, m1q4, m2q8.")
@click.option("--operator", default="field", show_default=True, help="field, gradient, hessian or laplacian.")
@click.option("--temporal", default="none", show_default=True, help="none (nearest stored time) or pchip.")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True, help="Type of the values written.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the answer: .npy (the array Dataset.query returns) or .csv (one row per point, JHTDB's column names).")
@click.option("--token", default=None, envvar="TURBDB_TOKEN", help="Token for a server (default: $TURBDB_TOKEN).")
def query(db_or_url: str, name: str, field: str, points_file: Path, time_: float, method: str, operator: str,
          temporal: str, dtype: str, out: Path, token: str | None) -> None:
    """Evaluate FIELD (or its gradient, Hessian, Laplacian) of dataset NAME at the points in
    --points and write the answer to --out.

    DB_OR_URL is a database directory, or the http:// address of a turbdb server (turbdb
    serve), which evaluates the points where the data lives.
    """
    import numpy as np

    from .arguments import as_points

    if db_or_url.startswith(("http://", "https://")):
        from .remote import connect

        database = connect(db_or_url, token)
    else:
        from .database import open as open_db

        database = open_db(db_or_url)
    points = as_points(_read_points(points_file))
    values = database[name].query(field, points, time=time_, method=method, operator=operator, temporal=temporal,
                                  dtype=dtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".csv":
        from .service.jhtdb import columns

        names = columns(field, values.shape[1], operator.lower())
        np.savetxt(out, values.reshape(len(points), -1), delimiter=",", header=",".join(names), comments="",
                   fmt="%.9g")
    else:
        np.save(out, values)
    click.echo(f"{name}: {operator} of {field} at {len(points)} points, t = {time_:g}, {method}: wrote {out} "
               f"{values.shape} {values.dtype}")


def _ints(text: str | None, option: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise click.BadParameter(f"expected integers separated by commas, e.g. 64,64,64,3; got {text!r}", param_hint=option) from None


def _floats(text: str | None, option: str) -> tuple[float, float, float] | None:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise click.BadParameter(f"expected three numbers x,y,z; got {text!r}", param_hint=option)
    return values  # type: ignore[return-value]


def _periodic(text: str) -> tuple[bool, bool, bool]:
    text = text.lower()
    if text == "none":
        return (False, False, False)
    if not set(text) <= set("xyz"):
        raise click.BadParameter(f"give the periodic axes as letters, e.g. xyz, xz or none; got {text!r}", param_hint="--periodic")
    return tuple(a in text for a in "xyz")  # type: ignore[return-value]


if __name__ == "__main__":
    main()
