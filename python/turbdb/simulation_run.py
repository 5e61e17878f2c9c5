"""``turbdb simulate``: runs a built-in generator and stores each time step as it comes,
writing step i on a background thread while the generator computes step i+1."""

from __future__ import annotations

import dataclasses
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .database import create_dataset
from .database import open as open_db
from .dataset import Dataset
from .exceptions import DatasetExistsError, InvalidRequestError, StorageError
from .simulate import DNSConfig, run_dns, synthetic_snapshots
from .size_limit import check_work_bytes, human_bytes
from .times import time_grid

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
    say = (lambda line: None) if quiet else (lambda line: tqdm.write(line))
    if if_missing and overwrite:
        raise InvalidRequestError("give --if-missing (keep a complete dataset) or --overwrite (replace it), not both")
    if (db / name).exists():
        existing = _existing(db, name)
        info = existing.info if existing is not None else None  # scans every shard: once
        if if_missing and info is not None and len(info.steps_present()) == info.nt:
            if info.grid != (grid,) * 3 or info.nt != steps:
                raise DatasetExistsError(f"dataset {name!r} exists with grid {info.grid[0]}³ and {info.nt} steps, "
                                         f"not the {grid}³ and {steps} asked for; pass --overwrite to replace it, "
                                         "or another --name")
            say(f"{db / name} exists with all {info.nt} steps; nothing to do")
            return existing
        if if_missing:
            say(f"{db / name} is incomplete (an interrupted run?); simulating it again")
            overwrite = True
        elif not overwrite:
            raise DatasetExistsError(f"dataset {name!r} already exists in {db}; pass --overwrite to replace it")

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
    size = _check_room(db, grid, steps, kind)
    dataset = create_dataset(
        db, name, grid=(grid, grid, grid), times=time_grid(0.0, stored_dt, steps),
        fields={"velocity": {"ncomp": 3, "units": "box units"}, "pressure": {"ncomp": 1, "units": "box units"}},
        units={"length": "box units (domain 2π)", "time": "box units"},
        provenance=provenance, overwrite=overwrite,
    )
    say(f"writing {steps} steps of {grid}³ ({kind}, {size / 1e9:.2g} GB) into {dataset.path}")

    if kind == "dns":
        # The DNS reports its work in steps of the final grid (spin-up on coarser grids counts
        # less), as a float: show a percentage and the time left, not the counts.
        bar = tqdm(total=1.0, disable=quiet, dynamic_ncols=True, desc="spin-up",
                   bar_format="{desc}{percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")
    else:
        bar = tqdm(total=steps, unit="step", disable=quiet, dynamic_ncols=True, desc="generate")
    window: list[dict[str, float]] = []

    def progress(done: float, total: float, phase: str) -> None:
        bar.total = total
        bar.set_description("spin-up" if phase == "spinup" else "simulate", refresh=False)
        bar.update(done - bar.n)  # update, not refresh: tqdm throttles the redraws

    if kind == "dns":
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
    # The generator's working arrays: about four float32 copies of a step (synthetic), or
    # four float64 vector fields (the DNS's spectral solver).
    check_work_bytes(grid**3 * 3 * (4 if kind == "synthetic" else 8) * 4, f"a {kind} run on a {grid}³ grid",
                     "choose a smaller --grid")
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
    dataset.write("velocity", step, velocity)
    dataset.write("pressure", step, pressure)


def _existing(db: Path, name: str) -> Dataset | None:
    try:
        return open_db(db)[name]
    except (KeyError, OSError, ValueError):
        return None


