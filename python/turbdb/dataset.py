"""A dataset: one simulation stored as a Zarr v3 group, one sharded array per field.
Reading metadata and writing time steps; queries build on it."""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import math
import os
import re
import socket
import stat
import sys
import threading
import shutil
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

import numpy as np

from . import _core, engine_futures, submission
from .file_snapshots import Snapshot, snapshot
from .exceptions import (
    DamagedMetadataError, DatasetBusyError, Float32PrecisionWarning, FormatError, InvalidRequestError, StorageError,
    TurbdbError, UnknownNameError,
)
from .info import DatasetInfo, check_name, uniform_times, upgraded
from .times import format_time
from .process_engines import HoldsEngine, settings_of, shared_engine
from .query import point_call
from .step_versions import DatasetReplacedError, FieldView, described_field_ids, replaced_error
from .metadata_check import metadata_problems
from .output_files import _running as process_running
from .permissions import (
    EFFECTIVE_IDS, account, cannot_read, first_unreadable, settle, settle_step, settle_tree, unreadable, unwritable,
)
from .rewrites import (INTERRUPTED_MARK, REWRITING_KEY, changed, count_rewrite, engine_catch_up, rewrite_counts,
                       rewrites_under_way)
from .step_write_locks import step_written
from .written_steps import (
    RECORD_KEY, cut_at, forget_field, holds, record_step, recorded_runs, steps_of, steps_on_disk,
)
from .zarr_meta import (
    ZARR_JSON,
    consolidated_metadata,
    field_document,
    field_id,
    parse_atom_codecs,
    parse_json,
    read_json,
    storage_error,
    TEMP_PREFIX,
    TIME_CHUNK,
    write_coordinate,
    write_json_atomic,
)

LOCK_FILE = ".turbdb.lock"
#: Held by the one process appending steps (ingest): a second writer is refused, not interleaved.
WRITER_LOCK_FILE = ".turbdb-writer.lock"
#: The dataset attribute holding the ingest journal (``turbdb.ingest.pipeline`` writes it).
JOURNAL_KEY = "ingest"
#: The fields ``turbdb simulate`` writes at every step (simulation_run.py).
SIMULATED_FIELDS = ("velocity", "pressure")


#: Seconds for which a dataset's metadata just read is taken as current (the several looks
#: of one query at it read the file once while it is being appended to; see
#: :func:`turbdb.file_snapshots.snapshot`).
METADATA_RECENT_SECONDS = 0.005
#: Looks :meth:`Dataset.field_view` takes at a dataset created again meanwhile before it
#: gives up (each finds the metadata and the store of one dataset unless another creation
#: lands between them).
VIEW_TRIES = 8


