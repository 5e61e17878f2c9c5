"""Stores the steps of input files into a dataset, appending times, and resumes after an
interruption: a journal in the dataset's metadata records which input step went to which
time index, and is updated only after the step's shards are all in place."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..database import create_dataset
from ..database import open as open_db
from ..dataset import JOURNAL_KEY, Dataset, directory_identity
from ..exceptions import (
    DatasetBusyError, Float32PrecisionWarning, FormatError, InvalidRequestError, TurbdbError, UnknownNameError,
)
from ..info import check_name, spacing_tolerance
from ..progress_bars import bar_disabled
from ..times import format_time, time_grid
from .opening import open_sources
from .source import Source, StepRef

#: Seconds between saves of the ingest journal (and at the end, and when the ingest
#: fails): saved at every step, it rewrote the dataset's whole metadata thrice a step with
#: the steps written — quadratic in the number of files. A process killed outright loses
#: at most this much of the journal: the rerun stores those steps again, at their places
#: (the first step is saved at once: without a journal a rerun would append after them).
JOURNAL_SAVE_SECONDS = 1.0



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
    replace: bool = False,
    sort: str | None = None,
) -> Dataset:
    """Appends every time step of ``inputs`` (in order) to ``field`` of dataset ``name``,
    creating the dataset or the field when missing. Steps already ingested from the same
    input are skipped, so rerunning an interrupted ingest completes it, and a file that grew
    has only its new steps appended. A step stored before whose values now read
    differently (the file changed, or another ``--dtype``/``--axes``/… reads it) is refused,
    or with ``replace`` stored again in its place.

    ``sort``: inputs whose names differ only in numbers given out of the numbers' order
    (``u_1, u_10, u_2``: how the shell sorts ``u_*.npy``) are refused unless ``sort`` is
    ``"given"`` (keep that order) or ``"numbers"`` (sort them by their numbers).

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
    inputs = in_time_order([Path(p) for p in inputs], sort)
    sources = open_sources(inputs, **options)
    said = _say_new_notes(sources, {})
    # Checked before the field is added: a refused option left the new field behind, whose
    # units then refused the corrected command.
    dataset, created, added = _target(
        db, name, field, sources[0], spacing=spacing, origin=origin, periodic=periodic, units=units,
        check=lambda existing: _check_given(existing, field, given, t0=t0, spacing=spacing, origin=origin,
                                            periodic=periodic, units=units))
    # What this call made, told apart from what another process may make in its place.
    made = directory_identity(dataset.path / field) if added else None
    how = json.dumps(options, sort_keys=True, default=str)
    with dataset.writer_lock():  # one writer per dataset; the journal is read under the lock
        if made is not None and directory_identity(dataset.path / field) != made:
            raise DatasetBusyError(f"another process replaced dataset {name!r} while this ingest was creating it; "
                                   "nothing was stored: run this again")
        try:
            return _append(dataset, name, field, sources, dt=dt, t0=t0, quiet=quiet, how=how, replace=replace,
                           said=said)
        except BaseException:
            # A dataset (or field) this call created and could not store a step in is removed
            # again, so that the corrected command starts afresh instead of meeting a dataset of
            # the wrong grid or a field of the wrong units or components. Only under the lock
            # and while it is still the one made here: the cleanup once deleted a dataset
            # another process had created over this one meanwhile.
            _say_new_notes(sources, said)  # what reading the steps found before it failed
            if made is not None and directory_identity(dataset.path / field) == made:
                if created and not any(f.steps_present for f in dataset.info.fields.values()):
                    shutil.rmtree(dataset.path, ignore_errors=True)
                elif not dataset.info.fields[field].steps_present:
                    dataset.remove_empty_field(field)
            raise


def _say_new_notes(sources: list[Source], said: dict[int, int]) -> dict[int, int]:
    """Prints the notes of ``sources`` not printed yet: ``said`` counts those printed per
    source (by id), and is returned updated. Readers add notes as they read steps."""
    for source in sources:
        notes = source.notes  # once: the reading thread may add one meanwhile
        for note in notes[said.get(id(source), 0):]:
            tqdm.write(f"note: {note}", file=sys.stderr)
        said[id(source)] = len(notes)
    return said


