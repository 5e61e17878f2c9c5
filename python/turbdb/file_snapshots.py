"""Knowing whether a small file that is replaced by renames (a dataset's ``zarr.json``)
changed, without reading it at every look. A rename gives the path a new inode and new
times — except that the file system hands out again the inode just freed, and two files
renamed over the path within one tick of its coarse clock get the same times and often
the same size: their ``stat`` is equal (200 times in 200 on ext4). So a ``stat`` equal to
the one taken when the bytes were read proves them current only when they were read
:data:`SETTLED_SECONDS` after the file's last change (a file renamed over it since bears a
later time); before that the bytes are read again and compared. A cache trusted its
``stat`` whenever the file had settled *now*, and so kept for good bytes read between two
such renames: a query then mixed two versions of a rewritten step unseen."""

from __future__ import annotations

import dataclasses
import os
import time

#: Seconds after a file's last change from which bytes read are trusted while its ``stat``
#: stays the same: many ticks of a coarse file-system clock (1–10 ms), which lags by one.
SETTLED_SECONDS = 0.25

StatKey = tuple[int, int, int, int]


def stat_key(st: os.stat_result) -> StatKey:
    """What tells one file at a path from the next, as far as ``stat`` can."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def keys_settled(key: StatKey | tuple[()], read_at: float) -> bool:
    """Whether a file whose :func:`stat_key` was ``key`` at ``read_at`` (taken before the
    ``stat``) had not changed for :data:`SETTLED_SECONDS` then: while its ``stat`` stays
    ``key``, it is the same file. No key (no file) is settled."""
    return not key or read_at - max(key[2], key[3]) / 1e9 > SETTLED_SECONDS


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """The bytes of a file, its ``stat`` when they were read, and when that was."""

    key: StatKey
    data: bytes
    #: Wall-clock time just before the ``stat``.
    read_at: float

    def settled(self) -> bool:
        """Whether the bytes were read well after the file's last change: while its
        ``stat`` stays :attr:`key`, they are its bytes."""
        return keys_settled(self.key, self.read_at)


def snapshot(path: str, previous: Snapshot | None, recent: float = 0.0) -> tuple[Snapshot, bool]:
    """The file at ``path`` now, read only where ``previous`` (None: nothing known) cannot
    vouch for it, and whether its bytes differ from ``previous``'s. ``recent``: seconds
    for which bytes just read are taken as current under the same ``stat`` (a caller that
    looks several times within one piece of work, each look as good as the first; a
    replacement that keeps the ``stat`` is seen that much later). Raises ``OSError``."""
    read_at = time.time()
    st = os.stat(path)
    key = stat_key(st)
    if previous is not None and previous.key == key and (previous.settled() or read_at - previous.read_at < recent):
        return previous, False
    data = read_bytes(path)
    # The stat taken before the read: a file renamed over the path meanwhile has another
    # one, so the next look reads it again.
    now = Snapshot(key, data, read_at)
    return now, previous is None or data != previous.data


def read_bytes(path: str) -> bytes:
    """The file's bytes. Opened non-blocking: a FIFO in the file's place must not hold the
    caller (regular files ignore the flag)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
