"""``turbdb simulate``: runs a built-in generator and stores each time step as it comes,
writing step i on a background thread while the generator computes step i+1."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from .database import create_dataset
from .database import open as open_db
from .dataset import LOCK_FILE, WRITER_LOCK_FILE, Dataset, writer_lock
from .exceptions import DatasetExistsError, InvalidRequestError, StorageError, TurbdbError
from .info import check_name
from .progress_bars import bar_disabled
from .simulate import DNSConfig, run_dns, synthetic_snapshots
from .size_limit import check_work_bytes, human_bytes
from .times import time_grid
from .zarr_meta import TEMP_PREFIX, ZARR_JSON

SYNTHETIC_DT = 0.01


def run_simulation(
    db: Path,
    name: str,
    *,
    grid: int,
    steps: int,
    save_every: int | None = None,
    seed: int = 0,
    kind: str = "dns",
    if_missing: bool = False,
    overwrite: bool = False,
    quiet: bool = False,
) -> Dataset:
    """Creates dataset ``name`` in ``db`` and fills it from the generator ``kind``."""
    check_name("dataset", name)  # first: '' or '..' passed for an existing dataset ("already exists")
    say = (lambda line: None) if quiet else (lambda line: tqdm.write(line))
    if if_missing and overwrite:
        raise InvalidRequestError("give --if-missing (keep a complete dataset) or --overwrite (replace it), not both")
    config, snapshots = None, None  # the DNS's settings, or the synthetic generator's steps
    if kind == "dns":
        config = DNSConfig(n=grid, seed=seed)
        every = save_every or config.default_save_every
        stored_dt = every * config.dt
        provenance = {"generator": "turbdb simulate --kind dns", "save_every": every,
                      **{f"dns_{k}": v for k, v in dataclasses.asdict(config).items()}}
    else:
        if save_every is not None:
            raise InvalidRequestError("--save-every is a DNS setting; the synthetic kind stores every step it makes")
        every, stored_dt = 1, SYNTHETIC_DT
        provenance = {"generator": "turbdb simulate --kind synthetic", "seed": seed}
        snapshots = synthetic_snapshots(grid, n_steps=steps, dt=stored_dt, seed=seed)  # checks grid, before creating
    with contextlib.ExitStack() as lock:
        locked = False
        if (db / name).exists():
            existing = _existing(db, name)
            interrupted = existing is None and _interrupted_creation(db / name)
            if if_missing and not interrupted:
                if existing is None or (different := _differs(existing, grid, steps, provenance)):
                    what = "is not a dataset" if existing is None else f"is {different}"
                    raise DatasetExistsError(f"{db / name} exists and {what}, not the run asked for; --if-missing "
                                             "only completes or keeps what this same command made: pass --overwrite "
                                             "to replace it, or another --name")
                info = existing.info  # scans every shard: once
                if len(info.steps_present()) == info.nt:  # (a read-only database is fine here)
                    say(f"{db / name} exists with all {info.nt} steps; nothing to do")
                    return existing
            elif not if_missing and not overwrite:
                raise DatasetExistsError(f"dataset {name!r} already exists in {db}; "
                                         f"{_how_to_go_on(existing, grid, steps, provenance)}")
            if existing is not None or interrupted:
                # Nobody may be writing what is to be replaced (make demo started twice deleted
                # the steps the first run was storing). create_dataset gives the new dataset the
                # same lock file, so the lock is held on, for it, until its steps are stored.
                # Said for the command refused: --overwrite replaces, it skips no stored step.
                then = ("run this again to replace it" if not if_missing else
                        "run this again: a complete dataset is kept, an incomplete one simulated again")
                lock.enter_context(writer_lock(db / name, then=then))
                locked = True
            if if_missing:
                say(f"{db / name} is incomplete (an interrupted run?); simulating it again")
            overwrite = True

        size = _check_room(db, grid, steps, kind)
        dataset = create_dataset(
            db, name, grid=(grid, grid, grid), times=time_grid(0.0, stored_dt, steps),
            fields={"velocity": {"ncomp": 3, "units": "box units"}, "pressure": {"ncomp": 1, "units": "box units"}},
            units={"length": "box units (domain 2π)", "time": "box units"},
            provenance=provenance, overwrite=overwrite,
        )
        if not locked:
            lock.enter_context(dataset.writer_lock())
        return _fill(dataset, kind, grid, steps, size, every, config, snapshots, say, quiet)


def _fill(dataset: Dataset, kind: str, grid: int, steps: int, size: int, every: int, config: DNSConfig | None,
          snapshots: Any, say: Callable[[str], None], quiet: bool) -> Dataset:
    """Runs the generator and stores its steps into the new ``dataset`` (whose writer lock
    the caller holds)."""
    say(f"writing {steps} steps of {grid}³ ({kind}, {size / 1e9:.2g} GB) into {dataset.path}")

    if kind == "dns":
        # The DNS reports its work in steps of the final grid (spin-up on coarser grids counts
        # less), as a float: show a percentage and the time left, not the counts.
        bar = tqdm(total=1.0, disable=bar_disabled(quiet), dynamic_ncols=True, desc="spin-up",
                   bar_format="{desc}{percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")
    else:
        bar = tqdm(total=steps, unit="step", disable=bar_disabled(quiet), dynamic_ncols=True, desc="generate")
    window: list[dict[str, float]] = []

    def progress(done: float, total: float, phase: str) -> None:
        bar.total = total
        bar.set_description("spin-up" if phase == "spinup" else "simulate", refresh=False)
        bar.update(done - bar.n)  # update, not refresh: tqdm throttles the redraws

    if config is not None:
        snapshots = run_dns(config, n_saved=steps, save_every=every, progress=progress, log=say)

    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="turbdb-writer") as writer:
            pending: Future[None] | None = None
            for snapshot in snapshots:
                if pending is not None:
                    pending.result()  # at most one step in flight: bounded memory, errors surface
                pending = writer.submit(_store, dataset, snapshot.step, snapshot.velocity, snapshot.pressure)
                window.append(snapshot.stats)
                if kind != "dns":
                    bar.update(1)
            if pending is not None:
                pending.result()
    except BaseException:
        # A run that stored no step leaves no dataset behind: an empty one blocked the rerun
        # ("already exists") and was listed, served and verified as if it held data.
        if not dataset.info.steps_present():
            shutil.rmtree(dataset.path, ignore_errors=True)
        raise
    finally:
        bar.close()
    if kind == "dns":
        _record_window(dataset, window)
    say(f"done: {dataset.path} holds {len(dataset.info.steps_present())} time steps")
    return dataset


def _check_room(db: Path, grid: int, steps: int, kind: str) -> int:
    """Refuses a run whose steps would not fit on the disk, or whose generator would not
    fit in memory, before anything is created (a 4096³ request was accepted and reported
    2.2 TB to write on a disk with 65 GB free); returns the bytes the steps take."""
    # The generator's peak memory a grid point, measured (tracemalloc and RSS, 32³–128³): the
    # DNS's solver state, scratch and transform outputs 190 bytes, the synthetic generator's
    # 65; and one stored step (16 bytes) in flight on the writer thread.
    per_point = (190 if kind == "dns" else 65) + 16
    check_work_bytes(grid**3 * per_point, f"a {kind} run on a {grid}³ grid",
                     "choose a smaller --grid (or raise the limit: TURBDB_MAX_RESULT_BYTES=<bytes>)")
    size = steps * grid**3 * 4 * 4  # float32 velocity (3) and pressure (1)
    where = next(p for p in (db, *db.resolve().parents) if p.exists())
    free = shutil.disk_usage(where).free
    if size > free:
        raise StorageError(f"{steps} steps of {grid}³ take {human_bytes(size)}, and the disk at {where} has "
                           f"{human_bytes(free)} free: store fewer --steps, a smaller --grid, or use another disk")
    return size


#: Live diagnostics of the run averaged over the stored window, kept in the provenance.
WINDOW_STATS = ("Re_lambda", "kmax_eta", "skewness", "flatness", "dissipation", "u_rms", "eta", "tau_eta",
                "integral_scale", "large_eddy_time")


def _record_window(dataset: Dataset, window: list[dict[str, float]]) -> None:
    """Stores the window means (4 significant digits) as ``dns_window_*`` provenance."""
    means = {f"dns_window_{key}": float(f"{np.mean([st[key] for st in window]):.4g}") for key in WINDOW_STATS}

    def change(attrs: dict) -> None:
        attrs["provenance"].update(means)

    dataset.update_attrs(change)


def _store(dataset: Dataset, step: int, velocity: np.ndarray, pressure: np.ndarray) -> None:
    # On the writer thread; the writer lock the main thread holds is this process's.
    dataset.write("velocity", step, velocity)
    dataset.write("pressure", step, pressure)


def _how_to_go_on(existing: Dataset | None, grid: int, steps: int, provenance: dict[str, Any]) -> str:
    """What a rerun refused over an existing dataset can pass: --if-missing too where the
    dataset is an interrupted run of this same command (some steps stored), which it completes."""
    if existing is not None and _differs(existing, grid, steps, provenance) is None:
        try:
            stored = len(existing.info.steps_present())
        except (TurbdbError, OSError):  # damaged: not for --if-missing to judge
            return "pass --overwrite to replace it"
        if stored < existing.metadata.nt:
            return (f"it holds {stored} of its {existing.metadata.nt} steps (an interrupted run?): pass --if-missing "
                    "to complete it, or --overwrite to replace it")
    return "pass --overwrite to replace it"


def _differs(existing: Dataset, grid: int, steps: int, provenance: dict[str, Any]) -> str | None:
    """How the existing dataset differs from the run asked for (None: the same run), by
    its sizes and the generator settings its provenance records."""
    info = existing.metadata
    if info.grid != (grid,) * 3 or info.nt != steps:
        return f"a grid of {' x '.join(map(str, info.grid))} with {info.nt} steps"
    made = info.provenance
    if made.get("generator") != provenance["generator"]:
        return f"made by {made.get('generator') or 'something else than turbdb simulate'}"
    # The settings a user chooses (the solver's own constants may change between versions).
    changed = [key for key in ("save_every", "dns_seed", "seed") if made.get(key) != provenance.get(key)]
    return f"a run with other settings ({', '.join(changed)})" if changed else None


#: What create_dataset writes before the dataset's own zarr.json (written last).
_CREATED_FIRST = {"x", "y", "z", "time", "velocity", "pressure", LOCK_FILE, WRITER_LOCK_FILE}


def _interrupted_creation(path: Path) -> bool:
    """A directory left by a ``create_dataset`` that was stopped before it wrote the group's
    zarr.json (written last): only what it writes first, so a rerun may replace it."""
    return (path.is_dir() and not (path / ZARR_JSON).exists()
            and all(e.name in _CREATED_FIRST or e.name.startswith(TEMP_PREFIX) for e in os.scandir(path))
            and not any((path / field / "c").exists() for field in ("velocity", "pressure")))  # no step stored


def _existing(db: Path, name: str) -> Dataset | None:
    try:
        return open_db(db)[name]
    except (KeyError, OSError, ValueError):
        return None