def _append(dataset: Dataset, name: str, field: str, sources: list[Source], *, dt: float | None, t0: float,
            quiet: bool, how: str, replace: bool, said: dict[int, int]) -> Dataset:
    """Appends the steps of ``sources`` not yet in the journal (the caller holds the writer
    lock); steps stored before that now read differently are refused or, with ``replace``,
    stored again at their time index. Notes the reading adds are printed as they come
    (``said``: see :func:`_say_new_notes`)."""
    _remove_stale_temporaries(dataset.path / field)
    journal = _journal(dataset, field)
    given_dt = dt
    if dt is not None:
        journal["dt"] = dt  # kept, so that a later ingest without --dt steps on by it
    if dt is None and dataset.metadata.nt < 2:  # a single time (or none) has no dt of its own
        dt = _given_dt(dataset, journal)
    say = (lambda line: None) if quiet else tqdm.write
    total = sum(s.n_steps for s in sources)
    before = json.dumps(journal, sort_keys=True)
    todo, unchanged = _steps_to_store(dataset, field, sources, journal, how=how, replace=replace, say=say)
    _check_new_times(dataset, field, journal["next"], sum(again is None for _, _, again in todo), given_dt)
    if not todo:
        say(f"all {total} input steps are already in {name}/{field}; nothing to do")
        if json.dumps(journal, sort_keys=True) != before:  # unchanged steps under their new identities
            _save_journal(dataset, field, journal)
        return dataset
    if len(todo) < total:
        say(f"resuming: {total - len(todo)} of {total} input steps are already stored")

    step_bytes = int(np.prod(sources[0].grid)) * sources[0].ncomp * 4
    bar = tqdm(total=len(todo) * step_bytes, unit="B", unit_scale=True, disable=bar_disabled(quiet),
               desc=f"ingest {field}")
    digests = {entry[1]: entry[0] for entry in map(_entry, journal["steps"].values())}
    moved_from = _steps_of_missing_files(journal, how) if any(again is None for _, _, again in todo) else {}
    moved = 0
    saved_at, unsaved = -math.inf, False  # the first step saves it: a rerun must find the journal to resume
    _say_new_notes(sources, said)  # what looking at the inputs found; then each step's input's own
    try:
        # Read the next input while the current one is written: the two overlap.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="turbdb-read") as reader:
            upcoming = reader.submit(_read_with_digest, *todo[0][:2])
            for i, (source, ref, again) in enumerate(todo):
                data, digest = upcoming.result()
                _say_new_notes([source], said)  # the one just read (all of them each step: quadratic)
                if i + 1 < len(todo):
                    upcoming = reader.submit(_read_with_digest, *todo[i + 1][:2])
                earlier = moved_from.get(_moved_key(ref, digest)) if again is None else None
                if earlier:
                    # The input was moved (a project moved with mv, its ingest rerun there):
                    # stored before, so its entry follows it instead of the step being appended again.
                    _record(journal, ref, _entry(journal["steps"].pop(earlier.pop()))[0], digest, how, known=False)
                    moved += 1
                    unsaved = True
                    bar.update(step_bytes)
                    continue
                if again is None and digest in digests:
                    tqdm.write(f"note: {_describe(ref)} {_same_values(data, f'time index {digests[digest]} of {name}/{field}')}",
                               file=sys.stderr)
                t = journal["next"] if again is None else again
                stored_times = dataset.metadata.nt
                _ensure_time(dataset, t, dt, t0)
                try:
                    _write_saying_precision_lost(dataset, field, t, data, ref)
                except TurbdbError as e:
                    # Refused (a NaN, a full disk): the time appended for it goes again. An
                    # interrupted write keeps it, and the rerun rewrites the step there.
                    dataset.drop_unwritten_times(stored_times)
                    raise type(e)(f"{_describe(ref)}: {e}") from None
                if again is None:
                    journal["next"] = t + 1
                _record(journal, ref, t, digest, how, known=again is not None)
                digests[digest] = t
                unsaved = True
                if time.monotonic() - saved_at >= JOURNAL_SAVE_SECONDS:
                    _save_journal(dataset, field, journal)
                    saved_at, unsaved = time.monotonic(), False
                bar.update(step_bytes)
    except BaseException:
        if unsaved:  # the steps stored so far: a rerun resumes after them
            with contextlib.suppress(TurbdbError, OSError):
                _save_journal(dataset, field, journal)
        raise
    if unsaved:
        _save_journal(dataset, field, journal)
    bar.close()
    if moved:
        say(f"{moved} input step(s) were stored before from a file no longer at its recorded path, with the same "
            "values and options (moved or renamed since): not stored again")
    replaced = sum(again is not None for _, _, again in todo)
    stored = f"stored {len(todo) - replaced - moved} step(s)" + (f", replaced {replaced}" if replaced else "")
    say(f"{name}/{field}: {stored}; {len(dataset.info.steps_present(field))} of {dataset.info.nt} present")
    return dataset


