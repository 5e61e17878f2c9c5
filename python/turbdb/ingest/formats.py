"""The registry of input formats: every module in turbdb.ingest.readers declares a
``FORMAT``; this finds them, looks formats up by name or alias, and detects a file's format."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

from turbdb.exceptions import FormatError, UnknownNameError
from turbdb.ingest import readers
from turbdb.ingest.format_spec import Format, Option

__all__ = ["OptionUse", "detect_format", "get_format", "names", "option_uses", "registered"]


@functools.cache
def registered() -> tuple[Format, ...]:
    """Every format, in the order of its module's name. Found by listing the readers
    package, so that a new format is a new module there and nothing else."""
    found = []
    for module_info in sorted(pkgutil.iter_modules(readers.__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{readers.__name__}.{module_info.name}")
        declared = getattr(module, "FORMAT", None)
        if not isinstance(declared, Format):
            raise TypeError(f"{module.__name__} declares no FORMAT (a turbdb.ingest.format_spec.Format)")
        found.append(declared)
    _check_unambiguous(found)
    return tuple(found)


def _check_unambiguous(found: list[Format]) -> None:
    """Two formats may not claim one name or extension, nor declare one option differently."""
    claims: dict[str, str] = {}
    for f in found:
        for claim in (f.name, *f.aliases, *f.extensions):
            if claims.setdefault(claim, f.name) != f.name:
                raise TypeError(f"formats {claims[claim]} and {f.name} both claim {claim!r}")
    options: dict[str, tuple[Option, str]] = {}
    for f in found:
        for option in f.options:
            first, by = options.setdefault(option.name, (option, f.name))
            if first != option:
                raise TypeError(f"formats {by} and {f.name} declare option {option.name!r} differently")


def names() -> tuple[str, ...]:
    return tuple(f.name for f in registered())


def get_format(name: str) -> Format:
    """The format called ``name`` or one of its aliases (any case)."""
    wanted = name.lower()
    for f in registered():
        if wanted == f.name or wanted in f.aliases:
            return f
    raise UnknownNameError(
        f"unknown input format {name!r}; use one of {', '.join(names())} "
        "or leave it unset to detect it from the file"
    )


def detect_format(path: Path) -> str:
    """The format of ``path`` from its extension, else its first bytes; the fallback format
    (raw) if neither tells."""
    formats = registered()
    if path.is_dir():
        return _only(path, [f for f in formats if f.directory], "a directory")
    suffix = path.suffix.lower()
    if suffix in (".xmf", ".xdmf"):  # it was read as raw binary, and refused for want of a dtype
        raise FormatError(f"{path} is an XDMF description, not an input format: ingest the HDF5 file it describes "
                          f"({_xdmf_data(path)}) instead")
    by_extension = next((f.name for f in formats if suffix in f.extensions), None)
    if by_extension is not None:
        return by_extension
    with path.open("rb") as file:
        head = file.read(8)
    by_signature = next((f.name for f in formats if f.signature is not None and f.signature(head)), None)
    if by_signature is not None:
        return by_signature
    if head.startswith(b"PK\x03\x04"):
        raise FormatError(
            f"{path} is a zip archive (.npz or zipped store), which turbdb does not read; "
            "extract the arrays first (e.g. np.save each member of an .npz)"
        )
    return _only(path, [f for f in formats if f.fallback], "an unrecognised file")


def _xdmf_data(path: Path) -> str:
    """The HDF5 file an XDMF document names (``<DataItem …>box.h5:/velocity_0001``), or a
    description of it when it names none that can be read."""
    try:
        text = path.read_text(errors="replace")[:65536]
    except OSError:
        text = ""
    named = re.search(r">\s*([^<>:]+?\.(?:h5|hdf5|he5)):/", text, re.IGNORECASE)
    if named is None:
        return "the .h5 file beside it"
    data = Path(named.group(1).strip())
    return str(data if data.is_absolute() else path.parent / data)


def _only(path: Path, candidates: list[Format], what: str) -> str:
    if len(candidates) != 1:
        raise FormatError(f"{path} is {what}, which no single input format claims; pass format=")
    return candidates[0].name


@dataclass(frozen=True)
class OptionUse:
    """An option and the formats that take it: what ``turbdb ingest`` turns into a flag."""

    option: Option
    formats: tuple[Format, ...]

    @property
    def help(self) -> str:
        """The option's help, prefixed by the formats it is for, e.g. "HDF5/netCDF/Zarr: …"."""
        labels = "/".join(f.label for f in self.formats)
        return f"{labels[:1].upper()}{labels[1:]}: {self.option.help}"


def option_uses() -> list[OptionUse]:
    """Every option any format takes, once, in the order the formats declare them."""
    uses: dict[str, OptionUse] = {}
    for f in registered():
        for option in f.options:
            known = uses.get(option.name)
            uses[option.name] = OptionUse(option, (*known.formats, f) if known else (f,))
    return list(uses.values())
