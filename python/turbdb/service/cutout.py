"""Cutouts streamed in z-slabs: the header first (``.npy`` or NetCDF-3), then one slab at a
time read by the engine, so a cube of any size passes through a bounded buffer."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import numpy as np
from starlette.responses import StreamingResponse

from ..arguments import known_field
from ..cutout import check_box, check_filter, nodes_read, output_shape, read_box, time_index
from ..dataset import Dataset
from ..info import DatasetInfo
from ..step_versions import VERSIONS_HEADER, StepVersions
from .admission import SMALL_REQUEST_POINTS
from .backend import Backend
from .transport import NETCDF, NPY, NetCDFStream, npy_header

FORMATS = {"npy": NPY, "netcdf": NETCDF}


@dataclasses.dataclass
class CutoutPlan:
    dataset: Dataset
    #: The dataset's metadata the plan was made from (the header, the coordinates): a
    #: dataset created again meanwhile ends the stream, its slabs are not the plan's.
    info: DatasetInfo
    field: str
    t_index: int
    time: float
    ranges: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]  # x, y, z
    strides: tuple[int, int, int]  # x, y, z
    filter_width: int
    shape: tuple[int, int, int, int]  # nz, ny, nx, ncomp
    planes_per_slab: int
    #: The rewrite count of the step, noted before its first slab is read.
    versions: StepVersions
    #: Whether a slab was read (and so sent): the step must not change until the last.
    begun: bool = False

    @property
    def nodes(self) -> int:
        nz, ny, nx, _ = self.shape
        return nz * ny * nx

    @property
    def nodes_read(self) -> int:
        """The nodes read: more than :attr:`nodes` with a box filter."""
        return nodes_read(self.info, self.ranges, self.strides, self.filter_width)

    def slabs(self) -> list[tuple[int, int]]:
        """z ranges of the slabs, each ``planes_per_slab`` output planes."""
        (z0, z1), sz = self.ranges[2], self.strides[2]
        step = self.planes_per_slab * sz
        return [(start, min(z1, start + step)) for start in range(z0, z1, step)]

    def read(self, z: tuple[int, int]) -> np.ndarray:
        """Blocking: the engine reads one slab, float32 ``(nz_slab, ny, nx, ncomp)`` (filtered
        and strided as asked). Every slab comes from one version of the step: the first is
        read again while a rewrite of the step overlaps it (nothing is sent yet); a later
        one that a rewrite overlapped is :class:`DatasetBusyError`, which cuts the answer
        short rather than mix two versions (:mod:`turbdb.step_versions`)."""
        x, y, _ = self.ranges
        while True:
            try:
                values = read_box(self.dataset, self.field, self.t_index, (x, y, z), self.strides, self.filter_width)
                self.versions.check(self.dataset)
                self.begun = True
                return values
            except Exception as error:  # any: one of a dataset created again is DatasetReplacedError (renewed)
                if self.begun or not self.versions.spoiled(self.dataset, error):
                    raise
            self.versions = self.versions.renewed(self.dataset).settled(self.dataset)


def plan(dataset: Dataset, field: str, *, time: float, x, y, z, strides: tuple[int, int, int], filter_width: int,
         chunk_bytes: int) -> CutoutPlan:
    """Checks the request as ``Dataset.cutout`` would (blocking: it asks the engine) and
    sizes the slabs."""
    known_field(dataset.name, dataset.metadata.fields, field)
    view = dataset.field_view(field)  # the grid, times and field id of one dataset
    info = view.info
    ranges = tuple((0, n) if r is None else r for r, n in zip((x, y, z), info.grid))
    t_index = time_index(view, time)
    check_box(dataset, field, t_index, ranges, view.made)
    ncomp = info.fields[field].ncomp
    check_filter(info, ranges, filter_width, ncomp)
    nz, ny, nx = output_shape(ranges, strides)
    plane = max(1, nx * ny * ncomp * 4)
    return CutoutPlan(dataset, info, field, t_index, float(info.times[t_index]), ranges, strides, filter_width,
                      (nz, ny, nx, ncomp), max(1, min(nz, chunk_bytes // plane)),
                      StepVersions.of(dataset, field, [t_index], view.made).settled(dataset))


def netcdf_layout(plan: CutoutPlan) -> NetCDFStream:
    """The NetCDF variables, with the metadata of a local cutout's NetCDF file
    (``turbdb cutout --out c.nc``): coordinates as ``Dataset.cutout`` gives them, x, y, z
    in the dataset's length unit, the time as a variable in its time unit, the field's
    ``units`` only where it has some, then the data."""
    info = plan.info
    nz, ny, nx, ncomp = plan.shape
    components = info.fields[plan.field].components
    width = max(len(c) for c in components)
    length_units, time_units = ({"units": u} if u else {} for u in (info.units.get("length"), info.units.get("time")))
    field_units = info.fields[plan.field].units
    variables = {}
    for axis in "xyz":
        variables[axis] = ((axis,), "f8", {"long_name": f"{axis} (physical)", **length_units})
        variables[f"{axis}_index"] = ((axis,), "i4", {"long_name": f"{axis} grid index"})
    variables["component"] = (("component", "strlen"), "S1", {"_Encoding": "utf-8"})
    variables["time"] = ((), "f8", time_units)
    variables["time_index"] = ((), "i4", {})
    stride = plan.strides[0] if len(set(plan.strides)) == 1 else list(plan.strides)
    variables[plan.field] = (("z", "y", "x", "component"), "f4",
                             {"dataset": plan.dataset.name, **({"units": field_units} if field_units else {}),
                              "time": plan.time, "time_index": plan.t_index, "stride": stride,
                              "filter_width": plan.filter_width,
                              "coordinates": "time time_index x_index y_index z_index"})
    strides = plan.strides[0] if len(set(plan.strides)) == 1 else ",".join(map(str, plan.strides))
    attrs = {"dataset": plan.dataset.name, "time": plan.time, "time_index": plan.t_index, "stride": strides,
             "filter_width": plan.filter_width, "Conventions": "CF-1.8", "source": "turbdb cutout"}
    return NetCDFStream({"z": nz, "y": ny, "x": nx, "component": ncomp, "strlen": width}, variables, attrs)


def _coordinate_bytes(plan: CutoutPlan, stream: NetCDFStream) -> bytes:
    info = plan.info
    chunks = []
    for (start, stop), stride, axis, o, d, n, periodic in zip(plan.ranges, plan.strides, "xyz", info.origin,
                                                               info.spacing, info.grid, info.periodic):
        index = np.arange(start, stop, stride)
        chunks.append(stream.small_data(axis, o + d * index))
        chunks.append(stream.small_data(f"{axis}_index", np.mod(index, n) if periodic else index))
    chunks.append(stream.small_data("component", info.fields[plan.field].components))
    chunks.append(stream.small_data("time", plan.time))
    chunks.append(stream.small_data("time_index", plan.t_index))
    return b"".join(chunks)


async def respond(backend: Backend, plan: CutoutPlan, fmt: str) -> StreamingResponse:
    """Streams the cutout. The first slab is read before the answer starts, so that an
    engine error on it is still a proper 4xx; a later failure cuts the stream short (the
    client sees fewer bytes than Content-Length announced)."""
    slabs = plan.slabs()
    first = await _read(backend, plan, slabs[0])
    big_endian = fmt == "netcdf"
    if big_endian:
        layout = netcdf_layout(plan)
        head = layout.header() + _coordinate_bytes(plan, layout)
        length = layout.total_bytes()
    else:
        head = npy_header(np.float32, plan.shape)
        length = len(head) + plan.nodes * plan.shape[3] * 4

    def encode(slab: np.ndarray) -> bytes:
        return slab.astype(">f4").tobytes() if big_endian else slab.tobytes()

    async def body() -> AsyncIterator[bytes]:
        yield head + encode(first)
        backend.metrics.cutout_chunks.inc()
        for z in slabs[1:]:
            yield encode(await _read(backend, plan, z))
            backend.metrics.cutout_chunks.inc()

    headers = {"Content-Length": str(length), "X-Turbdb-Time": repr(plan.time),
               "X-Turbdb-Time-Index": str(plan.t_index), "X-Turbdb-Shape": ",".join(map(str, plan.shape)),
               # The versions the first slab was read at, which every later slab keeps (or the
               # stream is cut short): for a client that split a cutout into boxes to compare.
               VERSIONS_HEADER: plan.versions.tag(),
               # The stored step counted from 1, as the HDF5 export (velocity_0002) and JHTDB (ts=2) count.
               "Content-Disposition": f'attachment; filename="{plan.dataset.name}-{plan.field}-{plan.t_index + 1}.'
                                      f'{"nc" if big_endian else "npy"}"'}
    return StreamingResponse(body(), media_type=FORMATS[fmt], headers=headers)


async def _read(backend: Backend, plan: CutoutPlan, z: tuple[int, int]) -> np.ndarray:
    nodes = len(range(z[0], z[1], plan.strides[2])) * plan.shape[1] * plan.shape[2]
    async with backend.limiter.admit(nodes):
        # A large slab is long work: large cutouts side by side must leave a thread to small requests.
        return await backend.run(plan.read, z, long=nodes > SMALL_REQUEST_POINTS)
