"""Sizes in bytes as people write them (``--cache-bytes 2GiB``, ``turbdb.open(...,
cache_bytes="512MB")``): binary and SI units, plain integers, and clear refusals."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import turbdb
from turbdb.byte_size import parse_byte_size
from turbdb.exceptions import InvalidRequestError


@pytest.mark.parametrize(("text", "nbytes"), [
    ("0", 0), ("1073741824", 1 << 30), (4096, 4096),
    ("4GiB", 4 << 30), ("4 GiB", 4 << 30), ("4gib", 4 << 30), ("4Gi", 4 << 30), ("4G", 4 << 30),
    ("512MiB", 512 << 20), ("512M", 512 << 20), ("1.5KiB", 1536), (".5k", 512), ("2TiB", 2 << 40), ("1PiB", 1 << 50), ("2PB", 2 * 10**15),
    ("4GB", 4 * 10**9), ("500MB", 5 * 10**8), ("3kB", 3000), ("1.5e9", 1_500_000_000), ("4.1GB", 4_100_000_000), ("0.3kB", 300), ("100B", 100),
])
def test_units_count_in_powers_of_1024_or_of_1000_as_their_names_say(text, nbytes):
    assert parse_byte_size(text) == nbytes


@pytest.mark.parametrize("bad", ["", "GiB", "-1", -1, "4 parsecs", "4iB", "1.5B", "1.0001kB", "1e30", 2.5, True, None])
def test_anything_else_is_refused_with_examples_of_what_is_taken(bad):
    with pytest.raises(InvalidRequestError, match="cache_bytes"):
        parse_byte_size(bad, "cache_bytes")


@given(st.integers(0, 2**40), st.sampled_from([("", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("kB", 1000), ("MB", 10**6)]))
def test_an_integer_with_a_unit_is_that_many_units(count, unit):
    suffix, scale = unit
    assert parse_byte_size(f"{count}{suffix}") == count * scale


def test_the_engine_takes_its_cache_size_as_text(tmp_path):
    ds = turbdb.create_dataset(tmp_path, "box", grid=(16, 16, 16), times=[0.0], fields={"velocity": 3}, atom=8)
    del ds
    assert turbdb.open(tmp_path, cache_bytes="3MiB").engine_stats()["cache_capacity"] == 3 << 20
    with pytest.raises(InvalidRequestError, match="cache_bytes must be a number of bytes"):
        turbdb.open(tmp_path, cache_bytes="lots")


def test_more_bytes_than_any_machine_has_is_said_so():
    with pytest.raises(InvalidRequestError, match="more bytes than any machine has"):
        parse_byte_size("99999999PiB", "cache_bytes")
