"""``turbdb cluster``: bring a Dask cluster up over a database, lay the database out on its
workers, report its health, repair it after workers are lost."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..exceptions import InvalidRequestError, ServiceError
from .group import main
from .inputs import ExpandedPath

_SCHEDULER_HELP = ("Address of the Dask scheduler, tcp://HOST:PORT (default: $TURBDB_SCHEDULER, or the file "
                   "given by --address-file).")


def scheduler_address(scheduler: str | None, address_file: Path | None) -> str:
    """The scheduler to use: ``--scheduler``, else ``--address-file``, else $TURBDB_SCHEDULER."""
    if scheduler:
        return scheduler
    if address_file is not None:
        if not address_file.is_file():
            raise InvalidRequestError(f"no address file at {address_file}: is `turbdb cluster up` running?")
        return address_file.read_text().strip()
    if os.environ.get("TURBDB_SCHEDULER"):
        return os.environ["TURBDB_SCHEDULER"]
    raise InvalidRequestError("say which cluster: --scheduler tcp://HOST:PORT, --address-file FILE "
                              "(written by turbdb cluster up) or $TURBDB_SCHEDULER")


def _bar(total_label: str):
    """A tqdm progress callback ``(done, total)`` for placing files."""
    from tqdm import tqdm

    from ..progress_bars import bar_disabled

    state: dict[str, Any] = {}

    def progress(done: int, total: int) -> None:
        if "bar" not in state:
            state["bar"] = tqdm(total=total, unit="file", desc=total_label, dynamic_ncols=True, disable=bar_disabled())
        state["bar"].update(done - state["bar"].n)
        if done >= total:
            state["bar"].close()

    return progress


@main.group()
def cluster() -> None:
    """Run a database on a cluster of Dask workers.

    `turbdb cluster up DB --workers N` starts one on this machine (or attaches to a running
    Dask cluster with --scheduler); `turbdb.open(DB, cluster=ADDRESS)` and
    `turbdb serve DB --cluster ADDRESS` use it. Every partition lives on two workers; a slow
    or lost worker is covered by the other copy. See docs/cluster.md.
    """


#: The same for starting a cluster and for placing a database on one.
def _fewer_copies(placed: int, asked: int) -> None:
    """Says so when the workers could not hold the copies asked for (copies of a partition
    go to distinct workers): the cluster then survives fewer lost workers than expected."""
    if placed < asked and click.get_current_context().get_parameter_source("replicas") is not ParameterSource.DEFAULT:
        click.echo(f"turbdb: note: {placed} worker{'s' if placed > 1 else ''} can hold {placed} cop"
                   f"{'ies' if placed > 1 else 'y'} of a partition, not the {asked} asked for: the cluster survives "
                   f"{placed - 1} lost worker{'s' if placed != 2 else ''}, not {asked - 1}; start more workers for more",
                   err=True)


_replicas = click.option("--replicas", type=click.IntRange(1, 8), default=2, show_default=True,
                         help="Copies of every partition, on distinct workers.")

@cluster.command()
@click.argument("db", type=ExpandedPath(file_okay=False, exists=True, path_type=Path))
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="Start a Dask LocalCluster of this many worker processes on this machine.")
@click.option("--scheduler", default=None, help="Attach to the running Dask cluster at tcp://HOST:PORT instead "
                                                "(SLURM via dask-jobqueue, Kubernetes, dask scheduler/worker).")
@_replicas
@click.option("--data-root", type=ExpandedPath(file_okay=False, path_type=Path), default=None,
              help="Node-local disks: copy each worker's partitions into DATA_ROOT/<worker>. Default: the workers "
                   "read DB itself (shared storage).")
@click.option("--address-file", type=ExpandedPath(dir_okay=False, path_type=Path), default=None,
              help="Write the scheduler address to this file (other commands read it with --address-file).")
@click.option("--threads", type=click.IntRange(1, 1024), default=None,
              help="Engine threads per worker (local cluster; default: the cores shared out).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface the local cluster listens on.")
@click.option("--dashboard-address", default=":8787", show_default=True,
              help="Where the local cluster serves the Dask dashboard (':0' for any free port).")
def up(db: Path, workers: int | None, scheduler: str | None, replicas: int, data_root: Path | None,
       address_file: Path | None, threads: int | None, host: str, dashboard_address: str) -> None:
    """Serve DB on a Dask cluster: start a local one (--workers N) and run until stopped,
    or attach to a running one (--scheduler) and return.

    Lays the database out on the workers if the catalogue (DB/turbdb-cluster.json) does
    not fit them yet, gives every worker its node, prints the scheduler address and the
    dashboard link.
    """
    from ..cluster.launch import attach, start_local

    if (workers is None) == (scheduler is None):
        raise click.UsageError("give either --workers N (start a local cluster) or --scheduler ADDRESS (attach)")
    progress = _bar("placing")
    if scheduler is not None:
        running = attach(db, scheduler, replicas=replicas, data_root=data_root, progress=progress)
    else:
        running = start_local(db, workers, replicas=replicas, data_root=data_root, threads=threads,
                              dashboard_address=dashboard_address, host=host, progress=progress)
    catalogue = running.catalogue
    if running.placed_because and running.placed_because != ["the database was not laid out yet"]:
        click.secho(f"turbdb: placing again: {'; '.join(running.placed_because)}", fg="yellow", bold=True, err=True)
    for slot, why in running.missing.items():
        click.secho(f"turbdb: warning: worker {slot} {why}: its partitions are served from their other copies "
                    f"(DEGRADED). Start it again, or run `turbdb cluster repair {db} --scheduler {running.address}` "
                    "to copy them onto the other workers", fg="yellow", bold=True, err=True)
    layout = ("shared storage" if catalogue.layout == "shared"
              else f"node-local copies under {Path(next(iter(catalogue.slots.values()))).parent}")
    serving = (f"{len(catalogue.slots) - len(running.missing)} of {len(catalogue.slots)}" if running.missing
               else str(len(catalogue.slots)))
    click.echo(f"turbdb: {serving} workers serve {db} ({layout}; {catalogue.replicas} copies of every "
               f"partition, {catalogue.virtual} virtual partitions)")
    _fewer_copies(catalogue.replicas, replicas)
    click.echo(f"turbdb: scheduler {running.address}")
    if running.dashboard:
        click.echo(f"turbdb: dashboard {running.dashboard}")
    if address_file is not None:
        address_file.write_text(running.address + "\n")
    click.echo(f"turbdb: use it with turbdb.open({str(db)!r}, cluster={running.address!r}) or "
               f"turbdb serve {db} --cluster {running.address}")
    if running.local is None:
        running.client.close()
        return
    click.echo("turbdb: Ctrl-C stops the cluster", nl=True)
    sys.stdout.flush()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    running.close()
    if address_file is not None and address_file.is_file():
        address_file.unlink()
    click.echo("turbdb: cluster stopped")


@cluster.command()
@click.argument("db", type=ExpandedPath(file_okay=False, exists=True, path_type=Path))
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="Place for this many workers named 0 … N-1 (copies made by this process).")
@click.option("--scheduler", default=None, help="Place for the workers of the running Dask cluster at this address "
                                                "(each worker copies its own partitions from DB).")
@_replicas
@click.option("--data-root", type=ExpandedPath(file_okay=False, path_type=Path), default=None,
              help="Node-local disks: copy each worker's partitions into DATA_ROOT/<worker>. Default: shared storage "
                   "(only the catalogue is written).")
def place(db: Path, workers: int | None, scheduler: str | None, replicas: int, data_root: Path | None) -> None:
    """Lay DB out on a cluster: decide which workers hold each partition (chained
    declustering over virtual partitions), write the catalogue DB/turbdb-cluster.json, and
    with --data-root copy every worker's partitions to its directory."""
    from ..cluster.catalogue import Catalogue
    from ..cluster.layout import place as place_on
    from ..cluster.mediator import connect_client
    from ..cluster.membership import Membership

    if (workers is None) == (scheduler is None):
        raise click.UsageError("give either --workers N or --scheduler ADDRESS")
    client = connect_client(scheduler) if scheduler else None
    try:
        slots = sorted(Membership(client).live(refresh=True)) if client else [str(i) for i in range(workers)]
        catalogue = Catalogue.create(db, slots, replicas=replicas, data_root=data_root)
        placed = place_on(catalogue, client=client, progress=_bar("placing"))
    finally:
        if client is not None:
            client.close()
    click.echo(f"turbdb: placed {db} on {len(slots)} workers ({catalogue.layout} layout, {catalogue.replicas} copies, "
               f"{catalogue.virtual} virtual partitions); catalogue {Catalogue.path_of(db)}")
    _fewer_copies(catalogue.replicas, replicas)
    for slot, files in placed.items():
        click.echo(f"  worker {slot}: {files} files in {catalogue.slots[slot]}")


