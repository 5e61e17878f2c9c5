"""Cutouts: the stored values on a box of grid nodes, at one or several stored times, with a
stride per axis and JHTDB's box filter (``filter_width``), as an ``xarray.DataArray``.

The filter averages the ``w³`` nodes around each output node (``w = filter_width``): nodes
``i − h … i − h + w − 1`` per axis with ``h = (w − 1) // 2`` (centred for odd ``w``),
wrapping on periodic axes and truncated at the walls of non-periodic ones (the mean of the
nodes inside). It is applied before the stride: every ``stride``-th filtered node is kept,
as JHTDB's cutout service does. Sums are taken in float64, axis by axis (the box is
separable), node by node in a fixed order, so any sub-box gives the same bits."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .arguments import MAX_INDEX, axes_of, known_field, node_range, time_list
from .exceptions import InvalidRequestError, OutOfDomainError
from .size_limit import check_result_bytes, check_work_bytes
from .written_steps import naming_the_step
from .step_versions import StepVersions, read_consistently

if TYPE_CHECKING:
    import xarray

    from .dataset import Dataset
    from .info import DatasetInfo
    from .step_versions import FieldView

Ranges = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
Strides = tuple[int, int, int]
# A local cutout is read in z-slabs of about this many bytes of float64 work space, so a
# filtered cutout of a large box never holds the whole expanded box in float64.
SLAB_BYTES = 64 * 2**20
# Nodes of one cutout handed to the node engine at once (a sixteenth of its default queue).
ENGINE_CUTOUT_NODES = 4_000_000


def cutout(dataset: Dataset, field: str, *, time: Any, x: Any = None, y: Any = None, z: Any = None,
           stride: Any = 1, filter_width: int = 1) -> xarray.DataArray:
    """See :meth:`turbdb.Dataset.cutout`."""
    known_field(dataset.name, dataset.metadata.fields, field)
    # The grid, times and field id of one dataset: every step read is checked against the
    # id, so a cutout during which the dataset was created again ends (DatasetReplacedError).
    view = dataset.field_view(field)
    info = view.info
    strides = as_strides(stride)
    width = as_filter_width(filter_width)
    ranges = box_ranges(info, x, y, z)
    t_indices = [time_index(view, t) for t in time_list(time)]
    for t_index in sorted(set(t_indices)):
        check_box(dataset, field, t_index, ranges, view.made)
    check_filter(info, ranges, width, info.fields[field].ncomp)
    shape = output_shape(ranges, strides) + (info.fields[field].ncomp,)
    # Counted before anything is allocated (float32 values): too large is a LimitExceededError.
    check_result_bytes(len(t_indices) * math.prod(shape) * 4, f"a cutout of {' x '.join(map(str, shape[2::-1]))} nodes",
                       "ask for a smaller box, a larger stride, or split the box into several cutouts")
    data = np.empty((len(t_indices),) + shape, dtype=np.float32)
    slabs = list(z_slabs(ranges, strides, width, info.fields[field].ncomp))
    for k, t_index in enumerate(t_indices):
        # Each step read whole from one version of it: again if a rewrite overlapped the read.
        read_consistently(dataset, StepVersions.of(dataset, field, [t_index], view.made),
                          lambda _, k=k, t_index=t_index: _read_step(dataset, field, t_index, ranges, strides, width,
                                                                   slabs, data[k]))
    return cutout_array(dataset.name, info, field, data if np.ndim(time) else data[0], ranges, strides,
                        t_indices if np.ndim(time) else t_indices[0], width)


def _read_step(dataset: Dataset, field: str, t_index: int, ranges: Ranges, strides: Strides, width: int,
               slabs: list[tuple[tuple[int, int], tuple[int, int]]], out: np.ndarray) -> None:
    """The box at one step into ``out``, z-slab by z-slab (:func:`z_slabs`)."""
    for (z0, z1), (k0, k1) in slabs:
        read_box(dataset, field, t_index, (ranges[0], ranges[1], (z0, z1)), strides, width, out=out[k0:k1])


def check_box(dataset: Dataset, field: str, t_index: int, ranges: Ranges, made: int | None) -> None:
    """Lets the engine check a box with its own messages (empty range, outside a
    non-periodic axis, step not written: named by its time index and time) by reading a
    single node: a stride longer than every range keeps only each first node. Read again
    if a rewrite of the step overlapped it (its shard replaced as it was opened);
    ``made``: the field's id the box was made for (:class:`~turbdb.step_versions.FieldView`)."""
    stride = max(1, *(b - a for a, b in ranges))
    try:
        read_consistently(dataset, StepVersions.of(dataset, field, [t_index], made),
                          lambda _: read_nodes(dataset, field, t_index, ranges, stride))
    except InvalidRequestError as e:
        named = naming_the_step(e, dataset.metadata.times, field)
        if named is e:
            raise
        raise named from None


