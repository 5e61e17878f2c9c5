"""Output files written whole or not at all: each is written under a temporary name beside
its target and renamed over it only once complete, so that an interrupted or failed write
leaves the earlier file (or none) in place, never a truncated one that reads as whole."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .zarr_meta import TEMP_PREFIX


@contextlib.contextmanager
def replacing(*targets: str | os.PathLike[str]) -> Iterator[list[Path]]:
    """Temporary paths, one beside each of ``targets``, to write the new outputs to (files,
    or directories such as a Zarr store). When the block ends they are renamed over their
    targets, in the order given; when it fails or is interrupted they are removed and the
    targets are left as they were. Each temporary name ends with its target's name, so
    that writers that go by the ending (``np.save``, ``savefig``) write the same format.
    A directory replaces a directory only: callers check first that the old one may go."""
    given = [Path(t).expanduser() for t in targets]  # "~/q.csv" was a directory named ~ here
    # Written in place, as before, where a rename cannot do: a device or pipe (a link to
    # /dev/null: the rename replaced the device node with a file), a folder the user may
    # not write in (only the file is theirs).
    # (Through the name given, a link included: np.save adds .npy to a device's name.)
    devices = [_is_device(t) for t in given]
    places = [t if device else _place(t) for t, device in zip(given, devices)]
    for target, device in zip(places, devices):
        if not device:
            target.parent.mkdir(parents=True, exist_ok=True)
    for folder in {target.parent for target, device in zip(places, devices) if not device}:
        _sweep_left_behind(folder)
    in_place = [device or _in_unwritable_folder(target) for target, device in zip(places, devices)]
    temporaries = [t if kept else _beside(target, t.name) for t, target, kept in zip(given, places, in_place)]
    leftovers = [t for t, kept in zip(temporaries, in_place) if not kept]
    try:
        try:
            yield temporaries
        except OSError as e:
            named = _named_for_target(e, temporaries, given)
            if named is e:
                raise
            raise named from None
        with _interrupts_held():  # all the outputs in place, and nothing they replaced left behind
            for temporary, target, kept in zip(temporaries, places, in_place):
                if not kept:
                    _move_into_place(temporary, target, leftovers)
            _remove_all(leftovers)
    finally:
        _remove_all(leftovers)


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuses, before any work, an output in a folder this account may not write in (the
    error came after the work, naming the hidden temporary), unless the output is a file it
    may write there (written in place, see :func:`replacing`) or a pipe or device."""
    target = Path(path).expanduser()
    if _is_device(target):
        return
    folder = target.parent
    while not folder.exists() and folder != folder.parent:  # made by replacing
        folder = folder.parent
    if not folder.is_dir():  # a file in the way: the write names it
        return
    if os.access(folder, os.W_OK | os.X_OK) or (target.is_file() and os.access(target, os.W_OK)):
        return
    raise PermissionError(errno.EACCES, f"permission denied: this account may not write in {folder or '.'}",
                          str(target))


