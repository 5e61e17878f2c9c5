"""The input side of ``turbdb ingest``: simulation output files opened as lazy sequences of
time steps, each an array (nz, ny, nx, ncomp). One module per input format under readers/."""

from turbdb.ingest.formats import names
from turbdb.ingest.opening import open_source, open_sources
from turbdb.ingest.source import Source, StepRef

FORMATS = names()

__all__ = ["FORMATS", "Source", "StepRef", "open_source", "open_sources"]
