"""The metadata of a dataset (grid, spacing, origin, periodicity, times, fields, units,
provenance) as stored under the ``turbdb`` key of the dataset group's attributes."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np

from . import _core
from .exceptions import DamagedMetadataError, InvalidRequestError, TurbdbError
from .times import format_time
from .written_steps import Runs, recorded_runs

#: The storage format this turbdb writes (docs/format.md, "Versions"). 2 adds what a turbdb
#: of format 1 would misread and then damage (the ingest journal's steps, the steps
#: written, the rewrite counts, field ids): a turbdb refuses a dataset of a later format,
#: so an older one no longer writes into a dataset this one wrote.
FORMAT_VERSION = 2
#: The format of the metadata documents the service sends (:meth:`DatasetInfo.to_served_attrs`).
SERVED_FORMAT_VERSION = 1
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
COMPONENT_NAMES = {1: [""], 3: ["x", "y", "z"]}
# JHTDB's letters for the usual vector fields (ux, bx, ax); other fields use their initial.
COMPONENT_PREFIX = {"velocity": "u", "magneticfield": "b", "vectorpotential": "a"}


def is_plain_name(name: object) -> bool:
    """Whether ``name`` may be a dataset or field name (a plain directory name)."""
    return isinstance(name, str) and bool(NAME_PATTERN.match(name)) and ".." not in name


#: Names a dataset's directory already holds beside its fields: the coordinate arrays and
#: its own metadata. A field named ``x`` overwrote the x coordinate's metadata, and the
#: dataset could no longer be read.
RESERVED_FIELD_NAMES = ("x", "y", "z", "time", "zarr.json")


def check_name(kind: str, name: str) -> str:
    """Dataset and field names become directory names: keep them plain, and off the names
    of what the directories hold already (the database's and each dataset's ``zarr.json``,
    a dataset's coordinate arrays)."""
    if not is_plain_name(name):
        raise InvalidRequestError(
            f"{kind} name {name!r} is not allowed: use a letter followed by up to 63 letters, digits, '_', '-' or '.'"
        )
    reserved = RESERVED_FIELD_NAMES if kind == "field" else ("zarr.json",)
    if name in reserved:
        raise InvalidRequestError(f"{kind} name {name!r} is taken by the {'dataset' if kind == 'field' else 'database'}'s "
                                  f"own {'metadata' if name == 'zarr.json' else 'coordinate array ' + repr(name)}; "
                                  f"choose another, e.g. {name.split('.')[0]}_{kind}")
    return name


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """One stored field: its components and units. ``every_step`` False: the field is
    written at some of the dataset's steps only, on purpose (verify then takes no step
    another field has for one it lost). ``recorded``: the runs ``(first, last)`` of time
    indices the metadata records as written (:mod:`turbdb.written_steps`), None for a
    field written before the record existed."""

    name: str
    ncomp: int
    units: str = ""
    steps_present: tuple[int, ...] = ()
    every_step: bool = True
    recorded: Runs | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def components(self) -> list[str]:
        """Component names, e.g. ``ux, uy, uz`` for velocity."""
        suffixes = COMPONENT_NAMES.get(self.ncomp, [str(i) for i in range(self.ncomp)])
        prefix = COMPONENT_PREFIX.get(self.name, self.name[0])
        return [f"{prefix}{s}" if s else self.name for s in suffixes]


def spacing_tolerance(times: Any) -> float:
    """How far apart two time steps may be and still count as one spacing, beyond 1e-9 of
    it: the rounding of the times themselves (16 float64 steps at their size), which far
    from zero exceeds 1e-9 of a small spacing (86400 + k·0.001 read as non-uniform)."""
    times = np.asarray(times, dtype=np.float64)
    return 16 * float(np.spacing(np.max(np.abs(times)))) if times.size else 0.0


@dataclasses.dataclass(frozen=True, eq=False)
class DatasetInfo:
    """Everything known about a dataset; ``fields[name].steps_present`` says which time
    steps have been written completely. Two are equal when they describe the same metadata
    and steps (the generated comparison raised: ``times`` is an array)."""

    name: str
    grid: tuple[int, int, int]
    spacing: tuple[float, float, float]
    origin: tuple[float, float, float]
    periodic: tuple[bool, bool, bool]
    times: np.ndarray
    fields: dict[str, FieldInfo]
    atom: int
    partition: int
    units: dict[str, str]
    provenance: dict[str, Any]
    attrs: dict[str, Any]
    #: The format the dataset is stored in (docs/format.md, "Versions").
    format_version: int = FORMAT_VERSION

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DatasetInfo):
            return NotImplemented
        return self.to_attrs() == other.to_attrs() and self.fields == other.fields

    __hash__ = None  # type: ignore[assignment]  # mutable dicts inside, as before

    @property
    def nt(self) -> int:
        return len(self.times)

    @property
    def dt(self) -> float | None:
        """The time spacing when stored times are uniform."""
        if self.nt < 2:
            return None
        steps = np.diff(self.times)
        return float(steps[0]) if np.allclose(steps, steps[0], rtol=1e-9, atol=spacing_tolerance(self.times)) else None

    @property
    def domain(self) -> tuple[tuple[float, float], ...]:
        """Per axis (x, y, z) the physical extent: a full period on periodic axes, the
        first to the last node otherwise."""
        return tuple(
            (o, o + d * (n if p else n - 1))
            for o, d, n, p in zip(self.origin, self.spacing, self.grid, self.periodic)
        )

    def steps_present(self, field: str | None = None) -> list[int]:
        """Time indices written for ``field``, or for every field when ``None``."""
        sets = [set(f.steps_present) for n, f in self.fields.items() if field in (None, n)]
        return sorted(set.intersection(*sets)) if sets else []

    def to_attrs(self) -> dict[str, Any]:
        """The JSON stored in the group attributes (steps present are derived, not stored)."""
        return {
            "format_version": self.format_version,
            "name": self.name,
            "grid": list(self.grid),
            "spacing": list(self.spacing),
            "origin": list(self.origin),
            "periodic": list(self.periodic),
            "times": [float(t) for t in self.times],
            "fields": {n: {"ncomp": f.ncomp, "units": f.units, **({} if f.every_step else {"every_step": False})}
                       for n, f in self.fields.items()},
            "atom": self.atom,
            "partition": self.partition,
            "units": self.units,
            "provenance": self.provenance,
            "attrs": self.attrs,
        }

    def to_served_attrs(self) -> dict[str, Any]:
        """The metadata as the service sends it: :meth:`to_attrs`, which holds format 1's keys
        only (what format 2 adds stays on disk), so labelled format 1 — a client of format 1
        (turbdb 0.1) refuses a document of a later format, though it reads this one whole."""
        return {**self.to_attrs(), "format_version": SERVED_FORMAT_VERSION}

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any], steps: dict[str, tuple[int, ...]] | None = None, *,
                   name: str | None = None) -> DatasetInfo:
        """The metadata stored as ``attrs``, checked: a damaged or inconsistent document
        (a negative grid, decreasing times) is a :class:`DamagedMetadataError`. ``name``
        is the dataset's directory name, which is its name: the one stored is what it was
        created as, and a renamed directory was listed by it but opened only by the new one."""
        steps = steps or {}
        try:
            if not isinstance(attrs["format_version"], int) or attrs["format_version"] > FORMAT_VERSION:
                raise DamagedMetadataError(
                    f"dataset {attrs.get('name')!r} has format version {attrs['format_version']!r}; "
                    "upgrade turbdb to read it"
                )
            recorded = recorded_runs(attrs, f"dataset {attrs.get('name') if name is None else name!r}")
            info = cls(
                name=attrs["name"] if name is None else name,
                grid=tuple(int(n) for n in attrs["grid"]),
                spacing=tuple(float(d) for d in attrs["spacing"]),
                origin=tuple(float(o) for o in attrs["origin"]),
                periodic=tuple(bool(p) for p in attrs["periodic"]),
                times=np.asarray(attrs["times"], dtype=np.float64),
                fields={
                    n: FieldInfo(n, int(f["ncomp"]), f.get("units", ""), tuple(steps.get(n, ())),
                                 every_step=_flag(f.get("every_step", True), f"field {n!r}'s every_step"),
                                 recorded=recorded.get(n))
                    for n, f in attrs["fields"].items()
                },
                atom=int(attrs["atom"]),
                partition=int(attrs["partition"]),
                units=dict(attrs.get("units", {})),
                provenance=dict(attrs.get("provenance", {})),
                attrs=dict(attrs.get("attrs", {})),
                format_version=attrs["format_version"],
            )
            info._check()
            return info
        except DamagedMetadataError:
            raise
        except (KeyError, TypeError, ValueError, OverflowError, TurbdbError) as e:
            raise DamagedMetadataError(
                f"dataset {attrs.get('name') if isinstance(attrs, dict) else None!r}: the metadata is incomplete or "
                f"damaged ({type(e).__name__}: {e})"
            ) from None

    def _check(self) -> None:
        """Raises if the stored values contradict each other or what the store can hold."""
        if len(self.grid) != 3 or len(self.spacing) != 3 or len(self.origin) != 3 or len(self.periodic) != 3:
            raise ValueError("grid, spacing, origin and periodic need three entries each (x, y, z)")
        if min(self.grid) < 1:
            raise ValueError(f"grid {list(self.grid)} has an axis without nodes")
        if not all(math.isfinite(d) and d > 0 for d in self.spacing) or not all(map(math.isfinite, self.origin)):
            raise ValueError(f"spacing {list(self.spacing)} must be positive and origin {list(self.origin)} finite")
        uniform_times(self.times)
        if not self.fields:
            raise ValueError("the dataset has no fields")
        for field in self.fields.values():
            check_name("field", field.name)
            _core.check_layout(self.grid, field.ncomp, self.atom, self.partition)

    def describe(self) -> str:
        """A human summary, as ``turbdb info`` prints it."""
        nx, ny, nz = self.grid
        lines = [
            f"dataset {self.name}",
            f"  grid        {nx} x {ny} x {nz}   spacing {', '.join(f'{d:.6g}' for d in self.spacing)}",
            f"  origin      {', '.join(f'{o:.6g}' for o in self.origin)}   periodic {', '.join('xyz'[i] for i, p in enumerate(self.periodic) if p) or 'none'}",
        ]
        if self.nt == 1:
            lines.append(f"  times       1 step, t = {format_time(self.times[0])}")
        elif self.nt:
            dt = f"dt {format_time(self.dt)}" if self.dt is not None else "non-uniform"
            lines.append(f"  times       {self.nt} steps, t = {format_time(self.times[0])} … {format_time(self.times[-1])} ({dt})")
        lines.append(f"  storage     atoms {self.atom}³, partitions {self.partition}³ (Zarr v3 shards)")
        for f in self.fields.values():
            present = f.steps_present
            lines.append(
                f"  field       {f.name:<14} {f.ncomp} component{'s' if f.ncomp > 1 else ''}"
                f"{' [' + f.units + ']' if f.units else ''}   {len(present)}/{self.nt} steps written"
                f"{f' ({index_ranges(present, most=6)})' if present else ''}"
                f"{'' if f.every_step else ', at some steps only'}"
            )
        for key, value in self.provenance.items():
            lines.append(f"  {key:<11} {value}")
        return "\n".join(lines)


