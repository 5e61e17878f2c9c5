"""``turbdb simulate``: runs a built-in generator and stores each time step as it comes,
writing step i on a background thread while the generator computes step i+1."""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .database import create_dataset
from .database import open as open_db
from .dataset import Dataset
from .exceptions import DatasetExistsError
from .simulate import DNSConfig, run_dns, synthetic_snapshots

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
    if (db / name).exists():
        existing = _existing(db, name)
        if if_missing and existing is not None and len(existing.info.steps_present()) == existing.info.nt:
            say(f"{db / name} exists with all {existing.info.nt} steps; nothing to do")
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
        every, stored_dt = 1, SYNTHETIC_DT
        provenance = {"generator": "turbdb simulate --kind synthetic", "seed": seed}
    dataset = create_dataset(
        db, name, grid=(grid, grid, grid), times=np.arange(steps) * stored_dt,
        fields={"velocity": {"ncomp": 3, "units": "box units"}, "pressure": {"ncomp": 1, "units": "box units"}},
        units={"length": "box units (domain 2π)", "time": "box units"},
        provenance=provenance, overwrite=overwrite,
    )
    say(f"writing {steps} steps of {grid}³ ({kind}) into {dataset.path}")

    bar = tqdm(total=1, unit="step", disable=quiet, dynamic_ncols=True, desc="spin-up" if kind == "dns" else "generate")

    def progress(done: int, total: int, phase: str) -> None:
        bar.total = total
        bar.set_description("spin-up" if phase == "spinup" else "simulate")
        bar.n = done
        bar.refresh()

    if kind == "dns":
        snapshots = run_dns(config, n_saved=steps, save_every=every, progress=progress, log=say)
    else:
        bar.total = steps
        snapshots = synthetic_snapshots(grid, n_steps=steps, dt=stored_dt, seed=seed)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="turbdb-writer") as writer:
        pending: Future[None] | None = None
        for snapshot in snapshots:
            if pending is not None:
                pending.result()  # at most one step in flight: bounded memory, errors surface
            pending = writer.submit(_store, dataset, snapshot.step, snapshot.velocity, snapshot.pressure)
            if kind != "dns":
                bar.update(1)
        if pending is not None:
            pending.result()
    bar.close()
    say(f"done: {dataset.path} holds {len(dataset.info.steps_present())} time steps")
    return dataset


def _store(dataset: Dataset, step: int, velocity: np.ndarray, pressure: np.ndarray) -> None:
    dataset.write("velocity", step, velocity)
    dataset.write("pressure", step, pressure)


def _existing(db: Path, name: str) -> Dataset | None:
    try:
        return open_db(db)[name]
    except (KeyError, OSError, ValueError):
        return None


