"""What a placement laid out: per dataset its grid, times, fields and their ids, rewrite counts (see
:mod:`turbdb.rewrites`) and written steps, as the catalogue records them. Node-local
copies are made once; a database that grew or was written again since (a step appended,
a step written or rewritten, a dataset added) leaves them stale, and a worker reading them
would answer from the old data — so ``turbdb cluster up`` lays the database out again, the
mediator refuses a dataset whose copies no longer match (:func:`check_current`), and each
worker refuses a copy of its own that does not hold what the catalogue records
(:func:`copy_difference`: a disk restored from an older backup)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..database import Database
from ..dataset import Dataset
from ..exceptions import ServiceError, TurbdbError
from ..file_snapshots import keys_settled, stat_key
from ..rewrites import rewrite_counts
from ..written_steps import entry_of, recorded_runs, runs_of
from ..zarr_meta import FIELD_ID_ATTRIBUTE, ZARR_JSON, read_json


def describe(dataset: Dataset, *, steps: bool = True) -> dict[str, Any]:
    """What ``dataset`` holds now, as JSON. ``written``: the steps each field's metadata
    records as written (:mod:`turbdb.written_steps`; cheap, so compared per query); with
    ``steps`` also the steps found on disk (a scan of the shard directories), which stand
    in for the record of a field written before there was one. Its times are summed up
    (count, first, last, a digest), so that the catalogue stays small however many there
    are; each field's random id tells a dataset created again with the same sizes from
    the one placed."""
    info = dataset.metadata
    attrs = dataset._attrs()
    counts = rewrite_counts(attrs, dataset.path)
    recorded = recorded_runs(attrs, f"dataset {dataset.name!r}")
    times = np.asarray(info.times, dtype=np.float64)
    out: dict[str, Any] = {
        "grid": list(info.grid), "partition": info.partition,
        "times": {"count": len(times), "first": float(times[0]) if len(times) else None,
                  "last": float(times[-1]) if len(times) else None,
                  "sha256": hashlib.sha256(times.tobytes()).hexdigest()},
        "fields": {name: f.ncomp for name, f in info.fields.items()},
        "ids": {name: _field_id(dataset.path / name) for name in info.fields},
        "rewrites": {f: {str(s): n for s, n in sorted(c.items())} for f, c in sorted(counts.items()) if c},
        "written": {name: entry_of(recorded[name]) for name in info.fields if name in recorded}}
    if steps:
        present = dataset.info.fields
        out["steps"] = {name: list(f.steps_present) for name, f in present.items()}
        for name, f in present.items():
            out["written"].setdefault(name, entry_of(runs_of(f.steps_present)))
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
    checked_at = time.time()
    key = (id(placed), *metadata_key(dataset))
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
    if all(keys_settled(k, checked_at) for k in key[1:]):  # else a replacement may keep a stat: look again
        _verified[str(dataset.path)] = key


def copy_difference(placed: dict[str, Any] | None, copy: Dataset) -> str | None:
    """How a worker's own copy of a dataset differs from what the catalogue records was
    placed (None if it does not): a node-local disk restored from a backup older (or
    newer) than the layout holds other data under the same names, and answering from it
    would add its partial sums to the other copies'."""
    if placed is None:
        return "the catalogue does not record this dataset"
    now = describe(copy, steps=False)
    for key, what in _COPY_PARTS:
        if key in placed and key in now and placed[key] != now[key]:
            if key == "written" and all(placed[key][f] == now[key][f] for f in set(placed[key]) & set(now[key])):
                continue
            return f"{what} differ from the catalogue's record"
    return None


#: What a copy's description holds, in words, in the order its parts are compared.
_COPY_PARTS = (("grid", "its grid"), ("partition", "its partition size"), ("fields", "its fields"),
               ("ids", "its fields' ids (another dataset of the same name)"), ("times", "its times"),
               ("rewrites", "the rewrite counts of its steps"), ("written", "the steps it records as written"))


def metadata_key(dataset: Dataset) -> tuple[Any, ...]:
    """The stat keys of a dataset's metadata files: they change whenever it is written,
    rewritten, created again or replaced by another copy (every write is a rename)."""
    return (*(_stat(dataset.path / name / ZARR_JSON) for name in dataset.metadata.fields),
            _stat(dataset.path / ZARR_JSON))


def _stat(path: Path) -> tuple[int, ...]:
    try:
        return stat_key(os.stat(path))
    except OSError:
        return ()


def _change(placed: dict[str, Any], now: dict[str, Any]) -> str | None:
    """The first difference between two descriptions, in words (keys only one of them has,
    such as ``steps``, are not compared; ``written`` field by field, for the fields both
    record)."""
    for key in ("grid", "partition", "fields", "ids", "times", "rewrites", "written", "steps"):
        if key not in placed or key not in now or placed[key] == now[key]:
            continue
        if key == "written":
            if any(placed[key][f] != now[key][f] for f in set(placed[key]) & set(now[key])):
                return "steps were written"
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