def _check_new_times(dataset: Dataset, field: str, first: int, count: int, dt: float | None) -> None:
    """Refuses new steps whose times ``dt`` (as given, or None) cannot give: the ``count``
    steps from time index ``first`` on take the dataset's times there (steps never go
    between stored times), which another ``--dt`` contradicts (it was ignored, and a note
    said the times became non-uniform); and steps appended to non-uniform times without
    ``--dt``, which were stepped on by 1 in silence."""
    info = dataset.metadata
    if count == 0:
        return
    # Where this field has a step before them, the first new one follows it by dt too.
    start, end = max(first - 1, 0), min(first + count, info.nt)
    taken = info.times[start:end]
    atol = spacing_tolerance(info.times)
    if dt is not None and len(taken) > 1 and not np.allclose(np.diff(taken), dt, rtol=1e-9, atol=atol):
        shown = ", ".join(format_time(t) for t in taken[:6]) + (", …" if len(taken) > 6 else "")
        spacing = np.diff(taken)
        instead = "leave --dt out" + (f" (or give --dt {format_time(float(spacing[0]))})"
                                      if np.allclose(spacing, spacing[0], rtol=1e-9, atol=atol) else "")
        raise InvalidRequestError(
            f"--dt {dt:g} does not fit the times the new steps of {field} take: they go to time indices "
            f"{first}-{end - 1} of dataset {dataset.name!r}, which already has the times {shown} at indices "
            f"{start}-{end - 1}{' (from the last step of ' + field + ' on)' if first > 0 else ''}, and steps are "
            f"never put between stored times. To store them at those times, {instead}; else ingest into a new "
            "dataset. Nothing was stored")
    if first + count > info.nt:
        if dt is None and info.nt >= 2 and info.dt is None:
            steps = ", ".join(format_time(float(d)) for d in np.diff(info.times)[-3:])
            raise InvalidRequestError(
                f"dataset {dataset.name!r} has non-uniform times (its last steps {steps}): give --dt, the time "
                f"between the {count} step(s) appended after {format_time(float(info.times[-1]))}; nothing was stored")
        if dt is not None and info.dt is not None and not np.isclose(dt, info.dt, rtol=1e-9, atol=atol):
            tqdm.write(f"note: --dt {dt:g} is not the dataset's dt {info.dt:g}: its times become non-uniform",
                       file=sys.stderr)


def _write_saying_precision_lost(dataset: Dataset, field: str, t: int, data: np.ndarray, ref: StepRef) -> None:
    """Writes the step; what storing float64 inputs as float32 loses (a warning of
    :meth:`Dataset.write`) is a note naming the input, like the readers' notes."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", Float32PrecisionWarning)
        dataset.write(field, t, data)
    for warning in caught:
        if issubclass(warning.category, Float32PrecisionWarning):
            tqdm.write(f"note: {_describe(ref)}: {warning.message}", file=sys.stderr)
        else:  # not ours to reword
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _same_values(data: np.ndarray, stored: str) -> str:
    """How a step relates to the ``stored`` one whose float32 values (digest) it shares:
    float64 inputs that differ only before the cast to float32 are no data stored twice."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        exact = data.dtype == np.float32 or np.array_equal(data.astype(np.float32).astype(data.dtype), data)
    if exact:
        return f"holds exactly the values stored at {stored}: the same data stored twice?"
    return (f"holds other values than the step stored at {stored}, but the same as float32, in which both are "
            "stored")


