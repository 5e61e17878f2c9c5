"""Commands that make and inspect datasets: simulate, ingest, info, verify."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..database_listing import misnamed_error
from ..exceptions import TurbdbError
from ..permissions import permission_denied
from .group import main
from .format_options import format_options
from .inputs import ExpandedPath, existing_dataset_name, is_url, new_dataset_name, periodic_axes, token_option, xyz_floats
from .inputs import database as open_database


@main.command()
@click.argument("db", type=ExpandedPath(file_okay=False, path_type=Path))
@click.option("--name", required=True, callback=new_dataset_name,
              help="Name of the dataset to create: a letter, then up to 63 letters, digits, '_', '-' or '.'.")
@click.option("--grid", type=click.IntRange(8, 4096), default=64, show_default=True,
              help="Grid points per side of the periodic box [0, 2π)³: even, and at least 16 for dns.")
@click.option("--steps", type=click.IntRange(1, 1_000_000), default=100, show_default=True, help="Time steps to store.")
@click.option("--save-every", type=click.IntRange(1), default=None, help="Solver steps between stored steps (dns; default: the solver's choice).")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Seed of the random initial field.")
@click.option("--kind", type=click.Choice(["dns", "synthetic"]), default="dns", show_default=True,
              help="dns: forced isotropic turbulence (pseudo-spectral); synthetic: random-phase Kolmogorov field, fast at any size, not physical.")
@click.option("--if-missing", is_flag=True, help="Do nothing if the dataset exists with all its steps (used by make demo).")
@click.option("--overwrite", is_flag=True, help="Replace an existing dataset of that name.")
@click.option("--quiet", is_flag=True,
              help="Print nothing but errors: no progress bar and no log lines (Re_λ, …). Without it the log lines "
                   "go to stdout and the bar, on a terminal only, to stderr.")
def simulate(db: Path, name: str, grid: int, steps: int, save_every: int | None, seed: int, kind: str,
             if_missing: bool, overwrite: bool, quiet: bool) -> None:
    """Run the built-in generator and store its time steps in DB as dataset NAME.

    Every stored step is written as soon as it is computed (while the next one is being
    computed), so the dataset can be read while it grows. The dns kind spins up from a random
    field to a statistically stationary state first (on 64³, or the grid if smaller, then
    refined spectrally to the grid) and logs Re_λ, dissipation against injection, and the skewness and flatness of
    ∂u/∂x. --grid 64 gives Re_λ ≈ 41 in a few minutes; --grid 256 --steps 41 gives Re_λ ≈ 117
    with a short inertial range (11 GB, about half an hour on 2 cores): docs/simulate.md.
    """
    from ..simulation_run import run_simulation

    if grid % 2 or (kind == "dns" and grid < 16):
        raise click.BadParameter(f"{grid} is not an even number{' of at least 16 (dns)' if kind == 'dns' else ''}",
                                 param_hint="--grid")
    if if_missing and overwrite:
        raise click.UsageError("give --if-missing (keep a complete dataset) or --overwrite (replace it), not both")
    if save_every is not None and kind != "dns":
        raise click.UsageError("--save-every is a DNS setting; the synthetic kind stores every step it makes")
    run_simulation(db, name, grid=grid, steps=steps, save_every=save_every, seed=seed, kind=kind,
                   if_missing=if_missing, overwrite=overwrite, quiet=quiet)


def _datasets_without_metadata(path: Path, names: list[str]) -> list[str]:
    """Directories of the database that hold field arrays (``*/zarr.json``) but no
    ``zarr.json`` of their own: datasets whose metadata was lost (or a copy that stopped
    before it), which listing skips. Hidden ones are a replacement under way or interrupted
    (``create_dataset(overwrite=True)`` builds the new dataset beside the old), not a
    dataset; a directory this account may not look inside is not one either (listing names it)."""
    def holds_arrays_only(entry: os.DirEntry[str]) -> bool:
        try:
            if not entry.is_dir() or os.path.lexists(os.path.join(entry.path, "zarr.json")):
                return False
            with os.scandir(entry.path) as below:
                return any(sub.is_dir() and os.path.isfile(os.path.join(sub.path, "zarr.json")) for sub in below)
        except OSError:
            return False

    with os.scandir(path) as entries:
        return sorted(entry.name for entry in entries
                      if not entry.name.startswith(".") and entry.name not in names and holds_arrays_only(entry))


#: What info and verify say of a directory :func:`_datasets_without_metadata` finds.
_NO_METADATA = ("it holds field arrays but no zarr.json, so it is no dataset any more (a copy that stopped "
                "halfway, or its metadata lost); restore its zarr.json from a backup or re-ingest it")


def _stored_name(dataset_dir: Path) -> str | None:
    """The name a dataset's metadata was written with (None if unreadable: verify says why)."""
    from ..zarr_meta import read_json

    try:
        name = read_json(dataset_dir / "zarr.json")["attributes"]["turbdb"]["name"]
    except (TurbdbError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


def _database_metadata_problem(path: Path) -> str | None:
    """What is wrong with the database's own ``zarr.json``, which turbdb does not need but
    Zarr readers do (``zarr.open_group(DB)``), with the line that restores it; None if fine."""
    from ..database import FORMAT_VERSION
    from ..zarr_meta import group_document, read_json

    restore = json.dumps(group_document({"turbdb_database": {"format_version": FORMAT_VERSION}}))
    try:
        document = read_json(path / "zarr.json")
    except TurbdbError as e:
        problem = str(e)
    else:
        attrs = document.get("attributes")
        if document.get("zarr_format") == 3 and document.get("node_type") == "group" and isinstance(attrs, dict) \
                and isinstance(attrs.get("turbdb_database"), dict):
            return None
        problem = f"{path / 'zarr.json'} is not a turbdb database's Zarr v3 group document"
    return (f"{problem}: turbdb still reads the datasets, Zarr readers cannot open the database as a group; "
            f"restore it with: echo {shlex.quote(restore)} > {shlex.quote(str(path / 'zarr.json'))}")


@main.command()
@click.argument("db", type=ExpandedPath(file_okay=False, path_type=Path))
@click.argument("inputs", nargs=-1, required=True, type=ExpandedPath(path_type=Path))
@click.option("--name", required=True, callback=new_dataset_name, help="Dataset to append to (created if missing).")
@click.option("--field", required=True, help="Field the inputs hold, e.g. velocity or pressure.")
@format_options
@click.option("--axes", default=None, help="Axis letters of the input array as read (t z y x c), e.g. czyx; default zyxc (C) or xyzc (F).")
@click.option("--dt", type=float, default=None, help="Time between appended steps (default: the dataset's; for a dataset of one time, the --dt its ingest was "
                   "given; else 1; required for a dataset of non-uniform times). Steps that take times the dataset "
                   "has already keep them: a --dt disagreeing with those is refused.")
@click.option("--t0", type=float, default=0.0, show_default=True, help="New dataset: time of its first step.")
@click.option("--spacing", default=None, help="New dataset: grid spacing dx,dy,dz (default 2π/n: the box [0, 2π)³).")
@click.option("--origin", default="0,0,0", show_default=True, help="New dataset: position of the first node x,y,z.")
@click.option("--periodic", default="xyz", show_default=True, help="New dataset: periodic axes, e.g. xyz, xz or none.")
@click.option("--units", default="", help="New field: units of the field, e.g. m/s.")
@click.option("--replace", is_flag=True,
              help="Store again, in place, steps ingested before from the same files that now read as other values "
                   "(after correcting --dtype, --axes, …, or a file rewritten); refused without it.")
@click.option("--sort", type=click.Choice(["given", "numbers"]), default=None,
              help="Inputs numbered out of order as the shell sorts them (u_1, u_10, u_2): keep the order given, or "
                   "sort them by their numbers; refused without it.")
@click.option("--quiet", is_flag=True,
              help="No progress bar and no log lines (notes and errors still go to stderr); a bar is drawn only on a "
                   "terminal.")
def ingest(db: Path, inputs: tuple[Path, ...], name: str, field: str, fmt: str | None, axes: str | None,
           dt: float | None, t0: float, spacing: str | None, origin: str, periodic: str, units: str,
           replace: bool, sort: str | None, quiet: bool, **input_options: Any) -> None:
    """Append the time steps in INPUTS (in the order given) to field FIELD of dataset NAME.

    Inputs are files of the formats --format lists (detected from the name, else the first
    bytes; a directory is a Zarr/xarray store), each holding one time step or several along a
    t axis; an option whose help starts with format names applies to those formats only. An
    interrupted ingest is resumed by running the same command again: steps already stored are
    skipped, the step in progress is rewritten; a file that grew has its new steps appended.
    """
    from ..ingest.pipeline import ingest_inputs

    context = click.get_current_context()
    given = {option for option in ("t0", "spacing", "origin", "periodic", "units")
             if context.get_parameter_source(option) is not ParameterSource.DEFAULT}
    ingest_inputs(
        db, name, field, list(inputs),
        source_options={"format": fmt, "axes": axes, **input_options},
        dt=dt, t0=t0, spacing=xyz_floats(spacing, "--spacing", positive=True), origin=xyz_floats(origin, "--origin"),
        periodic=periodic_axes(periodic), units=units, quiet=quiet, given=given, replace=replace, sort=sort,
    )


def _directory_or_url(ctx: click.Context, param: click.Parameter, db: str) -> Path | str:
    """A database directory (``~`` expanded), or a server's http(s):// address kept as it
    is: made a path, it read "no database at …/http:/127.0.0.1:18300"."""
    return db if is_url(db) else ExpandedPath(file_okay=False, path_type=Path).convert(db, param, ctx)


def _directory(ctx: click.Context, param: click.Parameter, db: str) -> Path:
    """A database directory: verify reads the shard files themselves, which a server does
    not hand out."""
    if is_url(db):
        raise click.BadParameter(f"{db} is a server's address: verify reads every shard file, so run it where the "
                                 "database is stored, on its directory (`turbdb info URL` describes a served dataset)",
                                 ctx=ctx, param=param)
    return ExpandedPath(file_okay=False, path_type=Path).convert(db, param, ctx)


@main.command()
@click.argument("db", metavar="DB_OR_URL", callback=_directory_or_url)
@click.argument("name", required=False, callback=existing_dataset_name)
@click.option("--json", "as_json", is_flag=True, help="Print the metadata as JSON.")
@token_option
def info(db: Path | str, name: str | None, as_json: bool, token: str | None) -> None:
    """Describe the datasets in DB_OR_URL (or only NAME): grid, times, fields, steps written.

    DB_OR_URL is a database directory, or the http:// address of a turbdb server (turbdb
    serve), which describes the datasets the token may read.
    """
    with open_database(str(db), token) as database:  # a server's connections are closed after
        names = [name] if name else database.datasets
        infos, damaged, unreadable, misnamed = [], {}, {}, {}
        if not name and isinstance(db, Path) and database.only is None:  # what listing leaves out, a line each
            damaged.update((n, _NO_METADATA) for n in _datasets_without_metadata(database.path, names))
            misnamed.update((n, misnamed_error(n).args[0]) for n in database.listing().misnamed)
        if not names and not damaged and not misnamed:
            click.echo(f"{db}: no datasets yet (create one with turbdb simulate or turbdb ingest)")
            return
        for n in names:  # one damaged or unreadable dataset must not hide the others
            try:
                infos.append(database[n].info)
            except TurbdbError as e:
                if name:  # the one dataset asked for: its error is the answer
                    raise
                (unreadable if permission_denied(e) else damaged)[n] = str(e)
    if as_json:
        out = {i.name: {**i.to_attrs(), "steps_present": {f: list(fi.steps_present) for f, fi in i.fields.items()}} for i in infos}
        out.update({n: {"damaged": message} for n, message in damaged.items()})
        out.update({n: {"unreadable": message} for n, message in unreadable.items()})
        out.update({n: {"misnamed": message} for n, message in misnamed.items()})
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo("\n\n".join([i.describe() for i in infos] + [f"{n}: DAMAGED: {m}" for n, m in damaged.items()]
                                + [f"{n}: UNREADABLE: {m}" for n, m in unreadable.items()]
                                + [f"{n}: MISNAMED: {m}" for n, m in misnamed.items()]))
    if damaged or unreadable or misnamed:
        sys.exit(1)


@main.command()
@click.argument("db", callback=_directory)
@click.argument("name", required=False, callback=existing_dataset_name)
def verify(db: Path, name: str | None) -> None:
    """Check every shard of every field: index checksums, chunk ranges, atom checksums;
    and the metadata other Zarr readers go by (consolidated copy, coordinates).

    Names each corrupt or missing shard and exits with status 1 if anything is wrong.
    """
    from ..database import open as open_db
    from ..info import index_ranges

    database = open_db(db)
    names = [name] if name else database.datasets
    bad = unchecked = 0
    if not name:
        if names and (problem := _database_metadata_problem(database.path)):
            bad += 1
            click.echo(f"{db}: {click.style('damaged', fg='red')}: {problem}")
        for orphan in _datasets_without_metadata(database.path, names):
            bad += 1
            click.echo(f"{orphan}: {click.style('damaged', fg='red')}: {_NO_METADATA}")
        for misnamed in database.listing().misnamed:
            bad += 1
            click.echo(f"{misnamed}: {click.style('misnamed', fg='red')}: {misnamed_error(misnamed).args[0]}")
        if not names and not bad:
            click.secho(f"no datasets in {db}: nothing was checked", fg="red", err=True)
            sys.exit(1)
    for n in names:
        try:  # a dataset whose metadata is damaged is reported, and the others still checked
            reports = database[n].verify()
            metadata = database[n].verify_metadata()
        except TurbdbError as e:
            if name:
                raise
            if permission_denied(e):  # not checked, not damaged
                unchecked += 1
                click.echo(f"{n}: {click.style('unreadable', fg='red')}: {e}")
                continue
            bad += 1
            click.echo(f"{n}: {click.style('damaged', fg='red')}: {e}")
            continue
        if (created_as := _stored_name(database.path / n)) not in (None, n):
            click.echo(f"{n}: note: its metadata names it {created_as!r} (renamed or copied under a new name "
                       f"since); it is named by its directory, {n!r}")
        bad += len(metadata)
        if metadata:
            click.echo(f"{n}: metadata: {click.style(f'{len(metadata)} problem(s)', fg='red')}")
            for path, message in metadata:
                click.echo(f"  {path}: {message}")
        for field, report in reports.items():
            problems, closed = report["problems"], report.get("unreadable", [])
            bad += len(problems)
            unchecked += len(closed)
            status = click.style("ok", fg="green") if not problems else click.style(f"{len(problems)} problem(s)", fg="red")
            if closed:
                status += ", " + click.style(f"{len(closed)} part(s) unreadable", fg="red")
            click.echo(f"{n}/{field}: {report['shards']} shards, {report['atoms']} atoms, "
                       f"{len(report['complete_steps'])} complete steps: {status}")
            for path, t, message in problems + closed:
                click.echo(f"  {path}{f' (time step {t})' if t >= 0 else ''}: {message}")
            if report.get("unrecorded"):
                click.echo(f"  note: time step(s) {index_ranges(report['unrecorded'])} hold every shard but are not "
                           "recorded as written (a write stopped before recording them, or one under way): info does "
                           "not list them until they are written again")
            info = database[n].metadata
            if not info.fields[field].every_step or any(t < 0 for _, t, _ in closed):
                continue  # written at some steps only, on purpose, or not seen: its holes are no news
            if report.get("unwritten_between"):
                click.echo(f"  note: time step(s) {index_ranges(report['unwritten_between'])} hold no data, between "
                           "written ones: lost, if they were written")
            unseen = {t for _, t, _ in closed}
            after = [t for t in range(max(report["complete_steps"], default=-1) + 1, info.nt) if t not in unseen]
            if after:  # declared, never written: a run stopped, or one still writing
                simulated = str(info.provenance.get("generator", "")).startswith("turbdb simulate")
                how = ("`turbdb simulate … --if-missing` completes an interrupted simulation" if simulated
                       else "running the same ingest again, or the same Dataset.write calls, completes an "
                            "interrupted one")
                click.echo(f"  note: time step(s) {index_ranges(after)} of {info.nt} are declared but hold no data "
                           f"yet (a run still writing, or one that stopped: {how})")
    if bad:
        click.secho(f"{bad} problem(s) found; re-ingest or re-simulate the named time steps (the other lines say what to do)",
                    fg="red", err=True)
    if unchecked:  # not lost data: what this account may not read was not checked at all
        click.secho(f"{unchecked} part(s) could not be read (permission denied) and were not checked; run verify as an "
                    "account that may read everything (the owner of the database)", fg="red", err=True)
    if bad or unchecked:
        sys.exit(1)
