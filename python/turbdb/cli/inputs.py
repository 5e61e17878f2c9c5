"""What commands read from their arguments: a database directory or a server address,
points from a file, and comma-separated option values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


def is_url(db: str) -> bool:
    return db.startswith(("http://", "https://"))


def database(db: str, token: str | None = None, progress: bool | None = None) -> Any:
    """A local database directory, or a turbdb server (``token``, else $TURBDB_TOKEN)."""
    if is_url(db):
        from ..remote import connect

        return connect(db, token, progress=progress)
    from ..database import open as open_db

    return open_db(Path(db))


def read_points(path: Path) -> object:
    import numpy as np

    if not path.is_file():
        raise click.BadParameter(f"{path} is neither a number of particles nor a file", param_hint="--points")
    try:
        points = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None, ndmin=2)
    except ValueError as e:
        raise click.BadParameter(f"cannot read points from {path}: {e}", param_hint="--points") from None
    return points


def int_list(text: str | None, option: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise click.BadParameter(f"expected integers separated by commas, e.g. 64,64,64,3; got {text!r}", param_hint=option) from None


def xyz_floats(text: str | None, option: str) -> tuple[float, float, float] | None:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise click.BadParameter(f"expected three numbers x,y,z; got {text!r}", param_hint=option)
    return values  # type: ignore[return-value]


def periodic_axes(text: str) -> tuple[bool, bool, bool]:
    text = text.lower()
    if text == "none":
        return (False, False, False)
    if not set(text) <= set("xyz"):
        raise click.BadParameter(f"give the periodic axes as letters, e.g. xyz, xz or none; got {text!r}", param_hint="--periodic")
    return tuple(a in text for a in "xyz")  # type: ignore[return-value]


class ByteSize(click.ParamType):
    """A size in bytes with an optional unit: 4GiB, 512MiB, 2G, 1.5e9 or a plain integer."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from ..byte_size import parse_byte_size
        from ..exceptions import InvalidRequestError

        try:
            return parse_byte_size(value, "the size")
        except InvalidRequestError as e:
            self.fail(str(e), param, ctx)