def _steps_to_store(dataset: Dataset, field: str, sources: list[Source], journal: dict[str, Any], *, how: str,
                    replace: bool, say: Callable[[str], None]) -> tuple[list[tuple[Source, StepRef, int | None]], int]:
    """The input steps to store, each with the time index it goes to again (``None``: a new
    step, appended), and how many were found unchanged. A step stored before from the same
    file, key and index is read again when the file or the options reading it changed: the
    same values are skipped (a touched file, a file that grew), other values are refused
    before anything is written, or with ``replace`` stored again in place. Steps stored by an
    ingest that kept no digests are compared with the stored values themselves."""
    todo: list[tuple[Source, StepRef, int | None]] = []
    changed: list[str] = []
    unchanged = 0
    legacy = _legacy_steps(journal)
    stored_by_file = _stored_by_file(journal)
    for source in sources:
        for ref in source.refs():
            key = _step_key(ref)
            entry = _entry(journal["steps"].get(key))
            if entry is None and key not in legacy:
                todo.append((source, ref, None))
                continue
            t = int(entry[0]) if entry is not None else legacy[key]
            same_file = (entry[3:5] == (ref.size, ref.mtime_ns) if entry is not None
                         else ref.ident() in journal["done"])
            if same_file and (entry is None or journal["hows"][entry[2]] == how):
                unchanged += 1
                continue
            _, digest = _read_with_digest(source, ref)
            stored = entry[1] if entry is not None else _stored_digest(dataset, field, t)
            if digest == stored:
                _record(journal, ref, t, digest, how, known=True)
                unchanged += 1
            elif replace:
                todo.append((source, ref, t))
            else:
                read_with = _options_text(journal["hows"][entry[2]]) if entry is not None else "unrecorded options"
                changed.append(f"{_describe(ref)} (time index {t}, read with {read_with})")
        _note_steps_gone(source, stored_by_file)
    if changed:
        listed = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise InvalidRequestError(
            f"{len(changed)} input step(s) already stored in {dataset.name}/{field} now read as other values: "
            f"{listed}. The file changed since, or other options (--dtype, --axes, --shape, --order, "
            f"--variables, …) read it now; nothing was stored. Give --replace to store this reading in their "
            f"place, or ingest into a new dataset")
    if replace and not any(again is not None for _, _, again in todo) and unchanged:
        say("note: --replace: every step stored before from these inputs reads the same; none replaced")
    return todo, unchanged


def _moved_key(ref: StepRef, digest: str) -> tuple[Any, ...]:
    """What a moved or copied input keeps: its file's name and size, the key and index of
    the step in it, and the step's values (``cp -r`` changes the modification time)."""
    return (os.path.basename(ref.source), ref.size, ref.key, ref.index, digest)


def _steps_of_missing_files(journal: dict[str, Any], how: str) -> dict[tuple[Any, ...], list[str]]:
    """The journal's steps read with ``how`` from files no longer at their recorded path
    (keys are absolute paths), by :func:`_moved_key`: an input with all of it the same was
    moved. A file still in place is another file holding the same data, and so is one of
    another name or size (the review: a new all-zero step was taken for a deleted one)."""
    if how not in journal["hows"]:
        return {}
    how_index = journal["hows"].index(how)
    exists: dict[str, bool] = {}
    missing: dict[tuple[Any, ...], list[str]] = {}
    for key, text in journal["steps"].items():
        _, digest, read_with, size, _ = _entry(text)
        path, file_key, index = json.loads(key)
        if read_with != how_index:
            continue
        if path not in exists:
            exists[path] = os.path.exists(path)
        if not exists[path]:
            missing.setdefault((os.path.basename(path), size, file_key, index, digest), []).append(key)
    return missing


