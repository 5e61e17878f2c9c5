"""``turbdb workload``: generate a JHTDB-shaped trace of jobs and queries, and replay one
against a database directory or a server from concurrent clients."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import click

from ..busy_causes import BUSY_CAUSES
from ..exceptions import TurbdbError
from .group import main
from .inputs import (ByteSize, ExpandedPath, FiniteFloat, database, existing_dataset_name, is_url, option_given,
                     token_option)
from .interrupts import work_done


@main.group()
def workload() -> None:
    """Traces of many users at once: `generate` one, `replay` it."""


@workload.command()
@click.argument("db_or_url")
@click.argument("name", callback=existing_dataset_name)
@click.option("--out", type=ExpandedPath(dir_okay=False, path_type=Path), required=True,
              help="Where to write the trace (JSON lines, one query a line).")
@click.option("--field", default="velocity", show_default=True, help="Field the queries read.")
@click.option("--jobs", type=click.IntRange(1), default=400, show_default=True, help="Jobs in the trace.")
@click.option("--duration", type=FiniteFloat(min=0, min_open=True), default=60.0, show_default=True,
              help="Seconds over which the jobs arrive (at speed-up 1).")
@click.option("--regions", type=click.IntRange(1), default=6, show_default=True,
              help="Regions of interest that users share.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Seed of everything drawn.")
@token_option
def generate(db_or_url: str, name: str, out: Path, field: str, jobs: int, duration: float, regions: int,
             seed: int, token: str | None) -> None:
    """Write a trace for dataset NAME of DB_OR_URL shaped like the JHTDB log: bursty arrivals,
    about 88 % of jobs on one time step, some over a few steps, a few iterating over every
    step; mostly small queries in shared regions, some large uniform batches."""
    from ..workload import generate as make, write_trace

    info = database(db_or_url, token)[name].info
    if field not in info.fields:
        raise click.BadParameter(f"dataset {name!r} has no field {field!r}; it has {', '.join(info.fields)}",
                                 param_hint="--field")
    trace = make(info, dataset=name, field=field, jobs=jobs, duration=duration, regions=regions, seed=seed)
    count = write_trace(out, trace)
    work_done()
    click.echo(f"wrote {count} queries in {jobs} jobs to {out}")


@workload.command()
@click.argument("trace", type=ExpandedPath(exists=True, dir_okay=False, path_type=Path))
@click.argument("db_or_url", required=False)
@click.option("--url", default=None, help="A turbdb server's address to replay against (instead of DB_OR_URL).")
@click.option("--token", default=None, envvar="TURBDB_TOKEN",
              help="Token for a server (default: $TURBDB_TOKEN). Without one the server's anonymous rate limit "
                   "paces the replay, and the figures measure that limit.")
@click.option("--speedup", type=FiniteFloat(min=0, min_open=True, allow_inf=True), default=math.inf, show_default="∞",
              help="Replay this many times faster than the trace's arrival times (∞: every job at once); the last "
                   "arrival may come at most 7 days after the start.")
@click.option("--clients", type=click.IntRange(1, 1024), default=8, show_default=True,
              help="Concurrent clients sending the jobs' queries (jobs under way at once). Against a server at most "
                   "128 with the threads driver: a server takes 128 connections from one address.")
@click.option("--driver", type=click.Choice(["threads", "futures"]), default="threads", show_default=True,
              help="threads: a thread per client, waiting for its answers; futures: every client driven from one "
                   "thread by Dataset.submit (through a local node engine no client takes a thread; against a "
                   "server, at most 64 queries are sent at once).")
@click.option("--scheduler", type=click.Choice(["noshare", "liferaft", "jaws"]), default=None,
              help="For a database directory: query through a node engine scheduled this way.")
@click.option("--cache-policy", type=click.Choice(["lru", "lruk", "slru", "urc"]), default=None,
              help="For a database directory: the engine cache's policy.")
@click.option("--cache-bytes", type=ByteSize(), default=None, metavar="SIZE",
              help="For a database directory: the engine cache's bytes, e.g. 512MiB or 2GB.")
@click.option("--io", type=click.Choice(["buffered", "direct"]), default=None, help="For a database directory: how the engine reads.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--progress/--no-progress", default=None,
              help="A progress bar of queries answered on stderr (default: when stderr is a terminal).")
def replay(trace: Path, db_or_url: str | None, url: str | None, token: str | None, speedup: float, clients: int,
           driver: str, scheduler: str | None, cache_policy: str | None, cache_bytes: int | None, io: str | None,
           as_json: bool, progress: bool | None) -> None:
    """Replay TRACE against DB_OR_URL (a database directory, or a turbdb server's address;
    or give the address with --url) and print throughput (queries/s, points/s),
    response-time percentiles by size class and, where there is a node engine, the bytes it
    read and its cache hit ratio."""
    from tqdm import tqdm

    from ..database import open as open_db
    from ..workload import read_trace
    from ..workload import replay as run
    from ..workload.replay import clients_problem, speedup_problem

    if (db_or_url is None) == (url is None):
        raise click.UsageError("give the database directory or the server's address as DB_OR_URL, or the address "
                               "with --url (one of them)")
    if url is not None:
        if not is_url(url):
            raise click.BadParameter(f"expected an address such as http://127.0.0.1:8000, not {url!r}",
                                     param_hint="--url")
        db_or_url = url
    engine_options = [f"--{o.replace('_', '-')}" for o in ("scheduler", "cache_policy", "cache_bytes", "io")
                      if option_given(o)]
    if is_url(db_or_url) and engine_options:
        raise click.UsageError(f"{', '.join(engine_options)} set up the node engine that replays a database "
                               "directory; a server runs its own (turbdb serve --scheduler …): drop them, or "
                               "replay the directory")
    queries = read_trace(trace)
    if not queries:
        raise click.BadParameter(f"{trace} holds no queries: write one with `turbdb workload generate`",
                                 param_hint="TRACE")
    for problem, option in ((speedup_problem(queries, speedup), "--speedup"),
                            (clients_problem(clients, driver, against_server=is_url(db_or_url)), "--clients")):
        if problem is not None:
            raise click.BadParameter(problem, param_hint=option)
    if is_url(db_or_url):
        db = database(db_or_url, token)
    else:
        db = open_db(db_or_url, scheduler=scheduler, cache_policy=cache_policy, cache_bytes=cache_bytes, io=io)
    bar = tqdm(total=len(queries), unit="query", desc="replay", disable=None if progress is None else not progress,
               dynamic_ncols=True)
    try:
        report = run(db, queries, speedup=speedup, clients=clients, progress=lambda done, total: bar.update(1),
                     driver=driver)
        summary = report.summary()
        if is_url(db_or_url) and not report.unreachable:  # a server gone is not waited for again
            # The server's totals since it started, beside the replay's own figures in "engine".
            with contextlib.suppress(TurbdbError):  # a server without a node engine, or gone
                summary["server_engine"] = db.engine_stats()
    finally:
        bar.close()
        if is_url(db_or_url):
            db.close()
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_report(summary, clients)
    if summary["failed"] or summary["not_sent"] or not summary["queries"]:
        # After the report: a script that replays a trace learns from the status that the figures
        # leave queries out, and why from the report.
        raise SystemExit(1)


def _print_report(summary: dict, clients: int) -> None:
    from ..workload.replay import completion_text

    left_out = (f", {summary['not_sent']} not sent: the rest of a job after its failed query, and every query "
                "left once the server could not be reached" if summary.get("not_sent") else "")
    click.echo(f"{summary['queries']} queries ({summary['failed']} failed{left_out}; "
               f"{summary.get('traced', summary['queries'] + summary['failed'])} in the trace) "
               f"in {summary['seconds']:.2f} s: "
               f"{summary['queries_per_second']:.1f} queries/s, {summary['points_per_second']:.0f} points/s")
    for reason, count in summary["failures"].items():
        click.echo(f"  failed: {count} × {reason}", err=True)
    for size, r in summary["response"].items():
        click.echo(f"  {size:>6}: {r['count']} queries, response p50 {r['p50'] * 1e3:.1f} ms, "
                   f"p95 {r['p95'] * 1e3:.1f} ms, p99 {r['p99'] * 1e3:.1f} ms")
    line = completion_text(summary.get("completion", {}))
    if line:
        click.echo(f"  {line}")
    engine = summary["engine"]  # what the engine did during the replay (the server's: also for other clients)
    if engine.get("bytes_read") is not None:
        click.echo(f"  engine: {engine['atoms_read']:.0f} atoms, {engine['bytes_read'] / 1e6:.1f} MB read, "
                   f"cache hit ratio {engine['hit_ratio']:.3f}")
    for line in throttling_lines(summary.get("throttling", {}), summary["seconds"], clients):
        click.echo(line)


def throttling_lines(waits: dict[str, float], seconds: float, clients: int) -> list[str]:
    """What the replay's clients waited on the server's limits, and a warning where the
    rate limit, not the server, set the pace."""
    lines = []
    limited = waits.get("paced_seconds", 0.0) + waits.get("rate_limited_seconds", 0.0)
    if waits.get("paced") or waits.get("rate_limited"):
        lines.append(f"  rate limit: {waits.get('paced', 0):.0f} requests held back by the client and "
                     f"{waits.get('rate_limited', 0):.0f} answered 429, {limited:.1f} s waited in all")
    if waits.get("busy"):
        # By what each 503 said was full: the engine's queue is one cause of several, and the
        # connections of this address past the server's cap one that more clients make worse.
        causes = sorted((waits.get("busy_causes") or {}).items(), key=lambda item: -item[1])
        by_cause = "; ".join(f"{count:.0f} × {BUSY_CAUSES.get(cause, cause)}" for cause, count in causes)
        lines.append(f"  server busy: {waits['busy']:.0f} answers of 503 retried, {waits['busy_seconds']:.1f} s waited "
                     "in all" + (f" ({by_cause})" if by_cause else ""))
        if dict(causes).get("client_connections"):
            lines.append("  warning: the server refused connections of this address past its cap for one client "
                         "(128): replay with fewer --clients, and stop other programs of this machine using it")
    # The clients' waits against the time they had: a tenth or more of it is the limit's pace.
    if limited > 0.1 * seconds * clients:
        lines.append("  warning: the token's rate limit set the pace of this replay, so these figures measure the "
                     "limit, not the server. Give a token with a higher limit (`turbdb token NAME "
                     "--requests-per-minute 1e6 >> tokens.toml`, `turbdb serve DB --tokens tokens.toml`, then "
                     "--token or $TURBDB_TOKEN), or replay the database directory itself.")
    return lines
