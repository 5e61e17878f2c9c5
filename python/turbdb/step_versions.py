"""Reads that see one version of each stored step. A rewrite (``Dataset.write`` over a
stored step) replaces the step's shards one by one while queries read them: a query that
read some shards before the rewrite and some after, or took some atoms from a cache (a node
engine's) and the rest from the new files, answered with values of both versions (126 of
1 980 answers under a storm of rewrites). So a read works as a seqlock: it notes the
rewrite counts of the steps it needs (:mod:`turbdb.rewrites`) before it runs, its caches
caught up with them, and looks at the metadata file again after; an answer during which a
rewrite of one of those steps began, ended or was under way is dropped and read again. A
rewrite under way is waited for; past :data:`BUSY_SECONDS` the read gives up with
:class:`DatasetBusyError` (HTTP 503)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import dataclasses
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from . import _core
from .exceptions import CorruptDataError, DatasetBusyError, StorageError, TurbdbError
from .file_snapshots import Snapshot, snapshot
from .output_files import _running
from .rewrites import INTERRUPTED_MARK, REWRITES_KEY, rewrite_counts, rewrites_under_way

T = TypeVar("T")

#: How long a read waits for a rewrite of a step it needs, and reads again answers that
#: rewrites overlapped, before it gives up.
BUSY_SECONDS = 5.0
#: How often a read waiting for a rewrite looks at the metadata again.
POLL_SECONDS = 0.005
#: Errors a rewrite can cause while a shard is read (a shard replaced as it was opened, an
#: atom taken for swapped): read again when a rewrite overlapped the read.
REWRITE_ERRORS = (StorageError, CorruptDataError)

#: Per metadata file, its last bytes read by a check and what they record of rewrites: the
#: file is parsed again only when it changed (a rewrite), not for every query.
_PARSED: dict[str, tuple[Snapshot, dict[str, dict[int, int]], dict[str, dict[int, str]]]] = {}
_PARSED_LOCK = threading.Lock()
#: Metadata files remembered at most (one entry a dataset; a server's datasets fit).
_PARSED_MOST = 256

Versions = tuple[tuple[int, "str | None"], ...]

#: Set where a read must not sleep (the service's event loop): it raises :class:`RewriteUnderWay`.
_WAITS_REFUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("turbdb_rewrite_waits_refused", default=False)


class StepRewrittenError(DatasetBusyError):
    """A step a read needed was rewritten while it was read: its answer was dropped (the
    read is made again; an error only where nothing can make it again)."""

    status = 503  # the service's answer: try again, as for a busy server
    retry_after = 1.0


class RewriteUnderWay(DatasetBusyError):
    """A read within :func:`waits_refused` would wait for a rewrite: its caller runs it
    where it may wait."""

    status = 503


@contextlib.contextmanager
def waits_refused() -> Iterator[None]:
    """Within the block, a read that would wait for a rewrite raises
    :class:`RewriteUnderWay` instead (the service runs small queries on its event loop)."""
    token = _WAITS_REFUSED.set(True)
    try:
        yield
    finally:
        _WAITS_REFUSED.reset(token)


@dataclasses.dataclass(frozen=True, slots=True)
class StepVersions:
    """The rewrite counts of the ``steps`` of ``field`` a read needs, and the rewrite of
    each under way (``PID@HOST``, None when none), as the dataset's caches last caught up
    with them. ``retry_until``: once a read was dropped, when to give up reading again."""

    field: str
    steps: tuple[int, ...]
    seen: Versions
    retry_until: float | None = None

    @classmethod
    def of(cls, dataset: Any, field: str, steps: Sequence[int]) -> StepVersions:
        """As the dataset's metadata gives them now (its caches catch up first); waits for nothing."""
        steps = tuple(steps)
        return cls(field, steps, _recorded(dataset._attrs(), field, steps))

    def rewriter(self) -> str | None:
        """The process rewriting one of the steps now (``PID@HOST``), or None. A rewrite
        whose process is gone from this machine was interrupted: nothing will end it, the
        step is what it is (``verify`` names it), so it is not waited for."""
        for _, who in self.seen:
            if who is not None and not _gone(who):
                return who
        return None

    def unchanged(self, dataset: Any) -> bool:
        """Whether no rewrite of the steps began, ended or was under way since these were
        noted: the metadata file is read again unless its ``stat`` is unchanged since a
        time well after its last change (:func:`_current`)."""
        if self.rewriter() is not None:
            return False
        now = _current(dataset._metadata_file)
        return now is not None and _versions(now[0], now[1], self.field, self.steps) == self.seen

    def check(self, dataset: Any) -> None:
        """Raises :class:`StepRewrittenError` unless :meth:`unchanged`."""
        if not self.unchanged(dataset):
            raise StepRewrittenError(f"step{'s' if len(self.steps) > 1 else ''} "
                                     f"{', '.join(map(str, self.steps))} of {self.field!r} in dataset "
                                     f"{dataset.name!r} {'were' if len(self.steps) > 1 else 'was'} rewritten while "
                                     "it was read; ask again")

    def spoiled(self, dataset: Any, error: BaseException) -> bool:
        """Whether ``error``, raised by the read, comes of a rewrite that overlapped it: the
        check's own error, or a shard replaced or taken for swapped as it was read while the
        versions changed. The read is then made again."""
        if isinstance(error, StepRewrittenError):
            return True
        return isinstance(error, REWRITE_ERRORS) and not self.unchanged(dataset)

    def renewed(self, dataset: Any) -> StepVersions:
        """The versions now, for a read made again: the metadata read afresh and the caches
        caught up with it. Past the time to give up, :class:`DatasetBusyError`."""
        until = self.retry_until if self.retry_until is not None else time.monotonic() + BUSY_SECONDS
        if time.monotonic() > until:
            raise _busy(dataset, self)
        return dataclasses.replace(self, seen=_recorded(dataset._attrs(fresh=True), self.field, self.steps),
                                   retry_until=until)

    def settled(self, dataset: Any) -> StepVersions:
        """These, or once no rewrite of the steps is under way, the versions then (blocking:
        it sleeps while one is)."""
        versions = self
        while (who := versions.rewriter()) is not None:
            if _WAITS_REFUSED.get():
                raise RewriteUnderWay(f"step {', '.join(map(str, self.steps))} of {self.field!r} is being rewritten "
                                      f"by process {who}")
            time.sleep(POLL_SECONDS)
            versions = versions.renewed(dataset)
        return versions

    async def settled_async(self, dataset: Any) -> StepVersions:
        """:meth:`settled` on an event loop."""
        versions = self
        while versions.rewriter() is not None:
            await asyncio.sleep(POLL_SECONDS)
            versions = versions.renewed(dataset)
        return versions


