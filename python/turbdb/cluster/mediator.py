"""The mediator: ``turbdb.open(DB, cluster=ADDRESS)`` gives the usual ``Database``, whose
datasets answer queries, cutouts and particle tracking with the cluster's workers. A query
is split by the partitions its stencils touch (:mod:`~turbdb.cluster.routing`), each unit
runs on a worker holding its partitions (:mod:`~turbdb.cluster.dispatch`), and the float64
partial sums that come back are added here. Metadata is read from the database directory,
which the mediator sees; the shards may live only on the workers. A mediator made from an
address reconnects when its scheduler comes back after a restart
(:mod:`~turbdb.cluster.reconnect`)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from distributed import Client

from .. import _core
from ..arguments import SLOTS
from ..database import Database
from ..dataset import Dataset, directory_identity
from ..exceptions import InvalidRequestError, ServiceError, UnknownNameError
from ..info import is_plain_name
from . import plugin
from .balance import Balancer
from .bounded import ask_each
from .catalogue import Catalogue
from .contents import check_current, differences
from .dispatch import Dispatcher, Report
from .handoff import SharedArray, SharedMemory
from .health import cluster_status
from .membership import Membership
from .queue import POLICIES
from .reconnect import Reconnection
from .routing import Groups, Reach, Unit, shared_runs, split_cutout, split_query
from .server import Servers
from .transfer import copy_between, metadata_files, partition_files

#: How long connecting to the scheduler may take.
CONNECT_SECONDS = 10
#: How long each attempt to reach a lost scheduler again may take.
RECONNECT_SECONDS = 3


def connect_client(cluster: str | Client, seconds: float | None = None) -> Client:
    """A client of the Dask cluster at ``cluster`` (an address; trying for ``seconds``,
    default ``CONNECT_SECONDS``), or ``cluster`` itself."""
    if isinstance(cluster, Client):
        return cluster
    if not isinstance(cluster, str):
        raise InvalidRequestError(f"cluster must be a scheduler address (tcp://HOST:PORT) or a dask.distributed."
                                  f"Client, not {type(cluster).__name__}")
    _check_address(cluster)
    try:
        return Client(cluster, timeout=seconds or CONNECT_SECONDS, direct_to_workers=True, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise ServiceError(f"cannot reach the Dask scheduler at {cluster} ({type(e).__name__}: {e}); is "
                           "`turbdb cluster up` running, and is this its address?") from None


def _check_address(address: str) -> None:
    """Refuses what is not a scheduler address before a Client is made of it: one made of
    'garbage' failed deep in distributed, then hung 20 s closing itself."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme != "inproc":
            _, port = parse_host_port(location)
            if port is not None and not 0 < int(port) < 65536:  # else refused only after the connect timeout
                raise ValueError(f"port {port} is not between 1 and 65535")
    except ValueError as e:
        raise InvalidRequestError(f"{address!r} is not a Dask scheduler address ({e}); give tcp://HOST:PORT, e.g. "
                                  "tcp://127.0.0.1:8786, as `turbdb cluster up` prints it") from None


