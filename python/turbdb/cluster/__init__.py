"""turbdb on a cluster of Dask workers (design §6; Perlman et al. §3, Kanov et al. §3.3,
Arpaci-Dusseau et al.'s River).

Partitions are placed on workers by chained declustering over virtual partitions
(:mod:`placement`), recorded in a catalogue next to the datasets (:mod:`catalogue`) and
laid out on shared storage or node-local disks (:mod:`layout`). Every worker holds a
:class:`~node.Node` in a Dask ``WorkerPlugin`` (:mod:`plugin`). The mediator
(:mod:`mediator`, ``turbdb.open(DB, cluster=ADDRESS)``) splits each query by the partitions
its stencils touch (:mod:`routing`), lets both copies of a partition pull its work units
from a shared queue (:mod:`queue`, graduated declustering), survives workers that die
(:mod:`dispatch`, :mod:`membership`), lends the densest partitions of overloaded workers to
idle ones (:mod:`balance`) and adds the partial sums. :mod:`health` reports degraded
partitions, :mod:`repair` re-replicates them, :mod:`launch` brings a cluster up.

Its classes are imported on first use: the mediator brings in dask.distributed (over a
second), which a module reading only the catalogue (the service's error messages) does
not need.
"""

from typing import Any

__all__ = ["Catalogue", "ClusterDatabase", "ClusterDataset"]


def __getattr__(name: str) -> Any:
    if name == "Catalogue":
        from .catalogue import Catalogue

        return Catalogue
    if name in ("ClusterDatabase", "ClusterDataset"):
        from . import mediator

        return getattr(mediator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
