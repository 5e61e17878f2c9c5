"""A database: a directory (a Zarr v3 group) holding one dataset per subdirectory.
``open`` reads one; ``create_dataset`` adds a dataset to one, creating it if needed."""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import math
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import __version__, _core
from .arguments import CACHE_POLICIES, IO_MODES, SCHEDULERS, choice
from .byte_size import parse_byte_size
from .database_listing import DatabaseListing, Listing, holds_dataset_metadata, in_brief, misnamed_error
from .dataset import WRITER_LOCK_FILE, Dataset, replacement_lock
from .exceptions import (
    DamagedMetadataError, DatasetExistsError, FormatError, InvalidRequestError, StorageError, TurbdbError,
    UnknownNameError,
)
from .info import FORMAT_VERSION, check_axis_triplet, check_extent, check_name, is_plain_name, uniform_times
from .process_engines import HoldsEngine, settings_of, shared_engine
from .output_files import _sweep_left_behind as sweep_left_behind, replacing as replaced_directory
from .permissions import permission_denied, unreadable
from .size_limit import human_bytes
from .zarr_meta import (
    ZARR_JSON,
    consolidated_metadata,
    field_document,
    group_document,
    read_json,
    storage_error,
    TIME_CHUNK,
    write_coordinate,
    write_json_atomic,
)

if TYPE_CHECKING:
    from .jobs import Job


