"""The ``turbdb`` command line: create, fill, inspect, query and serve databases. Every
command has ``--help``; each module below registers its commands on :func:`main`."""

from . import cluster, cutout, datasets, queries, service, tokens, workload  # noqa: F401  (they register their commands)
from .group import main

__all__ = ["main"]
