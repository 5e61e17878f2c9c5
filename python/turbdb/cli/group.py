"""The ``turbdb`` command group, on which every command module registers. Errors print one
line saying what to do, never a traceback; SIGTERM stops a command as Ctrl-C does
(``interrupts.py``)."""

from __future__ import annotations

import errno
import os
import re
import sys

import click

from ..exceptions import TurbdbError
from .interrupts import TERMINATED_STATUS, Terminated, handle_as_program, work_done


#: What to do about the operating-system errors a user can fix.
_OS_ADVICE = {
    errno.ENOSPC: "free space on that disk or write somewhere else",
    errno.EDQUOT: "free space within your quota or write somewhere else",
    errno.EACCES: "check the permissions of that path, or use one you can write",
    errno.EPERM: "check the permissions of that path, or use one you can write",
    errno.EROFS: "that file system is read-only; write somewhere else",
    errno.ENOENT: "check the path",
    errno.EEXIST: "a file is in the way of a directory that path needs; choose another path",
    errno.ENOTDIR: "a part of that path is a file, not a directory; check the path",
    errno.EMFILE: "too many open files; raise the limit (ulimit -n)",
}


def os_error_message(e: OSError) -> str:
    """One line for an OSError the library did not turn into a turbdb error: what failed,
    on which path, and what to do."""
    e = short_write_error(e) or e
    where = f" ({e.filename})" if e.filename else ""
    advice = _OS_ADVICE.get(e.errno or 0)
    return f"{e.strerror or e}{where}" + (f": {advice}" if advice else "")


# numpy's .npy writer (ndarray.tofile) reports a short write, a full disk, without the errno.
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


def short_write_error(e: OSError, path: str | os.PathLike[str] | None = None) -> OSError | None:
    """The error numpy's "786432 requested and 262112 written" stands for, with its errno
    and ``path`` (default: the error's own): no space left on the disk (a quota that is full
    gives the same, and the advice covers it: write somewhere else); None for any other
    error. (Its numbers are one chunk's, not the file's: the disk's free space afterwards
    cannot tell a full disk from a quota.)"""
    if e.errno is not None or not _SHORT_WRITE.fullmatch(str(e)):
        return None
    path = path if path is not None else e.filename
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), None if path is None else str(path))


class _Command(click.Command):
    """A command whose .npy output failed part-way says on which path (numpy's error names none)."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except OSError as e:
            out = ctx.params.get("out")
            error = short_write_error(e, out if isinstance(out, (str, os.PathLike)) else None)
            if error is None:
                raise
            raise error from None


class _Group(click.Group):
    """Turns turbdb errors, and the operating system's, into a one-line message and exit
    code 2, and SIGTERM into one line and exit code 143."""

    command_class = _Command

    def main(self, args=None, *rest, **options):  # type: ignore[override]
        # No arguments: the program, with those of its command line, whose signals the group
        # handles; arguments given: called from Python (CliRunner, a script).
        if args is None:
            handle_as_program()
        return super().main(args, *rest, **options)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            result = super().invoke(ctx)
        except TurbdbError as e:
            click.secho(f"error: {e}", fg="red", err=True)
            sys.exit(2)
        except OSError as e:
            click.secho(f"error: {os_error_message(e)}", fg="red", err=True)
            sys.exit(2)
        except Terminated:
            click.echo("Terminated (SIGTERM).", err=True)
            sys.exit(TERMINATED_STATUS)
        work_done()
        return result


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="turbdb")
def main() -> None:
    """turbdb: a turbulence database.

    A database is a directory of datasets; each dataset is one simulation stored as Zarr v3
    shards of Morton-ordered atoms. Start with `turbdb simulate data --name isotropic64
    --grid 64 --steps 100`, then `turbdb info data`.
    """
