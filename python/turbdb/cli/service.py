"""Commands that run things: serve the database over HTTP, run the demo."""

from __future__ import annotations

from pathlib import Path

import click

from ..exceptions import TurbdbError
from .group import main
from .inputs import ByteSize, ExpandedPath
from .wording import reworded


def _checked(ctx: click.Context, value: str | None, check) -> str | None:
    """``value`` if ``check`` takes it; else a usage error (exit 2) with its message, as for
    any malformed option (it was found inside serve, exit 1)."""
    if value is not None:
        try:
            check(value)
        except TurbdbError as e:
            raise click.BadParameter(reworded(str(e), ctx.command)) from None
    return value


def _proxies(value: str) -> None:
    from ..service.proxies import TrustedProxies

    TrustedProxies(value)


def _root(value: str) -> None:
    from ..service.server import _root_path

    _root_path(value)


@main.command()
@click.argument("db", type=ExpandedPath(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: any free one; the address is printed).")
@click.option("--tokens", "tokens_file", type=ExpandedPath(dir_okay=False, exists=True, path_type=Path), default=None,
              help="TOML file of tokens and their limits (see docs/service.md; turbdb token makes entries). "
                   "Without it only anonymous use, with JHTDB's limit of 4096 points per request.")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Engine calls run at once, in threads of this one process (each call also uses every core). "
                   "Default: the number of cores.")
@click.option("--max-inflight-points", type=click.IntRange(1), default=None,
              help="Points admitted at once over all requests (memory bound); others wait their turn. Default 4000000.")
@click.option("--cutout-chunk-bytes", type=click.IntRange(1024), default=None, hidden=True,
              help="Size of the slabs cutouts are streamed in (default 16 MiB).")
@click.option("--scheduler", type=click.Choice(["noshare", "liferaft", "jaws"]), default=None,
              help="Run point queries through one node engine scheduled this way (jaws: shared batches; "
                   "noshare: each alone; liferaft: one atom at a time by workload). Default jaws when any other "
                   "engine option is given; without any engine option each request runs alone.")
@click.option("--cache-bytes", type=ByteSize(), default=None, metavar="SIZE",
              help="Bytes of decoded atoms the node engine keeps, e.g. 2GiB or 500MB (default a quarter of the memory "
                   "the server may use — RAM, or its container's limit — at most 4 GiB).")
@click.option("--cache-policy", type=click.Choice(["lru", "lruk", "slru", "urc"]), default=None,
              help="The atom cache's replacement policy (default urc: ranked by pending work).")
@click.option("--io", type=click.Choice(["buffered", "direct"]), default=None,
              help="direct: the engine reads past the OS page cache, so its cache is the only one (default "
                   "buffered, through the page cache).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True, help="Server log level.")
@click.option("--access-log", is_flag=True, help="Log one line per request (whatever --log-level says).")
@click.option("--allow-origin", "allow_origins", multiple=True, metavar="ORIGIN",
              help="Let scripts of the web page at ORIGIN (https://host[:port]; * for any) call the API from a "
                   "browser (CORS). Repeatable. Default: none.")
@click.option("--cluster", "cluster_address", default=None,
              help="Run the queries on the Dask cluster at tcp://HOST:PORT serving DB (turbdb cluster up); "
                   "GET /v1/cluster reports its health.")
@click.option("--graceful-seconds", type=click.FloatRange(0, 86400, max_open=True), default=30.0, show_default=True,
              help="How long a shutdown (Ctrl-C, SIGTERM, SIGHUP) waits for the requests in progress before closing "
                   "their connections; requests whose body is still arriving are answered 503 at once.")
@click.option("--forwarded-allow-ips", default=None, metavar="IPS", callback=lambda ctx, p, v: _checked(ctx, v, _proxies),
              help="Reverse proxies to trust: comma-separated addresses or networks (127.0.0.1,10.0.0.0/8; * for any "
                   "peer). A request from one counts as coming from the client its X-Forwarded-For names (rate "
                   "limits, connection caps, the log, jobs), and its X-Forwarded-Prefix, when sent, is its root "
                   "path (in place of --root-path). Default: none; those headers are ignored.")
@click.option("--root-path", default="", metavar="PATH", callback=lambda ctx, p, v: _checked(ctx, v, _root),
              help="The path a reverse proxy serves the server under, such as /turbdb (the proxy strips it): pages, "
                   "links and /docs then name it.")
@click.option("--body-idle-seconds", type=click.FloatRange(0.5, 3600), default=10.0, show_default=True,
              help="How long a request body may stop arriving while the server reads it; past that, or once it "
                   "averages under 16 KiB/s after that long, the request is answered 408, its connection closed "
                   "and its share of --max-inflight-points released.")
@click.option("--send-idle-seconds", type=click.FloatRange(0.5, 3600), default=30.0, show_default=True,
              help="How long an answer may make no progress because its client reads nothing; past that, its "
                   "connection is closed and its work dropped.")
def serve(db: Path, host: str, port: int, tokens_file: Path | None, workers: int | None, max_inflight_points: int | None,
          cutout_chunk_bytes: int | None, scheduler: str | None, cache_bytes: int | None, cache_policy: str | None,
          io: str | None, log_level: str, access_log: bool, allow_origins: tuple[str, ...],
          cluster_address: str | None, graceful_seconds: float, forwarded_allow_ips: str | None,
          root_path: str, body_idle_seconds: float, send_idle_seconds: float) -> None:
    """Serve the datasets in DB over HTTP until interrupted (Ctrl-C or SIGTERM let the
    requests in progress finish, for up to --graceful-seconds).

    The API is /v1/datasets (metadata), /v1/datasets/NAME/query, /cutout and /track (JSON or
    .npy), /v1/limits (what a token may do), JHTDB's /turbulence-svc/values,
    /turbulence-svc/cutout/api/local and /turbulence-svc/metadata (givernylocal runs
    against them), /healthz, /metrics, /v1/engine (the node engine's counters, with
    --scheduler etc.) and, with --cluster, /v1/cluster; / says what it is, and the interactive documentation at /docs works
    offline. Use it from Python with turbdb.connect(URL, token) (which splits work into
    batches within the token's limits) or from the shell with turbdb query URL NAME ….
    Make tokens with turbdb token.
    """
    from ..service import serve as run_server

    run_server(db, host=host, port=port, tokens=str(tokens_file) if tokens_file else None, workers=workers,
               max_points_in_flight=max_inflight_points, cutout_chunk_bytes=cutout_chunk_bytes, log_level=log_level,
               access_log=access_log, cluster=cluster_address, allow_origins=allow_origins,
               engine={"scheduler": scheduler, "cache_bytes": cache_bytes, "cache_policy": cache_policy, "io": io},
               graceful_seconds=graceful_seconds, forwarded_allow_ips=forwarded_allow_ips, root_path=root_path,
               body_idle_seconds=body_idle_seconds, send_idle_seconds=send_idle_seconds)


@main.command()
@click.argument("db", type=ExpandedPath(file_okay=False, path_type=Path), default="data")
@click.option("--name", default="isotropic64", show_default=True, help="Dataset to demonstrate on.")
@click.option("--out", type=ExpandedPath(file_okay=False, path_type=Path), default=None, help="Where to write the plots (default DB/NAME-demo).")
def demo(db: Path, name: str, out: Path | None) -> None:
    """Show what the dataset holds: its metadata, physical checks computed from the stored
    data, particles tracked forward and back, and plots of a vorticity slice, the energy
    spectrum, the trajectories and the R–Q joint PDF.

    DB defaults to data, where make demo simulates the default dataset."""
    from ..demo import run_demo

    run_demo(db, name, out)
