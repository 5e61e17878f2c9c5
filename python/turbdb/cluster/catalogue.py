"""The catalogue of a cluster: a small JSON file next to the datasets of a database
(``DB/turbdb-cluster.json``) that any reader can open. It names the worker slots and the
data root each reads from, the number of copies, and the holders of every virtual
partition (primary first), and — for node-local copies — what each dataset held when it was
placed (:mod:`~turbdb.cluster.contents`). Partitions map to virtual partitions by a fixed rule
(:class:`~turbdb.cluster.placement.PartitionMap`), so the file stays small however many
time steps a dataset has; repairs rewrite the holders."""

from __future__ import annotations

import dataclasses
import os
import uuid
from pathlib import Path
from typing import Any

from ..exceptions import FormatError, InvalidRequestError, StorageError, TurbdbError
from ..info import DatasetInfo
from ..zarr_meta import read_json, write_json_atomic
from .placement import DEFAULT_SPAN, PartitionMap, chained_declustering, virtual_count

CATALOGUE = "turbdb-cluster.json"
FORMAT = "turbdb-cluster/1"
LAYOUTS = ("shared", "local")

#: Per catalogue file, its stat key and the data roots of its workers (:func:`node_roots`).
_ROOTS: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}


@dataclasses.dataclass
class Catalogue:
    """Where every partition of a database lives. ``slots`` maps a worker slot (the Dask
    worker's name) to the data root it reads: the database itself on shared storage, or
    ``DATA_ROOT/<slot>`` on node-local disks. ``holders[v]`` are the slots holding virtual
    partition ``v``, primary first."""

    database: Path
    id: str
    replicas: int
    virtual: int
    span: int
    layout: str
    slots: dict[str, str]
    holders: list[list[str]]
    contents: dict[str, dict[str, Any]] | None = None
    _maps: dict[tuple, PartitionMap] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def create(cls, database: str | os.PathLike[str], slots: list[str], *, replicas: int = 2,
               data_root: str | os.PathLike[str] | None = None, span: int = DEFAULT_SPAN) -> Catalogue:
        """A fresh placement of ``database`` over worker ``slots``: shared storage, or
        node-local copies under ``data_root/<slot>``."""
        database = Path(database).resolve()
        if not slots:
            raise StorageError("a cluster needs at least one worker")
        replicas = min(replicas, len(slots))
        virtual = virtual_count(len(slots), replicas)
        if data_root is None:
            roots = {s: str(database) for s in slots}
        else:
            root = Path(data_root).resolve()
            if root == database or database in root.parents:
                # The copies would sit among the datasets: `turbdb verify` takes them for damaged ones.
                raise InvalidRequestError(f"the data root {data_root} is inside the database {database}; give a "
                                          "directory outside it (each worker's node-local disk)")
            roots = {s: str(root / s) for s in slots}
        return cls(database, uuid.uuid4().hex[:12], replicas, virtual, span, "shared" if data_root is None else "local",
                   roots, chained_declustering(slots, replicas, virtual))

    @staticmethod
    def path_of(database: str | os.PathLike[str]) -> Path:
        return Path(database) / CATALOGUE

    @classmethod
    def exists(cls, database: str | os.PathLike[str]) -> bool:
        return cls.path_of(database).is_file()

    @classmethod
    def load(cls, database: str | os.PathLike[str]) -> Catalogue:
        path = cls.path_of(database)
        if not path.is_file():
            raise StorageError(f"{database} has no cluster catalogue ({CATALOGUE}); start a cluster with "
                               f"`turbdb cluster up {database} --workers N` or place it with `turbdb cluster place`")
        document = read_json(path)
        if document.get("format") != FORMAT:
            raise FormatError(f"{path} is not a turbdb cluster catalogue (format {document.get('format')!r})")
        try:
            catalogue = cls(Path(database).resolve(), document["id"], int(document["replicas"]),
                            int(document["virtual_partitions"]), int(document["span"]), document["layout"],
                            {str(k): str(v) for k, v in document["slots"].items()},
                            [[str(s) for s in h] for h in document["holders"]], document.get("contents"))
            catalogue._check()
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise FormatError(f"{path} is damaged ({type(e).__name__}: {e}); place the cluster again") from None
        return catalogue

    def _check(self) -> None:
        """Refuses holders that do not fit the rest: queries would index past them or read
        from a root no slot names (ValueError: the file is damaged)."""
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}")
        if self.replicas < 1 or self.span < 1 or self.virtual < 1 or not self.slots:
            raise ValueError("replicas, span, virtual_partitions and slots must be positive")
        if len(self.holders) != self.virtual:
            raise ValueError(f"{len(self.holders)} holder lists for {self.virtual} virtual partitions")
        for v, holders in enumerate(self.holders):
            strangers = [s for s in holders if s not in self.slots]
            if not holders or strangers or len(set(holders)) != len(holders):
                raise ValueError(f"virtual partition {v} has holders {holders}, not distinct slots of "
                                 f"{sorted(self.slots)}")
        if self.contents is not None and not isinstance(self.contents, dict):
            raise ValueError("contents must map datasets to what they held")

    def save(self) -> None:
        write_json_atomic(self.path_of(self.database), {
            "format": FORMAT, "id": self.id, "replicas": self.replicas, "virtual_partitions": self.virtual,
            "span": self.span, "layout": self.layout, "slots": self.slots, "holders": self.holders,
            **({} if self.contents is None else {"contents": self.contents})})

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "replicas": self.replicas, "virtual_partitions": self.virtual, "span": self.span,
                "layout": self.layout, "slots": dict(self.slots)}

    @property
    def plugin_name(self) -> str:
        """The name of the worker plugin serving this database (one per catalogue)."""
        return f"turbdb-{self.id}"

    def partition_map(self, info: DatasetInfo) -> PartitionMap:
        """The partition → virtual partition rule of a dataset."""
        shards = tuple(-(-n // info.partition) for n in info.grid)
        key = (info.name, shards)
        if key not in self._maps:
            self._maps[key] = PartitionMap(shards, self.virtual, self.span, info.name)
        return self._maps[key]

    @staticmethod
    def node_roots(database: str | os.PathLike[str]) -> dict[str, str]:
        """``{slot: data root}`` of the workers of a node-local layout of ``database`` (none
        on shared storage, or without a readable catalogue), read again only when the
        catalogue was replaced: the service cuts these paths out of its messages."""
        path = Catalogue.path_of(database)
        try:
            st = path.stat()
        except OSError:
            return {}
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = _ROOTS.get(str(path))
        if cached is None or cached[0] != key:
            try:
                document = read_json(path)
                roots = ({str(s): str(r) for s, r in document["slots"].items()}
                         if document.get("layout") == "local" else {})
            except (TurbdbError, KeyError, TypeError, AttributeError):
                roots = {}
            _ROOTS[str(path)] = cached = (key, roots)
        return cached[1]

    def held_by(self, slot: str) -> list[int]:
        """The virtual partitions ``slot`` holds."""
        return [v for v, h in enumerate(self.holders) if slot in h]
