"""What commands read from their arguments: a database directory or a server address,
points from a file or a pipe, and comma-separated option values."""

from __future__ import annotations

import io
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

#: What --points reads, named by every message that refuses something else.
POINT_FORMATS = ("an .npy array (N, 3), a .json list of [x, y, z], or a text file (.csv, .txt) of x, y, z rows "
                 "separated by commas, semicolons, tabs or blanks")

#: The first bytes of formats --points does not read, and what each is.
_NOT_POINTS = {b"PK\x03\x04": "an .npz (zip) archive", b"\x89HDF": "an HDF5 file", b"CDF": "a netCDF-3 file"}

token_option = click.option("--token", default=None, envvar="TURBDB_TOKEN",
                            help="Token for a server (default: $TURBDB_TOKEN).")


class ExpandedPath(click.Path):
    """click.Path that expands ``~``: the shell leaves ``--out=~/q.csv`` and quoted paths
    alone, and a directory named ``~`` was made in the working directory instead."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = os.path.expanduser(value)
        return super().convert(value, param, ctx)


def option_given(name: str) -> bool:
    """Whether the running command's option ``name`` was given (on the command line, or by
    its environment variable) rather than left at its default."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def is_url(db: str) -> bool:
    return db.startswith(("http://", "https://"))


def local_path(db: str | os.PathLike[str]) -> Path:
    """A database (or output) path as given, ``~`` expanded."""
    return Path(db).expanduser()


def database(db: str, token: str | None = None, progress: bool | None = None) -> Any:
    """A local database directory, or a turbdb server (``token``, else $TURBDB_TOKEN)."""
    if is_url(db):
        from ..remote import connect

        remote = connect(db, token, progress=progress)
        context = click.get_current_context(silent=True)
        if context is not None:  # its connections closed with the command (run in-process, they stayed open)
            context.call_on_close(remote.close)
        return remote
    from ..database import open as open_db

    return open_db(local_path(db))


#: The longest file name most file systems take (NAME_MAX), in bytes.
_NAME_MAX = 255
#: What a dataset name may be (turbdb.info.check_name).
_NAME_RULE = "use a letter followed by up to 63 letters, digits, '_', '-' or '.'"


def existing_dataset_name(ctx: click.Context, param: click.Parameter, name: str | None) -> str | None:
    """A NAME argument naming a dataset to read: refused at once if no directory can have
    that name ('', '.', '..', a '/', longer than the file system takes), where "File name
    too long" came from deep in the look-up. Other names are looked up as they are: a
    dataset directory renamed by hand to no dataset name is named as such there (rename it)."""
    if name is None:
        return None
    if name in ("", ".", "..") or "/" in name or "\0" in name or len(name.encode(errors="replace")) > _NAME_MAX:
        raise click.BadParameter(f"{_shown(name)} cannot name a dataset: {_NAME_RULE}", ctx=ctx, param=param)
    return name


def new_dataset_name(ctx: click.Context, param: click.Parameter, name: str | None) -> str | None:
    """A --name of a dataset to create, checked before anything else: a bad one was
    reported as "already exists" (an empty name is the database itself)."""
    from ..exceptions import InvalidRequestError
    from ..info import check_name

    if name is None:  # not given: click says so
        return None
    if not name or len(name) > 64:  # say the rule without echoing a name of any length
        raise click.BadParameter(f"{_shown(name)} is not allowed as a dataset name: {_NAME_RULE}", ctx=ctx, param=param)
    try:
        return check_name("dataset", name)
    except InvalidRequestError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def _shown(name: str) -> str:
    """A name in a message: quoted, and cut short if long."""
    return repr(name) if len(name) <= 40 else f"{name[:20]!r}… ({len(name)} characters)"


def read_points(spec: str | os.PathLike[str], *, or_count: bool = False) -> Any:
    """Points from a file, ``-`` (stdin) or a pipe (``<(…)``, /dev/stdin): an .npy array
    (N, 3), a .json list of [x, y, z], or text rows of x, y, z separated by commas,
    semicolons, tabs or blanks (told from the rows themselves, whatever the file's ending);
    a header row such as ``x,y,z`` (pandas writes one, and so does ``turbdb query --out
    *.csv``) and ``#`` comments are skipped. ``or_count``: the option also takes a number of
    particles, which the message for a missing file names."""
    if str(spec) == "-":
        path, content = Path("<stdin>"), sys.stdin.buffer.read()
    else:
        path = Path(spec).expanduser()
        if not path.exists():
            what = "neither a number of particles nor a file" if or_count else "not a file"
            raise click.BadParameter(f"{spec} is {what}; points come from {POINT_FORMATS}", param_hint="--points")
        if path.is_dir():
            raise click.BadParameter(f"{path} is a directory; give a file of points", param_hint="--points")
        if path.is_file() and _head(path).startswith(b"\x93NUMPY"):  # read by numpy itself: no copy in memory
            return _npy(path, path)
        try:  # whole: a pipe can be read only once
            content = path.read_bytes()
        except OSError as e:
            raise click.BadParameter(f"cannot read points from {path}: {e.strerror or e}", param_hint="--points") from None
    if content.startswith(b"\x93NUMPY"):
        return _npy(io.BytesIO(content), path)
    text = _text(content, path)
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("[", "{")):
        return _json_points(text, path)
    return _text_points(text, path)


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(8)
    except OSError:
        return b""


