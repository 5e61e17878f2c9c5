"""What an input format module declares about itself (its ``FORMAT``): how to recognise its
files, how to open them, and the options it takes. The registry (formats.py), open_source
and ``turbdb ingest`` read these declarations, so adding a format edits none of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turbdb.ingest.source import Source

__all__ = ["Format", "Option"]


def _unchanged(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Option:
    """A keyword of open_source and, spelt with dashes, an option of ``turbdb ingest``.

    ``parse`` is the option's type: it turns what a user gave (a Python value, or the
    command line's string) into what the reader takes, or raises InvalidRequestError. It must
    accept its own output, as the CLI parses a value before open_source does. A format that
    shares an option with another (``variables``) declares the very same Option.
    """

    name: str
    help: str
    parse: Callable[[Any], Any] = _unchanged
    default: Any = None
    choices: tuple[str, ...] | None = None  # the command line offers only these

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Format:
    """An input format: ``open(path, axes=..., **options)`` returns its Source, called with
    every option in ``options``, parsed, or at its default when not given."""

    name: str  # what format= takes, e.g. "hdf5"
    label: str  # how messages and --help name it, e.g. "HDF5"
    open: Callable[..., Source]
    options: tuple[Option, ...] = ()
    aliases: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()  # lower case, with the dot
    signature: Callable[[bytes], bool] | None = None  # recognises a file by its first 8 bytes
    directory: bool = False  # a directory input is of this format
    fallback: bool = False  # a file nothing recognises is read as this format