class ClusterDatabase(Database):
    """The datasets of a database served by a Dask cluster. ``declustering``: ``graduated``
    (both copies of a partition pull its work; the default) or ``static`` (each unit to the
    primary of its partitions); ``balance``: lend the densest partitions of overloaded
    workers to idle ones for a batch (Perlman et al. §3.4)."""

    def __reduce__(self) -> Any:
        # Inherited, it arrived as a plain local database: not on the cluster, and writable.
        raise TypeError("a cluster database cannot be pickled: open it in each process with "
                        "turbdb.open(path, cluster=ADDRESS)")

    def __init__(self, path: str | os.PathLike[str], cluster: str | Client, *, declustering: str = "graduated",
                 balance: bool = True):
        super().__init__(path)
        if declustering not in POLICIES:
            raise InvalidRequestError(f"unknown declustering {declustering!r}; valid: {', '.join(POLICIES)}")
        self._catalogue = Catalogue.load(self.path)
        self._catalogue_stamp = _stamp(Catalogue.path_of(self.path))
        self._owns_client = not isinstance(cluster, Client)
        self.declustering = declustering
        self.balancer = Balancer() if balance else None
        self._borrowed: set[tuple[str, str, str, int, int]] = set()
        #: What the last query or cutout did, failures and retries included (diagnostics).
        self.last_report: Report | None = None
        self._lock = threading.Lock()
        self._lock_use = threading.RLock()  # one change of client at a time
        self._use(connect_client(cluster))
        self.address = self.client.scheduler.address
        # A client made here is made again when its scheduler comes back; one given is the caller's.
        self._reconnection = (Reconnection(self.address, lambda a: connect_client(a, RECONNECT_SECONDS),
                                           self._use) if self._owns_client else None)

    def _use(self, client: Client) -> None:
        """Serves through ``client``: what hangs off it is made anew (a restarted scheduler
        has new workers, which need their nodes and actors), and what the previous client
        left is closed."""
        with self._lock_use:
            plugin.install(client, self.catalogue, replace=False)
            before = (getattr(self, "client", None), getattr(self, "servers", None),
                      getattr(self, "shared_memory", None))
            membership = Membership(client)
            membership.live(refresh=True)
            self._scheduler_id = membership.scheduler_id
            # Units go to each worker's actor, not through the scheduler.
            self.client, self.membership, self.dispatcher = client, membership, Dispatcher(membership)
            self.servers, self.shared_memory = Servers(client, membership), SharedMemory(client)
        old_client, old_servers, old_shared = before
        for part in (old_shared, old_servers):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.close()
        if old_client is not None and old_client is not client:
            with contextlib.suppress(Exception):
                old_client.close(timeout=2)

    def scheduler_problem(self) -> str | None:
        """Why the scheduler cannot be reached now, or None: from the client's state alone,
        without a network round trip (``/healthz`` asks at every probe). A client made here
        that has lost its scheduler is made again once the scheduler is back."""
        if self.client.status == "running":
            return None
        if self._reconnection is not None:
            self._reconnection.start()
            tried = self._reconnection.attempts
            return (f"the Dask scheduler at {self.address} cannot be reached; reconnecting"
                    f"{f' ({tried} attempts so far)' if tried else ''}")
        return f"the Dask scheduler at {self.address} cannot be reached (its client is {self.client.status})"

    def check_scheduler(self) -> None:
        """A 503 :class:`ServiceError` at once while the scheduler cannot be reached. A
        scheduler restarted soon enough for the client to reach it again by itself is
        another scheduler: its workers get their nodes, and actors are made anew."""
        if self.membership.scheduler_id not in (None, self._scheduler_id):
            with self._lock_use:
                if self.membership.scheduler_id not in (None, self._scheduler_id):
                    self._use(self.client)
        problem = self.scheduler_problem()
        if problem is not None:
            remedy = ("this mediator reconnects by itself" if self._reconnection is not None
                      else "then open the database again")
            error = ServiceError(f"{problem}: the cluster answers nothing without it. Start it again (`turbdb cluster "
                                 f"up`, or your `dask scheduler` and its workers); {remedy}")
            error.status = 503  # type: ignore[attr-defined]  # unavailable until the scheduler is back
            raise error

    def __repr__(self) -> str:
        return f"<turbdb.ClusterDatabase {str(self.path)!r} on {self.address}: {', '.join(self.datasets) or 'empty'}>"

    @property
    def catalogue(self) -> Catalogue:
        """The catalogue, read again when a repair has rewritten it."""
        with self._lock:
            stamp = _stamp(Catalogue.path_of(self.path))
            if stamp != self._catalogue_stamp:
                self._catalogue, self._catalogue_stamp = Catalogue.load(self.path), stamp
            return self._catalogue

    def __getitem__(self, name: str) -> ClusterDataset:
        if not is_plain_name(name) or name not in self.datasets:
            raise UnknownNameError(
                f"no dataset {name!r} in {self.path}; available: {', '.join(self.datasets) or 'none'}")
        return ClusterDataset(self.path / name, self)

    def status(self) -> dict[str, Any]:
        """Health: each slot's worker, and the partitions with fewer copies than asked for;
        ``stale``: how the database changed since its node-local copies were placed (those
        datasets are refused until it is placed again). A scheduler that cannot be reached
        serves nothing: every partition is reported unavailable, with ``error`` saying why."""
        catalogue = self.catalogue
        stale = differences(catalogue.contents, self) if catalogue.layout == "local" else []
        try:
            self.check_scheduler()
            live = self.membership.live(refresh=True)
        except ServiceError as e:
            report = cluster_status(self, catalogue, {}, scheduler=self.address, stale=stale)
            return {**report, "scheduler_reachable": False, "error": str(e)}
        damaged = self._damaged_copies(catalogue, live) if catalogue.layout == "local" else {}
        return {**cluster_status(self, catalogue, live, scheduler=self.address, dashboard=self.client.dashboard_link,
                                 silent=self.membership.silent(), stale=stale, damaged=damaged),
                "scheduler_reachable": True}

    def _damaged_copies(self, catalogue: Catalogue, live: dict[str, str]) -> dict[str, dict[str, str]]:
        """Per slot, the datasets whose node-local copy may not serve, and why (each worker
        checks its own; one that does not answer within a few seconds is left out)."""
        answers = ask_each(self.client, plugin.copy_problems, catalogue.plugin_name, addresses=list(live.values()))
        out = {}
        for answer in answers.values():
            if isinstance(answer, dict) and answer.get("problems"):
                out[str(answer["slot"])] = dict(answer["problems"])
        return out

    def lend_copies(self, dataset: Dataset, pmap: Any, lent: dict[tuple[int, int], tuple[str, ...]],
                    live: dict[str, str]) -> None:
        """Copies lent partitions to their borrowers' node-local disks (once: the borrower
        keeps them, as Perlman et al. suggest, for the batches that follow)."""
        info = dataset.metadata
        by_pair: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for (t, shard), group in lent.items():
            borrower, source = group[-1], next((s for s in group[:-1] if s in live), None)
            key = (self.catalogue.id, borrower, dataset.name, t, shard)  # a new layout removes lent copies
            if source is None or key in self._borrowed:
                continue
            by_pair.setdefault((source, borrower), []).append((t, shard))
            self._borrowed.add(key)
        for (source, borrower), partitions in by_pair.items():
            files = metadata_files(self.path, dataset.name, info.fields)
            files += partition_files(info, dataset.name, pmap, partitions)
            copy_between(self.client, self.catalogue, live[source], live[borrower], files,
                         info.partition**3 * 4 * max(f.ncomp for f in info.fields.values()))

    def close(self) -> None:
        if self._reconnection is not None:
            self._reconnection.close()
        self.shared_memory.close()
        self.servers.close()
        if self._owns_client:
            self.client.close()