def read_consistently(dataset: Any, versions: StepVersions, read: Callable[[bool], T]) -> T:
    """``read(again)`` once no rewrite of the steps ``versions`` notes is under way, made
    again (``again`` True) until no rewrite of them overlapped it (see the module's
    docstring); its answer."""
    versions = versions.settled(dataset)
    again = False
    while True:
        try:
            result = read(again)
        except REWRITE_ERRORS as error:
            if not versions.spoiled(dataset, error):
                raise
        else:
            if versions.unchanged(dataset):
                return result
        versions = versions.renewed(dataset).settled(dataset)
        again = True


def steps_read(times: Any, time_: float, temporal: str) -> tuple[int, ...]:
    """The stored steps an evaluation at ``time_`` reads (the engine's own choice), or,
    where it refuses the time (outside the stored range: it will say so), those around it."""
    try:
        return tuple(i for i, _ in _core.FieldStore.time_levels(times, float(time_), temporal))
    except (TurbdbError, ValueError, TypeError):
        k = bisect.bisect_right(list(times), time_)
        return tuple(range(max(0, k - 3), min(len(times), k + 2)))


def _recorded(attrs: dict[str, Any], field: str, steps: tuple[int, ...]) -> Versions:
    """The versions of ``steps`` in the parsed metadata ``attrs`` (the counts were checked
    when it was parsed; the marks are checked here, for the field alone)."""
    counts = attrs.get(REWRITES_KEY, {}).get(field, {})
    mine = rewrites_under_way(attrs, "dataset metadata").get(field, {})
    return tuple((int(counts.get(str(s), 0)), mine.get(s)) for s in steps)