def _legacy_steps(journal: dict[str, Any]) -> dict[str, int]:
    """Steps an ingest that kept no digests stored (only in ``done``), by file, key and index."""
    legacy: dict[str, int] = {}
    for ident, t in journal["done"].items():
        key = json.dumps(json.loads(ident)[:3], separators=(",", ":"), ensure_ascii=False)
        if key not in journal["steps"]:
            legacy[key] = int(t)
    return legacy


def _note_steps_gone(source: Source, stored: dict[tuple[str, str], list[tuple[int, int]]]) -> None:
    """Says which steps stored from ``source`` before (``stored``: (index, time index) by
    file and key) it no longer has, rewritten shorter: they stay stored."""
    gone = sorted(t for index, t in stored.get((str(source.path), source.key), ()) if index >= source.n_steps)
    if gone:
        tqdm.write(f"note: {source.path} now holds {source.n_steps} step(s); time indices {', '.join(map(str, gone))} "
                   "stored from its later steps before stay as they are", file=sys.stderr)


def _stored_by_file(journal: dict[str, Any]) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """The journal's steps grouped by file and key, read once (per source it was a pass over
    every entry: quadratic in an ingest of many files)."""
    grouped: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for key, entry in journal["steps"].items():
        path, file_key, index = json.loads(key)
        grouped.setdefault((path, file_key), []).append((index, _entry(entry)[0]))
    return grouped


def _step_key(ref: StepRef) -> str:
    """Which step of which input, whatever its version (size, modification time)."""
    return json.dumps([ref.source, ref.key, ref.index], separators=(",", ":"), ensure_ascii=False)


def _entry(text: str | None) -> tuple[int, str, int, int, int] | None:
    """A ``steps`` entry of the journal (see :func:`_record`), or None."""
    if text is None:
        return None
    t, digest, how, size, mtime = text.split()
    return int(t), digest, int(how), int(size), int(mtime)


def _record(journal: dict[str, Any], ref: StepRef, t: int, digest: str, how: str, *, known: bool) -> None:
    """Notes that input step ``ref`` is stored at time index ``t``, by file, key and index:
    ``"t digest options size mtime"`` (options: an index into ``hows``, since every step of
    a run has the same). A ``known`` step's entry in ``done`` (how
    ingests before digests knew steps) goes."""
    key = _step_key(ref)
    if known and journal["done"]:
        earlier = key[:-1] + ","  # an identity's list begins with file, key and index
        journal["done"] = {k: v for k, v in journal["done"].items() if not (v == t and k.startswith(earlier))}
    if how not in journal["hows"]:
        journal["hows"].append(how)
    # One string: zarr.json is written indented, a list would take seven lines a step.
    journal["steps"][key] = f"{t} {digest} {journal['hows'].index(how)} {ref.size} {ref.mtime_ns}"


def _stored_digest(dataset: Dataset, field: str, t: int) -> str:
    """The digest of time index ``t`` of ``field`` as stored (see :func:`_read_with_digest`)."""
    import zarr

    return _digest(zarr.open_array(dataset.path / field, mode="r")[t])


def _save_journal(dataset: Dataset, field: str, journal: dict[str, Any]) -> None:
    dataset.update_attrs(lambda attrs: attrs.setdefault(JOURNAL_KEY, {}).__setitem__(field, journal))


def _options_text(how: str | None) -> str:
    if not how:
        return "unrecorded options"
    options = {k: v for k, v in json.loads(how).items() if v is not None}
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(options.items())) or "no options"


def _read_with_digest(source: Source, ref: StepRef) -> tuple[np.ndarray, str]:
    """A step's values and the digest of them as stored (float32), which tells a step read
    again apart from what was stored of it."""
    data = source.read(ref)
    return data, _digest(data)


def _digest(values: Any) -> str:
    """BLAKE2 (64 bits) of ``values`` as float32, in C order whatever their shape."""
    with np.errstate(over="ignore"):  # values beyond float32 are the writer's to refuse, by name
        stored = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    return hashlib.blake2b(stored.data, digest_size=8).hexdigest()


