"""Work units on the Dask dashboard. Units are actor calls (:mod:`~turbdb.cluster.server`),
which the scheduler never sees as tasks, so on their own they leave the dashboard's Task
Stream empty. Each unit a worker runs is logged as an event (topic :data:`TOPIC`) with its
start and stop; a scheduler plugin, :class:`UnitStream`, turns every such event into the
record a finished task leaves in the task stream. The Task Stream panel then draws a bar
per unit on the worker that ran it — ``turbdb-query`` and ``turbdb-cutout``, coloured by
kind, black where the unit failed — and ``Client.get_task_stream()`` returns them.

The plugin runs in the scheduler, which must be able to import turbdb: a ``LocalCluster``
started by ``turbdb cluster up`` can; a scheduler started elsewhere without turbdb installed
cannot, and the cluster then serves as before with a warning that the task stream will not
show the units."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

from distributed import Client, get_worker
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.diagnostics.task_stream import TaskStreamPlugin

#: The event topic of finished units.
TOPIC = "turbdb-unit"
#: The scheduler plugin's name (one per scheduler, whatever databases share it).
PLUGIN_NAME = "turbdb-unit-stream"


@contextlib.contextmanager
def shown(kind: str, dataset: str, field: str) -> Iterator[None]:
    """Runs a unit of ``kind`` ("query" or "cutout") on this worker and logs it for the
    dashboard, failed or not. Outside a worker (a unit run in-process) it logs nothing."""
    start = time.time()
    status = "error"
    try:
        yield
        status = "OK"
    finally:
        _log(kind, dataset, field, start, time.time(), status)


def _log(kind: str, dataset: str, field: str, start: float, stop: float, status: str) -> None:
    try:
        worker = get_worker()
    except ValueError:
        return
    worker.log_event(TOPIC, {
        "key": f"turbdb-{kind}-{uuid.uuid4().hex}", "worker": worker.address,
        "thread": threading.get_ident(), "start": start, "stop": stop, "status": status,
        "dataset": dataset, "field": field,
    })


class UnitStream(SchedulerPlugin):
    """On the scheduler: appends each logged unit to the task stream, as a task's record."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def log_event(self, topic: str, msg: Any) -> None:
        if topic != TOPIC or self.scheduler is None:
            return
        stream = self.scheduler.plugins.get(TaskStreamPlugin.name)
        if stream is None:  # the dashboard and get_task_stream make it on first use
            stream = TaskStreamPlugin(self.scheduler)
            self.scheduler.add_plugin(stream)
        stream.buffer.append({
            "key": msg["key"], "worker": msg["worker"], "thread": msg["thread"], "status": msg["status"],
            "startstops": [{"action": "compute", "start": msg["start"], "stop": msg["stop"]}],
            "nbytes": 0, "type": None, "typename": "turbdb unit", "metadata": {},
            "dataset": msg["dataset"], "field": msg["field"],
        })
        stream.index += 1


_warned = False


def install(client: Client) -> bool:
    """Puts :class:`UnitStream` on the client's scheduler (once; again is a no-op). Returns
    whether it is there; where the scheduler cannot load it, warns once and goes on."""
    global _warned
    try:
        client.register_plugin(UnitStream(), name=PLUGIN_NAME)
        return True
    except Exception as e:  # the scheduler could not import turbdb, or refused the plugin
        if not _warned:
            _warned = True
            warnings.warn(f"the Dask scheduler at {client.scheduler.address} could not load turbdb's task-stream "
                          f"plugin ({type(e).__name__}: {e}); the cluster works, but the dashboard's Task Stream "
                          "will not show turbdb's units. Install turbdb where the scheduler runs to see them.",
                          RuntimeWarning, stacklevel=2)
        return False
