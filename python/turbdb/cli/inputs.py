"""What commands read from their arguments: a database directory or a server address,
points from a file, and comma-separated option values."""

from __future__ import annotations

import math
from pathlib import Path
from collections.abc import Iterator
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
    delimiter, skip = ("," if path.suffix == ".csv" else None), 0
    try:
        if path.suffix == ".npy":
            points = np.load(path)
        else:
            skip = _header_rows(path, delimiter)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # numpy's "input contained no data": said below
                try:
                    points = np.loadtxt(path, delimiter=delimiter, ndmin=2, skiprows=skip, encoding="utf-8-sig",
                                        quotechar='"')
                except ValueError as e:
                    raise ValueError(_bad_line(path, delimiter, skip) or str(e)) from None
    except (ValueError, OSError) as e:
        raise click.BadParameter(f"cannot read points from {path}: {e}", param_hint="--points") from None
    if points.size == 0:
        header = next(((n, cells) for n, cells in _rows(path, delimiter) if n == skip), None) if skip else None
        taken = (f" (line {header[0]}, {(delimiter or ' ').join(header[1])!r}, is not numbers: taken for a header)"
                 if header else "")
        form = ("an (N, 3) array of x, y, z" if path.suffix == ".npy" else
                f"one x, y, z row per point, separated by {'commas' if delimiter else 'blanks'}")
        raise click.BadParameter(f"{path} holds no points{taken}: {form}", param_hint="--points")
    return points


def _header_rows(path: Path, delimiter: str | None) -> int:
    """The lines before the data: up to the first line that is not blank or a comment, if
    none of its cells is a number (a header such as ``x,y,z``); else 0. A row with a typo
    (``1,2,3e``) is not a header: skipped as one, it lost a point without a word."""
    for number, cells in _rows(path, delimiter):
        return 0 if any(_is_number(c) for c in cells) else number
    return 0


def _bad_line(path: Path, delimiter: str | None, skip: int) -> str | None:
    """Which line of a points file cannot be read, and why (numpy counts rows from 0 after
    the skipped ones, which points at the wrong line)."""
    for number, cells in _rows(path, delimiter):
        if number <= skip:
            continue
        if len(cells) != 3:
            return f"line {number} has {len(cells)} value(s), not 3 (x, y, z): {(delimiter or ' ').join(cells)!r}"
        if not all(_is_number(c) for c in cells):
            return f"line {number} holds something that is not a number: {(delimiter or ' ').join(cells)!r}"
    return None


def _rows(path: Path, delimiter: str | None) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of the lines that are not blank or comments; quotes and a
    byte-order mark (as spreadsheets write) are taken off."""
    with path.open(encoding="utf-8-sig", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            text = line.split("#", 1)[0].strip()
            if text:
                yield number, [c.strip().strip('"') for c in text.split(delimiter)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


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


class FiniteFloat(click.FloatRange):
    """A float in a range that is a number: click's FloatRange lets nan through (every
    comparison with it is false), and inf unless ``allow_inf``."""

    def __init__(self, *args: Any, allow_inf: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allow_inf = allow_inf

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number) or (math.isinf(number) and not self.allow_inf):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


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
