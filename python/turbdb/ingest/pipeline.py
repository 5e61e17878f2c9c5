"""Stores the steps of input files into a dataset, appending times, and resumes after an
interruption: a journal in the dataset's metadata records which input step went to which
time index, and is updated only after the step's shards are all in place."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..database import create_dataset
from ..database import open as open_db
from ..dataset import Dataset
from ..exceptions import FormatError, InvalidRequestError, TurbdbError, UnknownNameError
from ..info import check_name
from ..times import time_grid
from .opening import open_sources
from .source import Source, StepRef

JOURNAL_KEY = "ingest"


def ingest_inputs(
    db: Path,
    name: str,
    field: str,
    inputs: list[Path],
    *,
    source_options: dict[str, Any] | None = None,
    dt: float | None = None,
    t0: float = 0.0,
    spacing: tuple[float, float, float] | None = None,
    origin: tuple[float, float, float] | None = None,
    periodic: tuple[bool, bool, bool] = (True, True, True),
    units: str = "",
    quiet: bool = False,
) -> Dataset:
    """Appends every time step of ``inputs`` (in order) to ``field`` of dataset ``name``,
    creating the dataset or the field when missing. Steps already ingested from the same
    unchanged input are skipped, so rerunning an interrupted ingest completes it."""
    check_name("dataset", name)
    check_name("field", field)
    if dt is not None and not (np.isfinite(dt) and dt > 0):
        raise InvalidRequestError(f"--dt must be a positive number, not {dt}")
    options = {k: v for k, v in (source_options or {}).items() if v is not None}
    sources = open_sources([Path(p) for p in inputs], **options)
    dataset = _target(db, name, field, sources[0], spacing=spacing, origin=origin, periodic=periodic, units=units)
    with dataset.writer_lock():  # one writer per dataset; the journal is read under the lock
        return _append(dataset, name, field, sources, dt=dt, t0=t0, quiet=quiet)


def _append(dataset: Dataset, name: str, field: str, sources: list[Source], *, dt: float | None, t0: float,
            quiet: bool) -> Dataset:
    """Appends the steps of ``sources`` not yet in the journal (the caller holds the writer lock)."""
    _remove_stale_temporaries(dataset.path / field)
    journal = _journal(dataset, field)
    todo = [(s, r) for s in sources for r in s.refs() if r.ident() not in journal["done"]]
    total = sum(s.n_steps for s in sources)
    say = (lambda line: None) if quiet else tqdm.write
    if not todo:
        say(f"all {total} input steps are already in {name}/{field}; nothing to do")
        return dataset
    if len(todo) < total:
        say(f"resuming: {total - len(todo)} of {total} input steps are already stored")

    step_bytes = int(np.prod(sources[0].grid)) * sources[0].ncomp * 4
    bar = tqdm(total=len(todo) * step_bytes, unit="B", unit_scale=True, disable=quiet, desc=f"ingest {field}")
    # Read the next input while the current one is written: the two overlap.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="turbdb-read") as reader:
        upcoming = reader.submit(_read, *todo[0])
        for i, (source, ref) in enumerate(todo):
            data = upcoming.result()
            if i + 1 < len(todo):
                upcoming = reader.submit(_read, *todo[i + 1])
            t = journal["next"]
            _ensure_time(dataset, t, dt, t0)
            try:
                dataset.write(field, t, data)
            except TurbdbError as e:
                raise type(e)(f"{_describe(ref)}: {e}") from None
            journal["next"] = t + 1
            journal["done"][ref.ident()] = t
            dataset.update_attrs(lambda attrs: attrs.setdefault(JOURNAL_KEY, {}).__setitem__(field, journal))
            bar.update(step_bytes)
    bar.close()
    say(f"{name}/{field}: stored {len(todo)} step(s); {len(dataset.info.steps_present(field))} of {dataset.info.nt} present")
    return dataset


def _read(source: Source, ref: StepRef) -> np.ndarray:
    return source.read(ref)


def _describe(ref: StepRef) -> str:
    where = f"{ref.source}" + (f":{ref.key}" if ref.key else "")
    return f"{where} (step {ref.index})"


def _target(db: Path, name: str, field: str, source: Source, *, spacing: Any, origin: Any,
            periodic: Any, units: str) -> Dataset:
    """The dataset to append to: existing (checked against the input) or new."""
    try:
        dataset = open_db(db)[name]
    except (UnknownNameError, OSError):
        return create_dataset(
            db, name, grid=source.grid, spacing=spacing, origin=origin or (0.0, 0.0, 0.0), periodic=periodic,
            times=[], fields={field: {"ncomp": source.ncomp, "units": units}},
            provenance={"generator": "turbdb ingest"},
        )
    info = dataset.info
    if info.grid != source.grid:
        raise FormatError(
            f"{source.path} holds grid (nx, ny, nz) = {source.grid} but dataset {name!r} has {info.grid}"
        )
    if field not in info.fields:
        dataset.add_field(field, source.ncomp, units=units)
    elif info.fields[field].ncomp != source.ncomp:
        raise FormatError(
            f"{source.path} holds {source.ncomp} component(s) but field {field!r} of {name!r} has "
            f"{info.fields[field].ncomp}; check --field or --axes"
        )
    return dataset


def _journal(dataset: Dataset, field: str) -> dict[str, Any]:
    """Where the next step of ``field`` goes and which input steps are stored. A field that
    was filled by other means continues after its last written step."""
    entry = dataset._attrs().get(JOURNAL_KEY, {}).get(field)
    if entry is not None:
        return {"next": int(entry["next"]), "done": dict(entry["done"])}
    present = dataset.info.steps_present(field)
    return {"next": present[-1] + 1 if present else 0, "done": {}}


def _ensure_time(dataset: Dataset, t: int, dt: float | None, t0: float) -> None:
    """Appends stored times until time index ``t`` exists (from the cached metadata: no
    scan of the written steps on every ingested step)."""
    info = dataset.metadata
    if t < info.nt:
        return
    step = dt if dt is not None else (info.dt or 1.0)
    last = info.times[-1] if info.nt else t0 - step
    count = t - info.nt + 1
    dataset.append_times(time_grid(last, step, count, first=1))


def _remove_stale_temporaries(field_dir: Path) -> None:
    """Temporary shard files are left only by a killed writer; they are never read."""
    for root, _, files in os.walk(field_dir):
        for f in files:
            if f.startswith(".turbdb-tmp-"):
                os.unlink(os.path.join(root, f))
