"""Picking the arrays to read in a file that holds several (HDF5, netCDF, Zarr): the
``variables`` option that names them, and the choice made when it is not given."""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from turbdb.exceptions import FormatError, InvalidRequestError, UnknownNameError
from turbdb.ingest.format_spec import Option

__all__ = ["VARIABLES", "choose_arrays", "parse_variables"]

# At most this many candidates are listed in an error message.
_MAX_LISTED = 20


def parse_variables(variables: str | Iterable[str] | None) -> list[str] | None:
    """``"u,v,w"`` or ``["u", "v", "w"]`` as a list of names; None stays None."""
    if variables is None:
        return None
    names = variables.split(",") if isinstance(variables, str) else list(variables)
    if not all(isinstance(n, str) for n in names):
        raise InvalidRequestError(f"variables must be names (strings); got {variables!r}")
    names = [n.strip() for n in names]
    if not names or not all(names):
        raise InvalidRequestError(
            f"variables {variables!r} contains an empty name; give e.g. 'u' or 'u,v,w'"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidRequestError(f"variables {variables!r} repeats {', '.join(repeated)}")
    return names


def choose_arrays(
    candidates: dict[str, tuple[tuple[int, ...], np.dtype]],
    requested: list[str] | None,
    *,
    where: str,
    kind: str,
    option: str,
) -> list[str]:
    """The names of the arrays to read: ``requested`` if they all exist, else the only
    floating-point array of three or more dimensions."""

    def listing(names: Iterable[str]) -> str:
        names = list(names)
        shown = [f"{n} {candidates[n][0]} {candidates[n][1]}" for n in names[:_MAX_LISTED]]
        more = f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else ""
        return "; ".join(shown) + more if shown else "none"

    fields = [n for n, (shape, _) in candidates.items() if len(shape) >= 3]
    if requested is not None:
        missing = [n for n in requested if n not in candidates]
        if missing:
            raise UnknownNameError(
                f"{where} has no {kind} {', '.join(map(repr, missing))}; "
                f"it holds {listing(fields or candidates)}"
            )
        return requested
    floats = [n for n in fields if candidates[n][1].kind == "f"]
    if len(floats) == 1:
        return floats
    if not floats:
        raise FormatError(
            f"{where} holds no floating-point {kind} with 3 or more dimensions "
            f"(found: {listing(fields or candidates)}); name one with {_flag(option)}if it is there"
        )
    steps = _cutout_steps(floats)
    if steps:  # velocity_0001, velocity_0003, …: time steps, not components
        raise FormatError(
            f"{where} holds {len(steps)} time steps of {steps[0][0]!r} ({', '.join(n for _, n in steps[:3])}"
            f"{', …' if len(steps) > 3 else ''}), as turbdb cutout and JHTDB write them: ingest one step at a time "
            f"with {_flag(option)}{steps[0][1]!r} (and --t0, --dt), or write the cutout as .nc or .zarr, which "
            "ingest reads whole"
        )
    alike = [n for n in floats if candidates[n][0] == candidates[floats[0]][0]]
    stack = f", or stack per-component {kind}s (u, v, w) with {_flag('variables')}'{','.join(alike[:3])}'"
    raise FormatError(
        f"{where} holds several floating-point {kind}s with 3 or more dimensions: "
        f"{listing(floats)}. Choose one with {_flag(option)}{floats[0]!r}"
        f"{stack if len(alike) > 1 else ''}"
    )


def _flag(option: str) -> str:
    """How ``option`` is given on the command line, and in Python."""
    return f"--{option.replace('_', '-')} (Python: {option}=) "


def _cutout_steps(names: list[str]) -> list[tuple[str, str]]:
    """``(field, name)`` of names that are all one field's time steps, ``<field>_<NNNN>``
    (turbdb's and JHTDB's HDF5 cutouts); empty if they are not."""
    matches = [re.fullmatch(r"/?(.+)_(\d{4,})", n) for n in names]
    if len(names) < 2 or not all(matches) or len({m[1] for m in matches}) != 1:
        return []
    return sorted(((m[1], n) for m, n in zip(matches, names)), key=lambda step: step[1])


VARIABLES = Option(
    "variables",
    help="variable(s), comma-separated ones stacked as components (u,v,w).",
    parse=parse_variables,
)