def _flag(value: Any, what: str) -> bool:
    """A stored boolean; anything else is damaged metadata (``"false"`` would read as True)."""
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, not {value!r}")
    return value


def index_ranges(indices: Iterable[int], most: int | None = None) -> str:
    """Compacts ascending ``0 1 2 5 6`` into ``0-2, 5-6`` (the first ``most`` runs, then …)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:most])
    return text + (", …" if most is not None and len(runs) > most else "")


def uniform_times(times: Any) -> np.ndarray:
    """Validates a 1-D increasing array of stored times."""
    times = np.asarray(times, dtype=np.float64).reshape(-1)
    if times.size and not np.all(np.isfinite(times)):
        raise InvalidRequestError("times must be finite")
    if times.size > 1 and not np.all(np.diff(times) > 0):
        raise InvalidRequestError("times must be strictly increasing")
    return times


def check_axis_triplet(kind: str, value: Any, positive: bool = False) -> tuple[float, float, float]:
    try:
        triple = tuple(float(v) for v in value)
    except TypeError:
        raise InvalidRequestError(f"{kind} must be three numbers (x, y, z), not {value!r}") from None
    if len(triple) != 3 or not all(math.isfinite(v) for v in triple):
        raise InvalidRequestError(f"{kind} must be three finite numbers (x, y, z), not {value!r}")
    if positive and min(triple) <= 0:
        raise InvalidRequestError(f"{kind} must be positive, not {value!r}")
    if positive and min(triple) < sys.float_info.min:  # subnormal: 1/spacing overflows
        raise InvalidRequestError(f"{kind} must be at least {sys.float_info.min:.3g}, not {value!r}")
    return triple


#: The fewest distinct float64 positions a cell's width must hold where the domain lies
#: (2¹⁶: a point's place within its cell resolved to 1.5e-5 of the spacing).
CELL_RESOLUTION = 2**16


def upgraded(attrs: dict[str, Any]) -> None:
    """Marks a dataset's metadata, about to be written by this turbdb, as of its format: a
    dataset of format 1 written here from now records what format 1 does not know (steps
    written, rewrite counts), which a turbdb of format 1 would misread, storing steps again
    or missing a rewrite. It refuses the dataset instead ("upgrade turbdb")."""
    attrs["format_version"] = FORMAT_VERSION


def check_extent(grid: tuple[int, int, int], spacing: tuple[float, float, float],
                 origin: tuple[float, float, float]) -> None:
    """Refuses a domain whose far end is not a finite number (origin 1e308, spacing 1e308):
    its coordinates would be stored as infinities; and one whose spacing float64 numbers
    cannot resolve where it lies (origin 1e300, spacing 0.1: every node's coordinate was
    1e300, every point fell on node 0), within :data:`CELL_RESOLUTION` of a spacing."""
    for axis, n, d, o in zip("xyz", grid, spacing, origin):
        end = o + d * n
        if not math.isfinite(end):
            raise InvalidRequestError(f"the domain along {axis} ends at {o:g} + {n} × {d:g}, beyond the largest "
                                      "number: choose a smaller origin or spacing")
        farthest = max(abs(o), abs(end))
        finest = CELL_RESOLUTION * math.ulp(farthest)
        if d < finest:
            raise InvalidRequestError(
                f"the spacing along {axis}, {d:g}, is too fine for coordinates near {farthest:g}: float64 "
                f"numbers there are {math.ulp(farthest):.3g} apart, so points within a cell could not be "
                f"told apart (the spacing must be at least {finest:.3g}); give the origin relative to the domain "
                "(say 0) and keep its offset in the dataset's attributes")