@cluster.command()
@click.argument("db", type=ExpandedPath(file_okay=False, exists=True, path_type=Path))
@click.option("--scheduler", default=None, help=_SCHEDULER_HELP)
@click.option("--address-file", type=ExpandedPath(dir_okay=False, path_type=Path), default=None,
              help="File holding the scheduler address (turbdb cluster up --address-file).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (the same as GET /v1/cluster).")
def status(db: Path, scheduler: str | None, address_file: Path | None, as_json: bool) -> None:
    """Report the cluster's health: every worker, and the partitions left with fewer copies
    than asked for once workers are lost. Exits 0 when healthy, 1 when degraded, when
    partitions have no copy at all (also when the scheduler cannot be reached: then nothing
    is served), when node-local copies are older than the database (stale), or when a
    worker found its copy damaged."""
    import turbdb

    address = scheduler_address(scheduler, address_file)
    try:
        with turbdb.open(db, cluster=address) as cdb:
            report = cdb.status()
    except ServiceError as e:  # no scheduler: a report all the same, as docs/cluster.md says
        report = _unreachable_report(db, address, e)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print_status(db, report)
    sys.exit(0 if report["state"] == "healthy" else 1)


def _unreachable_report(db: Path, address: str, error: ServiceError) -> dict[str, Any]:
    """The status of a cluster whose scheduler cannot be reached: every partition
    unavailable, ``scheduler_reachable`` false and why (what the mediator reports when its
    scheduler dies later)."""
    from ..cluster.catalogue import Catalogue
    from ..cluster.contents import differences
    from ..cluster.health import cluster_status
    from ..database import open as open_db

    database, catalogue = open_db(db), Catalogue.load(db)
    stale = differences(catalogue.contents, database) if catalogue.layout == "local" else []
    return {**cluster_status(database, catalogue, {}, scheduler=address, stale=stale),
            "scheduler_reachable": False, "error": str(error)}


