"""Reads that see one version of each stored step. A rewrite (``Dataset.write`` over a
stored step) replaces the step's shards one by one while queries read them: a query that
read some shards before the rewrite and some after, or took some atoms from a cache (a node
engine's) and the rest from the new files, answered with values of both versions (126 of
1 980 answers under a storm of rewrites). So a read works as a seqlock: it notes the
rewrite counts of the steps it needs (:mod:`turbdb.rewrites`) before it runs, its caches
caught up with them, and looks at the metadata file again after; an answer during which a
rewrite of one of those steps began, ended or was under way is dropped and read again. A
rewrite under way is waited for; past :data:`BUSY_SECONDS` the read gives up with
:class:`DatasetBusyError` (HTTP 503).

A dataset created again over the one a read began with (``overwrite=True``) is another
dataset, not a version of a step: a read takes the metadata and the field's store of one
and the same dataset (:class:`FieldView`), notes the field's id with the versions, and
one during which the dataset was created again ends with :class:`DatasetReplacedError`
(HTTP 503: asked again, it reads the new dataset) — the new store with the old axes and
times answered wrong values, or made the engine panic on another grid."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from . import _core
from .exceptions import CorruptDataError, DatasetBusyError, QueryCancelledError, StorageError, TurbdbError
from .file_snapshots import Snapshot, snapshot
from .output_files import _running
from .rewrites import INTERRUPTED_MARK, REWRITES_KEY, rewrite_counts, rewrites_under_way
from .zarr_meta import field_id, parse_json

T = TypeVar("T")

#: How long a read waits for a rewrite of a step it needs, and reads again answers that
#: rewrites overlapped, before it gives up.
BUSY_SECONDS = 5.0
#: How often a read waiting for a rewrite looks at the metadata again.
POLL_SECONDS = 0.005
#: The response header with which the service sends the versions of the steps an answer
#: read (:meth:`StepVersions.tag`; one tag per time, ``;`` between).
VERSIONS_HEADER = "X-Turbdb-Versions"
#: Errors a rewrite can cause while a shard is read (a shard replaced as it was opened, an
#: atom taken for swapped): read again when a rewrite overlapped the read.
REWRITE_ERRORS = (StorageError, CorruptDataError)

#: Per metadata file, its last bytes read by a check and what they record of rewrites and
#: of the fields' ids: the file is parsed again only when it changed (a rewrite), not for
#: every query.
_PARSED: dict[str, tuple[Snapshot, dict[str, dict[int, int]], dict[str, dict[int, str]], dict[str, int | None]]] = {}
_PARSED_LOCK = threading.Lock()
#: Metadata files remembered at most (one entry a dataset; a server's datasets fit: with
#: 256, a server of 300 datasets queried in turn read and parsed the file at every query).
_PARSED_MOST = 1024

Versions = tuple[tuple[int, "str | None"], ...]

#: Set where a read must not sleep (the service's event loop): it raises :class:`RewriteUnderWay`.
_WAITS_REFUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("turbdb_rewrite_waits_refused", default=False)


class StepRewrittenError(DatasetBusyError):
    """A step a read needed was rewritten while it was read: its answer was dropped (the
    read is made again; an error only where nothing can make it again)."""

    status = 503  # the service's answer: try again, as for a busy server
    retry_after = 1.0


class DatasetReplacedError(DatasetBusyError):
    """The dataset was created again (``overwrite=True``), or the field read removed and
    added again, while a read of it was under way:
    what was read came from the old dataset, or from both; asked again, the read takes the
    new one."""

    status = 503  # the service's answer: try again (turbdb.connect does), the name is there
    retry_after = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class FieldView:
    """The metadata of a dataset and the opened store of one of its fields, of one and the
    same dataset (:meth:`turbdb.Dataset.field_view`): a read takes its axes, times and
    components from ``info`` and its values from ``store``. ``made``: the id the metadata
    gives the field (None for fields made before ids existed), which changes when the
    dataset is created again."""

    info: Any
    store: Any
    made: int | None


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
    #: The field's id when the read began (:attr:`FieldView.made`): another one now means
    #: the dataset was created again.
    made: int | None = None
    retry_until: float | None = None

    @classmethod
    def of(cls, dataset: Any, field: str, steps: Sequence[int], made: int | None) -> StepVersions:
        """As the dataset's metadata gives them now (its caches catch up first); waits for
        nothing. ``made``: the field's id in the metadata the read took its axes and store
        from (:class:`FieldView`); :class:`DatasetReplacedError` where the dataset was created
        again since."""
        steps = tuple(steps)
        versions = cls(field, steps, (), made)
        look = dataset._look()
        versions._check_made(dataset, look[3])
        return dataclasses.replace(versions, seen=_recorded(look[1], field, steps))

    def tag(self) -> str:
        """These versions as the service sends them with an answer (``X-Turbdb-Versions``):
        ``MADE:STEP=COUNT,…``, the field's id and the rewrite count of each step read. A
        client that split one request into several compares them: pieces of different tags
        read different versions of a step (or different datasets), and are asked again."""
        return f"{self.made if self.made is not None else '-'}:" + ",".join(
            f"{step}={count}" for step, (count, _) in zip(self.steps, self.seen))

    @staticmethod
    def read_tag(text: str) -> tuple[frozenset[str], dict[int, int], bool]:
        """What a header of :meth:`tag`\ s (one per time, ``;`` between) says: the field ids,
        each step's newest rewrite count, and whether one step was read at two counts."""
        made, counts, mixed = set(), {}, False
        for part in text.split(";"):
            field_id, _, steps = part.partition(":")
            made.add(field_id)
            for item in filter(None, steps.split(",")):
                step, count = (int(n) for n in item.split("="))
                mixed |= counts.setdefault(step, count) != count
                counts[step] = max(counts[step], count)
        return frozenset(made), counts, mixed

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
        noted, nor the dataset was created again: the metadata file is read again unless its
        ``stat`` is unchanged since a time well after its last change (:func:`_current`)."""
        if self.rewriter() is not None:
            return False
        now = _current(dataset._metadata_file)
        return (now is not None and now[2].get(self.field) == self.made
                and _versions(now[0], now[1], self.field, self.steps) == self.seen)

    def replaced(self, dataset: Any) -> bool:
        """Whether the metadata now gives the field another id than when the read began:
        the dataset was created again (its metadata missing or unreadable for a moment, as
        while it is swapped in, is not taken for that: the read is made again)."""
        now = _current(dataset._metadata_file)
        return now is not None and now[2].get(self.field) != self.made

    def _check_made(self, dataset: Any, described: dict[str, int | None]) -> None:
        """:class:`DatasetReplacedError` unless the field ids ``described`` (a look at the
        metadata) give the field the id the read began with."""
        if described.get(self.field) != self.made:
            raise replaced_error(dataset, self.field)

    def check(self, dataset: Any) -> None:
        """Raises :class:`DatasetReplacedError` where the dataset was created again,
        :class:`StepRewrittenError` where a step was rewritten (unless :meth:`unchanged`)."""
        if self.replaced(dataset):
            raise replaced_error(dataset, self.field)
        if not self.unchanged(dataset):
            raise StepRewrittenError(f"step{'s' if len(self.steps) > 1 else ''} "
                                     f"{', '.join(map(str, self.steps))} of {self.field!r} in dataset "
                                     f"{dataset.name!r} {'were' if len(self.steps) > 1 else 'was'} rewritten while "
                                     "it was read; ask again")

    def spoiled(self, dataset: Any, error: BaseException) -> bool:
        """Whether ``error``, raised by the read, comes of a rewrite that overlapped it: the
        check's own error, or a shard replaced or taken for swapped as it was read while the
        versions changed. The read is then made again. So is any error of a read during
        which the dataset was created again (a shard "copied from another dataset", a step
        "not written", a box outside the new grid: each came of reading the new dataset's
        files as the old one's), where :meth:`renewed` raises :class:`DatasetReplacedError`."""
        if isinstance(error, QueryCancelledError):
            return False
        if isinstance(error, (StepRewrittenError, DatasetReplacedError)) or self.replaced(dataset):
            return True
        return isinstance(error, REWRITE_ERRORS) and not self.unchanged(dataset)

    def renewed(self, dataset: Any) -> StepVersions:
        """The versions now, for a read made again: the metadata read afresh and the caches
        caught up with it. Past the time to give up, :class:`DatasetBusyError`."""
        until = self.retry_until if self.retry_until is not None else time.monotonic() + BUSY_SECONDS
        if time.monotonic() > until:
            raise _busy(dataset, self)
        look = dataset._look(fresh=True)
        self._check_made(dataset, look[3])  # created again: reading again through the same store cannot help
        return dataclasses.replace(self, seen=_recorded(look[1], self.field, self.steps), retry_until=until)

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
        except Exception as error:  # any: one of a dataset created again is DatasetReplacedError (renewed)
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


def replaced_error(dataset: Any, field: str) -> DatasetReplacedError:
    """The error of a read of ``field`` during which ``dataset`` was created again (or the
    field removed and added again: its id changed as well)."""
    return DatasetReplacedError(f"dataset {dataset.name!r} in {dataset.path.parent} was created again (or its field "
                                f"{field!r} removed and added again) while it was read: the answer would mix the two; "
                                "ask again (the new one is read)")


def described_field_ids(document: dict[str, Any], path: Any) -> dict[str, int | None]:
    """The field ids the consolidated copy in a dataset's ``zarr.json`` (``document``, at
    ``path``) gives its arrays; none without one (a dataset another tool wrote)."""
    children = (document.get("consolidated_metadata") or {}).get("metadata") or {}
    ids = {}
    for name, child in children.items() if isinstance(children, dict) else ():
        if isinstance(child, dict):
            with contextlib.suppress(TurbdbError):
                ids[name] = field_id(child, f"{path}/{name}/zarr.json")
    return ids


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


def _current(path: str) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, str]], dict[str, int | None]] | None:
    """The rewrite counts, rewrites under way and field ids (:func:`described_field_ids`)
    the metadata file at ``path`` records now, or None where it cannot be read or parsed (the read is made again, and the dataset then
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
                _PARSED[path] = (now, *known[1:])
        return known[1:]
    try:
        document = parse_json(now.data, path)
        attrs = document["attributes"]["turbdb"]
        counts = rewrite_counts(attrs, path)
        under_way = rewrites_under_way(attrs, path)
        ids = described_field_ids(document, path.rpartition("/")[0])
    except (ValueError, KeyError, TypeError, AttributeError, TurbdbError):
        return None
    with _PARSED_LOCK:
        _PARSED.pop(path, None)  # the newest last: the oldest is the one let go
        if len(_PARSED) >= _PARSED_MOST:
            del _PARSED[next(iter(_PARSED))]
        _PARSED[path] = (now, counts, under_way, ids)
    return counts, under_way, ids


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
