"""Which axis of a stored array is time, z, y, x or component: given by the user, read from
the file's dimension names, or assumed from the number of dimensions."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turbdb.exceptions import FormatError, InvalidRequestError

__all__ = ["Layout", "axis_letter", "check_axes", "default_axes", "resolve_axes"]

# More components than this under the *default* axes almost always means the axis is time
# (a 3x3 tensor such as the velocity gradient is the largest field a DNS stores).
_MAX_DEFAULT_NCOMP = 9
# What a field's components number: scalar, vector, symmetric and full 3x3 tensor. Another
# count in the last axis while the first is as small is as likely a thin grid's nx, read
# transposed if taken for components.
_FIELD_NCOMP = frozenset({1, 3, 6, 9})
# Layouts people write, in the order one is suggested when dimension names only name some
# axes: C order (numpy, xarray) first, then Fortran's.
_LAYOUTS = ("zyx", "zyxc", "tzyx", "czyx", "tzyxc", "tczyx", "ctzyx",
            "xyz", "xyzc", "xyzt", "cxyz", "txyz", "xyzct", "cxyzt", "txyzc")
_AXIS_NAMES = {"t": "time", "c": "components", "x": "x", "y": "y", "z": "z"}


@dataclass(frozen=True)
class Layout:
    """The axes of one stored array (letters from "tzyxc"), its shape, and how many
    separately stored variables are stacked as its components."""

    axes: str
    shape: tuple[int, ...]
    n_stacked: int = 1

    def _size(self, letter: str) -> int:
        return self.shape[self.axes.index(letter)]

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self._size("x"), self._size("y"), self._size("z"))

    @property
    def ncomp(self) -> int:
        return self._size("c") if "c" in self.axes else self.n_stacked

    @property
    def n_steps(self) -> int:
        return self._size("t") if "t" in self.axes else 1

    @property
    def step_shape(self) -> tuple[int, ...]:
        """The shape of one step as stored, i.e. without the time axis."""
        return tuple(n for a, n in zip(self.axes, self.shape, strict=True) if a != "t")

    def step_key(self, index: int) -> tuple[int | slice, ...]:
        """A basic-indexing key that cuts step ``index`` out of the stored array."""
        return tuple(index if a == "t" else slice(None) for a in self.axes)

    def to_zyxc(self, blocks: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
        """Put one step (one block per stacked variable, in stored order without the time
        axis) into a new C-contiguous (nz, ny, nx, ncomp) array of ``dtype``."""
        rest = self.axes.replace("t", "")
        perm = [rest.index(a) for a in "zyxc" if a in rest]
        nx, ny, nz = self.grid
        if len(blocks) == 1:
            view = blocks[0].transpose(perm)
            if "c" not in rest:
                view = view[..., np.newaxis]
            # A freshly read block that is already in place needs no second copy; anything
            # else (notably a view into a memory map) is copied so the caller owns the result.
            if view.flags.c_contiguous and view.dtype == dtype and blocks[0].flags.owndata:
                return view
            return np.array(view, dtype=dtype, order="C")
        out = np.empty((nz, ny, nx, len(blocks)), dtype=dtype)
        for c, block in enumerate(blocks):
            out[..., c] = block.transpose(perm)
        return out


def default_axes(ndim: int, *, order: str = "C", stacked: bool = False) -> str | None:
    """The axes assumed when none are given and the file names none, or None if there is
    no sensible default for ``ndim``."""
    if order == "F":
        # A Fortran u(nx, ny, nz, 3, nt) read with order="F" keeps that index order.
        table = {3: "xyz", 4: "xyzt"} if stacked else {3: "xyz", 4: "xyzc", 5: "xyzct"}
    else:
        table = {3: "zyx", 4: "tzyx"} if stacked else {3: "zyx", 4: "zyxc", 5: "tzyxc"}
    return table.get(ndim)


def check_axes(
    axes: Any, shape: tuple[int, ...], *, what: str, order: str = "C", stacked: bool = False
) -> str:
    """Validate user-given ``axes`` against an array of ``shape``; return them normalised."""
    if not isinstance(axes, str):
        raise InvalidRequestError(
            f"axes must be a string of letters from t, z, y, x, c such as 'zyxc'; got {axes!r}"
        )
    norm = axes.strip().lower()
    unknown = sorted(set(norm) - set("tzyxc"))
    if unknown:
        raise InvalidRequestError(
            f"axes {axes!r} contains {', '.join(map(repr, unknown))}; use only the letters "
            "t (time), z, y, x and c (component), one per array axis, e.g. 'zyxc'"
        )
    repeated = sorted({a for a in norm if norm.count(a) > 1})
    if repeated:
        raise InvalidRequestError(
            f"axes {axes!r} names {', '.join(map(repr, repeated))} more than once; "
            "each letter may appear only once"
        )
    missing = [a for a in "xyz" if a not in norm]
    if missing:
        raise InvalidRequestError(
            f"axes {axes!r} lacks {', '.join(map(repr, missing))}; x, y and z must each "
            "appear once (turbdb stores 3-D fields)"
        )
    if stacked and "c" in norm:
        raise InvalidRequestError(
            f"axes {axes!r} has 'c', but the components come from separate variables; "
            "describe one variable, e.g. 'zyx' or 'tzyx'"
        )
    if len(norm) != len(shape):
        example = default_axes(len(shape), order=order, stacked=stacked)
        hint = f", e.g. {example!r}" if example else ""
        raise InvalidRequestError(
            f"axes {axes!r} names {len(norm)} axes but {what} has {len(shape)} "
            f"(shape {shape}); give one letter per axis{hint}"
        )
    return norm


_T_NAMES = frozenset(
    {"t", "time", "times", "nt", "it", "step", "steps", "timestep", "timesteps", "tstep",
     "record", "records", "rec", "snapshot", "snapshots"}
)
_C_NAMES = frozenset(
    {"c", "comp", "comps", "component", "components", "ncomp", "ncomps", "nc", "icomp",
     "vec", "vector", "dir", "direction", "nvar"}
)
# x, y or z with a prefix or suffix seen in simulation output: nx, ix, xc (centres),
# xf (faces), xh (half-grid), x_dim, x_axis.
_SPATIAL = re.compile(r"(?:n|i|num)?([xyz])(?:dim|axis|grid|c|f|h|s|pos|coord)?")


def axis_letter(name: str | None, cf_axis: str | None = None) -> str | None:
    """The axis letter a dimension name (or its CF ``axis`` attribute) stands for, if any."""
    if isinstance(cf_axis, str) and cf_axis.strip().upper() in ("X", "Y", "Z", "T"):
        return cf_axis.strip().lower()
    if not name:
        return None
    found = set()
    for token in re.split(r"[^a-z0-9]+", name.lower()):
        if token in _T_NAMES:
            found.add("t")
        elif token in _C_NAMES:
            found.add("c")
        elif m := _SPATIAL.fullmatch(token):
            found.add(m.group(1))
    return found.pop() if len(found) == 1 else None


def resolve_axes(
    axes: str | None,
    shape: tuple[int, ...],
    *,
    what: str,
    order: str = "C",
    stacked: bool = False,
    dims: Sequence[str | None] | None = None,
    cf_axes: Sequence[str | None] | None = None,
) -> str:
    """The axes of an array: as given, else from its dimension names, else the default for
    its number of dimensions — validated in every case."""
    if axes is not None:
        return check_axes(axes, shape, what=what, order=order, stacked=stacked)
    ndim = len(shape)
    letters: list[str | None] = [None] * ndim
    if dims is not None and len(dims) == ndim:
        cf = list(cf_axes) if cf_axes is not None else [None] * ndim
        letters = [axis_letter(d, a) for d, a in zip(dims, cf, strict=True)]
    named = _complete_from_names(letters, dims, what=what, stacked=stacked)
    if named is not None:
        return check_axes(named, shape, what=what, stacked=stacked)
    guess = default_axes(ndim, order=order, stacked=stacked)
    if guess is None:
        allowed = "3 or 4 (each a scalar, optionally with time)" if stacked else "3 to 5"
        raise FormatError(
            f"{what} has {ndim} dimensions (shape {shape}); turbdb reads arrays with {allowed} "
            "dimensions: z, y, x, optionally time and components"
        )
    clash = [i for i, (letter, g) in enumerate(zip(letters, guess, strict=True)) if letter is not None and letter != g]
    if clash and dims is not None:
        taken = ", ".join(f"{dims[i]!r} reads as {_AXIS_NAMES[letters[i]]}" for i in clash)  # type: ignore[index]
        where = ", ".join(_AXIS_NAMES[guess[i]] for i in clash)
        advice = "pass axes naming each dimension in order"
        example = _suggested_axes(letters, order=order, stacked=stacked)
        if example is not None:
            reading = ", ".join(f"{d!r} as {_AXIS_NAMES[a]}" for d, a in zip(dims, example, strict=True))
            advice += f", e.g. axes={example!r} ({reading}) if the others are in that order"
        raise FormatError(
            f"{what} has dimensions {tuple(dims)}: {taken}, where the default axes {guess!r} put {where}; {advice}"
        )
    if "c" in guess:
        _check_default_components(guess, shape, what=what, order=order)
    return guess


def _check_default_components(guess: str, shape: tuple[int, ...], *, what: str, order: str) -> None:
    """Refuses default axes whose component axis is more likely time or a thin grid's
    nodes: taken for components, the field would be stored transposed without a word."""
    n = shape[guess.index("c")]
    # A component-first array, np.stack([u, v, w]) or Fortran's u(3, nx, ny, nz), holds its
    # components where the grid would begin.
    lead = next(i for i, a in enumerate(guess) if a in "xyz")
    first = shape[lead]
    if n <= _MAX_DEFAULT_NCOMP and (n in _FIELD_NCOMP or first > _MAX_DEFAULT_NCOMP):
        return
    ordinal = "first" if lead == 0 else "second"
    options = []
    if first <= _MAX_DEFAULT_NCOMP:
        component_first = guess[:lead] + "c" + guess[lead:].replace("c", "")
        options.append(f"axes={component_first!r} if its {ordinal} axis ({first}) holds the components")
    if "t" not in guess:
        as_time = guess.replace("c", "t") if order == "F" else "t" + guess.replace("c", "")
        options.append(f"axes={as_time!r} if its {'last' if order == 'F' else 'first'} axis is time")
    instead = "pass " + ", or ".join(options) if options else "pass axes naming each dimension in order"
    if n > _MAX_DEFAULT_NCOMP:
        why = f"it would have {n} components, which is unlikely"
    else:
        nx, ny, nz = Layout(guess, shape).grid
        why = (f"it would be a grid of {nx} x {ny} x {nz} with {n} components; fields have 1, 3, 6 or 9, and "
               f"with an axis as short as its {ordinal} ({first}) the layout cannot be told from the shape")
    raise FormatError(
        f"{what} has shape {shape}: with the default axes {guess!r} {why}; {instead}. "
        f"If it really holds {n} components, pass axes={guess!r}"
    )


def _suggested_axes(letters: Sequence[str | None], *, order: str, stacked: bool) -> str | None:
    """The first usual layout that gives each named dimension the axis its name says."""
    fortran_first = sorted(_LAYOUTS, key=lambda a: a.index("z") < a.index("x"))
    for layout in fortran_first if order == "F" else _LAYOUTS:
        if len(layout) == len(letters) and not (stacked and "c" in layout) and all(
                a is None or a == b for a, b in zip(letters, layout, strict=True)):
            return layout
    return None


def _complete_from_names(
    letters: list[str | None], dims: Sequence[str | None] | None, *, what: str, stacked: bool
) -> str | None:
    """Axes from recognised dimension names, or None if the names do not tell."""
    known = [a for a in letters if a is not None]
    if len(known) != len(set(known)):
        raise FormatError(
            f"{what} has dimensions {tuple(dims or ())}, several of which look like the same "
            "axis; pass axes naming each dimension in order, e.g. 'tzyxc'"
        )
    if not set("xyz") <= set(known):
        return None
    unknown = [i for i, a in enumerate(letters) if a is None]
    if not unknown:
        return "".join(known)
    if len(unknown) > 1:
        return None
    spare = [a for a in "tc" if a not in known and not (stacked and a == "c")]

    def filled(letter: str) -> str:
        return "".join(letter if a is None else a for a in letters)

    if len(spare) != 1:
        dim = dims[unknown[0]] if dims else None
        raise FormatError(
            f"{what} has dimensions {tuple(dims or ())}: cannot tell whether {dim!r} is time "
            f"or components; pass axes={filled('t')!r} if it is time, or axes={filled('c')!r} "
            "if it holds components"
        )
    return filled(spare[0])
