"""Stored steps written again, and the caches that must drop them. A rewrite
(``Dataset.write`` over a step that had shards) is counted in the dataset's ``rewrites``
attribute, ``{field: {step: count}}``; whatever cached the old shards — a field store's
mappings, a node engine's atoms — drops a step when it sees its count change. Every
``Dataset`` notices at its next query, since each query looks at the metadata file. An
engine serves every ``Dataset`` opened on its database, so what it has seen is kept per
engine: a ``Dataset`` opened after the rewrite must still make it drop the old atoms."""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from typing import Any

from .exceptions import DamagedMetadataError

#: The dataset attribute holding the counts.
REWRITES_KEY = "rewrites"
#: The dataset attribute naming the stored steps being written again, ``{field: {step:
#: "PID@HOST"}}``: a writer killed halfway leaves such a step mixing two versions of its
#: shards, and nothing else on disk tells (``verify`` names it).
REWRITING_KEY = "rewriting"
#: Ends the record of a rewrite that failed part-way (``PID@HOST interrupted``).
INTERRUPTED_MARK = " interrupted"

#: Per engine, per field directory, the identity of the field it last saw there and that
#: field's counts: one entry a directory, however often its dataset is created again (an
#: entry per identity grew by one per field at every re-creation).
_ENGINE_SEEN: weakref.WeakKeyDictionary[Any, dict[str, tuple[tuple[int, int, int | None], dict[int, int]]]] = \
    weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
# A forked child has none of its parent's engines (database.py makes new ones).
os.register_at_fork(after_in_child=_ENGINE_SEEN.clear)


def rewrite_counts(attrs: dict[str, Any], where: Path) -> dict[str, dict[int, int]]:
    """The counts of ``attrs``, checked: a misshapen attribute is a
    :class:`DamagedMetadataError` naming it."""
    stored = attrs.get(REWRITES_KEY, {})
    try:
        counts = {str(field): {int(step): int(n) for step, n in steps.items()} for field, steps in stored.items()}
    except (AttributeError, TypeError, ValueError):
        raise DamagedMetadataError(f"{where}: the {REWRITES_KEY!r} attribute must map fields to "
                                   f"{{step: count}}, not {stored!r}; the metadata is damaged") from None
    return counts


def count_rewrite(attrs: dict[str, Any], field: str, step: int) -> None:
    """Counts a rewrite of ``step`` of ``field`` in ``attrs`` (under the metadata lock)."""
    steps = attrs.setdefault(REWRITES_KEY, {}).setdefault(field, {})
    steps[str(step)] = int(steps.get(str(step), 0)) + 1


def changed(seen: dict[int, int] | None, now: dict[int, int]) -> list[int]:
    """The steps whose count differs from what was seen."""
    return [step for step, n in now.items() if (seen or {}).get(step) != n]


def engine_catch_up(engine: Any, store: Any, key: tuple[str, tuple[int, int, int | None]], now: dict[int, int]) -> None:
    """Makes ``engine`` drop the steps of the field ``key`` (its directory and identity,
    read through ``store``) rewritten since it last looked. An engine that never looked at
    the directory has cached nothing of it. Where it last looked at another field there
    (the dataset was created again, or a ``Dataset`` opened before that looked since), what
    it saw of this one was forgotten: every step ever rewritten is dropped (none, for a
    dataset just created)."""
    directory, identity = key
    with _LOCK:  # held while it drops them: another Dataset must not take them for dropped sooner
        fields = _ENGINE_SEEN.setdefault(engine, {})
        last = fields.get(directory)
        if last is not None:
            seen = last[1] if last[0] == identity else {}
            for step in changed(seen, now):
                engine.invalidate(store, step)
        fields[directory] = (identity, dict(now))


def rewrites_under_way(attrs: dict[str, Any], where: str) -> dict[str, dict[int, str]]:
    """The steps of each field whose rewrite began and did not finish, with the process
    (``PID@HOST``) that began it; a misshapen attribute is a :class:`DamagedMetadataError`."""
    stored = attrs.get(REWRITING_KEY, {})
    try:
        return {str(field): {int(step): str(who) for step, who in steps.items()} for field, steps in stored.items()}
    except (AttributeError, TypeError, ValueError):
        raise DamagedMetadataError(f"{where}: the {REWRITING_KEY!r} attribute must map fields to {{step: process}}, "
                                   f"not {stored!r}; the metadata is damaged") from None
