"""What a placement laid out: per dataset its grid, times, fields and their ids, rewrite counts (see
:mod:`turbdb.rewrites`) and written steps, as the catalogue records them. Node-local
copies are made once; a database that grew or was written again since (a step appended,
a step rewritten, a dataset added) leaves them stale, and a worker reading them would
answer from the old data — so ``turbdb cluster up`` lays the database out again, and the
mediator refuses a dataset whose copies no longer match (:func:`check_current`)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from ..database import Database
from ..dataset import Dataset, _stat_key
from ..exceptions import ServiceError, TurbdbError
from ..rewrites import rewrite_counts
from ..zarr_meta import FIELD_ID_ATTRIBUTE, ZARR_JSON, read_json


def describe(dataset: Dataset, *, steps: bool = True) -> dict[str, Any]:
    """What ``dataset`` holds now, as JSON. ``steps``: also which steps each field has
    written (a scan of its shard directories; left out where a query asks, per query).
    Its times are summed up (count, first, last, a digest), so that the catalogue stays
    small however many there are; each field's random id tells a dataset created again
    with the same sizes from the one placed."""
    info = dataset.metadata
    counts = rewrite_counts(dataset._attrs(), dataset.path)
    times = np.asarray(info.times, dtype=np.float64)
    out: dict[str, Any] = {
        "grid": list(info.grid), "partition": info.partition,
        "times": {"count": len(times), "first": float(times[0]) if len(times) else None,
                  "last": float(times[-1]) if len(times) else None,
                  "sha256": hashlib.sha256(times.tobytes()).hexdigest()},
        "fields": {name: f.ncomp for name, f in info.fields.items()},
        "ids": {name: _field_id(dataset.path / name) for name in info.fields},
        "rewrites": {f: {str(s): n for s, n in sorted(c.items())} for f, c in sorted(counts.items()) if c}}
    if steps:
        out["steps"] = {name: list(f.steps_present) for name, f in dataset.info.fields.items()}
    return out


def _field_id(field: Path) -> str | None:
    """The field's random id (``turbdb_field_id``: new for every field made), or None for a
    field made before fields had one."""
    try:
        return read_json(field / ZARR_JSON).get("attributes", {}).get(FIELD_ID_ATTRIBUTE)
    except TurbdbError:
        return None


def record(database: Database) -> dict[str, dict[str, Any]]:
    """What every dataset of ``database`` holds now (for the catalogue, at placement)."""
    return {name: describe(database[name]) for name in database.datasets}


def differences(recorded: dict[str, dict[str, Any]] | None, database: Database) -> list[str]:
    """How ``database`` differs from what was placed (empty if it does not): the datasets
    added, removed or changed since, in words."""
    if recorded is None:
        return ["the catalogue does not record what was placed (made by an older turbdb)"]
    now = set(database.datasets)
    out = [f"dataset {n!r} was added" for n in sorted(now - set(recorded))]
    out += [f"dataset {n!r} was removed" for n in sorted(set(recorded) - now)]
    for name in sorted(now & set(recorded)):
        change = _change(recorded[name], describe(database[name]))
        if change:
            out.append(f"dataset {name!r}: {change}")
    return out


#: Per dataset directory, the metadata files' stat keys and the record it was last found
#: current with: a query asks again only when a file was replaced (a rewrite, a step
#: appended, the dataset created again) or the catalogue was reloaded.
_verified: dict[str, tuple[Any, ...]] = {}


def check_current(recorded: dict[str, dict[str, Any]] | None, dataset: Dataset, database: str) -> None:
    """Refuses (503) to read ``dataset`` from node-local copies placed before it changed:
    its workers would answer from the old data."""
    placed = None if recorded is None else recorded.get(dataset.name)
    key = (id(placed), *(_stat(dataset.path / name / ZARR_JSON) for name in dataset.metadata.fields),
           _stat(dataset.path / ZARR_JSON))
    if placed is not None and _verified.get(str(dataset.path)) == key:
        return
    if placed is None:
        change = ("the catalogue does not record what was placed (made by an older turbdb)" if recorded is None
                  else "it was added after the cluster was placed")
    else:
        change = _change(placed, describe(dataset, steps=False))
    if change:
        error = ServiceError(f"dataset {dataset.name!r} changed since the cluster was laid out on its workers' "
                             f"disks ({change}): their copies are stale. Lay it out again: stop and rerun "
                             f"`turbdb cluster up {database} ... --data-root DIR` (it places again when the "
                             f"database changed), or run `turbdb cluster place {database} --scheduler ADDRESS "
                             "--data-root DIR` and reconnect")
        error.status = 503  # type: ignore[attr-defined]  # the service is unavailable until placed again
        raise error
    _verified[str(dataset.path)] = key


def _stat(path: Path) -> tuple[int, ...]:
    try:
        return _stat_key(str(path))
    except OSError:
        return ()


def _change(placed: dict[str, Any], now: dict[str, Any]) -> str | None:
    """The first difference between two descriptions, in words (keys only one of them has,
    such as ``steps``, are not compared)."""
    for key in ("grid", "partition", "fields", "ids", "times", "rewrites", "steps"):
        if key not in placed or key not in now or placed[key] == now[key]:
            continue
        if key == "times":
            return (f"{placed['times']['count']} times then ({_span(placed['times'])}), {now['times']['count']} now "
                    f"({_span(now['times'])})")
        if key == "ids":
            return "it was created again"
        if key == "rewrites":
            return "steps were written again"
        if key == "steps":
            return "steps were written"
        return f"its {key} changed"
    return None


def _span(times: dict[str, Any]) -> str:
    return f"{times['first']:g} to {times['last']:g}" if times["count"] else "none"
