"""Stores the steps of input files into a dataset, appending times, and resumes after an
interruption: a journal in the dataset's metadata records which input step went to which
time index, and is updated only after the step's shards are all in place."""

from __future__ import annotations

import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..database import create_dataset
from ..database import open as open_db
from ..dataset import JOURNAL_KEY, Dataset
from ..exceptions import FormatError, InvalidRequestError, TurbdbError, UnknownNameError
from ..info import check_name
from ..times import time_grid
from .opening import open_sources
from .source import Source, StepRef



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
    given: set[str] | frozenset[str] = frozenset(),
) -> Dataset:
    """Appends every time step of ``inputs`` (in order) to ``field`` of dataset ``name``,
    creating the dataset or the field when missing. Steps already ingested from the same
    unchanged input are skipped, so rerunning an interrupted ingest completes it.

    ``given``: which of ``t0``, ``spacing``, ``origin``, ``periodic`` and ``units`` the
    caller set on purpose (the CLI: those on the command line). They describe a new dataset
    (``units``: a new field); appending to an existing one, each must agree with what it
    has, since it cannot change it."""
    check_name("dataset", name)
    check_name("field", field)
    if dt is not None and not (np.isfinite(dt) and dt > 0):
        raise InvalidRequestError(f"--dt must be a positive number, not {dt}")
    if not np.isfinite(t0):
        raise InvalidRequestError(f"--t0 must be a finite number, not {t0}")
    options = {k: v for k, v in (source_options or {}).items() if v is not None}
    sources = open_sources([Path(p) for p in inputs], **options)
    for note in (note for source in sources for note in source.notes):
        tqdm.write(f"note: {note}", file=sys.stderr)
    dataset, created = _target(db, name, field, sources[0], spacing=spacing, origin=origin, periodic=periodic,
                               units=units)
    if not created:
        _check_given(dataset, field, given, t0=t0, spacing=spacing, origin=origin, periodic=periodic, units=units)
    try:
        with dataset.writer_lock():  # one writer per dataset; the journal is read under the lock
            return _append(dataset, name, field, sources, dt=dt, t0=t0, quiet=quiet)
    except BaseException:
        # A dataset this call created and could not store a step in is removed again, so that
        # the corrected command starts afresh instead of meeting a dataset of the wrong grid.
        if created and not any(f.steps_present for f in dataset.info.fields.values()):
            shutil.rmtree(dataset.path, ignore_errors=True)
        raise


def _append(dataset: Dataset, name: str, field: str, sources: list[Source], *, dt: float | None, t0: float,
            quiet: bool) -> Dataset:
    """Appends the steps of ``sources`` not yet in the journal (the caller holds the writer lock)."""
    _remove_stale_temporaries(dataset.path / field)
    journal = _journal(dataset, field)
    if dt is not None:
        info = dataset.metadata
        if info.dt is not None and not np.isclose(dt, info.dt, rtol=1e-9, atol=0):
            tqdm.write(f"note: --dt {dt:g} is not the dataset's dt {info.dt:g}: its times become non-uniform")
        journal["dt"] = dt  # kept, so that a later ingest without --dt steps on by it
    if dt is None and dataset.metadata.dt is None:  # a single time (or none) has no dt of its own
        dt = _given_dt(dataset, journal)
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
            stored_times = dataset.metadata.nt
            _ensure_time(dataset, t, dt, t0)
            try:
                dataset.write(field, t, data)
            except TurbdbError as e:
                # Refused (a NaN, a full disk): the time appended for it goes again. An
                # interrupted write keeps it, and the rerun rewrites the step there.
                dataset.drop_unwritten_times(stored_times)
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
            periodic: Any, units: str) -> tuple[Dataset, bool]:
    """The dataset to append to, existing (checked against the input) or new, and whether
    it is new."""
    try:
        dataset = open_db(db)[name]
    except (UnknownNameError, OSError):
        return create_dataset(
            db, name, grid=source.grid, spacing=spacing, origin=origin or (0.0, 0.0, 0.0), periodic=periodic,
            times=[], fields={field: {"ncomp": source.ncomp, "units": units}},
            provenance={"generator": "turbdb ingest"},
        ), True
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
    return dataset, False


def _check_given(dataset: Dataset, field: str, given: set[str] | frozenset[str], **values: Any) -> None:
    """Refuses an option for a new dataset (or field) that disagrees with the existing one:
    silently ignored, it left the user believing the data had the spacing they gave."""
    info = dataset.metadata
    has = {"spacing": tuple(info.spacing), "origin": tuple(info.origin), "periodic": tuple(info.periodic),
           "t0": float(info.times[0]) if info.nt else None,
           "units": info.fields[field].units if field in info.fields else None}
    for option in sorted(given):
        value, existing = values[option], has[option]
        if existing is None:  # no times yet, or a field this call adds: nothing to disagree with
            continue
        same = (np.allclose(value, existing, rtol=1e-12, atol=0) if option in ("spacing", "origin", "t0")
                else tuple(value) == existing if option == "periodic" else value == existing)
        if not same:
            what = "field" if option == "units" else "dataset"
            raise InvalidRequestError(
                f"--{option} {_option_text(option, value)} does not match the {_option_text(option, existing)} of "
                f"{what} {field if option == 'units' else dataset.name!r}: it describes a new {what}, and appending "
                f"cannot change it; leave --{option} out, or ingest into a new dataset")


def _option_text(option: str, value: Any) -> str:
    if option == "periodic":
        return "".join(a for a, p in zip("xyz", value) if p) or "none"
    if option in ("spacing", "origin"):
        return ",".join(f"{v:g}" for v in value)
    return repr(value) if option == "units" else f"{value:g}"


def _journal(dataset: Dataset, field: str) -> dict[str, Any]:
    """Where the next step of ``field`` goes and which input steps are stored. A field that
    was filled by other means continues after its last written step."""
    entry = dataset._attrs().get(JOURNAL_KEY, {}).get(field)
    if entry is not None:
        return {"next": int(entry["next"]), "done": dict(entry["done"]),
                **({"dt": float(entry["dt"])} if entry.get("dt") is not None else {})}
    present = dataset.info.steps_present(field)
    return {"next": present[-1] + 1 if present else 0, "done": {}}


def _given_dt(dataset: Dataset, journal: dict[str, Any]) -> float | None:
    """The ``--dt`` an earlier ingest into this dataset was given: this field's, else any
    other field's (a dataset of one time has no dt of its own to step on by)."""
    if journal.get("dt") is not None:
        return journal["dt"]
    given = [entry["dt"] for entry in dataset._attrs().get(JOURNAL_KEY, {}).values() if entry.get("dt") is not None]
    return float(given[-1]) if given else None


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
