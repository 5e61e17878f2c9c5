"""The checks ``turbdb verify`` makes of a dataset's metadata, beyond its shards: what other
Zarr readers (xarray, zarr-python) go by must say what turbdb's own attributes say. The
consolidated copy in the group's ``zarr.json`` (which they trust over the arrays' own),
the coordinate arrays (x, y, z, time), and each field array's dimension names and fill
value; arrays turbdb does not know are named, since nothing checks them."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .zarr_meta import ZARR_JSON, consolidated_metadata, read_json

#: What a coordinate may differ by from ``origin + i·spacing`` (written in float64).
COORDINATE_RTOL = 1e-12


def metadata_problems(path: Path, attrs: dict[str, Any]) -> list[tuple[str, str]]:
    """``(file, message)`` for each way the metadata of the dataset at ``path`` (whose
    ``turbdb`` attributes are ``attrs``) misleads a Zarr reader."""
    problems = _consolidated_problems(path)
    expected = {axis: origin + spacing * np.arange(n)
                for axis, n, origin, spacing in zip("xyz", attrs["grid"], attrs["origin"], attrs["spacing"])}
    expected["time"] = np.asarray(attrs["times"], dtype=np.float64)
    for name, values in expected.items():
        problems += _coordinate_problems(path, name, values, exact=name == "time")
    for field in attrs["fields"]:
        problems += _field_array_problems(path, field)
    known = set(expected) | set(attrs["fields"])
    for child in sorted(p for p in path.iterdir() if (p / ZARR_JSON).is_file() and p.name not in known):
        problems.append((f"{child.name}/{ZARR_JSON}", "an array the dataset's attributes do not list: turbdb neither "
                         "reads nor checks it; remove it, or add it as a field"))
    return problems


def _consolidated_problems(path: Path) -> list[tuple[str, str]]:
    stored = (read_json(path / ZARR_JSON).get("consolidated_metadata") or {}).get("metadata")
    if not isinstance(stored, dict):
        return [(ZARR_JSON, "the group has no consolidated metadata: xarray.open_zarr warns and reads every array's "
                 "own zarr.json")]
    actual = consolidated_metadata(path)["metadata"]
    problems = []
    for name in sorted(set(stored) | set(actual)):
        if name not in actual:
            what = "lists an array that does not exist"
        elif name not in stored:
            what = "does not list it, so xarray and zarr-python do not see it"
        elif stored[name] != actual[name]:
            what = "differs from the array's own zarr.json, and xarray and zarr-python read the consolidated copy"
        else:
            continue
        problems.append((f"{name}/{ZARR_JSON}", f"the group's consolidated metadata is stale: it {what}; any change "
                         "of the dataset's metadata (an appended time, an added field) rewrites it"))
    return problems


def _coordinate_problems(path: Path, name: str, expected: np.ndarray, *, exact: bool) -> list[tuple[str, str]]:
    import zarr  # read as xarray reads it; imported here: the CLI starts without zarr

    where = f"{name}/"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = zarr.open_array(path / name, mode="r")[:]
    except Exception as e:  # noqa: BLE001 - any failure to read is the problem reported
        return [(where, f"the {name} coordinate cannot be read ({type(e).__name__}: {e}); xarray.open_zarr fails")]
    if values.shape != expected.shape:
        return [(where, f"the {name} coordinate has {values.size} values where the dataset has {expected.size}")]
    if exact:
        wrong = np.flatnonzero(values != expected)
    else:
        scale = max(float(np.max(np.abs(expected), initial=0.0)), 1.0)
        wrong = np.flatnonzero(~(np.abs(values - expected) <= COORDINATE_RTOL * scale))
    if wrong.size:
        i = int(wrong[0])
        return [(where, f"the {name} coordinate holds {float(values[i])!r} at index {i} where the dataset's attributes say "
                 f"{float(expected[i])!r} ({wrong.size} value(s) differ): xarray would label the data wrongly")]
    return []


def _field_array_problems(path: Path, field: str) -> list[tuple[str, str]]:
    document = read_json(path / field / ZARR_JSON)
    problems = []
    names = ["time", "z", "y", "x", f"{field}_component"]
    if document.get("dimension_names") != names:
        problems.append((f"{field}/{ZARR_JSON}", f"dimension_names are {document.get('dimension_names')}, not "
                         f"{names}: xarray would label the axes wrongly"))
    if document.get("fill_value") != "NaN":
        problems.append((f"{field}/{ZARR_JSON}", f"fill_value is {document.get('fill_value')!r}, not NaN: Zarr "
                         "readers would show steps not written as that value"))
    return problems