class Dataset(HoldsEngine):
    """One stored simulation. ``info`` is read fresh on every access, so a dataset that
    is being written (``turbdb simulate``) shows its new steps as they land."""

    def __init__(self, path: str | os.PathLike[str], *, engine: Any = None):
        self.path = Path(path)
        self._engine = engine
        # Stat'ed on every query (see _attrs): a str, not a Path joined each time.
        self._metadata_file = str(self.path / ZARR_JSON)
        try:
            seen: Snapshot | None = snapshot(self._metadata_file, None)[0]
            document = parse_json(seen.data, self.path / ZARR_JSON)
        except OSError:  # read_json says what is wrong
            seen, document = None, read_json(self.path / ZARR_JSON)
        attrs = _turbdb_attrs(document)
        if attrs is None:
            raise FormatError(f"{self.path} is a Zarr group but not a turbdb dataset (no 'turbdb' attributes)")
        self.name = self.path.name
        self._stores: dict[str, tuple[Any, Any, tuple[int, int]]] = {}
        #: Per opened store, the rewrite counts it has caught up with (shared by copies, as
        #: the stores are).
        self._rewrites_seen: dict[str, dict[int, int]] = {}
        #: Held while a store is opened (shared by copies, as the stores are).
        self._opening_stores = threading.Lock()
        #: Per field, its opened store and the field id of the metadata it was opened with
        #: (grid, components): a store opened with the metadata of a dataset since created
        #: again is not the one :meth:`field_view` pairs with the new metadata.
        self._opened_for: dict[str, tuple[Any, int | None]] = {}
        # A list, not the tuple itself, so that shallow copies (the service makes one per
        # request) share what one of them parsed: (the file's snapshot, attrs, info, the
        # field ids it describes). Filled from the document just read, unless its
        # attributes are damaged: that is reported when they are used.
        self._cache: list[tuple[Snapshot | None, dict[str, Any], DatasetInfo, dict[str, int | None]] | None] = [None]
        if seen is not None:
            with contextlib.suppress(Exception):
                self._cache[0] = (seen, attrs, DatasetInfo.from_attrs(attrs, name=self.name),
                                  described_field_ids(document, self.path))
        #: Counters of the last query (atoms read, read calls, contributions), the seconds
        #: spent per phase (``plan_seconds``, ``read_seconds``, ``weights_seconds``,
        #: ``accumulate_seconds``, ``scatter_seconds``) and the SIMD path the kernel ran on
        #: (``kernel``): proof of what the engine did.
        self.last_query_stats: dict[str, Any] = {}
        #: The versions of the steps the last point query read
        #: (:class:`~turbdb.step_versions.StepVersions`): the service sends them with its
        #: answer, for a client that split a query into several requests to compare.
        self.last_read_versions: Any = None
        #: The fields :meth:`write` warned about losing float64 precision (once each).
        self._precision_warned: set[str] = set()

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a spawn-based multiprocessing Pool): opened again where it is unpickled,
        # with an engine of the same settings there; stores and engines do not travel.
        return _reopened, (str(self.path), settings_of(self._engine))

    def __repr__(self) -> str:
        info = self.metadata  # not info: its scan of every shard made print(ds) take seconds
        nx, ny, nz = info.grid
        return f"<turbdb.Dataset {self.name!r} {nx}x{ny}x{nz}, {info.nt} times, fields {list(info.fields)}>"

    # -- metadata -----------------------------------------------------------------------

    def _attrs(self, fresh: bool = False) -> dict[str, Any]:
        """The stored metadata (see :meth:`_look`)."""
        return self._look(fresh)[1]

    def _look(self, fresh: bool = False) -> tuple[Snapshot | None, dict[str, Any], DatasetInfo, dict[str, int | None]]:
        """One look at the stored metadata: (the file's snapshot, its attributes, the info
        they give, the field ids its consolidated copy gives), taken together (a thread
        that took the attributes and then the cache could get another look's info). Re-read only when ``zarr.json`` may have been replaced (see
        :mod:`turbdb.file_snapshots`: every write of it is a rename, but two within one clock
        tick can leave its ``stat`` as it was), parsed again only when its bytes changed, or
        at every look while an opened field is not yet the one it describes (see
        :meth:`_drop_replaced_stores`). ``fresh``: read and parsed again in any case."""
        cached = self._cache[0]
        known = None if fresh or cached is None else cached[0]
        try:
            seen, changed = snapshot(self._metadata_file, known, recent=METADATA_RECENT_SECONDS)
            document = parse_json(seen.data, self.path / ZARR_JSON) if changed else None
        except FileNotFoundError:  # gone (between the stat and the read too)
            raise self._gone() from None
        except PermissionError:
            raise unreadable(self._metadata_file, what=f"dataset {self.name!r}:") from None
        except OSError as e:
            raise StorageError(f"cannot read dataset {self.name!r}: {e.strerror or e} ({self._metadata_file})") from None
        if document is None:  # the bytes parsed before
            if seen is not known:
                self._cache[0] = cached = (seen, *cached[1:])
            return cached
        attrs = _turbdb_attrs(document)
        if attrs is None:
            raise DamagedMetadataError(f"{self._metadata_file} has no 'turbdb' attributes; the metadata is damaged")
        info = DatasetInfo.from_attrs(attrs, name=self.name)
        counts = rewrite_counts(attrs, self._metadata_file)  # damaged: refused at every look
        # The stores catch up before the new snapshot is published: a copy (another request)
        # that sees it must not read through a store still holding replaced shards.
        described = described_field_ids(document, self.path)
        settled = self._drop_replaced_stores(attrs, described)
        for field in list(self._stores):
            self._catch_up(field, counts.get(field, {}))
        look = self._cache[0] = (seen if settled else None, attrs, info, described)
        return look

    def _gone(self) -> UnknownNameError:
        """The error of a dataset whose metadata vanished since it was opened: deleted, or
        being created again (``overwrite=True``, a copy put back): the same as a dataset
        never there, and a 404 from the service (it answered 500)."""
        error = UnknownNameError(f"dataset {self.name!r} is no longer in {self.path.parent} (deleted, or being "
                                 "replaced: open it again)")
        error.status = 404  # type: ignore[attr-defined]  # as the service answers an unknown name
        return error

    def _catch_up(self, field: str, now: dict[int, int]) -> None:
        """Makes the opened store of ``field``, and the engine, drop what they cached of its
        steps rewritten since they last looked (``now``: the rewrite counts; see
        :mod:`turbdb.rewrites`). A store opened just now has cached nothing."""
        entry = self._stores.get(field)
        if entry is None:
            return
        store, _, identity = entry
        seen = self._rewrites_seen.get(field)
        if seen is not None and changed(seen, now):
            forget = getattr(store, "forget_cached", None)  # a cluster's fields cache nothing here
            if forget is not None:
                forget()
        self._rewrites_seen[field] = now
        if self.engine is not None:
            engine_catch_up(self.engine, store, (str(self.path / field), identity), now)

    def _drop_replaced_stores(self, attrs: dict[str, Any], described: dict[str, int | None]) -> bool:
        """Forgets the opened stores of fields whose array directory is no longer the one
        they read: the dataset was created again over this one (``overwrite=True``), and the
        old stores kept answering with the old data, or failed on the old grid. Returns
        whether every store left reads the field the metadata describes (``described``: the
        field ids its consolidated copy gives): a copy updated file by file (rsync) replaces
        the dataset's ``zarr.json`` before the fields' own, and a store opened or kept in
        between served the old field for good. Until they agree, every look reads the
        metadata again."""
        settled = True
        for field, (store, _, identity) in list(self._stores.items()):
            opened_for = self._opened_for.get(field, (store, described.get(field)))
            # Also one opened with the metadata of another dataset (this one created again
            # between the look at the metadata and the open): its grid is that dataset's.
            if field not in attrs["fields"] or directory_identity(self.path / field) != identity or \
                    (opened_for[0] is store and opened_for[1] != described.get(field)):
                self._stores.pop(field, None)
            elif described.get(field, identity[2]) != identity[2]:
                settled = False
        return settled

    @property
    def metadata(self) -> DatasetInfo:
        """Like :attr:`info` without scanning which steps are written: cheap, for the hot
        path of queries (a missing step is reported by the engine when it is needed)."""
        return self._look()[2]

    @property
    def info(self) -> DatasetInfo:
        """All metadata, including which time steps of each field are written: those the
        metadata records (``steps_written``, :mod:`turbdb.written_steps`) whose directory is
        there, one listing a field. A field written before the record existed has its
        steps found by looking at every shard file (about 5 µs each, so seconds on a
        dataset of millions of shards) until its next write records them."""
        attrs = self._attrs()
        grid = tuple(attrs["grid"])
        partition = attrs["partition"]
        shards = tuple(-(-n // partition) for n in grid)  # per axis x, y, z
        nt = len(attrs["times"])
        recorded = recorded_runs(attrs, self._metadata_file)
        try:
            steps = {f: steps_on_disk(recorded[f], self.path / f, nt) if f in recorded
                     else self._steps_written(f, nt, shards) for f in attrs["fields"]}
        except PermissionError as e:  # a read problem: not "use one you can write"
            raise unreadable(e.filename or self.path, what=f"dataset {self.name!r}:") from None
        return DatasetInfo.from_attrs(attrs, steps, name=self.name)

    def _steps_written(self, field: str, nt: int, shards: tuple[int, int, int]) -> tuple[int, ...]:
        """A step is written when all of its shards exist; each shard lands by rename, so
        this needs no bookkeeping that a crash could leave behind wrong."""
        root = self.path / field / "c"
        if not root.is_dir():
            return ()
        present = []
        for entry in os.scandir(root):
            if entry.name.isdigit() and int(entry.name) < nt and _count_shards(entry.path, shards) == math.prod(shards):
                present.append(int(entry.name))
        return tuple(sorted(present))

    def writer_lock(self) -> contextlib.AbstractContextManager[None]:
        """One writer per dataset: an advisory lock held for a whole ingest or simulation,
        and by each :meth:`write`, :meth:`append_times`, :meth:`add_field`, … made outside
        one. Two ingests into one dataset would otherwise interleave their steps and
        journals; the second is refused with :class:`DatasetBusyError` at once instead of
        waiting."""
        return writer_lock(self.path)

    @contextlib.contextmanager
    def _metadata_lock(self, reading: bool = False) -> Iterator[None]:
        """Serialises read-modify-write of the metadata between writer processes.
        ``reading``: for a reader that wants a consistent view, which creates the file only
        in a dataset of its own (one made by another account, as root running ``verify``,
        kept the dataset's owner from writing: opened for appending, the file must be
        theirs to write)."""
        path = self.path / LOCK_FILE
        try:
            writing = not (reading and (path.exists() or self.path.stat().st_uid != os.geteuid()))
        except OSError as e:
            raise storage_error(e, path) from None
        with _lock_file(path, writing) as lock:
            try:  # shared for a reader: on NFS an exclusive lock needs a file open for writing
                fcntl.flock(lock, fcntl.LOCK_SH if reading else fcntl.LOCK_EX)
            except OSError as e:
                raise storage_error(e, path) from None
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def update_attrs(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Applies ``change`` to the stored ``turbdb`` attributes under the metadata lock.
        The consolidated metadata is refreshed with them: ``change`` may resize or add
        arrays, and zarr-python and xarray trust the consolidated copy."""
        with self._metadata_lock():
            document = read_json(self.path / ZARR_JSON)
            change(document["attributes"]["turbdb"])
            upgraded(document["attributes"]["turbdb"])
            document["consolidated_metadata"] = consolidated_metadata(self.path)
            write_json_atomic(self.path / ZARR_JSON, document)

    # -- writing ------------------------------------------------------------------------

    def field_store(self, field: str) -> Any:
        """The Rust store of a field (cached per field, until the dataset is replaced). A
        read takes it with the metadata it goes by: :meth:`field_view`."""
        look = self._look()  # a stat: notices a dataset created again over this one
        for _ in range(VIEW_TRIES):  # dropped again by another thread's look (a replacement): opened again
            entry = self._stores.get(field)
            if entry is not None:
                return entry[0]
            # One store a field: threads that opened one each kept reading through theirs,
            # which no later rewrite made drop its cached shards (mixed answers for good).
            with self._opening_stores:
                if field not in self._stores:
                    self._open_store(field, look)
            look = self._look()
        raise replaced_error(self, field)

    def field_view(self, field: str) -> FieldView:
        """The metadata and the store of ``field`` of one and the same dataset, for a read:
        a query that took the metadata, then the store of a dataset created again meanwhile
        (``overwrite=True``), read the new data with the old axes and times (wrong values),
        or made the engine panic on another grid. Looked at again until the two agree;
        :class:`~turbdb.step_versions.DatasetReplacedError` if the dataset is created again
        faster than that."""
        for attempt in range(VIEW_TRIES):
            _, _, info, described = self._look(fresh=attempt > 0)
            store = self.field_store(field)
            opened_for = self._opened_for.get(field)
            # A store opened otherwise (a cluster's) reads with the metadata of the moment.
            if opened_for is None or opened_for[0] is not store or opened_for[1] == described.get(field):
                return FieldView(info, store, described.get(field))
        raise replaced_error(self, field)

    def _open_store(self, field: str, look: tuple[Any, dict[str, Any], DatasetInfo, dict[str, int | None]]) -> None:
        """Opens the store of ``field`` as the metadata ``look`` (:meth:`_look`) describes it
        into :attr:`_stores`."""
        attrs = look[1]
        if field not in attrs["fields"]:
            raise UnknownNameError(
                f"dataset {self.name!r} has no field {field!r}; it has {', '.join(attrs['fields'])}"
            )
        array_json = self.path / field / ZARR_JSON
        try:
            array_document = read_json(array_json)
        except StorageError:
            if not os.path.lexists(self._metadata_file):  # the dataset went since _attrs
                raise self._gone() from None
            # Removed (remove_empty_field: its directory goes before the metadata says so) since
            # the look, or the dataset created again without it: a field unknown, not a storage error.
            with self._writers_done():
                now = self._look(fresh=True)[1]["fields"]
            if field not in now:
                raise UnknownNameError(f"dataset {self.name!r} has no field {field!r} (any longer); it has "
                                       f"{', '.join(now)}") from None
            raise
        layout = parse_atom_codecs(array_document, array_json)
        store = _core.FieldStore(
            str(self.path / field),
            tuple(attrs["grid"]),
            attrs["fields"][field]["ncomp"],
            layout["atom"],
            layout["partition"],
            zstd=layout["zstd"],
            crc32c=layout["crc32c"],
            index_at_end=layout["index_at_end"],
            headers_required=layout["headers_required"],
            field_id=layout["field_id"],
        )
        identity = directory_identity(self.path / field)
        self._stores[field] = (store, attrs["fields"][field]["ncomp"], identity)
        self._opened_for[field] = (store, look[3].get(field))
        cached = self._cache[0]
        if cached is not None and cached[3].get(field, identity[2]) != identity[2]:
            self._cache[0] = (None, *cached[1:])  # opened before the field's own zarr.json was replaced
        self._rewrites_seen.pop(field, None)  # a new store: the engine may have cached, it has not
        self._catch_up(field, rewrite_counts(attrs, self._metadata_file).get(field, {}))

    def write(self, field: str, time_index: int, data: Any, *, sync: bool = False) -> int:
        """Stores time step ``time_index`` of ``field`` from ``data`` of shape
        ``(nz, ny, nx, ncomp)`` (or ``(nz, ny, nx)`` for a scalar), any float dtype.
        Each shard is written aside and renamed, so a crash during a first write leaves the
        step absent or with shards missing (``turbdb verify`` names them), never a wrong
        shard. A crash while a stored step is written again leaves it mixing old and new
        shards: the rewrite is recorded as under way before the shards are written, so
        ``verify`` names that step until it is written again. Holds the dataset's writer
        lock meanwhile (:class:`DatasetBusyError` while another process writes it, or when
        the dataset was created again since the write began: nothing is written then).
        Threads writing the same step wait for each other; other steps are written at once.
        Returns the bytes written. ``sync=True`` also fsyncs every shard."""
        store, ncomp, identity = self._field_to_write(field)
        info_attrs = self._attrs()
        nt = len(info_attrs["times"])
        if not (isinstance(time_index, (int, np.integer)) and 0 <= time_index < nt):
            raise InvalidRequestError(
                f"time index {time_index!r} is outside the dataset's {nt} stored times (0 … {nt - 1}); "
                "append times first (Dataset.append_times)"
            )
        data = np.asarray(data)
        nx, ny, nz = info_attrs["grid"]
        if data.ndim == 3 and ncomp == 1:
            data = data[..., np.newaxis]
        if data.shape != (nz, ny, nx, ncomp):
            raise FormatError(
                f"{field} data has shape {data.shape}; expected (nz, ny, nx, ncomp) = {(nz, ny, nx, ncomp)}"
                + (" or (nz, ny, nx)" if ncomp == 1 else "")
            )
        if not np.issubdtype(data.dtype, np.floating):
            raise FormatError(f"{field} data has dtype {data.dtype}; give floating-point values")
        lost = float32_precision_lost(data)
        if lost is not None and field not in self._precision_warned:
            # Once per field: a loop writing every step of the same data would repeat it.
            self._precision_warned.add(field)
            warnings.warn(Float32PrecisionWarning(f"{field}, time index {time_index}: {lost}"), stacklevel=2)
        if data.dtype not in (np.float32, np.float64):
            data = data.astype(np.float32)
        t = int(time_index)
        with self._writing("write to it again"), step_written(self.path, field, t):
            # The store writes by path: opened before a replacement that landed before the
            # lock, it wrote the old field's shards (and the step's record) into the new dataset.
            if directory_identity(self.path / field) != identity:
                raise self._created_again()
            rewrite = (self.path / field / "c" / str(t)).exists()  # the step had shards before
            if rewrite:
                rewrite_counts(info_attrs, self._metadata_file)  # damaged: refused before writing
                rewrites_under_way(info_attrs, self._metadata_file)
                # Announced before the shards change too: readers drop what they cached at
                # once (a writer killed halfway never announced it, and a server kept
                # answering the old values), and verify knows the step may mix two versions.
                self._announce_rewrite(store, field, t, under_way=True)
            finished = False
            try:
                written = store.write_step(t, np.require(data, requirements=["C", "A"]), sync)  # aligned: see query_points
                finished = True
            except InvalidRequestError:  # refused before any shard was written (a NaN)
                finished = True
                raise
            finally:
                if rewrite:  # and again after: what was read meanwhile may mix the two
                    self._announce_rewrite(store, field, t, under_way=False, interrupted=not finished)
            # The shards and directories were made with this process's umask: a group
            # member's 077 made a shared dataset's new step unreadable to the group.
            settle_step(self.path / field, t)
            self._record_written(field, t)
        return written

    def _record_written(self, field: str, t: int) -> None:
        """Records step ``t`` of ``field`` as written (its shards are all in place), under
        the metadata lock; a step recorded already (a rewrite) changes nothing."""
        runs = self.metadata.fields[field].recorded
        if runs is not None and holds(runs, t):
            return

        with self._metadata_lock():
            document = read_json(self.path / ZARR_JSON)
            attrs = document["attributes"]["turbdb"]
            if field not in attrs["fields"]:  # a field removed meanwhile
                return
            shards = tuple(-(-n // attrs["partition"]) for n in attrs["grid"])
            if record_step(attrs, field, t, lambda: self._steps_written(field, len(attrs["times"]), shards)):
                # No array changed: the consolidated copy stays as it is (not read again).
                upgraded(attrs)
                write_json_atomic(self.path / ZARR_JSON, document)

    def _announce_rewrite(self, store: Any, field: str, t: int, *, under_way: bool, interrupted: bool = False) -> None:
        """Counts a rewrite of step ``t`` of ``field`` (one metadata update), recording it as
        ``under_way``, ``interrupted`` (it failed part-way: its step may mix two versions)
        or finished, and makes this process's stores and engine drop the step; other
        processes drop it when they see the count change."""
        if self.engine is not None:
            self.engine.invalidate(store, t)

        def change(attrs: dict[str, Any]) -> None:
            count_rewrite(attrs, field, t)
            _mark_rewrite(attrs, field, t, under_way, interrupted)

        self.update_attrs(change)
        self._attrs()  # this process's other stores drop the step too

    def _field_to_write(self, field: str) -> tuple[Any, int, tuple[int, int, int | None]]:
        """The store of ``field`` (:meth:`field_store`), its components and the identity of
        the directory it was opened in, all of one opening: looked up again until no other
        thread replaced the opening during the look."""
        opened = self._stores.get(field)
        while True:
            store = self.field_store(field)
            now = self._stores.get(field)
            if now is not None and now is opened:
                return store, now[1], now[2]
            opened = now

    def _created_again(self) -> TurbdbError:
        """The refusal of a write that found the dataset created again (``overwrite=True``,
        by another process or thread) since it opened the field: nothing was written."""
        if not os.path.lexists(self._metadata_file):  # gone, or the new one not yet whole
            return self._gone()
        return DatasetReplacedError(f"dataset {self.name!r} in {self.path.parent} was created again while this write "
                                    "began, so nothing was written; write again to write to the new dataset")

    def _writing(self, then: str) -> contextlib.AbstractContextManager[None]:
        """The writer lock for one change made by this process, shared with any hold of it
        (an ingest or a simulation, which call the writers below; threads writing steps at
        once). ``then``: what to do once the other writer is done, for the refusal."""
        return shared_writer_lock(self.path, then=then)

    def append_times(self, times: Any) -> range:
        """Grows the time axis of every field by ``times`` (strictly after the last stored
        time). Returns the new time indices."""
        new = uniform_times(times)
        result: list[range] = []

        def change(attrs: dict[str, Any]) -> None:
            old = np.asarray(attrs["times"], dtype=np.float64)
            if old.size and new.size and new[0] <= old[-1]:
                raise InvalidRequestError(
                    f"appended times must come after the last stored time {format_time(old[-1])}; got {format_time(new[0])}"
                )
            combined = np.concatenate([old, new])
            uniform_times(combined)
            self._set_times(attrs, combined)
            result.append(range(len(old), len(combined)))

        with self._writing("append them again"):
            self.update_attrs(change)
        return result[0]

    def drop_unwritten_times(self, keep: int) -> None:
        """Removes the stored times after the first ``keep`` where no field has a step
        written (an ingest that failed after appending its time). Times with data in any
        field are kept."""
        fields = self.info.fields.values()
        written = max((max(f.steps_present, default=-1) for f in fields), default=-1)

        def change(attrs: dict[str, Any]) -> None:
            times = np.asarray(attrs["times"], dtype=np.float64)
            nt = max(keep, written + 1)
            if nt < len(times):
                self._set_times(attrs, times[:nt])

        with self._writing("run this again"):
            self.update_attrs(change)

    def _set_times(self, attrs: dict[str, Any], times: np.ndarray) -> None:
        """Makes ``times`` the stored times: the metadata, every field's time axis and the
        time coordinate."""
        attrs["times"] = [float(t) for t in times]
        cut_at(attrs, len(times))
        for field in attrs["fields"]:
            self._resize_field(field, len(times))
        write_coordinate(self.path, "time", times, chunk=TIME_CHUNK)

    def _resize_field(self, field: str, nt: int) -> None:
        path = self.path / field / ZARR_JSON
        document = read_json(path)
        document["shape"][0] = nt
        write_json_atomic(path, document)

    def add_field(self, field: str, ncomp: int, *, units: str = "", every_step: bool = True) -> None:
        """Adds an (empty) field array to the dataset. ``every_step=False``: the field is
        written at some of the dataset's steps only, on purpose (see :meth:`set_every_step`)."""
        check_name("field", field)
        if not (isinstance(ncomp, int) and not isinstance(ncomp, bool) and 1 <= ncomp < 2**32):
            raise InvalidRequestError(f"field {field!r} needs a positive number of components, not {ncomp!r}")
        _check_every_step(field, every_step)

        def change(attrs: dict[str, Any]) -> None:
            if field in attrs["fields"]:
                raise InvalidRequestError(f"dataset {self.name!r} already has a field {field!r}")
            _core.check_layout(tuple(attrs["grid"]), ncomp, attrs["atom"], attrs["partition"])
            document = field_document(
                nt=len(attrs["times"]),
                grid=tuple(attrs["grid"]),
                ncomp=ncomp,
                atom=attrs["atom"],
                partition=attrs["partition"],
                field=field,
            )
            write_json_atomic(self.path / field / ZARR_JSON, document)
            settle_tree(self.path / field, self.path)  # the dataset's permissions, not the umask
            attrs["fields"][field] = {"ncomp": ncomp, "units": units, **({} if every_step else {"every_step": False})}

        with self._writing("add the field again"):
            self.update_attrs(change)

    def set_every_step(self, field: str, every_step: bool) -> None:
        """Says whether ``field`` is written at every step of the dataset (the default) or,
        with False, at some steps only, on purpose (pressure saved every other step):
        :meth:`verify` then takes no step that other fields have for one this field lost
        (a step its ingest journal records stays checked). Kept in the dataset's metadata
        (``fields[field]["every_step"]``, see docs/format.md)."""
        _check_every_step(field, every_step)

        def change(attrs: dict[str, Any]) -> None:
            if field not in attrs["fields"]:
                raise UnknownNameError(f"dataset {self.name!r} has no field {field!r}; it has {', '.join(attrs['fields'])}")
            if every_step:
                attrs["fields"][field].pop("every_step", None)
            else:
                attrs["fields"][field]["every_step"] = False

        with self._writing("run this again"):
            self.update_attrs(change)

    def remove_empty_field(self, field: str) -> None:
        """Removes ``field`` if none of its steps is stored: what a failed first ingest of a
        new field leaves (its units and components would refuse the corrected command)."""
        def change(attrs: dict[str, Any]) -> None:
            shards = tuple(-(-n // attrs["partition"]) for n in attrs["grid"])
            if self._steps_written(field, len(attrs["times"]), shards):
                raise InvalidRequestError(f"field {field!r} of dataset {self.name!r} has stored steps; not removed")
            attrs["fields"].pop(field, None)
            attrs.get(JOURNAL_KEY, {}).pop(field, None)
            forget_field(attrs, field)
            # Before the consolidated metadata is listed again from the folders.
            shutil.rmtree(self.path / field, ignore_errors=True)

        with self._writing("run this again"):
            self.update_attrs(change)
        self._stores.pop(field, None)

    # -- querying -----------------------------------------------------------------------

    def query(
        self,
        field: str,
        points: Any,
        *,
        time: Any,
        method: str = "lag6",
        operator: str = "field",
        temporal: str = "none",
        dtype: Any = np.float32,
        strategy: str = "streaming",
        job: Any = None,
        cancel: Any = None,
    ) -> np.ndarray:
        """Evaluates ``operator`` of ``field`` at ``points`` (``(N, 3)`` physical x, y, z)
        at physical ``time``.

        ``method``: none, lag4, lag6, lag8, fd4noint, fd6noint, fd8noint, fd4lag4, m1q4,
        m2q8. ``operator``: field → ``(N, ncomp)``; gradient → ``(N, ncomp, 3)`` with
        ``[:, c, a] = ∂u_c/∂x_a``; hessian → ``(N, ncomp, 6)`` ordered xx, xy, xz, yy, yz,
        zz; laplacian → ``(N, ncomp)``. ``temporal``: none (nearest stored time) or pchip.
        Sums are accumulated in float64 and the result has ``dtype``; for a float32 answer
        (the default) of a field at one stored time, the lag stencil's sums along z of the
        stored float32 values run in float32 (a quarter of the instructions; about 2e-7 of
        the field's largest value, the order of float32's own rounding): ask for
        ``dtype=np.float64`` for float64 sums throughout. ``strategy`` selects
        the evaluation (streaming partial sums, or the sorted/direct baselines). A sequence
        of times (a time series, as JHTDB's ``timepoint_end``/``delta_t``) gives one answer
        per time, stacked: ``(T, N, …)``.

        With a node engine (:func:`turbdb.open` with ``scheduler=…``): ``job`` is the
        :class:`turbdb.jobs.Job` (from :meth:`turbdb.Database.job`) this query is the next
        query of, and ``cancel`` a ``threading.Event`` that, once set (from another thread),
        abandons the query — the engine drops its pending work — with
        :class:`QueryCancelledError`. Without an engine, ``job`` changes nothing and
        ``cancel`` stops the evaluation too: the kernel looks at it before each cell it
        sums, so a large query ends soon after it is set (:mod:`turbdb.stoppable`).

        A query never mixes two versions of a step another process rewrites meanwhile: it
        is evaluated again when a rewrite of a step it reads overlapped it, and waits for a
        rewrite under way; after 5 s of this, :class:`DatasetBusyError`
        (:mod:`turbdb.step_versions`). Cutouts (per step) and tracks (per evaluation) too.
        """
        from .query import query

        return query(self, field, points, time=time, method=method, operator=operator, temporal=temporal,
                     dtype=dtype, strategy=strategy, job=job, cancel=cancel)

    def submit(self, field: str, points: Any, **options: Any) -> Future:
        """:meth:`query` without waiting: returns a :class:`concurrent.futures.Future` at
        once, whose ``result()`` is the answer (or raises the query's error). Queries
        submitted together run together, so a node engine serves them with shared reads::

            futures = [ds.submit("velocity", pts, time=t, method="lag6") for t in ds.info.times]
            answers = [f.result() for f in futures]

        With a node engine, a query at one time is handed to it at once, holding no thread
        (up to 4 096 in flight; more wait their turn); otherwise, or with ``cancel=``, up to
        64 run at a time on a pool of threads. ``options`` are those of :meth:`query`
        (``cancel=`` an event still abandons it)."""
        if (wrong := submission.options_error(self.query, options)) is not None:
            return submission.failed(wrong)
        if self.engine is not None and options.get("cancel") is None and np.ndim(options.get("time")) == 0:
            try:
                call = point_call(self, field, points, **{k: v for k, v in options.items() if k != "cancel"})
            except Exception as e:  # as from the pool: the error comes with the answer
                failed: Future = Future()
                failed.set_exception(e)
                return failed
            if call.through_engine(self):
                return engine_futures.submit(self.engine, self, call)
        return submission.submit(self.query, field, points, **options)

    def cutout(self, field: str, *, time: Any, x: Any = None, y: Any = None, z: Any = None, stride: Any = 1,
               filter_width: int = 1) -> Any:
        """The stored values of ``field`` at the stored time nearest ``time`` on the nodes
        ``x = (start, stop)`` etc. (grid indices, half-open, wrapping on periodic axes; the
        whole axis when omitted), every ``stride``-th node (one stride, or three: x, y, z):
        an ``xarray.DataArray`` with dims ``(z, y, x, component)`` and physical and index
        coordinates. ``time`` may be a sequence of times (e.g. ``info.times[10:20:2]``): then
        the DataArray has a leading ``time`` dim. ``filter_width`` > 1 averages each node's
        box of ``filter_width³`` nodes first, as JHTDB's cutout service (see
        :mod:`turbdb.cutout`). Save it with ``.to_netcdf(…)`` or :func:`turbdb.export.write`
        (NetCDF, Zarr, HDF5 + XDMF for ParaView, .npy)."""
        from .cutout import cutout

        return cutout(self, field, time=time, x=x, y=y, z=z, stride=stride, filter_width=filter_width)

    def track(
        self,
        points: Any,
        *,
        start: float,
        end: float,
        dt: float,
        method: str = "lag6",
        field: str = "velocity",
        integrator: str = "rk2",
        return_velocity: bool = False,
        progress: Any = None,
        cancel: Any = None,
    ) -> Any:
        """Advects fluid particles from ``points`` (``(N, 3)`` physical x, y, z at time
        ``start``) to time ``end`` through the stored velocity ``field``, interpolated with
        ``method`` in space and pchip in time.

        ``integrator="rk2"`` is Heun's method as JHTDB's GetPosition: ``x* = x + dt·u(x, t)``,
        ``x' = x + dt/2·(u(x, t) + u(x*, t + dt))``; ``"euler"`` takes ``x' = x + dt·u(x, t)``.
        Tracks backward when ``end < start`` (``dt`` is always positive); the last step is
        shortened to land exactly on ``end``. Each velocity evaluation is one engine call
        for all particles.

        Returns positions ``(n_steps + 1, N, 3)`` float64, row 0 the start. They are
        continuous, not wrapped into the periodic box: ``origin + np.mod(p - origin, L)``
        is the position inside the box and ``np.floor_divide(p - origin, L)`` the periods
        crossed (``turbdb.track.wrap`` does both). With ``return_velocity=True`` returns
        ``(positions, velocities)``, the velocity at each position and time. A particle
        leaving a non-periodic axis raises ``OutOfDomainError`` naming it and the time.
        ``progress``: True for a tqdm bar, or a callback ``(steps_done, n_steps)``.
        ``cancel``: a ``threading.Event`` that, once set, abandons the track with
        :class:`QueryCancelledError` (the evaluation under way is dropped from the node
        engine; without one, the track stops after the evaluation under way).
        """
        from .track import track

        return track(self, points, start=start, end=end, dt=dt, method=method, field=field, integrator=integrator,
                     return_velocity=return_velocity, progress=progress, cancel=cancel)

    # -- checking -----------------------------------------------------------------------

    def verify(self) -> dict[str, Any]:
        """Checks every shard checksum, that every atom decodes and lies where it was
        written, per field. Returns ``{field: {"shards", "atoms", "complete_steps",
        "unbound_shards", "problems", "unwritten_between", "unrecorded"}}``;
        ``unbound_shards`` counts shards written before shards carried a header binding them
        to their place, ``unwritten_between`` the steps with no shard between written ones
        (never written, or lost from a field written before the record of steps written
        existed: a step the record or an ingest's journal lists is a problem when its shards
        are gone), and ``unrecorded`` the steps whole on disk that the record does not list
        (a write stopped before recording it). A step is also a problem where another field
        has it that this one must have had (see below), unless this field is written at some steps only
        (:meth:`set_every_step`); so is a step whose rewrite was interrupted (its shards mix
        two versions) and a temporary file a killed write left. What this account may not
        read (a shard, a step's directory, the field's ``c``) is listed apart, under
        ``"unreadable"`` as ``(path, step, message)`` (step -1: every step): not checked, and
        never taken for lost data. :meth:`verify_metadata` checks what other Zarr readers go
        by."""
        attrs = self._attrs()
        nt = len(attrs["times"])
        recorded = recorded_runs(attrs, self._metadata_file)
        reports = {}
        for field in attrs["fields"]:
            try:
                reports[field] = self.field_store(field).verify(nt)
            except UnknownNameError:
                if field in self._attrs()["fields"]:
                    raise  # the dataset itself gone
                # removed since the look above (remove_empty_field): nothing of it to check
        # What this account may not read was not checked: said so, never called lost (the
        # Rust check counts a directory it cannot list as empty), and none of its steps is
        # missing for the rules below.
        blocked = {field: self._unreadable_parts(field, report, nt) for field, report in reports.items()}
        # Steps with something on disk: whole, or damaged (a problem names them already).
        present = {field: set(r["complete_steps"]) | {t for _, t, _ in r["problems"] if t >= 0}
                   for field, r in reports.items()}
        nx, ny, nz = attrs["grid"]
        now, shapes = self._metadata_and_shapes(list(reports))
        for field in set(reports) - set(shapes):  # removed while the others were checked
            del reports[field]
        under_way = rewrites_under_way(now, self._metadata_file)
        journaled: dict[str, set[int]] = {}  # the steps each field's ingest journal says it stored
        for field, report in reports.items():
            # Other Zarr readers go by the array's own shape: it must say what the dataset does.
            shape = shapes[field]
            expected = [len(now["times"]), nz, ny, nx, attrs["fields"][field]["ncomp"]]
            if shape != expected:
                report["problems"].append((f"{field}/zarr.json", -1, f"the array's shape is {shape}, but the dataset "
                                           f"holds {expected} (time, z, y, x, component): other Zarr readers would "
                                           "read it wrongly"))
            for t, who in sorted(under_way.get(field, {}).items()):
                if _interrupted_rewrite(who):  # a rewrite still running is no problem
                    report["problems"].append((f"{field}/c/{t}", t, f"the rewrite of step {t} of {field} was "
                                               f"interrupted (process {who}): its shards mix two versions; write it "
                                               "again"))
            report["problems"] += _left_temporaries(self.path / field)
            # A step with no shard at all reads as "not written"; where an ingest recorded it
            # as stored, its shards are lost (with one shard a step, verify said "ok").
            journal = attrs.get(JOURNAL_KEY, {}).get(field, {})
            stored = set(journal.get("done", {}).values()) | {int(e.split()[0]) for e in journal.get("steps", {}).values()}
            # So are the steps the record lists (read before the scan: their shards were in
            # place then), every step of a field included.
            listed = set(steps_of(recorded.get(field, ()), below=nt))
            for t in sorted((stored | listed) - present[field] - blocked[field]):
                if t < nt:
                    said = ("the ingest journal says it was stored" if t in stored else
                            f"the dataset records it as written ({RECORD_KEY})")
                    report["problems"].append((f"{field}/c/{t}", t, f"every shard of this step is missing, and {said}"))
            journaled[field] = stored | listed
            report["unwritten_between"] = [t for t in range(min(present[field], default=0),
                                                            max(present[field], default=0))
                                           if t not in present[field] and t not in journaled[field]
                                           and t not in blocked[field]]
            # Whole on disk but not recorded: a write stopped between its last shard and its
            # record (or one under way); info does not list it until it is written again.
            now_recorded = recorded_runs(now, self._metadata_file).get(field)
            report["unrecorded"] = [] if now_recorded is None else [
                t for t in report["complete_steps"] if t < len(now["times"]) and not holds(now_recorded, t)]
        # A hole in one field where another field has the step (as every simulated dataset
        # writes all its fields each step) is a loss too. So is a step missing before a
        # field's first one that a field listed after it has, where the two share later
        # steps (written side by side): fields are listed in the order they were made, so
        # this one existed when that step was written, where a field listed before it may
        # have had the step before this one was added (a field added for the later steps
        # only); fields sharing no step were written apart on purpose (one step each). A
        # field holding no step is not written yet, as far as the disk tells. A simulation
        # writes every field at every step: there a field missing any step that another
        # has lost it, every step included.
        simulated = str(attrs.get("provenance", {}).get("generator", "")).startswith("turbdb simulate")
        newest = max((max(p, default=-1) for p in present.values()), default=-1)
        order = list(reports)
        for i, field in enumerate(order):
            report = reports[field]
            if attrs["fields"][field].get("every_step", True) is False:
                continue  # written at some steps only, on purpose: other fields' steps say nothing
            elsewhere = set().union(*(present[f] for f in reports if f != field))
            lost = {t: "other fields of this dataset have it" for t in report["unwritten_between"] if t in elsewhere}
            first = min(present[field], default=nt)
            for later in reversed(order[i + 1:]):
                if present[later] & present[field]:
                    lost.update({t: f"{later}, a field made after this one and written with it, has it"
                                 for t in present[later] if t < first})
            if simulated and field in SIMULATED_FIELDS:
                # The simulation writes its fields one after the other: while it runs (its
                # last time not reached) the newest step may lack a field for a moment.
                running = newest < nt - 1
                lost.update({t: "the simulation's other field has it" for t in
                             set().union(*(present[f] for f in SIMULATED_FIELDS if f in present and f != field))
                             if t not in present[field] and not (running and t == newest)})
            for t in sorted(set(lost) - journaled[field] - blocked[field]):  # a journaled step is named above already
                if t in report["unwritten_between"]:
                    report["unwritten_between"].remove(t)
                report["problems"].append((f"{field}/c/{t}", t, f"every shard of this step is missing, though {lost[t]} "
                                           f"(if {field} is written at some steps only on purpose, mark it: "
                                           f"turbdb.open(DB)[{self.name!r}].set_every_step({field!r}, False))"))
        return reports

    def _unreadable_parts(self, field: str, report: dict[str, Any], nt: int) -> set[int]:
        """Moves what of ``field`` this account may not read out of ``report["problems"]``
        (a shard the Rust check could not open or reach) into ``report["unreadable"]``, with
        each step directory it may not look into (which the check saw as holding no shard),
        and returns those steps: every step where the field's ``c`` directory itself is
        unreadable. Only steps the check did not find whole are looked at."""
        chunks = self.path / field / "c"
        parts: list[tuple[str, int, str]] = []
        steps: set[int] = set()

        def unreadable_part(path: Path | str, t: int, blocking: Path | None = None) -> None:
            where = os.path.relpath(path, self.path)
            beyond = f", at {os.path.relpath(blocking, self.path)}" if blocking not in (None, Path(path)) else ""
            parts.append((where, t, f"cannot be read by account {account()} (permission denied{beyond}), so it was "
                          "not checked: the data may well be intact. Make it readable (chmod -R g+rX or o+rX, as "
                          "its owner) or run verify as an account that may read it"))
            steps.add(t)

        named = set()
        for problem in list(report["problems"]):
            path = Path(problem[0]) if os.path.isabs(problem[0]) else self.path / problem[0]
            t = problem[1]
            if t >= 0 and cannot_read(path):
                report["problems"].remove(problem)
                # A directory on the way this account may not enter is named once, not each shard below it.
                closed = next((p for p in reversed(path.parents) if p.is_relative_to(chunks)
                               and not os.access(p, os.X_OK, effective_ids=EFFECTIVE_IDS)), path)
                if closed not in named:
                    named.add(closed)
                    unreadable_part(closed, t)
        whole = set(report["complete_steps"])
        try:
            with os.scandir(chunks) as entries:
                names = [e.name for e in entries if e.name.isdigit() and int(e.name) < nt]
            if not os.access(chunks, os.X_OK, effective_ids=EFFECTIVE_IDS):
                raise PermissionError
        except PermissionError:
            unreadable_part(chunks, -1)
            steps.update(range(nt))
            names = []
        except OSError:
            names = []
        known = whole | steps  # once: built again per step, it made verify quadratic (22 s at 20 000 steps)
        for t in sorted(int(name) for name in names if int(name) not in known):
            blocking = first_unreadable(chunks / str(t))
            if blocking is not None:
                unreadable_part(chunks / str(t), t, blocking)
        report["unreadable"] = sorted(parts, key=lambda part: (part[1], part[0]))
        return steps

    def _metadata_and_shapes(self, fields: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The metadata and each field array's shape, read together under the metadata
        lock: a dataset that grew while verify scanned its shards (seconds) holds more times
        by now, in its metadata and its arrays alike (the arrays were compared with the
        metadata read before the scan: 14 of 60 runs called a growing dataset's shape wrong).
        A field removed meanwhile (:meth:`remove_empty_field`) has no shape."""
        with self._writers_done():
            attrs = self._attrs()
            return attrs, {field: read_json(self.path / field / ZARR_JSON).get("shape") for field in fields
                           if field in attrs["fields"]}

    @contextlib.contextmanager
    def _writers_done(self) -> Iterator[None]:
        """Holds the metadata lock shared: a change of the metadata under way (a field being
        added or removed, its directory made or gone before the metadata says so) ends first."""
        with contextlib.ExitStack() as stack:
            with contextlib.suppress(StorageError):  # no lock file: no writer since it was made
                stack.enter_context(self._metadata_lock(reading=True))
            yield

    def verify_metadata(self) -> list[tuple[str, str]]:
        """``(file, message)`` for each way the metadata misleads xarray or zarr-python: a
        stale consolidated copy, coordinates that do not match the attributes or do not
        read, a field array's dimension names or fill value, arrays the dataset does not
        list (:mod:`turbdb.metadata_check`)."""
        # A FIFO in place of a file made the reads below wait forever: named, not opened.
        strange = [(f"{path.relative_to(self.path)}", f"is {kind}, not a regular file: turbdb and Zarr readers "
                    "would wait on it forever; remove it (a lock file is made again) or restore the file")
                   for path, kind in _irregular_files(self.path, (LOCK_FILE, WRITER_LOCK_FILE, *COORDINATES))]
        if any(not path.endswith(".lock") for path, _ in strange):
            return strange  # the checks below would read the coordinates
        with contextlib.ExitStack() as stack:
            # Under the writers' lock, so that a growing dataset's coordinate and attributes
            # agree; a dataset without the lock file has had no writer since it was made
            # (nor has a read-only database).
            if not strange:
                with contextlib.suppress(StorageError):
                    stack.enter_context(self._metadata_lock(reading=True))
            return strange + metadata_problems(self.path, self._attrs())


def _mark_rewrite(attrs: dict[str, Any], field: str, t: int, under_way: bool, interrupted: bool = False) -> None:
    """Records in ``attrs`` (under the metadata lock) that the rewrite of step ``t`` of
    ``field`` began (by this process) or was ``interrupted`` (it failed part-way, a
    Ctrl-C or a full disk, in a process that lives on: readers waited for it to end until
    that process exited), or clears the record once it finished."""
    steps = attrs.setdefault(REWRITING_KEY, {}).setdefault(field, {})
    if under_way or interrupted:
        steps[str(t)] = f"{os.getpid()}@{socket.gethostname()}" + (INTERRUPTED_MARK if interrupted else "")
        return
    steps.pop(str(t), None)
    if not steps:
        del attrs[REWRITING_KEY][field]
    if not attrs[REWRITING_KEY]:
        del attrs[REWRITING_KEY]


def _interrupted_rewrite(who: str) -> bool:
    """Whether the process ``PID@HOST`` that began a rewrite is gone: on this machine, when
    no such process runs (a rewrite under way is no problem); another machine's cannot be
    asked, so its record counts."""
    if who.endswith(INTERRUPTED_MARK):
        return True
    pid, _, host = who.partition("@")
    return host != socket.gethostname() or not _running(pid)


def _running(pid: str) -> bool:
    """Whether the process numbered ``pid`` (digits from a name) runs on this machine."""
    return pid.isdigit() and 0 < int(pid) < 2**22 and process_running(int(pid))  # 2²²: Linux's largest pid


#: A shard's temporary (the Rust writer's): ``.turbdb-tmp-<shard file>-<pid>``.
_SHARD_TEMPORARY = re.compile(re.escape(TEMP_PREFIX) + r".+-(\d+)")


def _left_temporaries(field_dir: Path) -> list[tuple[str, int, str]]:
    """The shard temporaries below ``field_dir`` whose writer no longer runs (a write
    killed between writing a shard and renaming it into place), as verify problems. A
    running writer's are its write under way."""
    found = []
    for directory, _, files in os.walk(field_dir / "c"):
        for name in files:
            left = _SHARD_TEMPORARY.fullmatch(name)
            if left is None or _running(left[1]):
                continue
            where = Path(directory, name).relative_to(field_dir.parent)
            step = where.parts[2] if len(where.parts) > 2 and where.parts[2].isdigit() else "-1"
            found.append((str(where), int(step), f"a temporary file left by a write that was killed (process "
                          f"{left[1]} is gone): it is no part of the dataset; delete it"))
    return found


def _check_every_step(field: str, every_step: Any) -> None:
    if not isinstance(every_step, bool):
        raise InvalidRequestError(f"field {field!r}: every_step must be True or False, not {every_step!r}")


#: float32's smallest normal magnitude: below it values keep fewer digits, or become 0.
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)
#: float32's relative step (2⁻²³).
_FLOAT32_EPS = float(np.finfo(np.float32).eps)
#: Fewer float32 steps than this across a step's values: their variation keeps under three digits.
_FEWEST_LEVELS = 1000


def _exact_in_float32(data: np.ndarray) -> bool:
    """Whether float32 holds every value of ``data`` exactly (float32 output saved as
    float64 loses nothing): looked at only where a loss is suspected."""
    with np.errstate(over="ignore", under="ignore"):
        return bool(np.array_equal(data.astype(np.float32), data))


def float32_precision_lost(data: np.ndarray) -> str | None:
    """What storing ``data`` (more precise than float32) as float32 loses, in words, or
    None: values that vary by too little for float32 around their size (an absolute
    pressure, 101325 + 1e-3·sin x, became a constant), or values below float32's normal
    range (1e-46 became 0). A min and a max of the whole step (a few ms for 128³×3): the
    rare tiny step is looked at closer."""
    if data.size == 0 or np.finfo(data.dtype).nmant <= np.finfo(np.float32).nmant:
        return None
    low, high = float(data.min()), float(data.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        return None  # NaN and infinities: the writer refuses them, naming them
    largest = max(abs(low), abs(high))
    if 0 < largest < _FLOAT32_TINY / _FLOAT32_EPS:
        with np.errstate(under="ignore"):
            small = int(np.count_nonzero((np.abs(data) < _FLOAT32_TINY) & (data != 0)))
        if small and not _exact_in_float32(data):
            return (f"{small} value(s) lie below {_FLOAT32_TINY:.3g}, float32's smallest normal number (the largest "
                    f"is {largest:.3g}): stored as float32 they become 0 or keep fewer digits. Store the field in "
                    "other units (scaled up)")
    with np.errstate(over="ignore"):  # beyond float32's range: the writer's to refuse, by name
        step = float(np.spacing(np.float32(largest)))
    if high > low and math.isfinite(step):
        levels = (high - low) / step
        if levels < _FEWEST_LEVELS and not _exact_in_float32(data):
            return (f"the values vary by only {high - low:.3g} around {largest:.7g}, where float32, in which turbdb "
                    f"stores them, steps by {step:.3g}: the variation (and its gradients) is "
                    f"{'lost' if levels < 2 else 'kept with ' + format(levels, '.0f') + ' levels only'}. Subtract a "
                    "mean or reference value (e.g. the ambient pressure) before storing")
    return None


def directory_identity(path: Path) -> tuple[int, int, int | None]:
    """(device, inode) of a field's array directory, as its Rust store records it, and the
    id its metadata gives the field: what changes when the field is made again, in a new
    directory (``overwrite=True``) or in the old one (a copy updated file by file, as rsync
    does, keeps the directories: stores and the engine kept answering the old values)."""
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0, None)
    try:
        made_as = field_id(read_json(path / ZARR_JSON), path / ZARR_JSON)
    except TurbdbError:
        made_as = None
    return (st.st_dev, st.st_ino, made_as)




def _turbdb_attrs(document: dict[str, Any]) -> dict[str, Any] | None:
    """The dataset metadata of a group document, if it has any."""
    attributes = document.get("attributes")
    attrs = attributes.get("turbdb") if isinstance(attributes, dict) else None
    return attrs if isinstance(attrs, dict) else None


def _count_shards(step_dir: str, shards: tuple[int, int, int]) -> int:
    """Shard files (named ``0``: one component chunk) below ``c/<t>/<z>/<y>/<x>/``, at the
    places of the grid's ``shards`` (x, y, z): a stray file elsewhere is not one of them."""
    nx, ny, nz = shards

    def inside(entry: os.DirEntry[str], n: int) -> bool:
        return entry.is_dir() and entry.name.isdigit() and int(entry.name) < n

    count = 0
    for z in (e for e in os.scandir(step_dir) if inside(e, nz)):
        for y in (e for e in os.scandir(z.path) if inside(e, ny)):
            for x in (e for e in os.scandir(y.path) if inside(e, nx)):
                count += os.path.isfile(os.path.join(x.path, "0"))
    return count


def open_lock_file(path: Path, *, writing: bool) -> IO[bytes]:
    """A lock file, opened (and with ``writing`` created) without blocking: a FIFO in its
    place made ``open`` wait forever for a writer that never comes. Anything but a regular
    file is a :class:`StorageError` naming it."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_APPEND) if writing else os.O_RDONLY
    try:
        made = writing and not os.path.lexists(path)
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO no process reads: opening it for writing is refused so
            raise _not_a_regular_file(path, "a FIFO") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_a_regular_file(path, _file_kind(mode))
        if made:  # readable by whoever reads the dataset, as a reader opens it to lock
            with contextlib.suppress(OSError):
                settle(path, os.stat(path.parent))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "ab" if writing else "rb")
    except BaseException:
        os.close(fd)
        raise


#: The coordinate arrays of a dataset, which :meth:`Dataset.verify_metadata` reads.
COORDINATES = ("x", "y", "z", "time")


def _irregular_files(root: Path, names: tuple[str, ...]) -> list[tuple[Path, str]]:
    """Each file below ``root / name`` (a file, or an array directory walked whole) that is
    not a regular file, with what it is; stat'ed only, never opened."""
    found = []
    for name in names:
        top = root / name
        with contextlib.suppress(FileNotFoundError):
            mode = os.stat(top).st_mode
            if not stat.S_ISDIR(mode):
                found += [(top, _file_kind(mode))] if not stat.S_ISREG(mode) else []
                continue
            for directory, _, files in os.walk(top):
                for file in files:
                    with contextlib.suppress(FileNotFoundError):
                        mode = os.stat(os.path.join(directory, file)).st_mode
                        if not stat.S_ISREG(mode):
                            found.append((Path(directory, file), _file_kind(mode)))
    return found


def _file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _not_a_regular_file(path: Path | str, kind: str) -> StorageError:
    return StorageError(f"{path} is {kind}, not a regular file: reading it could wait forever, so turbdb does not "
                        "open it; remove it (turbdb makes its lock files again) or restore the file from a copy")


class _Hold:
    """This process's hold of one dataset's writer lock. A second ``flock`` on another open
    of the same file is refused even within one process, so holds are counted here:
    threads writing separate steps at once (a thread pool, Dask's threaded scheduler,
    simulate's writer thread) refused each other, naming their own process."""

    def __init__(self, lock: IO[bytes], owner: int | None) -> None:
        self.lock = lock
        #: The thread that took it explicitly (an ingest, a simulation, a replacement); None
        #: for the single changes of :func:`shared_writer_lock`.
        self.owner = owner
        #: How many holds each thread has.
        self.threads: collections.Counter[int] = collections.Counter()
        #: The thread replacing the dataset meanwhile (:func:`replacement_lock`), if any.
        self.replacer: int | None = None


#: The writer locks this process holds, by their datasets' real paths.
_WRITER_LOCKS_HELD: dict[str, _Hold] = {}
_WRITER_LOCKS_GUARD = threading.Lock()


def _forget_writer_locks_after_fork() -> None:
    # A forked child shares its parent's lock (the same open file): it must not write as
    # though it held it, so it takes its own, which the parent's hold refuses.
    global _WRITER_LOCKS_GUARD
    _WRITER_LOCKS_HELD.clear()
    _WRITER_LOCKS_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_forget_writer_locks_after_fork)


def writer_lock_held(path: Path) -> bool:
    """Whether this thread took the writer lock of the dataset at ``path`` (an ingest or a
    simulation holding it)."""
    hold = _WRITER_LOCKS_HELD.get(os.path.realpath(path))
    return hold is not None and hold.owner == threading.get_ident()


@contextlib.contextmanager
def writer_lock(path: Path, *, then: str = "run this again: steps already stored are skipped") -> Iterator[None]:
    """The writer lock of the dataset at ``path`` (:meth:`Dataset.writer_lock`), also for a
    directory whose metadata is not written yet (a creation that was interrupted): one
    writer at a time, another process or another thread of this one (an ingest, a
    simulation, a replacement) refused with :class:`DatasetBusyError` naming the holder and
    saying to wait for it, ``then`` (what the refused command should do next). The holder
    may replace the dataset under it (:func:`replacement_lock`)."""
    with _held(path, then, "exclusive"):
        yield


def shared_writer_lock(path: Path, *, then: str) -> contextlib.AbstractContextManager[None]:
    """The writer lock for one change (:meth:`Dataset.write`, :meth:`Dataset.append_times`,
    …): shared with any hold of this process (the steps a thread pool writes, the writer
    thread of a simulation, a change made during an ingest of this process), taken for the
    change otherwise, refused while another process holds it or another thread of this one
    replaces the dataset."""
    return _held(path, then, "shared")


def replacement_lock(path: Path, *, then: str) -> contextlib.AbstractContextManager[None]:
    """The writer lock while the dataset at ``path`` is created again over itself
    (``create_dataset(..., overwrite=True)``): taken, or kept where this thread holds it
    already (``turbdb simulate`` replacing an interrupted run). Other threads of this
    process are refused meanwhile, as other processes are: a write joining the hold wrote
    the old dataset's shards into the new one's directory. Refused while another thread
    holds it (a write under way)."""
    return _held(path, then, "replacing")


@contextlib.contextmanager
def _held(path: Path, then: str, kind: str) -> Iterator[None]:
    """A hold of the writer lock of ``kind``: "shared" (one change), "exclusive" (an ingest,
    a simulation) or "replacing" (see :func:`replacement_lock`)."""
    key = os.path.realpath(path)
    me = threading.get_ident()
    with _WRITER_LOCKS_GUARD:
        hold = _WRITER_LOCKS_HELD.get(key)
        if hold is None:
            hold = _WRITER_LOCKS_HELD[key] = _Hold(_take_writer_lock(path, then), None if kind == "shared" else me)
        elif hold.replacer not in (None, me):
            raise DatasetBusyError(f"another thread of this process is replacing dataset {path.name!r} (creating it "
                                   f"again); wait for it to finish, then {then}")
        elif kind == "exclusive" or (kind == "replacing" and (hold.owner != me or set(hold.threads) - {me})):
            # One ingest, simulation or replacement at a time, also within a process; and no
            # replacement under a write of another thread.
            raise DatasetBusyError(f"another writer of this process is writing dataset {path.name!r}; wait for it to "
                                   f"finish, then {then}")
        if kind == "replacing":
            hold.replacer = me
        hold.threads[me] += 1
    try:
        yield
    finally:
        with _WRITER_LOCKS_GUARD:
            if kind == "replacing":
                hold.replacer = None
            hold.threads[me] -= 1
            if hold.threads[me] == 0:
                del hold.threads[me]
            if not hold.threads and _WRITER_LOCKS_HELD.get(key) is hold:
                del _WRITER_LOCKS_HELD[key]
                with contextlib.suppress(OSError):
                    fcntl.flock(hold.lock, fcntl.LOCK_UN)
                hold.lock.close()


def _lock_file(path: Path, writing: bool) -> IO[bytes]:
    """A lock file opened to ``flock``: for writing where asked and allowed (another
    account's file is opened read-only: flock needs no write access), read-only else. One
    this account may not make (a dataset it may not write in) is refused as such: the
    read-only retry's "No such file" hid it."""
    try:
        if writing:
            try:
                return open_lock_file(path, writing=True)
            except PermissionError:
                if not os.path.lexists(path):
                    raise unwritable(path.parent, what="dataset") from None
        return open_lock_file(path, writing=False)
    except StorageError:
        raise
    except PermissionError:
        raise (unwritable(path.parent, what="dataset") if writing else unreadable(path)) from None
    except OSError as e:
        raise storage_error(e, path) from None


def _take_writer_lock(path: Path, then: str) -> IO[bytes]:
    """The dataset's writer lock file, opened and locked by this process (see :func:`writer_lock`)."""
    file = path / WRITER_LOCK_FILE
    # Refused up front, naming the dataset: a lock file already there opens read-only, and the
    # writer then failed at its first file, naming that.
    if os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK, effective_ids=EFFECTIVE_IDS):
        raise unwritable(path, what="dataset")
    lock = _lock_file(file, writing=True)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise DatasetBusyError(
            f"another process is writing dataset {path.name!r}{_lock_holder(file)}; wait for it to finish, then "
            f"{then}"
        ) from None
    _record_holder(lock)
    return lock


def _record_holder(lock: IO[bytes]) -> None:
    """Writes who holds the writer lock into its file, for the refusal of another writer
    (best effort: a lock file opened read-only keeps the last holder's line)."""
    command = " ".join([os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python", *sys.argv[1:]])
    with contextlib.suppress(OSError, ValueError):
        os.ftruncate(lock.fileno(), 0)
        lock.write(f"{os.getpid()} {command[:200]}\n".encode(errors="replace"))
        lock.flush()


def _lock_holder(file: Path) -> str:
    """`` (process PID: COMMAND)`` of the writer lock's holder, as its line records it ('' unknown)."""
    try:
        with open_lock_file(file, writing=False) as f:
            line = f.read(512).decode(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return ""
    pid, _, command = line.partition(" ")
    return f" (process {pid}: {command})" if pid.isdigit() else ""


def _reopened(path: str, settings: dict[str, Any] | None) -> Dataset:
    """A pickled :class:`Dataset` opened again (its database's engine made here if it had one)."""
    engine = None if settings is None else shared_engine(Path(path).parent, **settings)
    return Dataset(path, engine=engine)
