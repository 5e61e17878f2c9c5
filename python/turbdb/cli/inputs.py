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
    """Points from an .npy array (N, 3), or from a .csv (commas) or .txt (blanks) file of
    x, y, z rows; a header row such as ``x,y,z`` (pandas writes one, and so does
    ``turbdb query --out *.csv``) and ``#`` comments are skipped."""
    import warnings

    import numpy as np

    if not path.is_file():
        raise click.BadParameter(f"{path} is neither a number of particles nor a file", param_hint="--points")
    try:
        if path.suffix == ".npy":
            points = np.load(path)
        else:
            delimiter = "," if path.suffix == ".csv" else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # numpy's "input contained no data": said below
                points = np.loadtxt(path, delimiter=delimiter, ndmin=2, skiprows=_header_rows(path, delimiter))
    except (ValueError, OSError) as e:
        raise click.BadParameter(f"cannot read points from {path}: {e}", param_hint="--points") from None
    if points.size == 0:
        raise click.BadParameter(f"{path} holds no points: one x, y, z row per point", param_hint="--points")
    return points


def _header_rows(path: Path, delimiter: str | None) -> int:
    """1 where the first line that is not blank or a comment is not numbers (a header such
    as ``x,y,z``), with the lines before it; else 0."""
    with path.open(errors="replace") as f:
        for number, line in enumerate(f, start=1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            try:
                [float(v) for v in text.split(delimiter)]
            except ValueError:
                return number
            return 0
    return 0


def output_file(path: Path, endings: tuple[str, ...]) -> Path:
    """``path`` if it ends in one of ``endings``; else an error before any work is done
    (``np.save`` would add ``.npy`` to any other name, and the file would not be where the
    command said it wrote it)."""
    if path.suffix not in endings:
        raise click.BadParameter(f"{path} must end in {' or '.join(endings)}", param_hint="--out")
    return path


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
    if not text or not set(text) <= set("xyz") or len(set(text)) < len(text):
        raise click.BadParameter(f"give the periodic axes as letters, each once, e.g. xyz, xz or none; got {text!r}",
                                 param_hint="--periodic")
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
