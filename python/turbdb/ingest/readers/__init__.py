"""One module per input format, each declaring a ``FORMAT`` (turbdb.ingest.format_spec):
a module added here is a format open_source and ``turbdb ingest`` know, options included.
Libraries that take long to import (h5py, xarray, zarr) are imported when a file of their
format is opened, since the CLI reads every declaration at startup."""
