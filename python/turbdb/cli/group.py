"""The ``turbdb`` command group, on which every command module registers. Errors print one
line saying what to do, never a traceback."""

from __future__ import annotations

import sys

import click

from ..exceptions import TurbdbError


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