def _npy(source: Any, path: Path) -> Any:
    import numpy as np

    try:
        return np.load(source, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise click.BadParameter(f"cannot read points from {path}: {e}", param_hint="--points") from None


def _text(content: bytes, path: Path) -> str:
    """``content`` as text, or a one-line refusal of a binary file (its bytes filled the
    message) naming the formats that are read."""
    what = next((kind for magic, kind in _NOT_POINTS.items() if content.startswith(magic)), None)
    if what is None and path.suffix.lower() in (".npz", ".h5", ".hdf5", ".nc", ".pkl", ".pickle"):
        what = f"a {path.suffix.lower()} file"
    if what is None:
        try:
            text = content.decode("utf-8-sig")
        except UnicodeDecodeError:
            what = "a binary file"
        else:
            if "\0" not in text:
                return text
            what = "a binary file"
    raise click.BadParameter(f"{path} is {what}, not points; --points reads {POINT_FORMATS}", param_hint="--points")


def _json_points(text: str, path: Path) -> Any:
    """Points from a JSON list of [x, y, z] (what ``json.dump(points.tolist())`` writes)."""
    import numpy as np

    form = "a .json points file holds a list of [x, y, z]"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"{path} is not valid JSON ({e.msg}, line {e.lineno}): {form}",
                                 param_hint="--points") from None
    if not isinstance(data, list):
        raise click.BadParameter(f"{path} holds a JSON {type(data).__name__}: {form}", param_hint="--points")
    for i, point in enumerate(data):
        if not (isinstance(point, list) and len(point) == 3
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in point)):
            shown = json.dumps(point)
            shown = shown if len(shown) <= 40 else shown[:40] + "…"
            raise click.BadParameter(f"item {i} of {path} is {shown}, not [x, y, z]: {form}", param_hint="--points")
    if not data:
        raise click.BadParameter(f"{path} holds no points: {form}", param_hint="--points")
    return np.array(data, dtype=np.float64)


#: Delimiters of text points, as the messages name them (None: blanks or tabs).
_SEPARATED_BY = {",": "commas", ";": "semicolons", None: "blanks or tabs"}