class ClusterDataset(Dataset):
    """A dataset whose queries run on the cluster (the same interface as :class:`Dataset`)."""

    def __init__(self, path: str | os.PathLike[str], database: ClusterDatabase):
        super().__init__(path)
        self.database = database

    def __reduce__(self) -> Any:
        raise TypeError("a cluster dataset cannot be pickled: open its database in each process with "
                        "turbdb.open(path, cluster=ADDRESS)")

    def __repr__(self) -> str:
        return super().__repr__().replace("<turbdb.Dataset", "<turbdb.ClusterDataset", 1)

    def field_store(self, field: str) -> DistributedField:
        if field not in self._stores:
            info = self.metadata
            if field not in info.fields:
                raise UnknownNameError(f"dataset {self.name!r} has no field {field!r}; it has {', '.join(info.fields)}")
            # Keyed as Dataset's own stores, so that a dataset created again is noticed here too.
            self._stores[field] = (DistributedField(self, field), info.fields[field].ncomp,
                                   directory_identity(self.path / field))
        return self._stores[field][0]

    def write(self, *args: Any, **kwargs: Any) -> int:
        raise InvalidRequestError("a cluster's datasets are read-only through the mediator: write with "
                                  "turbdb.open(path) on the database, then lay it out again with turbdb cluster place")

    append_times = add_field = write  # type: ignore[assignment]

    def verify(self) -> dict[str, Any]:
        raise InvalidRequestError("verify the shards where they are stored: `turbdb verify DB` on shared storage, "
                                  "or `turbdb verify DATA_ROOT/<slot>` on each node of a local layout")


