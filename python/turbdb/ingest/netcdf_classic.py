"""The size a classic netCDF file (CDF-1, -2 and -5) must have, from its header: where each
variable's data begins and how much there is. A truncated netCDF-4 file fails to open, but
a truncated classic one opens, and its missing tail reads as whatever the reader makes of
it (zeros, or garbage past the end of a memory map), so it is checked before reading."""

from __future__ import annotations

from pathlib import Path

from turbdb.exceptions import FormatError

_DIMENSION, _VARIABLE, _ATTRIBUTE = 10, 11, 12
# Bytes of each nc_type: byte, char, short, int, float, double, then CDF-5's unsigned and 64-bit types.
_TYPE_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 4, 6: 8, 7: 1, 8: 2, 9: 4, 10: 8, 11: 8}
_STREAMING = (1 << 32) - 1


class _Header:
    """A cursor over the header's big-endian fields."""

    def __init__(self, data: bytes, version: int):
        self.data, self.at = data, 4
        self.size = 8 if version == 5 else 4  # CDF-5 counts in 64 bits
        self.offset = 4 if version == 1 else 8  # CDF-1 has 32-bit data offsets

    def integer(self, size: int) -> int:
        if self.at + size > len(self.data):
            raise EOFError
        value = int.from_bytes(self.data[self.at:self.at + size], "big")
        self.at += size
        return value

    def count(self) -> int:
        return self.integer(self.size)

    def skip(self, size: int) -> None:
        self.at += (size + 3) // 4 * 4  # padded to 4 bytes

    def name(self) -> None:
        self.skip(self.count())

    def attributes(self) -> None:
        tag, count = self.integer(4), self.count()
        for _ in range(count if tag == _ATTRIBUTE else 0):
            self.name()
            kind = self.integer(4)
            self.skip(self.count() * _TYPE_BYTES.get(kind, 1))


def check_complete(path: Path) -> None:
    """Raises a FormatError if the classic netCDF file at ``path`` is shorter than its header
    says its data reaches; a netCDF-4 (HDF5) file or one whose header cannot be parsed is
    left to the reader."""
    with path.open("rb") as f:
        head = f.read(4)
        if head[:3] != b"CDF" or head[3] not in (1, 2, 5):
            return
        data = head + f.read(1 << 20)  # headers are small; a larger one is left unchecked
    size = path.stat().st_size
    header = _Header(data, head[3])
    try:
        records = header.count()
        lengths = []
        tag, count = header.integer(4), header.count()
        for _ in range(count if tag == _DIMENSION else 0):
            header.name()
            lengths.append(header.count())
        header.attributes()
        tag, count = header.integer(4), header.count()
        ends, record_bytes, record_vars = [], 0, []
        for _ in range(count if tag == _VARIABLE else 0):
            header.name()
            dims = [header.count() for _ in range(header.count())]
            header.attributes()
            kind, vsize, begin = header.integer(4), header.count(), header.integer(header.offset)
            values = _TYPE_BYTES.get(kind, 1)
            is_record = bool(dims) and lengths[dims[0]] == 0
            for d in dims[1:] if is_record else dims:
                values *= lengths[d]
            if is_record:
                record_vars.append((begin, values))
                record_bytes += vsize
            else:
                ends.append(begin + values)
    except (EOFError, IndexError):
        return
    if len(record_vars) == 1:
        record_bytes = record_vars[0][1]  # a lone record variable is not padded
    if records != _STREAMING and records:
        ends += [begin + (records - 1) * record_bytes + values for begin, values in record_vars]
    needed = max(ends, default=0)
    if size < needed:
        raise FormatError(f"{path} is truncated: its header places data up to byte {needed:,}, but the file has "
                          f"{size:,} bytes; copy it again from where it was written")