def _text_points(text: str, path: Path) -> Any:
    import warnings

    import numpy as np

    lines = text.splitlines()
    delimiter = _delimiter(lines)
    skip = _header_rows(lines, delimiter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's "input contained no data": said below
        try:
            points = np.loadtxt(io.StringIO(text), delimiter=delimiter, ndmin=2, skiprows=skip, quotechar='"')
        except ValueError as e:
            bad = _bad_line(lines, delimiter, skip) or str(e)
            raise click.BadParameter(f"cannot read points from {path}: {bad}", param_hint="--points") from None
    if points.size == 0:
        header = next(((n, cells) for n, cells in _rows(lines, delimiter) if n == skip), None) if skip else None
        taken = (f" (line {header[0]}, {(delimiter or ' ').join(header[1])!r}, is not numbers: taken for a header)"
                 if header else "")
        raise click.BadParameter(f"{path} holds no points{taken}: {POINT_FORMATS}", param_hint="--points")
    return points


def _delimiter(lines: list[str]) -> str | None:
    """The delimiter of text points, from the rows (the second, which is data even below a
    header, else the first): semicolons (spreadsheets with decimal commas write them),
    else commas, else blanks or tabs."""
    sample = [text for _, text in _texts(lines)][:2]
    row = sample[-1] if sample else ""
    return ";" if ";" in row else "," if "," in row else None


def _header_rows(lines: list[str], delimiter: str | None) -> int:
    """The lines before the data: up to the first line that is not blank or a comment, if
    none of its cells is a number (a header such as ``x,y,z``); else 0. A row with a typo
    (``1,2,3e``) is not a header: skipped as one, it lost a point without a word."""
    for number, cells in _rows(lines, delimiter):
        # Split on any separator too: "1,2,3" above blank-separated rows is a row of
        # numbers written differently, never a header (it was skipped as one, a point lost).
        words = [w for c in cells for w in re.split(r"[,;\s]+", c.strip("\"'")) if w]
        return 0 if any(_is_number(c) for c in (*cells, *words)) else number
    return 0


def _bad_line(lines: list[str], delimiter: str | None, skip: int) -> str | None:
    """Which line of a points file cannot be read, and why (numpy counts rows from 0 after
    the skipped ones, which points at the wrong line)."""
    for number, cells in _rows(lines, delimiter):
        if number <= skip:
            continue
        if len(cells) != 3:
            return f"line {number} has {len(cells)} value(s), not 3 (x, y, z): {(delimiter or ' ').join(cells)!r}"
        if not all(_is_number(c) for c in cells):
            return f"line {number} holds something that is not a number: {(delimiter or ' ').join(cells)!r}"
    return None


def _texts(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines that are not blank or comments."""
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if text:
            yield number, text


def _rows(lines: Iterable[str], delimiter: str | None) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of the lines that are not blank or comments; quotes (as
    spreadsheets write) are taken off."""
    for number, text in _texts(lines):
        yield number, [c.strip().strip('"') for c in text.split(delimiter)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def output_file(path: Path, endings: tuple[str, ...]) -> Path:
    """``path`` if it ends in one of ``endings`` (in any case: .NPY is .npy); else an error
    before any work is done."""
    if path.suffix.lower() not in endings:
        raise click.BadParameter(f"{path} must end in {' or '.join(endings)}", param_hint="--out")
    from ..output_files import check_writable

    check_writable(path)  # a folder this account may not write in: before the work, not after
    return path


def int_list(text: str | None, option: str, example: str = "64,64,64,3") -> tuple[int, ...] | None:
    """Integers separated by commas; ``example`` shows the option's own form in the message."""
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise click.BadParameter(f"expected integers separated by commas, e.g. {example}; got {text!r}",
                                 param_hint=option) from None


def xyz_floats(text: str | None, option: str, positive: bool = False) -> tuple[float, float, float] | None:
    """``x,y,z`` of ``option``: three finite numbers (``positive``: above 0), else a usage
    error naming the option (a NaN origin or a negative spacing was a failure of the
    work, exit 1, named by the Python API's parameter)."""
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise click.BadParameter(f"expected three numbers x,y,z; got {text!r}", param_hint=option)
    if not all(math.isfinite(v) for v in values):
        raise click.BadParameter(f"expected three finite numbers x,y,z; got {text!r}", param_hint=option)
    if positive and min(values) <= 0:
        raise click.BadParameter(f"expected three positive numbers x,y,z; got {text!r}", param_hint=option)
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
    comparison with it is false), and inf unless ``allow_inf``. Without bounds, any finite
    number (--help shows FLOAT, not a range)."""

    def __init__(self, *args: Any, allow_inf: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allow_inf = allow_inf
        if self.min is None and self.max is None:
            self.name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number) or (math.isinf(number) and not self.allow_inf):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()


class Times(click.ParamType):
    """One finite time, or several separated by commas (a time series): a float, or a list
    of floats when a comma is given."""

    name = "t[,t…]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        texts = value.split(",")
        numbers = []
        for text in texts:
            try:
                number = float(text)
            except ValueError:
                number = math.nan if text.strip() else None
            if number is None or not math.isfinite(number):
                if len(texts) == 1:
                    self.fail(f"{value!r} is not a finite time; give one, or several separated by commas "
                              "(e.g. 0,0.01,0.02)", param, ctx)
                shown = "an empty item" if number is None else f"{text.strip()!r}, not a finite time"
                self.fail(f"{value!r} holds {shown}; give times separated by commas (e.g. 0,0.01,0.02)", param, ctx)
            numbers.append(number)
        return numbers if len(texts) > 1 else numbers[0]


class Named(click.ParamType):
    """A name the API takes (a method, an operator, a temporal method), in any case or as an
    alias, given as its canonical name; an unknown one is a usage error listing the names."""

    def __init__(self, kind: str, valid: tuple[str, ...], aliases: dict[str, str]) -> None:
        self.kind, self.valid, self.aliases = kind, valid, aliases
        self.name = "text"  # the metavar --help shows, as for a plain string option

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from ..arguments import choice
        from ..exceptions import UnknownOptionError

        try:
            return choice(self.kind, value, self.valid, self.aliases)
        except UnknownOptionError as e:
            self.fail(str(e), param, ctx)


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
