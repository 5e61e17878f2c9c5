"""Which directories of a database hold datasets, looked at with one ``stat`` each: a
directory's ``zarr.json`` is read again only when its ``stat`` changed since the last look
(a server's first ``GET /v1/datasets`` of 500 datasets read every ``zarr.json`` once per
dataset, 250 000 reads, 20-47 s on its event loop). A directory this account may not enter
is listed (opening it says so); one whose name is no dataset name is listed apart."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from .exceptions import FormatError, UnknownNameError
from .file_snapshots import StatKey, keys_settled, stat_key
from .info import is_plain_name
from .permissions import permission_denied, unreadable
from .zarr_meta import ZARR_JSON, read_json

#: Names an "available: …" list shows before it says how many more there are: a 404 on a
#: server of 500 datasets carried all their names (11 KB).
SHOWN_NAMES = 20


@dataclasses.dataclass(frozen=True)
class Listing:
    #: The datasets, sorted; those this account may not read among them (opening one says so).
    names: tuple[str, ...]
    #: Directories holding a dataset under a name that is no dataset name ('run 2', 'café'),
    #: sorted: neither opened nor served (see :func:`misnamed_error`).
    misnamed: tuple[str, ...]


class DatabaseListing:
    """The datasets of one database directory, listed as often as asked: each look costs a
    ``stat`` a directory, and reads only the ``zarr.json`` files that changed."""

    def __init__(self, path: Path):
        self.path = path
        #: Per directory name: its zarr.json's stat, when that was taken, and whether it holds a dataset.
        self._seen: dict[str, tuple[StatKey, float, bool]] = {}

    def look(self) -> Listing:
        # Hidden names are never datasets' (they start with a letter): a dataset being
        # replaced, or what a replacement killed halfway left (see create_dataset).
        try:
            with os.scandir(self.path) as found:
                entries = [entry for entry in found if not entry.name.startswith(".")]
        except PermissionError:
            raise unreadable(self.path, what="database") from None
        seen: dict[str, tuple[StatKey, float, bool]] = {}
        names, misnamed = [], []
        for entry in entries:
            if self._holds_dataset(entry, seen):
                (names if is_plain_name(entry.name) else misnamed).append(entry.name)
        self._seen = seen  # replaced whole: looks from other threads never see it half made
        return Listing(tuple(sorted(names)), tuple(sorted(misnamed)))

    def _holds_dataset(self, entry: os.DirEntry[str], seen: dict[str, tuple[StatKey, float, bool]]) -> bool:
        try:
            if not entry.is_dir():
                return False
            looked_at = time.time()  # before the stat, as file_snapshots takes it
            st = os.stat(os.path.join(entry.path, ZARR_JSON))
        except OSError as e:
            # A directory this account may not enter (Python 3.11's is_file raised here and
            # took the whole database down): listed, so that opening it says so, unless its
            # name alone says it is no dataset.
            return permission_denied(e) and is_plain_name(entry.name)
        if not stat.S_ISREG(st.st_mode):
            return False
        key = stat_key(st)
        known = self._seen.get(entry.name)
        if known is not None and known[0] == key and keys_settled(key, known[1]):
            seen[entry.name] = known
            return known[2]
        holds = holds_dataset_metadata(Path(entry.path))
        seen[entry.name] = (key, looked_at, holds)
        return holds


def holds_dataset_metadata(path: Path) -> bool:
    """Whether the directory ``path`` holds a group with turbdb attributes; one whose
    metadata is damaged, or that this account may not read, counts too, so that opening it
    says so instead of the dataset silently vanishing ("no datasets yet")."""
    try:
        attributes = read_json(path / ZARR_JSON).get("attributes")
    except FormatError:
        return True
    except OSError as e:
        return permission_denied(e)
    return isinstance(attributes, dict) and "turbdb" in attributes


def misnamed_error(name: str) -> UnknownNameError:
    """The error of a dataset whose directory was renamed to what is no dataset name. It is
    refused everywhere rather than served: such a name cannot be created, named in a tokens
    file or sent in a URL unescaped, and two spellings of one accented name (NFC, NFD) are
    two directories that look the same, one of which a client would reach by chance."""
    return UnknownNameError(f"directory name {name!r} is not a valid dataset name (a letter followed by up to 63 "
                            f"letters, digits, '_', '-' or '.'), so turbdb neither opens nor serves it: rename it, "
                            f"e.g. to {plain_name_like(name)!r}")


def plain_name_like(name: str) -> str:
    """A dataset name close to ``name``: accents dropped, other characters made '_'."""
    ascii_only = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    plain = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]+", "_", ascii_only)).strip("_.-")
    if not plain[:1].isalpha():
        plain = "dataset_" + plain
    return plain[:64].rstrip(".") or "dataset"


def same_name(a: str, b: str) -> bool:
    """Whether two names are spelt alike, in any Unicode normal form."""
    return unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b)


def in_brief(names: Sequence[str], everything: str = "") -> str:
    """``names`` for an "available: …" list: the first :data:`SHOWN_NAMES`, then how many
    more (and ``everything``: where the whole list is), or "none"."""
    if not names:
        return "none"
    if len(names) <= SHOWN_NAMES:
        return ", ".join(names)
    where = f": {everything}" if everything else ""
    return f"{', '.join(names[:SHOWN_NAMES])} and {len(names) - SHOWN_NAMES} more ({len(names)} in all{where})"
