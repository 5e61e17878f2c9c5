"""The format registry: each reader module declares its format and options, and
open_source and ``turbdb ingest`` take them from there — a new module is a new format."""

import sys
import textwrap

import click
import numpy as np
import pytest
from click.testing import CliRunner

from turbdb.exceptions import InvalidRequestError
from turbdb.ingest import FORMATS, formats, open_source, readers
from turbdb.ingest.formats import option_uses, registered
from turbdb.cli import main
from turbdb.cli.format_options import format_options

# A complete format in one module: numbers in a text file, on a grid given by an option.
TEXT_FORMAT = textwrap.dedent('''
    """Test format: whitespace-separated numbers in a text file."""
    import numpy as np

    from turbdb.ingest.axes import Layout, resolve_axes
    from turbdb.ingest.format_spec import Format, Option
    from turbdb.ingest.source import ArraySource


    def parse_grid(value):
        return tuple(int(n) for n in value.split(",")) if isinstance(value, str) else tuple(value)


    class TextSource(ArraySource):
        format = "text"

        def __init__(self, path, *, grid, axes=None):
            shape = tuple(reversed(grid))
            layout = Layout(resolve_axes(axes, shape, what=str(path)), shape)
            super().__init__(path, key="", layout=layout, dtype=np.dtype("float64"))

        def _read_blocks(self, key):
            return [np.loadtxt(self.path).reshape(self.layout.shape)[key]]


    FORMAT = Format(
        name="text", label="text", open=TextSource, extensions=(".txt",),
        options=(Option("grid", "nx,ny,nz of the numbers.", parse_grid),),
    )
''')


@pytest.fixture
def extra_reader(tmp_path, monkeypatch):
    """Puts a module into the readers package (through its search path) for one test."""
    folder = tmp_path / "extra_readers"
    folder.mkdir()
    monkeypatch.setattr(readers, "__path__", [*readers.__path__, str(folder)])
    registered.cache_clear()

    added = []

    def add(name, source):
        (folder / f"{name}.py").write_text(source)
        added.append(f"{readers.__name__}.{name}")

    yield add
    for module in added:
        sys.modules.pop(module, None)
    registered.cache_clear()


def test_every_format_is_found_with_the_options_it_declares():
    declared = {f.name: [o.name for o in f.options] for f in registered()}
    assert declared == {
        "hdf5": ["dataset_path", "variables"],
        "netcdf": ["variables"],
        "npy": [],
        "raw": ["dtype", "shape", "order"],
        "zarr": ["variables"],
    }
    assert FORMATS == ("hdf5", "netcdf", "npy", "raw", "zarr")


def test_an_option_shared_by_formats_is_listed_once_for_all_of_them():
    uses = {u.option.name: [f.name for f in u.formats] for u in option_uses()}
    assert uses["variables"] == ["hdf5", "netcdf", "zarr"]
    help_of = {u.option.name: u.help for u in option_uses()}
    assert help_of["variables"].startswith("HDF5/netCDF/Zarr: variable(s)")
    assert help_of["order"].startswith("Raw binary: C (row-major)")


def test_ingest_help_shows_every_declared_option_with_its_formats():
    out = CliRunner().invoke(main, ["ingest", "--help"], terminal_width=200).output
    for use in option_uses():
        assert use.option.flag in out and use.help in out
    assert "[hdf5|netcdf|npy|raw|zarr]" in out


def test_ingest_refuses_a_bad_option_value_with_the_formats_own_message(tmp_path):
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "db"), "u.bin", "--name", "a", "--field", "u",
                                       "--shape", "64,sixty-four"])
    assert result.exit_code == 2
    assert "Invalid value for '--shape'" in result.output and "not a list of positive integers" in result.output


def test_a_new_reader_module_is_a_format_of_open_source_and_the_cli(tmp_path, extra_reader):
    extra_reader("text", TEXT_FORMAT)
    values = np.arange(24.0)
    np.savetxt(tmp_path / "f.txt", values)
    src = open_source(tmp_path / "f.txt", grid="4,3,2")
    assert src.format == "text" and src.grid == (4, 3, 2)
    np.testing.assert_array_equal(src.read(src.refs()[0]).ravel(), values)
    np.save(tmp_path / "a.npy", values.reshape(2, 3, 4))
    with pytest.raises(InvalidRequestError, match="which does not take grid"):
        open_source(tmp_path / "a.npy", grid="4,3,2")

    @click.command()
    @format_options
    def probe(fmt, **options):
        click.echo(f"{fmt} {options['grid']}")

    assert "Text: nx,ny,nz of the numbers." in CliRunner().invoke(probe, ["--help"]).output
    assert CliRunner().invoke(probe, ["--format", "text", "--grid", "4,3,2"]).output == "text (4, 3, 2)\n"


def test_two_formats_may_not_declare_one_option_differently(extra_reader):
    extra_reader("other", textwrap.dedent('''
        from turbdb.ingest.format_spec import Format, Option
        FORMAT = Format(name="other", label="other", open=print, options=(Option("shape", "rows"),))
    '''))
    with pytest.raises(TypeError, match="other and raw declare option 'shape' differently"):
        registered()


def test_two_formats_may_not_claim_one_extension(extra_reader):
    extra_reader("other", textwrap.dedent('''
        from turbdb.ingest.format_spec import Format
        FORMAT = Format(name="other", label="other", open=print, extensions=(".npy",))
    '''))
    with pytest.raises(TypeError, match="npy and other both claim '.npy'"):
        registered()


def test_detection_asks_each_format_in_turn(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((2, 2, 2)))
    (tmp_path / "a.npy").rename(tmp_path / "noext")
    assert formats.detect_format(tmp_path / "noext") == "npy"
    assert formats.detect_format(tmp_path) == "zarr"