def _describe(ref: StepRef) -> str:
    where = f"{ref.source}" + (f":{ref.key}" if ref.key else "")
    return f"{where} (step {ref.index})"


def _target(db: Path, name: str, field: str, source: Source, *, spacing: Any, origin: Any,
            periodic: Any, units: str, check: Callable[[Dataset], None]) -> tuple[Dataset, bool, bool]:
    """The dataset to append to, existing (checked against the input, and by ``check``
    before anything is added to it) or new, whether it is new and whether the field is."""
    try:
        dataset = open_db(db)[name]
    except (UnknownNameError, OSError):
        return create_dataset(
            db, name, grid=source.grid, spacing=spacing, origin=origin or (0.0, 0.0, 0.0), periodic=periodic,
            times=[], fields={field: {"ncomp": source.ncomp, "units": units}},
            provenance={"generator": "turbdb ingest"},
        ), True, True
    info = dataset.info
    if info.grid != source.grid:
        raise FormatError(
            f"{source.path} holds grid (nx, ny, nz) = {source.grid} but dataset {name!r} has {info.grid}"
        )
    check(dataset)
    if field not in info.fields:
        dataset.add_field(field, source.ncomp, units=units)
        return dataset, False, True
    if info.fields[field].ncomp != source.ncomp:
        raise FormatError(
            f"{source.path} holds {source.ncomp} component(s) but field {field!r} of {name!r} has "
            f"{info.fields[field].ncomp}; check --field or --axes"
        )
    return dataset, False, False


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
        return {"next": int(entry["next"]), "done": dict(entry["done"]), "steps": dict(entry.get("steps", {})),
                "hows": list(entry.get("hows", [])),
                **({"dt": float(entry["dt"])} if entry.get("dt") is not None else {})}
    present = dataset.info.steps_present(field)
    return {"next": present[-1] + 1 if present else 0, "done": {}, "steps": {}, "hows": []}


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


# A number in a file name: 12, 0.15 (a time), 1e-3 is read as 1 and 3 (rare in names).
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def in_time_order(inputs: list[Path], sort: str | None) -> list[Path]:
    """``inputs`` in the order to store them. Paths that differ only in their numbers and are
    not in the numbers' order (the shell sorts ``u_*.npy`` as text: u_1, u_10, u_11, u_2;
    also ``step_*/u.npy``) would store the steps out of time order: refused unless ``sort``
    says which to keep. Numbers may be decimal (``t_0.15.npy`` between 0.1 and 0.2)."""
    if sort not in (None, "given", "numbers"):
        raise InvalidRequestError(f"sort must be 'given' or 'numbers', not {sort!r}")
    if sort == "given" or len(inputs) < 2:
        return inputs
    texts = [str(p) for p in inputs]
    shapes = {_NUMBER.sub("#", text) for text in texts}
    numbered = len(shapes) == 1 and "#" in next(iter(shapes))

    def numbers(path: Path) -> tuple[float, ...]:
        return tuple(float(n) for n in _NUMBER.findall(str(path)))

    in_order = sorted(inputs, key=numbers) if numbered else inputs
    if sort == "numbers":
        if not numbered:
            raise InvalidRequestError("--sort numbers sorts inputs whose paths differ only in their numbers "
                                      "(u_1.npy … u_12.npy, step_1/u.npy … step_12/u.npy); these do not")
        return in_order
    if in_order != inputs:
        shown = ", ".join(str(p) if p.name == inputs[0].name else p.name for p in inputs[:4]) + (
            ", …" if len(inputs) > 4 else "")
        raise InvalidRequestError(
            f"the inputs ({shown}) are not in the order of the numbers in their names (the shell sorts names "
            f"as text, so u_10 comes before u_2): their steps would be stored out of time order. Give "
            f"--sort numbers to store them in the numbers' order, or --sort given to keep this order "
            f"(zero-padded names, u_01 … u_12, sort right either way)")
    return inputs