def check_ranges(info: DatasetInfo, ranges: Ranges) -> None:
    """Refuses an empty range and one outside a non-periodic axis, with the engine's words
    (for a client that sends the box in pieces, which the server checks one by one)."""
    for name, (start, stop), n, periodic in zip("xyz", ranges, info.grid, info.periodic):
        if stop <= start:
            raise InvalidRequestError(f"{name} range [{start}, {stop}) is empty")
        if not periodic and (start < 0 or stop > n):
            raise OutOfDomainError(f"{name} range [{start}, {stop}) is outside the non-periodic axis [0, {n})")


def check_filter_width(info: DatasetInfo, width: int) -> None:
    """Refuses a box filter wider than a periodic axis: its box would take nodes twice (on a
    bounded axis the box is cut at the walls instead)."""
    for name, n, periodic in zip("xyz", info.grid, info.periodic):
        if periodic and width > n:
            widest = min(m for m, p in zip(info.grid, info.periodic) if p)
            raise InvalidRequestError(f"filter_width {width} is wider than the grid's {n} nodes along the periodic "
                                      f"{name} axis (its box would take nodes twice); at most {widest}")


def check_filter(info: DatasetInfo, ranges: Ranges, width: int, ncomp: int) -> None:
    """Refuses a box filter wider than a periodic axis (its box would take nodes twice),
    and one whose reads for a single output plane — every node within ``width`` of the
    plane, as float64 — would not fit :func:`turbdb.set_max_result_bytes`'s limit: a
    2 × 2 × 2 cutout filtered 1 000 wide read a billion nodes and exhausted memory."""
    if width == 1:
        return
    check_filter_width(info, width)
    # The nodes read for one output plane; along a bounded axis at most the axis (the box
    # is cut at the walls).
    (x0, x1), (y0, y1), _ = ranges
    wanted = (x1 - x0 + width - 1, y1 - y0 + width - 1, width)
    read = [w if periodic else min(w, n) for w, n, periodic in zip(wanted, info.grid, info.periodic)]
    check_work_bytes(math.prod(read) * ncomp * 8,
                     f"a box filter {width} nodes wide over this box",
                     "ask for a narrower filter or a smaller box in x and y")


