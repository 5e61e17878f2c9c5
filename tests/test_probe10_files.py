"""Files that are not what they should be: a truncated Blosc chunk of an input store, a
field's lost leading steps, FIFOs in place of lock, coordinate or chunk files, and the
zero-fill note said only when zeros were stored. Real files on disk, small grids."""

import os
import shutil
import subprocess
import sys
import textwrap

import numcodecs
import numpy as np
import pytest
import zarr

import turbdb
from turbdb.exceptions import FormatError
from turbdb.ingest import open_source
from turbdb.ingest.pipeline import ingest_inputs


def finishes(code: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter; one that waits forever (on a FIFO) fails the test
    instead of hanging the suite."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish in {timeout} s (waiting on a FIFO?)")


def blosc_store(path, zarr_format):
    """A (2, 8, 8, 8) float32 field with xarray's dimension names, Blosc lz4 + shuffle."""
    u = np.random.default_rng(0).standard_normal((2, 8, 8, 8)).astype("f4")
    if zarr_format == 2:
        a = zarr.open_array(path, mode="w", zarr_format=2, shape=u.shape, chunks=(1, 8, 8, 8), dtype="f4",
                            compressor=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1),
                            attributes={"_ARRAY_DIMENSIONS": ["t", "z", "y", "x"]})
        chunk = path / "1.0.0.0"
    else:
        a = zarr.create_array(path, shape=u.shape, chunks=(1, 8, 8, 8), dtype="f4", dimension_names=["t", "z", "y", "x"],
                              compressors=zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"))
        chunk = path / "c" / "1" / "0" / "0" / "0"
    a[...] = u
    return u, chunk


# -- D1: a truncated Blosc chunk ------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("cut", ["half", "one byte"])
def test_a_truncated_blosc_chunk_is_refused_by_name_before_anything_is_stored(tmp_path, zarr_format, cut):
    u, chunk = blosc_store(tmp_path / "u.zarr", zarr_format)
    src = open_source(tmp_path / "u.zarr")  # whole: read back exactly
    np.testing.assert_array_equal(src.read(src.refs()[1])[..., 0], u[1])
    size = chunk.stat().st_size
    os.truncate(chunk, size // 2 if cut == "half" else size - 1)
    # numcodecs decompressed it without a word into leftover memory: stored, verified "ok".
    with pytest.raises(FormatError, match=rf"chunk {chunk} is \d+ bytes, but its Blosc header says {size}: it is "
                                          "truncated"):
        open_source(tmp_path / "u.zarr")
    with pytest.raises(FormatError, match="truncated"):
        ingest_inputs(tmp_path / "db", "d", "pressure", [tmp_path / "u.zarr"], quiet=True)
    assert not (tmp_path / "db" / "d").exists()


def test_a_truncated_blosc_chunk_of_one_array_of_a_group_names_the_array(tmp_path):
    g = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=2)
    g.create_array("u", shape=(1, 8, 8, 8), chunks=(1, 4, 8, 8), dtype="f4",
                   compressors=numcodecs.Blosc(cname="zstd", shuffle=2))[...] = 1.5
    chunk = tmp_path / "g.zarr" / "u" / "0.1.0.0"
    os.truncate(chunk, 10)
    with pytest.raises(FormatError, match=rf"chunk {chunk} of array 'u' is 10 bytes, too short for a Blosc chunk"):
        open_source(tmp_path / "g.zarr", variables="u")


# -- D4: a field that lost its first steps, or all of them ------------------------------------


def two_fields(path, **options):
    """Written as before turbdb recorded the steps written (``steps_written``): the rules
    below are what verify goes by then (tests/test_probe11_steps.py: with the record)."""
    ds = turbdb.create_dataset(path, "mine", grid=(8, 8, 8), times=[0, 1, 2], fields={"velocity": 3, "pressure": 1},
                               **options)
    for t in range(3):
        ds.write("velocity", t, np.ones((8, 8, 8, 3)))
        ds.write("pressure", t, np.ones((8, 8, 8)))
    ds.update_attrs(lambda attrs: attrs.pop("steps_written"))
    return ds


def lost_steps(ds):
    return {field: [t for _, t, message in report["problems"] if "every shard of this step is missing" in message]
            for field, report in ds.verify().items()}


def test_verify_finds_a_simulated_field_that_lost_its_first_step(tmp_path):
    ds = two_fields(tmp_path / "db", provenance={"generator": "turbdb simulate --kind synthetic"})
    shutil.rmtree(ds.path / "pressure" / "c" / "0")
    assert lost_steps(ds) == {"velocity": [], "pressure": [0]}
    shutil.rmtree(ds.path / "velocity" / "c")  # every step: those pressure has are lost
    assert lost_steps(ds) == {"velocity": [1, 2], "pressure": []}


def test_verify_finds_a_field_that_lost_leading_steps_a_later_field_has(tmp_path):
    ds = two_fields(tmp_path / "db")
    shutil.rmtree(ds.path / "velocity" / "c" / "0")
    assert lost_steps(ds) == {"velocity": [0], "pressure": []}
    problems = ds.verify()["velocity"]["problems"]
    assert "pressure, a field made after this one and written with it, has it" in problems[0][2]
    shutil.rmtree(ds.path / "velocity" / "c" / "1")
    assert lost_steps(ds) == {"velocity": [0, 1], "pressure": []}


def test_verify_passes_fields_written_for_some_steps_only(tmp_path):
    ds = two_fields(tmp_path / "db")
    ds.add_field("tracer", 1)
    ds.write("tracer", 2, np.ones((8, 8, 8)))  # tracked from step 2 on: steps 0 and 1 never written
    ds.add_field("dye", 1)  # added, not written yet
    assert lost_steps(ds) == {"velocity": [], "pressure": [], "tracer": [], "dye": []}
    # Two fields made together, each written at other steps: nothing says a step was lost.
    apart = turbdb.create_dataset(tmp_path / "db2", "apart", grid=(8, 8, 8), times=[0, 1])
    apart.write("velocity", 1, np.ones((8, 8, 8, 3)))
    apart.write("pressure", 0, np.ones((8, 8, 8)))
    assert lost_steps(apart) == {"velocity": [], "pressure": []}


# -- D5: FIFOs in place of files ---------------------------------------------------------------


@pytest.fixture
def dataset(tmp_path):
    return two_fields(tmp_path / "db")


def test_a_fifo_as_the_metadata_lock_is_named_not_waited_on(dataset):
    (dataset.path / ".turbdb.lock").unlink(missing_ok=True)
    os.mkfifo(dataset.path / ".turbdb.lock")
    result = finishes(f"""
        import turbdb
        ds = turbdb.open({str(dataset.path.parent)!r})["mine"]
        print(ds.verify_metadata())
        try:
            ds.update_attrs(lambda attrs: None)
        except turbdb.StorageError as e:
            print("refused:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "'.turbdb.lock', 'is a FIFO, not a regular file" in result.stdout
    assert "refused:" in result.stdout and ".turbdb.lock is a FIFO, not a regular file" in result.stdout


def test_a_fifo_as_the_writer_lock_is_refused(dataset):
    (dataset.path / ".turbdb-writer.lock").unlink(missing_ok=True)
    os.mkfifo(dataset.path / ".turbdb-writer.lock")
    result = finishes(f"""
        import turbdb
        try:
            with turbdb.open({str(dataset.path.parent)!r})["mine"].writer_lock():
                pass
        except turbdb.StorageError as e:
            print("refused:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and ".turbdb-writer.lock is a FIFO, not a regular file" in result.stdout


@pytest.mark.parametrize("coordinate", [("x", "c", "0"), ("time", "c", "0"), ("y", "zarr.json")])
def test_a_fifo_in_a_coordinate_array_is_named_by_verify_metadata(dataset, coordinate):
    fifo = dataset.path.joinpath(*coordinate)
    fifo.unlink()
    os.mkfifo(fifo)
    result = finishes(f"""
        import turbdb
        print(turbdb.open({str(dataset.path.parent)!r})["mine"].verify_metadata())
    """)
    assert result.returncode == 0, result.stderr
    assert f"('{'/'.join(coordinate)}', 'is a FIFO, not a regular file" in result.stdout


def test_an_input_store_with_a_fifo_chunk_is_refused_before_anything_is_made(tmp_path):
    blosc_store(tmp_path / "u.zarr", 2)
    chunk = tmp_path / "u.zarr" / "1.0.0.0"
    chunk.unlink()
    os.mkfifo(chunk)
    result = finishes(f"""
        from turbdb.ingest.pipeline import ingest_inputs
        from turbdb.exceptions import FormatError
        try:
            ingest_inputs({str(tmp_path / 'db')!r}, "d", "p", [{str(tmp_path / 'u.zarr')!r}], quiet=True)
        except FormatError as e:
            print("refused:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert f"refused: {tmp_path / 'u.zarr'} holds 1 file(s) that are not regular files: {chunk} (a FIFO)" in result.stdout
    assert not (tmp_path / "db" / "d").exists()


def test_a_fifo_as_an_input_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "u.npy")
    result = finishes(f"""
        from turbdb.ingest import open_source
        from turbdb.exceptions import StorageError
        try:
            open_source({str(tmp_path / 'u.npy')!r})
        except StorageError as e:
            print("refused:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "is not a regular file (a FIFO, socket or device)" in result.stdout


# -- D6: the zero-fill note ---------------------------------------------------------------------


def test_the_zero_fill_note_is_said_only_when_zeros_were_stored(tmp_path, capsys):
    u = np.full((2, 8, 8, 8), 1.5, "f4")
    zarr.open_array(tmp_path / "u.zarr", mode="w", zarr_format=2, shape=u.shape, chunks=(1, 8, 8, 8), dtype="f4",
                    attributes={"_ARRAY_DIMENSIONS": ["t", "z", "y", "x"]})[...] = u
    ingest_inputs(tmp_path / "db", "a", "p", [tmp_path / "u.zarr"], quiet=True)
    assert "fill value 0" not in capsys.readouterr().err
    u[1, 2, 3, 4] = 0.0
    zarr.open_array(tmp_path / "u.zarr", mode="r+")[...] = u
    ingest_inputs(tmp_path / "db", "b", "p", [tmp_path / "u.zarr"], quiet=True)
    err = capsys.readouterr().err
    assert err.count("fill value 0 (zarr-python's default)") == 1 and "zeros were stored as values" in err
