"""The ingest package imports without cycles: every module alone in a fresh interpreter, and
its import graph (lazy imports and the registry's discovery of readers included) is a DAG."""

import ast
import graphlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import turbdb.ingest
from turbdb.ingest import readers

PACKAGE = "turbdb.ingest"
ROOT = Path(turbdb.ingest.__file__).parent


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, with its file."""
    found = {PACKAGE: ROOT / "__init__.py"}
    for info in pkgutil.walk_packages([str(ROOT)], prefix=f"{PACKAGE}."):
        path = ROOT.joinpath(*info.name.split(".")[2:])
        found[info.name] = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file (a lazy import in a
    function still closes a cycle when it runs)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            # `from pkg import mod` imports the module pkg.mod; `from mod import f` imports mod.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {name: imports(name, path, known) for name, path in known.items()}
    # The registry imports every reader module by listing the readers package.
    edges[f"{PACKAGE}.formats"] |= {n for n in known if n.startswith(f"{readers.__name__}.")}
    return edges


def test_import_graph_is_read_from_the_sources():
    edges = graph()
    assert f"{PACKAGE}.source" in edges[f"{PACKAGE}.readers.npy"]
    assert f"{PACKAGE}.readers.hdf5" in edges[f"{PACKAGE}.readers.netcdf"]
    assert f"{PACKAGE}.readers.zarr" in edges[f"{PACKAGE}.formats"]
    assert f"{PACKAGE}.opening" in edges[f"{PACKAGE}.pipeline"]


def test_ingest_modules_import_one_another_without_a_cycle():
    edges = graph()
    try:
        order = list(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"import cycle in {PACKAGE}: {' -> '.join(e.args[1])}")
    assert set(order) == set(edges)


@pytest.mark.parametrize("name", sorted(modules()))
def test_each_ingest_module_imports_alone_in_a_fresh_interpreter(name):
    result = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_cli_reads_every_format_declaration_without_importing_h5py_xarray_or_zarr():
    code = (
        "import sys, turbdb.cli; from turbdb.ingest import formats; formats.registered(); "
        "print(sorted({'h5py', 'xarray', 'zarr'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