def _print_status(db: Path, report: dict[str, Any]) -> None:
    colour = {"healthy": "green", "degraded": "yellow", "stale": "yellow", "unavailable": "red"}[report["state"]]
    click.echo(f"cluster {report['scheduler']}: " + click.style(report["state"].upper(), fg=colour, bold=True))
    if report.get("dashboard"):
        click.echo(f"  dashboard {report['dashboard']}")
    if report.get("error"):
        click.secho(f"  {report['error']}", fg="red")
    for change in report.get("stale", []):
        click.secho(f"  stale node-local copies: {change} (those datasets are refused until `turbdb cluster place "
                    f"{db} … --data-root …` or `turbdb cluster up` lays them out again)", fg="yellow")
    for w in report["workers"]:
        state = (click.style("alive", fg="green") if w["alive"]
                 else click.style("SILENT", fg="red") if w.get("silent_seconds") is not None
                 else click.style("LOST ", fg="red"))
        click.echo(f"  worker {w['slot']:>4} {state} {w['address'] or '-':28} {w['virtual_partitions']:4} virtual "
                   f"partitions ({w['primary']} primary)  {w['root']}")
        if w.get("silent_seconds") is not None:
            click.echo(f"         running, but not heard from for {w['silent_seconds']:.0f} s (stopped or hung): "
                       "its partitions are read from their other copies")
        for name, why in w.get("damaged", {}).items():
            click.secho(f"         DAMAGED copy of {name}: {why}", fg="red")
            click.echo("         its units go to the other copies; lay the database out again (turbdb cluster up, "
                       "or turbdb cluster place) to copy it anew")
    for spare in report["spare_workers"]:
        click.echo(f"  worker {spare:>4} spare (not in the catalogue: turbdb cluster repair gives it partitions)")
    for kind, words in (("degraded", "with one copy left"), ("unavailable", "with no copy")):
        part = report[kind]
        if part["virtual_partitions"]:
            click.echo(f"{len(part['virtual_partitions'])} virtual partitions {words}:")
            for name, d in part["datasets"].items():
                shown = ", ".join(f"(t={e[0]}, shard {tuple(e[1:])})" for e in d["examples"][:4])
                click.echo(f"  {name}: {d['partitions']} partitions, e.g. {shown}")
    short = report["degraded"]["virtual_partitions"] or report["unavailable"]["virtual_partitions"]
    if short and report.get("scheduler_reachable", True):  # else: no cluster to repair on
        click.echo(f"run `turbdb cluster repair {db} --scheduler {report['scheduler']}` to copy them onto the "
                   "living workers")


@cluster.command()
@click.argument("db", type=ExpandedPath(file_okay=False, exists=True, path_type=Path))
@click.option("--scheduler", default=None, help=_SCHEDULER_HELP)
@click.option("--address-file", type=ExpandedPath(dir_okay=False, path_type=Path), default=None,
              help="File holding the scheduler address (turbdb cluster up --address-file).")
def repair(db: Path, scheduler: str | None, address_file: Path | None) -> None:
    """Re-replicate the partitions lost workers held: each gets new holders among the
    living workers (the least loaded first), its shards are copied from the surviving copy
    (node-local disks), and the catalogue is rewritten. New workers join and take a share."""
    from ..cluster.catalogue import Catalogue
    from ..cluster.mediator import connect_client
    from ..cluster.repair import repair as repair_cluster

    client = connect_client(scheduler_address(scheduler, address_file))
    try:  # each copy made is recorded as it completes: a failed repair keeps them (its error says how many)
        result = repair_cluster(client, Catalogue.load(db), progress=click.echo)
    finally:
        client.close()
    click.echo(f"turbdb: {len(result['moved'])} copies made")
    if result["unrecoverable"]:
        click.secho(f"turbdb: {len(result['unrecoverable'])} virtual partitions have no copy left "
                    f"({', '.join(map(str, result['unrecoverable'][:10]))}); restore their workers or place the "
                    "database again", fg="red", err=True)
        sys.exit(1)