def _versions(counts: dict[str, dict[int, int]], under_way: dict[str, dict[int, str]], field: str,
              steps: tuple[int, ...]) -> Versions:
    mine, rewriting = counts.get(field, {}), under_way.get(field, {})
    return tuple((mine.get(s, 0), rewriting.get(s)) for s in steps)


def _current(path: str) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, str]]] | None:
    """The rewrite counts and rewrites under way the metadata file at ``path`` records now,
    or None where it cannot be read or parsed (the read is made again, and the dataset then
    says what is wrong). Read again unless its ``stat`` vouches for the bytes read before
    (:mod:`turbdb.file_snapshots`), parsed again only when its bytes changed: reading every
    byte of it at every query cost 0.9 ms a query on a dataset whose ingest journal had
    20 000 steps (a 2.5 MB ``zarr.json``)."""
    known = _PARSED.get(path)
    try:
        now, changed = snapshot(path, None if known is None else known[0])
    except OSError:
        return None
    if not changed:
        if now is not known[0]:  # read again, the same bytes: remembered as read now
            with _PARSED_LOCK:
                _PARSED[path] = (now, known[1], known[2])
        return known[1], known[2]
    try:
        attrs = json.loads(now.data)["attributes"]["turbdb"]
        counts = rewrite_counts(attrs, path)
        under_way = rewrites_under_way(attrs, path)
    except (ValueError, KeyError, TypeError, AttributeError, TurbdbError):
        return None
    with _PARSED_LOCK:
        if len(_PARSED) >= _PARSED_MOST:
            _PARSED.clear()
        _PARSED[path] = (now, counts, under_way)
    return counts, under_way


def _gone(who: str) -> bool:
    """Whether the process ``PID@HOST`` is known to have ended: on this machine, when no such
    process runs. Another machine's cannot be asked: its rewrite counts as under way."""
    if who.endswith(INTERRUPTED_MARK):  # failed part-way in a process that lives on: nothing will end it
        return True
    pid, _, host = who.partition("@")
    return host == socket.gethostname() and pid.isdigit() and 0 < int(pid) < 2**22 and not _running(int(pid))


def _busy(dataset: Any, versions: StepVersions) -> DatasetBusyError:
    """The error of a read that waited :data:`BUSY_SECONDS` for rewrites of its steps."""
    who = versions.rewriter()
    steps = f"step{'s' if len(versions.steps) > 1 else ''} {', '.join(map(str, versions.steps))}"
    if who is not None:
        pid, _, host = who.partition("@")
        cause = (f"{'are' if len(versions.steps) > 1 else 'is'} being rewritten (by process {pid} on {host}; if that process has ended, its rewrite was "
                 "interrupted: write the step again)")
    else:
        cause = f"{'were' if len(versions.steps) > 1 else 'was'} rewritten again and again while read"
    error = DatasetBusyError(f"{steps} of {versions.field!r} in dataset {dataset.name!r} {cause}: for "
                             f"{BUSY_SECONDS:g} s no answer could be read from one version of "
                             f"{'each' if len(versions.steps) > 1 else 'it'}; retry once the rewrite ends")
    error.status = 503  # type: ignore[attr-defined]  # the service: try again later,
    error.retry_after = 1.0  # type: ignore[attr-defined]  # which turbdb.connect does
    return error
