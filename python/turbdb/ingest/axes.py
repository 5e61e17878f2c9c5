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
    clash = [
        f"{d!r} looks like {letter!r}"
        for d, letter, g in zip(dims or [None] * ndim, letters, guess, strict=True)
        if letter is not None and letter != g
    ]
    if clash:
        raise FormatError(
            f"{what} has dimensions {tuple(dims or ())}: {', '.join(clash)}, which contradicts "
            f"the default axes {guess!r}; pass axes naming each dimension in order"
        )
    if "c" in guess and shape[guess.index("c")] > _MAX_DEFAULT_NCOMP:
        n = shape[guess.index("c")]
        if "t" in guess:
            instead = "pass axes naming each dimension in order"
        else:
            as_time = guess.replace("c", "t") if order == "F" else "t" + guess.replace("c", "")
            instead = f"if an axis is time, pass e.g. axes={as_time!r}"
        raise FormatError(
            f"{what} has shape {shape}: with the default axes {guess!r} it would have {n} "
            f"components, which is unlikely; {instead}. If it really holds {n} components, "
            f"pass axes={guess!r}"
        )
    return guess


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
