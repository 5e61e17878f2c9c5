"""Who may read what turbdb writes, and what an account that may not is told. A file
rewritten keeps its permissions and group; what a writer adds to an existing dataset takes
those of the directory it lands in, not the writer's umask (a group member with umask 077
who appended one step locked the group, the owner included, out of a shared dataset). A
new dataset's files are made with the umask (docs/format.md, "Permissions")."""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from pathlib import Path

from .exceptions import StorageError

#: The errors of an account that may not do what it asked.
_DENIED = (errno.EACCES, errno.EPERM)
#: Whether ``os.access`` can look with the effective ids (as reads and writes do), not the real ones.
EFFECTIVE_IDS = os.access in os.supports_effective_ids


def keep_permissions(fd: int, like: Path) -> None:
    """Gives the open file ``fd`` the permission bits and group of ``like`` (the file it
    is about to replace, or a sibling), when ``like`` exists; the group only where this
    account may set it (one of its groups). A file that does not exist leaves ``fd`` as the
    umask made it."""
    try:
        wanted = os.stat(like)
    except OSError:
        return
    made = os.fstat(fd)
    if made.st_gid != wanted.st_gid:
        with contextlib.suppress(PermissionError):
            os.fchown(fd, -1, wanted.st_gid)
    if stat.S_IMODE(made.st_mode) != stat.S_IMODE(wanted.st_mode) or made.st_gid != wanted.st_gid:
        os.fchmod(fd, stat.S_IMODE(wanted.st_mode))  # after chown, which may clear bits


def settle(path: Path, directory: os.stat_result) -> None:
    """Gives ``path`` (a file or directory this process made) the permissions ``directory``
    (the stat of the directory it belongs to) implies: a directory its mode, a file its mode
    without the execute bits; and its group where this account may set it. Nothing is
    changed where they agree already."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return
        if st.st_gid != directory.st_gid:
            with contextlib.suppress(PermissionError):
                os.chown(path, -1, directory.st_gid, follow_symlinks=False)
        if not _agrees(st, directory):
            with contextlib.suppress(PermissionError):  # another account's: theirs to keep
                os.chmod(path, _wanted_mode(st, directory))


def settle_tree(top: Path, directory: Path) -> None:
    """:func:`settle` for ``top`` and everything below it, after the permissions of
    ``directory`` (the dataset's, for a field array a writer added to it)."""
    try:
        reference = os.stat(directory)
    except OSError:
        return
    _settle_all(top, reference)


def settle_step(field_dir: Path, t: int) -> None:
    """After the Rust writer stored step ``t`` of the field at ``field_dir`` (its
    directories and shards made with this process's umask): makes them take the field
    directory's permissions. One look down to the first shard first: the step is walked
    only where that differs (a writer whose umask is not the dataset's)."""
    try:
        reference = os.stat(field_dir)
    except OSError:
        return
    chunks = field_dir / "c"
    step = chunks / str(t)
    if all(_agrees(st, reference) and st.st_gid == reference.st_gid for st in _first_path(chunks, step)):
        return
    settle(chunks, reference)  # the writer made it for the field's first step
    _settle_all(step, reference)


def _settle_all(top: Path, reference: os.stat_result) -> None:
    settle(top, reference)
    for root, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            settle(Path(root, name), reference)


def _first_path(chunks: Path, step: Path) -> list[os.stat_result]:
    """The stats of ``chunks``, ``step`` and the first entry of each directory below it, down
    to a file: a sample of what one write made."""
    found = []
    path: Path | None = step
    with contextlib.suppress(OSError):
        found.append(os.stat(chunks))
        while path is not None:
            st = os.lstat(path)
            found.append(st)
            if not stat.S_ISDIR(st.st_mode):
                break
            with os.scandir(path) as entries:
                path = next((Path(e.path) for e in entries), None)
    return found


def _wanted_mode(st: os.stat_result, directory: os.stat_result) -> int:
    # Setgid kept (what is made below stays the group's), sticky not (it guards deletions
    # in the directory itself).
    mode = stat.S_IMODE(directory.st_mode) & ~stat.S_ISVTX
    return mode if stat.S_ISDIR(st.st_mode) else mode & 0o666


def _agrees(st: os.stat_result, directory: os.stat_result) -> bool:
    return stat.S_IMODE(st.st_mode) & 0o777 == _wanted_mode(st, directory) & 0o777


def permission_denied(error: BaseException) -> bool:
    """Whether ``error`` is an account's lack of permission (not a missing file, a full disk)."""
    return isinstance(error, OSError) and error.errno in _DENIED


def unreadable(path: Path | str, *, what: str = "") -> StorageError:
    """The error of a file or directory this account may not read: said as such, never as
    missing, with what to do. ``what`` names it (``dataset 'a'``)."""
    error = StorageError(f"cannot read {what + ' ' if what else ''}{path}: permission denied (account {account()} "
                         "may not read it): ask its owner to make it readable to you (e.g. chmod -R g+rX for a group "
                         "sharing the database), or use an account that may read it")
    error.errno = errno.EACCES
    return error


def unwritable(directory: Path | str, *, what: str = "") -> StorageError:
    """The error of a dataset this account may not write in (add steps, times, fields)."""
    error = StorageError(f"cannot write {what + ' ' if what else ''}{directory}: permission denied (account "
                         f"{account()} may not write in that directory): ask its owner for write access (e.g. a "
                         "group it shares with you, chmod -R g+w), or write to a dataset of your own")
    error.errno = errno.EACCES
    return error


def account() -> str:
    """This process's user name (its uid where it has none)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def cannot_read(path: Path | str) -> bool:
    """Whether this account may not read the file ``path``, or reach it (a directory on the
    way it may not enter); a file that is not there is not this."""
    try:
        os.stat(path)
    except PermissionError:
        return True
    except OSError:
        return False
    return not os.access(path, os.R_OK, effective_ids=EFFECTIVE_IDS)


def first_unreadable(directory: Path) -> Path | None:
    """``directory``, or the first directory below it, that this account may not list or
    enter; None where it may read them all (or ``directory`` is not there)."""
    try:
        with os.scandir(directory) as entries:
            below = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except PermissionError:
        return directory
    except OSError:
        return None
    if not os.access(directory, os.X_OK, effective_ids=EFFECTIVE_IDS):
        return directory
    return next((found for sub in below if (found := first_unreadable(sub)) is not None), None)
