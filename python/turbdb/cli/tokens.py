"""``turbdb token``: make a token for a server's tokens file (a fresh random secret and its
limits, as a TOML entry to append)."""

from __future__ import annotations

import click

from .group import main
from .inputs import FiniteFloat


@main.command()
@click.argument("name")
@click.option("--max-points", type=click.IntRange(1), default=10_000_000, show_default=True,
              help="Points (query points, cutout nodes, particles) per request.")
@click.option("--requests-per-minute", type=FiniteFloat(min=0, min_open=True), default=1200, show_default=True,
              help="Requests per minute (a minute's worth may come at once).")
@click.option("--datasets", default="*", show_default=True, help="Datasets it may read, comma-separated, or * for all.")
@click.option("--hashed", is_flag=True,
              help="Write only the secret's SHA-256 into the entry (the file then holds no secret) and print the "
                   "secret itself on stderr.")
def token(name: str, max_points: int, requests_per_minute: float, datasets: str, hashed: bool) -> None:
    """Print a new token for user NAME as a [[token]] entry of a tokens file.

    \b
    turbdb token alice >> tokens.toml          # then: turbdb serve data --tokens tokens.toml
    turbdb token bob --hashed >> tokens.toml   # the secret goes to the terminal only

    Give the secret to the user; they pass it as turbdb.connect(url, token=…), or
    Authorization: Bearer <secret>, or authToken=<secret> (or token=<secret>) on the JHTDB endpoints.
    """
    import hashlib
    import json
    import secrets
    import sys

    from ..service.tokens import rate_text

    if not name.strip():  # an entry named "" was written, and served
        raise click.BadParameter("give the token's user a name (it is shown in the server's log and limits)",
                                 param_hint="NAME")
    if name == "anonymous":
        raise click.BadParameter("'anonymous' names use without a token; set its limits under [anonymous] in the "
                                 "tokens file, and give this token another name", param_hint="NAME")
    if datasets.strip() != "*" and not [d for d in datasets.split(",") if d.strip()]:
        raise click.BadParameter(f"{datasets!r} names no dataset: the token could read nothing; give names, or '*'",
                                 param_hint="--datasets")
    secret = secrets.token_urlsafe(24)
    names = ["*"] if datasets.strip() == "*" else [d.strip() for d in datasets.split(",") if d.strip()]
    line = (f'sha256 = "{hashlib.sha256(secret.encode()).hexdigest()}"' if hashed else f'token = "{secret}"')
    click.echo(f"\n[[token]]\n{line}\nname = {json.dumps(name)}\nmax_points = {max_points}\n"
               f"requests_per_minute = {rate_text(requests_per_minute)}\ndatasets = {json.dumps(names)}")
    if hashed:
        if sys.stderr.isatty():
            click.echo(f"the secret of token {name!r} (give it to them; the entry keeps only its hash): {secret}", err=True)
        else:  # 2> secret.txt: the file holds the secret alone, ready for TURBDB_TOKEN=$(cat secret.txt)
            click.echo(secret, err=True)
