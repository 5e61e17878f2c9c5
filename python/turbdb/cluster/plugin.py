"""The worker side of a turbdb cluster: a Dask ``WorkerPlugin`` that gives every worker a
:class:`~turbdb.cluster.node.Node` over the data root of its slot, and the work the
mediator sends — query and cutout units through each worker's actor
(:mod:`~turbdb.cluster.server`), file transfers as tasks — each looking its node up by
the plugin's name, so several databases can share one Dask cluster. A worker restarted by
its nanny keeps its name, hence its slot and data; one whose name is not in the catalogue
has no node and serves nothing. Each node knows what the catalogue records was placed, and
checks its copy against it (:mod:`~turbdb.cluster.node`)."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from distributed import Client, WorkerPlugin, get_worker

from ..exceptions import StorageError
from . import dashboard
from .bounded import within
from .catalogue import Catalogue
from .handoff import SharedArray, write_into
from .node import Node, Partition


#: How long giving the workers their nodes may wait for them all to confirm …
INSTALL_SECONDS = 10.0
#: … and where a worker is known not to answer (it never confirms; the others take their
#: nodes within this).
QUIET_INSTALL_SECONDS = 2.0


class NodePlugin(WorkerPlugin):
    """Holds the node of one database on a worker. ``roots`` maps each slot (a worker's
    name) to its data root; ``expected``: what each dataset held when placed (node-local
    copies), which every node checks its copy against."""

    def __init__(self, name: str, roots: dict[str, str], expected: dict[str, dict[str, Any]] | None = None):
        self.name = name
        self.roots = dict(roots)
        self.expected = expected
        self.node: Node | None = None

    def setup(self, worker: Any) -> None:
        slot = str(worker.name)
        # (a plugin pickled by an older turbdb has no record to check against)
        self.node = Node(self.roots[slot], slot, getattr(self, "expected", None)) if slot in self.roots else None

    def teardown(self, worker: Any) -> None:
        self.node = None


def install(client: Client, catalogue: Catalogue, *, replace: bool, some_quiet: bool = False) -> None:
    """Gives every worker (present and future) its node of the catalogue's database;
    ``replace`` after the catalogue changed, else an installed plugin keeps its caches. The
    scheduler gets the plugin that shows the units on the dashboard. Waits for the workers
    to confirm ``INSTALL_SECONDS`` at most (``QUIET_INSTALL_SECONDS`` when ``some_quiet``:
    a worker is known not to answer): a stopped one would hold the call for as long as it
    stays stopped, and the scheduler, which keeps the plugin, hands it over when it answers."""
    node_plugin = NodePlugin(catalogue.plugin_name, catalogue.slots, expected_contents(catalogue))
    node_plugin.idempotent = not replace
    with contextlib.suppress(TimeoutError):
        within(QUIET_INSTALL_SECONDS if some_quiet else INSTALL_SECONDS,
               lambda: client.register_plugin(node_plugin, name=catalogue.plugin_name), "giving the workers their nodes")
    dashboard.install(client)


def expected_contents(catalogue: Catalogue) -> dict[str, dict[str, Any]] | None:
    """What the nodes check their copies against: the catalogue's record of each dataset
    without its list of steps on disk (``written`` says the same, compactly)."""
    if catalogue.layout != "local" or catalogue.contents is None:
        return None
    return {name: {k: v for k, v in held.items() if k != "steps"} for name, held in catalogue.contents.items()}


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


def keep_only(plugin: str, relative: list[str]) -> int:
    return node_of(plugin).keep_only(relative)


def copy_problems(plugin: str, dask_worker: Any = None) -> dict[str, Any]:
    """Why this worker's copies may not serve, per dataset (empty: sound; no slot: a
    worker without a node). Run with ``Client.run``, which passes the worker."""
    holder = (dask_worker or get_worker()).plugins.get(plugin)
    node = getattr(holder, "node", None)
    return {} if node is None else {"slot": node.slot, "problems": node.problems()}


def work_done(plugin: str) -> dict[str, Any]:
    """The node's counters, or an empty dict on a worker without a node."""
    holder = get_worker().plugins.get(plugin)
    node = getattr(holder, "node", None)
    return {} if node is None else {"slot": node.slot, "root": str(node.root), "work": node.work}
