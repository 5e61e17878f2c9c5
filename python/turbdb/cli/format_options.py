"""The options of ``turbdb ingest`` that belong to input formats (--dtype, --variables, …),
made from what each format declares, so a new format brings its options to the CLI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..exceptions import InvalidRequestError
from ..ingest.format_spec import Option
from ..ingest.formats import names, option_uses


class _Parsed(click.ParamType):
    """Checks a value with the option's own parser, so a bad one is a usage error."""

    name = "text"  # the metavar --help shows, as for a plain string option

    def __init__(self, option: Option) -> None:
        self.option = option

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self.option.parse(value)
        except InvalidRequestError as e:
            self.fail(str(e), param, ctx)


def format_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --format and one flag per format option; the command receives them as
    ``fmt`` and by option name."""
    for use in reversed(option_uses()):
        option = use.option
        kind = click.Choice(option.choices) if option.choices else _Parsed(option)
        command = click.option(
            option.flag, option.name, type=kind, default=option.default,
            show_default=option.default is not None, help=use.help,
        )(command)
    return click.option(
        "--format", "fmt", type=click.Choice(names()), default=None,
        help="Input format (default: from the file name).",
    )(command)