def check_room(path: str | os.PathLike[str], nbytes: int) -> None:
    """Refuses to write ``nbytes`` to the file ``path`` (a temporary of :func:`replacing`)
    when its disk has less free space: HDF5 that meets a full disk part-way may crash the
    process (a failed write in its metadata cache, or a second close of the half-closed
    file: h5py issues 914 and 2160), so its writers ask first. A pipe or device is not
    asked (it holds no files); a disk that fills meanwhile is still met."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
    except FileNotFoundError:
        pass
    try:
        disk = os.statvfs(Path(path).parent)
    except (OSError, AttributeError):  # no statvfs (Windows), or a folder the writer will name
        return
    if disk.f_bavail * disk.f_frsize < nbytes:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def save_npy(path: str | os.PathLike[str], values: Any) -> None:
    """``np.save`` under exactly the name given: given a name, np.save adds .npy to one
    that does not end in it (``c.NPY``, a device), and the file was not where it was said to be."""
    import numpy as np

    with open(path, "wb") as f:
        # Into a pipe (``--out`` linked to /dev/stdout), through its write alone: numpy
        # writes a real file by its descriptor, which needs a position a pipe has not.
        np.save(f if f.seekable() else _Writes(f.write), values)


class _Writes:
    """A file that only writes (see save_npy)."""

    def __init__(self, write: Any):
        self.write = write


def _is_device(target: Path) -> bool:
    """Whether ``target``, links followed by the system (``os.stat``), is neither a file nor
    a directory: a pipe, a terminal, a device, a socket, written in place. Resolving a link
    to /dev/stdout by its path gave /proc/PID/fd/pipe:[N], which does not exist: the
    output was taken for a new file, its temporary went to /proc, and it failed after the work."""
    try:
        mode = os.stat(target).st_mode
    except (OSError, ValueError):  # none yet (or a loop of links, named by _place)
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _in_unwritable_folder(target: Path) -> bool:
    """Whether ``target`` is a file the user may write in a folder they may not (see replacing)."""
    return target.is_file() and not os.access(target.parent, os.W_OK) and os.access(target, os.W_OK)


def _named_for_target(error: OSError, temporaries: list[Path], targets: list[Path]) -> OSError:
    """``error`` of a write to one of ``temporaries``, naming the output it stands for (the
    user never gave the hidden name): a full disk is the system's one line on that output
    (h5py's said "Can't synchronously write data (file write failed: … filename =
    '….turbdb-tmp-…-old.h5' …"); another error on a temporary keeps its words."""
    named = [target for temporary, target in zip(temporaries, targets)
             if str(temporary) == str(error.filename) or temporary.name in str(error)]
    if error.errno in (errno.ENOSPC, errno.EDQUOT) and (named or error.filename is None):
        return OSError(error.errno, os.strerror(error.errno), str((named or targets)[0]))
    if named and error.filename is not None:
        return OSError(error.errno, error.strerror, str(named[0]))
    return error


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Within the block, Ctrl-C (and SIGTERM) wait, and take effect as it ends: an interrupt
    while the outputs were renamed into place left an old ``.h5`` beside a new ``.xmf``, or a
    replaced Zarr store behind under its temporary name. Only the main thread receives
    signals, and a handler set outside Python cannot be put back: elsewhere, and then, the
    block runs as it is."""
    numbers = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or None in map(signal.getsignal, numbers):
        yield
        return
    held: list[tuple[int, Any]] = []
    previous = {number: signal.signal(number, lambda *caught: held.append(caught)) for number in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if held:
        number, frame = held[0]
        handler = previous[number]
        if callable(handler):
            handler(number, frame)  # Python's own for SIGINT raises KeyboardInterrupt
        elif handler == signal.SIG_DFL:
            signal.raise_signal(number)


def _place(target: Path) -> Path:
    """Where ``target`` really is: a symbolic link's file is replaced, not the link (as
    writing through the link did)."""
    if not target.is_symlink():
        return target
    try:
        return target.resolve(strict=False)
    except RuntimeError:  # a loop of links: the one-line error the shell gives too
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(target)) from None


def _beside(target: Path, ending: str | None = None) -> Path:
    # Hidden and prefixed as turbdb's other temporaries; unique, so two runs never share one;
    # named for the process and machine writing it (see _sweep_left_behind). It ends with
    # the name given (a link's target may have another ending, and np.save adds .npy to a
    # name without it).
    return target.parent / f"{TEMP_PREFIX}{os.getpid()}.{_machine()}.{secrets.token_hex(4)}-{ending or target.name}"


#: A temporary of :func:`_beside`: the writing process's id and machine.
_LEFT_BY = re.compile(re.escape(TEMP_PREFIX) + r"(\d+)\.([0-9a-f]{8})\.[0-9a-f]{8}-")


@functools.cache
def _machine() -> str:
    """This machine, as temporaries name it: a hash of its host name."""
    return hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()


def _sweep_left_behind(folder: Path) -> None:
    """Removes the temporaries in ``folder`` left by processes of this machine that no
    longer run: one killed while writing (``kill -9``, the out-of-memory killer) left its
    hidden temporary, a whole cutout's size, for good. A process of another machine (a
    shared file system), or a running one, is left alone."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        left = _LEFT_BY.match(entry.name)
        if left is None or left[2] != _machine() or _running(int(left[1])):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


def _running(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs (another user's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it runs, as someone else
        return True
    return True


def _move_into_place(temporary: Path, target: Path, leftovers: list[Path]) -> None:
    """Renames ``temporary`` over ``target``. A directory cannot be renamed over a
    non-empty one, so the old one is moved aside first and removed with the leftovers
    once the new one is in place, or put back if it is not (an interrupt between the two
    renames included)."""
    if not (temporary.is_dir() and target.is_dir() and not target.is_symlink()):
        if target.is_file():  # the new file keeps the old one's permissions (a private 600 stayed 600)
            with contextlib.suppress(OSError):
                shutil.copymode(target, temporary)
        try:
            os.replace(temporary, target)
        except OSError as e:
            if e.errno not in (errno.EBUSY, errno.EXDEV) or not target.is_file():
                raise OSError(e.errno, e.strerror, str(target)) from None
            # A file that is a mount point (docker -v host.csv:/work/q.csv): written through.
            shutil.copyfile(temporary, target)
        return
    aside = _beside(target)
    try:
        os.rename(target, aside)
        os.rename(temporary, target)
    finally:
        if not temporary.exists():
            leftovers.append(aside)
        elif aside.exists():
            os.rename(aside, target)


def _remove_all(leftovers: list[Path]) -> None:
    """Removes the leftovers that are there: never an error of its own in place of the write's."""
    for path in leftovers:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
