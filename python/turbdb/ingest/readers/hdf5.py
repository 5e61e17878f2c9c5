"""Reads a field from an HDF5 file: one dataset, or one dataset per component stacked along c;
only the hyperslab of each step is read."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from turbdb.exceptions import FormatError, UnknownNameError
from turbdb.ingest.axes import Layout, resolve_axes
from turbdb.ingest.format_spec import Format, Option
from turbdb.ingest.source import ArraySource, float_dtype
from turbdb.ingest.variables import VARIABLES, choose_arrays

if TYPE_CHECKING:
    import h5py

__all__ = ["FORMAT", "HDF5_SIGNATURE", "Hdf5Source"]

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.size == 1:
        return _text(value.item())
    return value if isinstance(value, str) else None


def _dimension_names(ds: h5py.Dataset) -> tuple[list[str | None], list[str | None]]:
    """Each axis's name (its label, else its attached dimension scale, as netCDF-4 writes)
    and the scale's CF ``axis`` attribute."""
    names: list[str | None] = []
    cf_axes: list[str | None] = []
    for dim in ds.dims:
        scale = dim[0] if len(dim) else None
        label = dim.label or (posixpath.basename(scale.name) if scale is not None else None)
        names.append(label or None)
        cf_axes.append(_text(scale.attrs.get("axis")) if scale is not None else None)
    return names, cf_axes


class Hdf5Source(ArraySource):
    """A field in an HDF5 file, chosen by ``dataset_path`` and/or ``variables``."""

    format = "hdf5"

    def __init__(
        self,
        path: Path,
        *,
        dataset_path: str | None = None,
        variables: list[str] | None = None,
        axes: str | None = None,
    ) -> None:
        import h5py

        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise FormatError(
                f"{path} is not a readable HDF5 file ({e}); check the file, or pass format= "
                "if it is something else"
            ) from e
        with f:
            names = self._choose(f, path, dataset_path, variables)
            datasets = [f[n] for n in names]
            first = datasets[0]
            shapes = {ds.name: ds.shape for ds in datasets}
            if len(set(shapes.values())) > 1:
                raise FormatError(
                    f"the component datasets of {path} differ in shape: "
                    + ", ".join(f"{n} {s}" for n, s in shapes.items())
                    + "; components stacked along c must have one shape"
                )
            dtypes = [float_dtype(ds.dtype, what=f"dataset {ds.name} of {path}") for ds in datasets]
            dims, cf_axes = _dimension_names(first)
            what = f"dataset {first.name} of {path}"
            stacked = len(datasets) > 1
            layout = Layout(
                resolve_axes(axes, first.shape, what=what, stacked=stacked, dims=dims, cf_axes=cf_axes),
                first.shape,
                n_stacked=len(datasets),
            )
            self.names = [ds.name for ds in datasets]
        super().__init__(
            path, key=",".join(self.names), layout=layout, dtype=np.result_type(*dtypes)
        )

    def _read_blocks(self, key: tuple[int | slice, ...]) -> list[np.ndarray]:
        import h5py

        # Opened per step: an ingest of many files must not hold them all open.
        with h5py.File(self.path, "r") as f:
            return [np.asarray(f[n][key]) for n in self.names]

    @staticmethod
    def _choose(
        f: h5py.File, path: Path, dataset_path: str | None, variables: list[str] | None
    ) -> list[str]:
        import h5py

        group: h5py.Group = f
        if dataset_path is not None:
            node = f.get(dataset_path)
            if node is None:
                raise UnknownNameError(
                    f"{path} has no dataset or group {dataset_path!r}; it holds "
                    f"{', '.join(_all_datasets(f)) or 'no datasets'}"
                )
            if isinstance(node, h5py.Dataset):
                if variables is not None:
                    raise FormatError(
                        f"dataset_path {dataset_path!r} of {path} is a dataset, so variables= "
                        "cannot pick datasets inside it; make dataset_path the group holding them"
                    )
                return [node.name]
            group = node
        candidates = {name: (ds.shape, ds.dtype) for name, ds in _datasets(group)}
        where = f"{path}" if group.name == "/" else f"group {group.name} of {path}"
        option = "variables" if dataset_path is not None else "dataset_path"
        requested = [v.lstrip("/") for v in variables] if variables is not None else None
        chosen = choose_arrays(candidates, requested, where=where, kind="dataset", option=option)
        return [group[n].name for n in chosen]


def _datasets(group: h5py.Group) -> list[tuple[str, h5py.Dataset]]:
    """Every dataset below ``group``, by path relative to it."""
    import h5py

    found: list[tuple[str, h5py.Dataset]] = []

    def visit(name: str, node: object) -> None:
        if isinstance(node, h5py.Dataset):
            found.append((name, node))

    group.visititems(visit)
    return found


def _all_datasets(f: h5py.File) -> list[str]:
    return [f"/{n} {ds.shape}" for n, ds in _datasets(f)][:20]


FORMAT = Format(
    name="hdf5",
    label="HDF5",
    open=Hdf5Source,
    options=(Option("dataset_path", "path of the dataset inside the file."), VARIABLES),
    aliases=("h5", "hdf"),
    extensions=(".h5", ".hdf5", ".hdf", ".he5"),
    signature=lambda head: head.startswith(HDF5_SIGNATURE),
)