def read_nodes(dataset: Dataset, field: str, t_index: int, ranges: Ranges, stride: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """Blocking: the stored values on the nodes ``ranges`` with one ``stride``, float32
    ``(nz, ny, nx, ncomp)`` — into ``out`` if given (C-contiguous, that shape), which is
    returned: through the database's node engine when it has one (the atoms come from, and
    stay in, the cache every query shares), else read alone, straight into ``out``. Through
    the engine a large box goes in z-slabs of at most :data:`ENGINE_CUTOUT_NODES` nodes, so
    that one cutout never fills the engine's queue. The callers read within
    :func:`~turbdb.step_versions.read_consistently` or check their versions after: a
    dataset created again since the box was made is found there."""
    view = dataset.field_view(field)  # axes and store of one dataset
    info, store = view.info, view.store
    axes = axes_of(info)
    engine = dataset.engine
    if engine is None:
        if out is None:
            return store.cutout(t_index, axes, ranges, stride)
        store.cutout_into(t_index, axes, ranges, stride, out)
        return out
    (x0, x1), (y0, y1), (z0, z1) = ranges
    nz, ny, nx = output_shape(ranges, (stride,) * 3)
    planes = max(1, ENGINE_CUTOUT_NODES // max(nx * ny, 1))
    if nz <= planes and out is None:
        return engine.cutout(store, t_index, axes, ranges, stride)
    ncomp = info.fields[field].ncomp
    check_result_bytes(nz * ny * nx * ncomp * 4, f"a cutout of {nx} x {ny} x {nz} nodes",
                       "ask for a smaller box, a larger stride, or split the box into several cutouts")
    if out is None:
        out = np.empty((nz, ny, nx, ncomp), dtype=np.float32)
    for k0 in range(0, nz, planes):
        k1 = min(nz, k0 + planes)
        slab = ((x0, x1), (y0, y1), (z0 + k0 * stride, z0 + (k1 - 1) * stride + 1))
        out[k0:k1] = engine.cutout(store, t_index, axes, slab, stride)
    return out


def read_box(dataset: Dataset, field: str, t_index: int, ranges: Ranges, strides: Strides,
             filter_width: int = 1, out: np.ndarray | None = None) -> np.ndarray:
    """Blocking: the (filtered, strided) values on the nodes ``ranges`` (x, y, z; half-open,
    unwrapped) at time index ``t_index``, float32 ``(nz, ny, nx, ncomp)`` — into ``out`` if
    given (C-contiguous, that shape), which is returned. The caller has checked the box
    (:func:`check_box`): the filter clips its reads to the domain."""
    info = dataset.metadata
    if filter_width == 1 and len(set(strides)) == 1:
        return read_nodes(dataset, field, t_index, ranges, strides[0], out)
    if filter_width == 1:
        if out is None:
            out = np.empty(output_shape(ranges, strides) + (info.fields[field].ncomp,), dtype=np.float32)
        _read_strided(dataset, field, t_index, ranges, strides, out)
        return out
    values = _read_filtered(dataset, info, field, t_index, ranges, strides, filter_width)
    if out is None:
        return values
    out[...] = values
    return out


def _read_strided(dataset: Dataset, field: str, t_index: int, ranges: Ranges, strides: Strides,
                  out: np.ndarray) -> None:
    """The nodes kept by different strides per axis, into ``out`` (any layout whose last axis
    is contiguous). The store reads with one stride: read at the strides' gcd, a box of
    stride (2, 1, 1) read twice its nodes and one of (128, 1, 1) 128 times. So an axis that
    keeps one node is read as that node alone, and an axis whose stride skips whole atoms is
    read plane by plane (each kept plane alone touches fewer atoms than the box at the gcd);
    what is left is read at the gcd and copied once."""
    kept = [node_count(start, stop, s) for (start, stop), s in zip(ranges, strides)]
    ranges = tuple(r if n > 1 else (r[0], r[0] + 1) for r, n in zip(ranges, kept))  # type: ignore[assignment]
    many = [a for a in range(3) if kept[a] > 1]
    if len({strides[a] for a in many}) <= 1:  # one stride wherever more than one node is kept
        step = strides[many[0]] if many else 1
        if out.flags.c_contiguous:
            read_nodes(dataset, field, t_index, ranges, step, out)
        else:
            _copy_nodes(out, read_nodes(dataset, field, t_index, ranges, step))
        return
    atom = dataset.metadata.atom
    skipping = [a for a in many if strides[a] >= atom]
    if not skipping:
        step = math.gcd(*(strides[a] for a in many))
        sx, sy, sz = (max(1, s // step) for s in strides)
        _copy_nodes(out, read_nodes(dataset, field, t_index, ranges, step)[::sz, ::sy, ::sx])
        return
    axis = max(skipping, key=lambda a: strides[a])  # x, y, z: array axis 2 - axis
    start, stop = ranges[axis]
    for k, at in enumerate(range(start, stop, strides[axis])):
        plane = tuple((at, at + 1) if a == axis else ranges[a] for a in range(3))
        _read_strided(dataset, field, t_index, plane, strides,  # type: ignore[arg-type]
                      out[(slice(None),) * (2 - axis) + (slice(k, k + 1),)])


def _copy_nodes(target: np.ndarray, source: np.ndarray) -> None:
    """``target[...] = source`` a node (its components) at a time: numpy copies a strided
    ``(…, 3)`` float32 array 2–3 times faster as 12-byte items than as 4-byte ones."""
    if source.dtype == target.dtype and source.strides[-1] == source.itemsize \
            and target.strides[-1] == target.itemsize:
        node = np.dtype((np.void, source.shape[-1] * source.itemsize))
        target.view(node)[...] = source.view(node)
    else:
        target[...] = source


def _read_filtered(dataset: Dataset, info: DatasetInfo, field: str, t_index: int, ranges: Ranges, strides: Strides,
                   filter_width: int) -> np.ndarray:
    """:func:`read_box` of a filtered box."""
    windows = [_windows(a, b, s, filter_width, n, periodic)
               for (a, b), s, n, periodic in zip(ranges, strides, info.grid, info.periodic)]
    read = tuple((w.lo, w.hi) for w in windows)
    values = read_nodes(dataset, field, t_index, read, 1).astype(np.float64)
    for axis, window in zip((2, 1, 0), windows):  # x, y, z are array axes 2, 1, 0
        values = window.mean(values, axis)
    return values.astype(np.float32)


class _windows:
    """The box windows of one axis: output nodes ``start, start+stride, … < stop`` each
    averaging ``[i − h, i − h + w)``, clipped to ``[0, n)`` on a non-periodic axis. ``lo`` and
    ``hi`` bound the nodes to read (unwrapped)."""

    def __init__(self, start: int, stop: int, stride: int, width: int, n: int, periodic: bool):
        half = (width - 1) // 2
        centres = np.arange(start, stop, stride)
        first, last = centres - half, centres - half + width
        if not periodic:
            first, last = np.maximum(first, 0), np.minimum(last, n)
        self.lo, self.hi = int(first.min()), int(last.max())
        self.first, self.last = first - self.lo, last - self.lo
        self.width = width

    def mean(self, values: np.ndarray, axis: int) -> np.ndarray:
        """The window means along ``axis``, each summed node by node from its first node, so
        that a node's value does not depend on the box around it: a cutout split into
        boxes (as a server's batches) equals the whole to the last bit."""
        shape = [1] * values.ndim
        shape[axis] = len(self.first)
        total = np.zeros(values.shape[:axis] + (len(self.first),) + values.shape[axis + 1:])
        # Past the longest window (cut at a wall) every offset adds nothing.
        for offset in range(int(np.max(self.last - self.first, initial=0))):
            index = self.first + offset
            inside = index < self.last
            part = np.take(values, np.minimum(index, values.shape[axis] - 1), axis=axis)
            total += part if inside.all() else np.where(inside.reshape(shape), part, 0.0)
        return total / (self.last - self.first).astype(np.float64).reshape(shape)


def z_slabs(ranges: Ranges, strides: Strides, filter_width: int, ncomp: int) -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """The z sub-ranges a box is read in, each with the output planes it fills, so that the
    float64 work space of one read stays near :data:`SLAB_BYTES`."""
    (x0, x1), (y0, y1), (z0, z1) = ranges
    sx, sy, sz = strides
    nz = len(range(z0, z1, sz))
    if filter_width == 1 and sx == sy == sz:
        planes = nz  # read straight into the answer: no work space
    else:
        plane_bytes = (x1 - x0 + filter_width) * (y1 - y0 + filter_width) * ncomp * 8 * sz
        planes = max(1, SLAB_BYTES // plane_bytes)
    for k0 in range(0, nz, planes):
        k1 = min(nz, k0 + planes)
        yield (z0 + k0 * sz, z0 + (k1 - 1) * sz + 1), (k0, k1)


def cutout_array(dataset_name: str, info: DatasetInfo, field: str, data: np.ndarray, ranges: Sequence[tuple[int, int]],
                 strides: Any, t_index: int | Sequence[int], filter_width: int = 1) -> xarray.DataArray:
    """The cutout ``data`` as the DataArray :meth:`turbdb.Dataset.cutout` returns (also built
    by the remote client): dims ``(z, y, x, component)``, with a leading ``time`` dim when
    ``t_index`` is a sequence; physical and index coordinates. One time is also a scalar
    ``time`` and ``time_index`` coordinate, as ``isel`` leaves of several, so that both
    shapes concatenate, select and export alike (the ``time``/``time_index`` attributes stay
    for code that reads them). ``units`` attributes: the field's on the array, the
    dataset's length and time units on x, y, z and time, where known."""
    import xarray

    strides = as_strides(strides)
    length_units, time_units = (_units(info.units.get(kind)) for kind in ("length", "time"))
    coords: dict[str, Any] = {}
    many = not np.isscalar(t_index) and np.ndim(t_index) == 1
    if many:
        indices = np.asarray(t_index, dtype=np.int64)
        coords["time"] = ("time", info.times[indices], time_units)
        coords["time_index"] = ("time", indices)
    else:
        coords["time"] = ((), float(info.times[int(t_index)]), time_units)
        coords["time_index"] = ((), int(t_index))
    for (start, stop), s, name, o, d, n, periodic in zip(ranges, strides, "xyz", info.origin, info.spacing,
                                                         info.grid, info.periodic):
        index = np.arange(start, stop, s)
        coords[name] = (name, o + d * index, length_units)
        coords[f"{name}_index"] = (name, np.mod(index, n) if periodic else index)
    coords["component"] = ("component", info.fields[field].components)
    attrs: dict[str, Any] = {"dataset": dataset_name, **_units(info.fields[field].units)}
    if not many:
        attrs.update(time=float(info.times[int(t_index)]), time_index=int(t_index))
    attrs["stride"] = strides[0] if len(set(strides)) == 1 else list(strides)
    attrs["filter_width"] = int(filter_width)
    dims = (("time",) if many else ()) + ("z", "y", "x", "component")
    return xarray.DataArray(data, dims=dims, coords=coords, name=field, attrs=attrs)


def _units(units: str | None) -> dict[str, str]:
    """The ``units`` attribute for ``units``; none where the dataset does not say (CF
    readers take a missing attribute as unknown, an empty one as dimensionless)."""
    return {"units": units} if units else {}


# -- arguments ---------------------------------------------------------------------------------


def as_strides(stride: Any) -> Strides:
    """A stride for every axis from one positive integer or three (x, y, z)."""
    values = (stride,) * 3 if isinstance(stride, (int, np.integer)) else tuple(stride) \
        if isinstance(stride, (tuple, list, np.ndarray)) else None
    if values is None or len(values) != 3 or not all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) and 1 <= s <= MAX_INDEX for s in values):
        raise InvalidRequestError(f"stride must be a positive integer, or three (x, y, z), not {stride!r}")
    return tuple(int(s) for s in values)  # type: ignore[return-value]


def parse_strides(text: str) -> Strides:
    """``"2"`` or ``"1,2,2"`` (an HTTP or command-line parameter) as three strides."""
    try:
        values = [int(v) for v in text.replace(":", ",").split(",")]
    except ValueError:
        raise InvalidRequestError(f"stride must be a positive integer or three (x,y,z), e.g. 2 or 1,2,2; not {text!r}") from None
    return as_strides(values[0] if len(values) == 1 else values)


def as_filter_width(width: Any) -> int:
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise InvalidRequestError(f"filter_width must be a positive integer (1: no filter), not {width!r}")
    return int(width)


def box_ranges(info: DatasetInfo, x: Any, y: Any, z: Any) -> Ranges:
    """Half-open node ranges per axis; ``None`` is the whole axis."""
    return tuple((0, n) if value is None else node_range(name, value)
                 for name, value, n in zip("xyz", (x, y, z), info.grid))  # type: ignore[return-value]


def nodes_read(info: DatasetInfo, ranges: Ranges, strides: Strides, width: int) -> int:
    """The nodes a cutout reads: its output nodes, or with a box filter every node from the
    first window's start to the last one's end on each axis (as :class:`_windows` reads
    them), which is what a server counts against a token's limit: a 16 × 16 × 16 box
    strided 64 and filtered 64 wide is 4 096 nodes out but 1 009³ read."""
    if width == 1:
        return math.prod(output_shape(ranges, strides))
    half, total = (width - 1) // 2, 1
    for (start, stop), stride, n, periodic in zip(ranges, strides, info.grid, info.periodic):
        count = node_count(start, stop, stride)
        lo, hi = start - half, start + (count - 1) * stride - half + width
        total *= (min(hi, n) - max(lo, 0)) if not periodic else hi - lo
    return total


def output_shape(ranges: Ranges, strides: Strides) -> tuple[int, int, int]:
    """``(nz, ny, nx)`` of a box."""
    nx, ny, nz = (node_count(a, b, s) for (a, b), s in zip(ranges, strides))
    return nz, ny, nx


def node_count(start: int, stop: int, stride: int) -> int:
    """``len(range(start, stop, stride))`` for a positive stride, by arithmetic: ``len`` of a
    range over more than 2**63 nodes (ends within ±2**62) raised a bare OverflowError where
    the request's size should be refused against its limit."""
    return max(0, (stop - start + stride - 1) // stride)


def time_index(view: FieldView, time: float) -> int:
    """The stored step of the dataset ``view`` shows nearest ``time`` (the engine refuses
    times outside the stored range)."""
    (t_index, _), = view.store.time_levels(view.info.times, float(time), "none")
    return int(t_index)
