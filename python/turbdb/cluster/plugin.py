"""The worker side of a turbdb cluster: a Dask ``WorkerPlugin`` that gives every worker a
:class:`~turbdb.cluster.node.Node` over the data root of its slot, and the work the
mediator sends — query and cutout units through each worker's actor
(:mod:`~turbdb.cluster.server`), file transfers as tasks — each looking its node up by
the plugin's name, so several databases can share one Dask cluster. A worker restarted by
its nanny keeps its name, hence its slot and data; one whose name is not in the catalogue
has no node and serves nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
from distributed import Client, WorkerPlugin, get_worker

from ..exceptions import StorageError
from . import dashboard
from .catalogue import Catalogue
from .handoff import SharedArray, write_into
from .node import Node, Partition


class NodePlugin(WorkerPlugin):
    """Holds the node of one database on a worker. ``roots`` maps each slot (a worker's
    name) to its data root."""

    def __init__(self, name: str, roots: dict[str, str]):
        self.name = name
        self.roots = dict(roots)
        self.node: Node | None = None

    def setup(self, worker: Any) -> None:
        slot = str(worker.name)
        self.node = Node(self.roots[slot], slot) if slot in self.roots else None

    def teardown(self, worker: Any) -> None:
        self.node = None


def install(client: Client, catalogue: Catalogue, *, replace: bool) -> None:
    """Gives every worker (present and future) its node of the catalogue's database;
    ``replace`` after the catalogue changed, else an installed plugin keeps its caches. The
    scheduler gets the plugin that shows the units on the dashboard."""
    node_plugin = NodePlugin(catalogue.plugin_name, catalogue.slots)
    node_plugin.idempotent = not replace
    client.register_plugin(node_plugin, name=catalogue.plugin_name)
    dashboard.install(client)


def node_of(plugin: str) -> Node:
    """This worker's node for the database whose plugin is named ``plugin``."""
    worker = get_worker()
    holder = worker.plugins.get(plugin)
    node = getattr(holder, "node", None)
    if node is None:
        raise StorageError(f"worker {worker.name!r} ({worker.address}) holds no partitions of this database; "
                           "it is not in the cluster's catalogue (turbdb cluster repair uses new workers)")
    return node


# -- the work (run on workers; module-level so that tasks pickle them by reference) ----------


def partial_sums(plugin: str, dataset: str, field: str, points: np.ndarray | SharedArray, spec: dict[str, Any],
                 partitions: list[Partition], dtype: str | None = None,
                 answer_to: str | None = None) -> np.ndarray | SharedArray:
    """A unit's answer: its partial sums (float64), or, for whole points, the answer in the
    query's ``dtype``. Points may come in shared memory, and the answer goes into the file
    ``answer_to`` when given (:mod:`~turbdb.cluster.handoff`; the array itself if it cannot)."""
    if isinstance(points, SharedArray):
        points = points.load()
    values = node_of(plugin).partial_sums(dataset, field, points, partitions=partitions, dtype=dtype, **spec)
    if answer_to is not None and (shared := write_into(answer_to, values, dtype)) is not None:
        return shared  # cast on the way into the file
    return values if dtype is None else values.astype(dtype, copy=False)


def cutout(plugin: str, dataset: str, field: str, t_index: int, ranges: Any, stride: int) -> np.ndarray:
    return node_of(plugin).cutout(dataset, field, t_index, ranges, stride)


def read_files(plugin: str, relative: list[str]) -> list[bytes | None]:
    return node_of(plugin).read_files(relative)


def write_files(plugin: str, relative: list[str], contents: list[bytes | None]) -> int:
    return node_of(plugin).write_files(relative, contents)


def copy_in(plugin: str, source: str, relative: list[str]) -> int:
    return node_of(plugin).copy_in(source, relative)


def work_done(plugin: str) -> dict[str, Any]:
    """The node's counters, or an empty dict on a worker without a node."""
    holder = get_worker().plugins.get(plugin)
    node = getattr(holder, "node", None)
    return {} if node is None else {"slot": node.slot, "root": str(node.root), "work": node.work}