class Database(HoldsEngine, Mapping[str, Dataset]):
    """The datasets of one database directory, by name. Given the directory of one dataset
    (``data/isotropic64``) instead, it is the database holding that dataset alone. With a
    node engine (any of ``scheduler``, ``cache_bytes``, ``cache_policy``, ``io`` given to
    :func:`open`), every dataset opened from it queries through that one engine, so queries
    from many threads share their reads and a cache of decoded atoms."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        scheduler: str | None = None,
        cache_bytes: int | str | None = None,
        cache_policy: str | None = None,
        io: str | None = None,
    ):
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidRequestError(f"a database is a directory: give its path, not {path!r}")
        # Absolute once, here: a relative path followed the working directory, so after a
        # chdir (a notebook's %cd) or in a worker started elsewhere the same object read
        # another project's data of the same name.
        self.path = Path(os.path.abspath(Path(path).expanduser()))
        #: The one dataset shown when opened at a dataset's directory.
        self.only: str | None = None
        if self.path.is_file():
            raise StorageError(f"{self.path} is a file, not a database directory; give the directory the datasets "
                               "are in")
        if not self.path.is_dir():
            raise StorageError(f"no database at {self.path}: the directory does not exist (create one with turbdb simulate or turbdb ingest)")
        if _is_dataset_group(self.path):
            self.path, self.only = self.path.parent, self.path.name
        elif _is_field_array(self.path):
            raise StorageError(f"{path} is the array of field {self.path.name!r} of dataset {self.path.parent.name!r}; "
                               f"open the database {self.path.parent.parent} (or the dataset directory "
                               f"{self.path.parent}) instead")
        self._engine: Any = None
        self._closed_engine = False  # whether close() let an engine go
        # Datasets opened by look-up, each handed out as a copy sharing its opened stores
        # (see __getitem__); they follow their metadata as the server's do. Each with the
        # identity of the directory it was opened in: one found gone or replaced is let go,
        # and its mappings with it (a deleted dataset's shards stayed mapped for good).
        self._opened: dict[str, tuple[tuple[int, int], Dataset]] = {}
        self._listing = DatabaseListing(self.path)
        if any(option is not None for option in (scheduler, cache_bytes, cache_policy, io)):
            # Only None is the default: scheduler=False or "" made a jaws engine for someone meaning none.
            self._engine = shared_engine(
                self.path,
                scheduler=choice("scheduler", "jaws" if scheduler is None else scheduler, SCHEDULERS),
                cache_bytes=_cache_bytes(cache_bytes),
                cache_policy=choice("cache policy name", "urc" if cache_policy is None else cache_policy, CACHE_POLICIES),
                io=choice("io mode", "buffered" if io is None else io, IO_MODES),
            )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a spawn-based multiprocessing Pool): opened again where it is unpickled,
        # with an engine of the same settings there; engines and mappings do not travel.
        path = self.path / self.only if self.only else self.path
        return _reopened, (str(path), settings_of(self._engine) or {})

    def engine_stats(self) -> dict[str, Any]:
        """What the node engine has done and holds (atoms and bytes read, cache hit ratio,
        α, batch sizes, response times by query size); raises if there is no engine."""
        if self.engine is None and self._closed_engine:
            raise InvalidRequestError("this database's node engine was let go (close(), or the end of its `with` "
                                      "block): open it again with turbdb.open(path, scheduler=...)")
        if self.engine is None:
            raise InvalidRequestError("this database has no node engine: open it with turbdb.open(path, scheduler=...)")
        return self.engine.stats()

    def job(self, plan: Iterable[Any]) -> Job:
        """Declares a job: the queries it will send, in order, each ``(dataset, field,
        time[, temporal])``. Give the returned :class:`turbdb.jobs.Job` as ``job=`` to each
        of those queries, in that order, and close it at the end (``with db.job(plan) as
        job:`` does). The JAWS scheduler then runs the queries of jobs that read the same
        time steps together, so one read serves them all; answers do not change. At most
        :data:`turbdb.jobs.MAX_JOB_QUERIES` queries; without a node engine the job is inert."""
        from .jobs import declare, plan_of

        # A look-up is a copy of the dataset opened first, its metadata parsed once: opening
        # it again for every job cost half a millisecond a job.
        return declare(self.engine, plan_of(self.__getitem__, plan))

    def close(self) -> None:
        """Lets go of the node engine (its cache and I/O threads go once the datasets
        opened from it, and every other open sharing it, are gone too); a database read
        without an engine holds nothing. Its datasets are still read, without the engine."""
        self._closed_engine = self._closed_engine or self._engine is not None
        self._engine = None
        self._opened.clear()

    def __enter__(self) -> Database:
        # `with turbdb.open(...) as db:` reads the same whether db is local, remote or a cluster.
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        shown = f"{self.path / self.only}" if self.only else str(self.path)
        return f"<turbdb.Database {shown!r}: {', '.join(self.datasets) or 'empty'}>"

    @property
    def datasets(self) -> list[str]:
        """Names of the datasets, sorted."""
        return list(self.listing().names)

    def listing(self) -> Listing:
        """The datasets (those this account may not read among them: opening one says so),
        and apart the directories holding a dataset under a name that is no dataset name.
        A ``stat`` a directory; only the ``zarr.json`` files changed since the last listing
        are read. Datasets opened before and no longer listed are let go."""
        if self.only is not None:
            plain = is_plain_name(self.only)
            return Listing((self.only,) if plain else (), () if plain else (self.only,))
        found = self._listing.look()
        for name in [n for n in list(self._opened) if n not in found.names]:  # deleted or renamed since
            self._let_go(name)
        return found

    def _let_go(self, name: str) -> None:
        """Forgets the dataset ``name`` opened before, found gone (deleted, or moved away),
        and has the node engine let go of its fields: their readers kept the deleted shard
        files mapped, and their atoms cached, until the engine went."""
        # What the engine saw of the dataset's rewrites is kept (rewrites._ENGINE_SEEN): a
        # copy of it still held reads on, and a rewrite must still drop what it caches.
        if self._opened.pop(name, None) is not None and self.engine is not None:
            self.engine.forget_directory(str(self.path / name))

    def __getitem__(self, name: str) -> Dataset:
        # Only the named directory is looked at, its metadata read once: listing every
        # dataset (reading each one's) made a look-up cost 0.2 ms with two datasets, and a
        # server's first listing of N datasets N² reads. A dataset opened before is handed
        # out again as a shallow copy, which shares its opened field stores (shards mapped
        # and checked) and keeps its own last_query_stats, as the server does per request:
        # `db[name].query(...)` opened, checked and unmapped every shard it touched on each
        # call, 12-28x the query on a dataset of many shards. The copy follows a dataset
        # written again under the name as any open dataset does (its metadata is looked at
        # on every query); one deleted, or replaced by another directory, is let go.
        where = self._dataset_directory(name)
        if where is None:
            if isinstance(name, str):
                self._let_go(name)
            raise self._unknown(name)
        held = self._opened.get(name)
        if held is not None and held[0] == where and held[1]._engine is self.engine:
            return copy.copy(held[1])
        self._opened.pop(name, None)
        if not is_plain_name(name):
            raise misnamed_error(name) if holds_dataset_metadata(self.path / name) else self._unknown(name)
        try:
            opened = Dataset(self.path / name, engine=self.engine)
        except DamagedMetadataError:
            raise
        except (FormatError, StorageError) as e:  # not a turbdb dataset: not in self.datasets
            if permission_denied(e):  # listed as unreadable, and said so: not "no dataset"
                raise
            raise self._unknown(name) from None
        self._opened[name] = (where, opened)
        return copy.copy(opened)

    def _unknown(self, name: object) -> UnknownNameError:
        return UnknownNameError(f"no dataset {name!r} in {self.path}; available: {in_brief(self.datasets)}")

    def _dataset_directory(self, name: object) -> tuple[int, int] | None:
        """(device, inode) of the directory right under the database's named ``name``,
        when it holds a ``zarr.json`` (a dataset if that holds turbdb metadata) or this
        account may not look inside it (opening it says so); None otherwise."""
        if not isinstance(name, str) or (self.only is not None and name != self.only):
            return None
        if name in ("", ".", "..") or "/" in name or os.sep in name or "\0" in name:
            return None
        path = self.path / name
        try:
            st = os.stat(path)
            if not stat.S_ISDIR(st.st_mode) or not stat.S_ISREG(os.stat(path / ZARR_JSON).st_mode):
                return None
        except OSError as e:
            if not permission_denied(e):
                return None
            try:
                st = os.stat(path)  # the directory may be looked at, not inside
            except OSError:
                return None
        return (st.st_dev, st.st_ino)

    def __iter__(self) -> Iterator[str]:
        return iter(self.datasets)

    def __len__(self) -> int:
        return len(self.datasets)


def _is_dataset_group(path: Path) -> bool:
    """The group of a dataset itself (``data/isotropic64``), not a database."""
    try:
        return "turbdb" in read_json(path / ZARR_JSON).get("attributes", {})
    except (OSError, FormatError):
        return False


def _is_field_array(path: Path) -> bool:
    """A field array inside a dataset (``data/isotropic64/velocity``)."""
    try:
        return read_json(path / ZARR_JSON).get("node_type") == "array" and holds_dataset_metadata(path.parent)
    except (OSError, FormatError):
        return False


def open(  # noqa: A001 - the public name is turbdb.open
    path: str | os.PathLike[str],
    *,
    scheduler: str | None = None,
    cache_bytes: int | str | None = None,
    cache_policy: str | None = None,
    io: str | None = None,
    cluster: Any = None,
    **cluster_options: Any,
) -> Database:
    """Opens the database directory ``path``; the directory of one dataset
    (``data/isotropic64``) opens as a database holding that dataset alone.

    Giving any engine option makes one node engine for the database, shared by every
    dataset and thread that queries it, and by every other ``open`` of the same database
    with the same options in this process (one cache, one scheduler; it goes when none of
    them is left): ``scheduler`` noshare, liferaft or jaws (the
    default); ``cache_bytes`` of decoded atoms, an integer or a size such as ``"2GiB"``
    (default a quarter of the memory the process may use — RAM, or a container's limit — at most 4 GiB);
    ``cache_policy`` lru, lruk, slru or urc (the default); ``io`` buffered (the default)
    or direct (reads bypass the OS page cache). Without them each query runs alone.

    With ``cluster`` (a Dask scheduler address ``tcp://HOST:PORT`` or a
    ``dask.distributed.Client``) queries run on the cluster serving the database
    (``turbdb cluster up``); ``cluster_options`` are those of
    :class:`turbdb.cluster.ClusterDatabase` (``declustering``, ``balance``).
    """
    engine = {"scheduler": scheduler, "cache_bytes": cache_bytes, "cache_policy": cache_policy, "io": io}
    if cluster is not None:
        given = [k for k, v in engine.items() if v is not None]
        if given:
            raise InvalidRequestError(f"{', '.join(given)} configure a local node engine; a cluster's workers "
                                      "run their own (turbdb cluster up)")
        from .cluster import ClusterDatabase

        return ClusterDatabase(Path(path).expanduser(), cluster, **cluster_options)
    if cluster_options:
        raise InvalidRequestError(f"{', '.join(cluster_options)} apply to a cluster: pass cluster=ADDRESS")
    return Database(path, **engine)


def _reopened(path: str, settings: dict[str, Any]) -> Database:
    """A pickled :class:`Database`, opened again (with an engine of ``settings``, if any)."""
    return Database(path, **settings)


def _cache_bytes(value: int | str | None) -> int | None:
    """The engine's cache size; more than the memory this process may use is refused (the cache holds
    decoded atoms in memory: it would swap, then be killed)."""
    if value is None:
        return None
    size = parse_byte_size(value, "cache_bytes")
    memory = _usable_memory()
    if memory and size > memory:
        raise InvalidRequestError(f"cache_bytes {value!r} is more than the memory this process may use ({human_bytes(memory)}: the machine's, or its container's limit): "
                                  "the engine's cache holds decoded atoms in memory; give at most a part of it (the "
                                  "default is a quarter, at most 4 GiB)")
    return size


def _usable_memory() -> int | None:
    """The memory this process may use: the machine's, or its container's or batch job's
    (cgroup) limit where smaller."""
    from . import _core

    return _core.usable_memory()


def create_dataset(
    db_path: str | os.PathLike[str],
    name: str,
    *,
    grid: tuple[int, int, int],
    spacing: tuple[float, float, float] | None = None,
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0),
    periodic: tuple[bool, bool, bool] = (True, True, True),
    times: Any = (),
    fields: Mapping[str, int | Mapping[str, Any]] | None = None,
    attrs: Mapping[str, Any] | None = None,
    units: Mapping[str, str] | None = None,
    provenance: Mapping[str, Any] | None = None,
    atom: int = 8,
    partition: int = 64,
    overwrite: bool = False,
) -> Dataset:
    """Creates dataset ``name`` in the database at ``db_path`` and returns it for writing.

    ``grid`` is ``(nx, ny, nz)``; ``spacing`` defaults to ``2π/n`` per axis (the periodic
    box ``[0, 2π)³``); ``times`` are the stored times (more can be appended later);
    ``fields`` maps a field name to its number of components, or to
    ``{"ncomp": n, "units": "…", "every_step": False}`` (``every_step`` False: the field
    is written at some steps only, on purpose; ``verify`` then takes no step that other
    fields have for one it lost). ``atom`` and ``partition`` are the sides of an atom
    (inner chunk) and a partition (shard) in voxels.
    """
    check_name("dataset", name)
    try:
        grid_t = tuple(int(n) for n in grid)
    except (TypeError, ValueError):
        raise InvalidRequestError(f"grid must be three integers (nx, ny, nz), not {grid!r}") from None
    if len(grid_t) != 3 or min(grid_t) < 1:
        raise InvalidRequestError(f"grid must be three positive integers (nx, ny, nz), not {grid!r}")
    if spacing is None:
        spacing = tuple(2 * math.pi / n for n in grid_t)
    spacing_t = check_axis_triplet("spacing", spacing, positive=True)
    origin_t = check_axis_triplet("origin", origin)
    check_extent(grid_t, spacing_t, origin_t)
    if len(tuple(periodic)) != 3:
        raise InvalidRequestError(f"periodic must be three booleans (x, y, z), not {periodic!r}")
    for side, label in ((atom, "atom"), (partition, "partition")):
        if not (isinstance(side, int) and not isinstance(side, bool) and side >= 1 and side & (side - 1) == 0):
            raise InvalidRequestError(f"{label} must be a power of two, not {side!r}")
    if atom > partition:
        raise InvalidRequestError(f"atom ({atom}) must not be larger than partition ({partition})")
    times_a = uniform_times(times)
    field_specs = _field_specs({"velocity": 3, "pressure": 1} if fields is None else fields)
    for ncomp, _, _ in field_specs.values():
        try:
            _core.check_layout(grid_t, ncomp, atom, partition)  # the sizes the store can address
        except OverflowError:
            raise InvalidRequestError(f"grid {grid_t} with {ncomp} components is too large to store") from None

    metadata = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "grid": list(grid_t),
        "spacing": list(spacing_t),
        "origin": list(origin_t),
        "periodic": [bool(p) for p in periodic],
        "times": [float(t) for t in times_a],
        "fields": {f: {"ncomp": n, "units": u, **({} if every else {"every_step": False})}
                   for f, (n, u, every) in field_specs.items()},
        "atom": atom,
        "partition": partition,
        "units": dict(units or {}),
        "provenance": {
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "turbdb_version": __version__,
            **dict(provenance or {}),
        },
        "attrs": dict(attrs or {}),
    }
    try:  # checked before anything is replaced: a bad value must not cost the old dataset
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidRequestError(f"the dataset's attributes must be JSON (numbers, strings, lists, dicts): {e}") from None

    db = Path(db_path).expanduser()
    path = db / name
    with contextlib.ExitStack() as replacing:
        try:
            db.mkdir(parents=True, exist_ok=True)
            if not (db / ZARR_JSON).exists():
                write_json_atomic(db / ZARR_JSON, group_document({"turbdb_database": {"format_version": FORMAT_VERSION}}))
            sweep_left_behind(db)  # what a replacement killed halfway left (the old dataset, the new one)
            target = path
            if path.exists():
                if not overwrite:
                    raise DatasetExistsError(f"dataset {name!r} already exists in {db}; pass overwrite=True to replace it")
                if path.is_symlink() or not path.is_dir():
                    raise StorageError(f"{path} is not a dataset's directory (a file or a link), so it is not replaced; "
                                       "move it away or choose another name")
                # Held until the new dataset is whole: replacing a dataset an ingest is writing
                # lost the ingest's steps, and its cleanup then deleted the new one.
                replacing.enter_context(replacement_lock(path, then="replace it"))
                # Made whole beside the old one, then renamed over it: a process killed while
                # deleting the old one in place left a directory that was neither dataset.
                (target,) = replacing.enter_context(replaced_directory(path))
                target.mkdir()
                _share_writer_lock(path, target)
        except OSError as e:
            if isinstance(e, TurbdbError):
                raise
            raise storage_error(e, path) from None

        # Arrays first, the group document last: a dataset is only listed once it is whole.
        for field, (ncomp, _, _) in field_specs.items():
            document = field_document(
                nt=len(times_a), grid=grid_t, ncomp=ncomp, atom=atom, partition=partition, field=field
            )
            write_json_atomic(target / field / ZARR_JSON, document)
        for axis, n, o, d in zip("xyz", grid_t, origin_t, spacing_t):
            write_coordinate(target, axis, o + d * np.arange(n))
        write_coordinate(target, "time", times_a, chunk=TIME_CHUNK)
        write_json_atomic(target / ZARR_JSON, group_document({"turbdb": metadata}, consolidated_metadata(target)))
    return Dataset(path)


def _share_writer_lock(old: Path, new: Path) -> None:
    """Gives the new dataset the old one's writer lock file, the same file (a hard link):
    a writer holding the lock (``turbdb simulate`` replacing an interrupted run) keeps
    holding it for the new dataset, which another writer could otherwise lock between the
    creation and the first write. Where links cannot be made, the new one makes its own."""
    with contextlib.suppress(OSError):
        os.link(old / WRITER_LOCK_FILE, new / WRITER_LOCK_FILE)


def _field_specs(fields: Mapping[str, int | Mapping[str, Any]]) -> dict[str, tuple[int, str, bool]]:
    """Per field: components, units and whether it is written at every step."""
    if not fields:
        raise InvalidRequestError("a dataset needs at least one field, e.g. fields={'velocity': 3}")
    specs = {}
    for field, spec in fields.items():
        check_name("field", field)
        ncomp, units, every = ((spec, "", True) if isinstance(spec, int)
                               else (spec.get("ncomp"), spec.get("units", ""), spec.get("every_step", True)))
        if not (isinstance(ncomp, int) and not isinstance(ncomp, bool) and ncomp >= 1):
            raise InvalidRequestError(f"field {field!r} needs a positive number of components, not {spec!r}")
        if not isinstance(every, bool):
            raise InvalidRequestError(f"field {field!r}: every_step must be True or False, not {every!r}")
        specs[field] = (ncomp, str(units), every)
    return specs
