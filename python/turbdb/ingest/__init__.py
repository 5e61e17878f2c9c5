"""The input side of ``turbdb ingest``: simulation output files opened as lazy sequences of
time steps, each an array (nz, ny, nx, ncomp)."""

from turbdb.ingest.source import FORMATS, Source, StepRef, open_source, open_sources

__all__ = ["FORMATS", "Source", "StepRef", "open_source", "open_sources"]