class DistributedField:
    """The cluster's view of one field, with the methods of the engine's field store that
    queries, cutouts and tracking call."""

    time_levels = staticmethod(_core.FieldStore.time_levels)

    def __init__(self, dataset: ClusterDataset, field: str):
        self.dataset = dataset
        self.field = field

    @property
    def _db(self) -> ClusterDatabase:
        return self.dataset.database

    def _current_catalogue(self) -> Catalogue:
        """The catalogue, after checking that node-local copies still hold what the
        database holds (a database grown or written since would be answered stale)."""
        self._db.check_scheduler()
        catalogue = self._db.catalogue
        if catalogue.layout == "local":
            check_current(catalogue.contents, self.dataset, str(self._db.path))
        return catalogue

    #: :func:`turbdb.query.query` tells :meth:`query` the answer's dtype.
    takes_dtype = True

    def query(self, points: np.ndarray, *, axes: Any, times: np.ndarray, time: float, method: str, operator: str,
              temporal: str, strategy: str, dtype: Any = np.float64) -> tuple[np.ndarray, dict[str, Any]]:
        """Evaluates a query on the workers: flat values and counters, as the engine's
        ``FieldStore.query`` returns them. Values are float64, or in ``dtype`` when every
        unit evaluates whole points (nothing to add: the worker casts, and half the bytes
        come back for float32)."""
        if strategy != "streaming":
            raise InvalidRequestError(f"a cluster evaluates by streaming partial sums; strategy {strategy!r} runs "
                                      "only on a local database (turbdb.open(path))")
        began = _clock()
        db, info = self._db, self.dataset.metadata
        catalogue = self._current_catalogue()
        levels = self.time_levels(np.ascontiguousarray(times, dtype=np.float64), float(time), temporal)
        pmap = catalogue.partition_map(info)
        n, width = len(points), info.fields[self.field].ncomp * SLOTS[operator]
        live = db.membership.live()
        whole = Groups.of(pmap, levels, catalogue.holders)
        everywhere = _same_workers(whole)
        lent: dict = {}
        if everywhere is not None:
            # Every partition on each of these workers (one live worker, or as many workers
            # as copies): each evaluates whole points, so contiguous runs of them are shared
            # out without routing or adding, each run queued under the groups in turn (for
            # static placement); one live worker gets them all in one run.
            bounds = shared_runs(n, len({s for g in everywhere for s in g if s in live}))
            units = [Unit(everywhere[i % len(everywhere)], None, points=slice(a, b), cost=int(b - a))
                     for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
        else:
            reach = Reach.of(info, points, method=method, operator=operator, axes=axes)
            lent = db.balancer.lend(pmap, reach, levels, catalogue.holders, live) if db.balancer else {}
            if lent and catalogue.layout == "local":
                db.lend_copies(self.dataset, pmap, lent, live)
            groups = Groups.of(pmap, levels, catalogue.holders, lent) if lent else whole
            units = split_query(pmap, reach, levels, groups, lambda g: sum(s in live for s in g) > 1)
        routed = _clock()
        # Runs of whole points are each answered once: copied in place (one run is the answer
        # itself); routed units' partial sums are added.
        shared_out = everywhere is not None
        answer_dtype = np.dtype(dtype) if shared_out else np.dtype(np.float64)
        whole_answer: list[np.ndarray] = []
        if shared_out and len(units) == 1:
            result = None
        else:
            result = np.empty((n, width), answer_dtype) if shared_out else np.zeros((n, width))
        spec = {"time": float(time), "method": method, "operator": operator, "temporal": temporal}
        plugin_name, name = catalogue.plugin_name, self.dataset.name
        exchange = db.shared_memory.exchange()  # for workers on this machine

        # The mediator's own serial work, timed for the cluster model (bench/cluster.py).
        spent = {"submit": 0.0, "merge": 0.0}
        through_shared_memory: set[int] = set()  # units whose points went through shared memory

        def start(unit: Unit, address: str) -> tuple[Any, list[Any]]:
            t0 = _clock()
            part = points[unit.points]
            shared = exchange.points(id(unit), part) if db.shared_memory.reaches(address) else None
            data = shared if shared is not None else part  # the array rides in the call, straight to the worker
            answer_to = None  # the answer comes back over the network
            if shared is not None:
                answer_to = exchange.answer_file(len(part) * width * answer_dtype.itemsize)
                through_shared_memory.add(id(unit))
            call = db.servers.call(address, "partial_sums", plugin_name, name, self.field, data, spec,
                                   unit.partitions, answer_dtype.str if shared_out else None, answer_to)
            spent["submit"] += _clock() - t0
            return call, [data]

        def merge(unit: Unit, values: np.ndarray | SharedArray) -> None:
            t0 = _clock()
            if isinstance(values, SharedArray):
                values = exchange.take(values)
            if result is None:
                whole_answer.append(values)
            elif shared_out:
                result[unit.points] = values.reshape(-1, width)
            else:
                result[unit.points] += values.reshape(-1, width)
            spent["merge"] += _clock() - t0

        try:
            report = db.dispatcher.run(units, start, merge, policy=db.declustering)
        finally:
            exchange.close()
        dispatched = _clock()
        db.last_report = report
        values = whole_answer[0] if result is None else result.ravel()
        return values, _counters(report, units, lent, shared_memory_units=len(through_shared_memory),
                                 route=routed - began, dispatch=dispatched - routed, **spent, total=_clock() - began)

    def cutout(self, t_index: int, axes: Any, ranges: Any, stride: int) -> np.ndarray:
        """Reads a box of nodes at time index ``t_index``, each partition's piece on a
        worker holding it: float32 ``(nz, ny, nx, ncomp)``."""
        return self._cutout(t_index, ranges, stride, None)

    def cutout_into(self, t_index: int, axes: Any, ranges: Any, stride: int, out: np.ndarray) -> None:
        """:meth:`cutout` into ``out``, an array of the box's shape (as the field store's)."""
        self._cutout(t_index, ranges, stride, out)

    def _cutout(self, t_index: int, ranges: Any, stride: int, out: np.ndarray | None) -> np.ndarray:
        db, info = self._db, self.dataset.metadata
        catalogue = self._current_catalogue()
        pmap = catalogue.partition_map(info)
        boxes = split_cutout(info, pmap, ranges, stride)
        shape = tuple(max(b.out[a][1] for b in boxes) for a in (2, 1, 0)) + (info.fields[self.field].ncomp,)
        if out is None:
            out = np.empty(shape, dtype=np.float32)
        elif out.shape != shape:
            raise InvalidRequestError(f"the output array has shape {out.shape}; this cutout needs {shape}")
        virtual = pmap.virtual_of(int(t_index), np.array([b.shard for b in boxes]))
        units = [Unit(tuple(catalogue.holders[v]), [(int(t_index), pmap.position(b.shard))], box=b,
                      cost=int(np.prod([hi - lo for lo, hi in b.out])))
                 for b, v in zip(boxes, virtual)]
        plugin_name, name = catalogue.plugin_name, self.dataset.name

        def start(unit: Unit, address: str) -> tuple[Any, list[Any]]:
            call = db.servers.call(address, "cutout", plugin_name, name, self.field, int(t_index), unit.box.ranges,
                                   int(stride))
            return call, []

        def merge(unit: Unit, values: np.ndarray) -> None:
            (x0, x1), (y0, y1), (z0, z1) = unit.box.out
            out[z0:z1, y0:y1, x0:x1] = values

        report = db.dispatcher.run(units, start, merge, policy=db.declustering)
        db.last_report = report
        self.dataset.last_query_stats = _counters(report, units, {})
        return out


def _same_workers(groups: Groups) -> list[tuple[str, ...]] | None:
    """The groups holding a query's partitions if they all are orderings of the same
    workers (so any of those workers holds every partition), else None."""
    ids = sorted({int(i) for table in groups.tables for i in np.unique(table)})
    chosen = [groups.groups[i] for i in ids]
    return chosen if len({frozenset(g) for g in chosen}) == 1 else None


def _counters(report: Report, units: list[Unit], lent: dict, shared_memory_units: int = 0,
              **seconds: float) -> dict[str, float]:
    """The counters of a query, all numbers (tracking adds them up over its steps): units,
    the points sent (``entries``: a point counts once per unit it is in), retries, backups,
    failures, lent partitions, units whose points and answer went through shared memory,
    the mediator's seconds by phase (``route``, ``dispatch`` and within it ``submit`` and
    ``merge``, ``total``), and per worker slot ``worker.SLOT.points`` and
    ``worker.SLOT.units``."""
    counters: dict[str, float] = {"units": len(units), "entries": sum(u.cost for u in units),
                                  "retried": report.retried, "backups": report.backups,
                                  "failures": len(report.failures), "lent_partitions": len(lent),
                                  "shared_memory_units": shared_memory_units,
                                  **{f"{k}_seconds": v for k, v in seconds.items()}}
    for slot, work in report.work.items():
        counters[f"worker.{slot}.points"] = work["points"]
        counters[f"worker.{slot}.units"] = work["units"]
    return counters


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _clock() -> float:
    return time.perf_counter()
