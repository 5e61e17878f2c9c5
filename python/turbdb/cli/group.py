"""The ``turbdb`` command group, on which every command module registers. Errors print one
line saying what to do, never a traceback, and exit 1 (usage errors: 2); SIGTERM stops a
command as Ctrl-C does (``interrupts.py``). docs/cli.md describes these conventions."""

from __future__ import annotations

import errno
import os
import re
import sys
import warnings

import click

from ..exceptions import TurbdbError
from .closed_pipes import keep_working_when_readers_leave
from .interrupts import TERMINATED_STATUS, Terminated, handle_as_program, work_done
from .wording import reworded


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


#: Exit status of a command that failed at its work (time out of range, unknown dataset,
#: server unreachable, disk full); click's usage errors (a bad option) exit 2.
FAILED_STATUS = 1


class CommandFailed(Exception):
    """A command's work failed: the one line that says why, worded for the command line."""


class _Command(click.Command):
    """A command whose errors are worded in its own options (``--filter-width``, not the
    API's ``filter_width``), and whose .npy output that failed part-way says on which path
    (numpy's error names none)."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except TurbdbError as e:
            raise CommandFailed(reworded(str(e), self)) from None
        except OSError as e:
            out = ctx.params.get("out")
            error = short_write_error(e, out if isinstance(out, (str, os.PathLike)) else None)
            raise CommandFailed(os_error_message(error or e)) from None


class _Subgroup(click.Group):
    """A group of commands (``turbdb stats``, ``turbdb cluster``): without a command it
    prints its help on stdout and exits 0, as ``turbdb`` itself does (click wrote it to
    stderr with status 2, a usage error)."""

    command_class = _Command
    group_class = type  # its own groups are of this class too

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)


class _Group(_Subgroup):
    """Turns turbdb errors, and the operating system's, into a one-line message and exit
    status 1 (click's usage errors keep 2), and SIGTERM into one line and exit status 143;
    honours NO_COLOR; a reader of stdout or stderr that leaves early stops the output, not
    the work (``closed_pipes.py``); warnings are one line."""

    group_class = _Subgroup

    def main(self, args=None, *rest, **options):  # type: ignore[override]
        # No arguments: the program, with those of its command line, whose signals and
        # streams the group handles; arguments given: called from Python (CliRunner, a script).
        if args is None:
            handle_as_program()
            keep_working_when_readers_leave()
            warnings.showwarning = _one_line_warning
        if os.environ.get("NO_COLOR"):  # https://no-color.org: any value but empty
            options.setdefault("color", False)
        return super().main(args, *rest, **options)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        from ..size_limit import max_result_bytes

        max_result_bytes()  # a bad $TURBDB_MAX_RESULT_BYTES is named now, not half-way through the work
        try:
            result = super().invoke(ctx)
        except CommandFailed as e:
            click.secho(f"error: {e}", fg="red", err=True)
            sys.exit(FAILED_STATUS)
        except TurbdbError as e:
            click.secho(f"error: {e}", fg="red", err=True)
            sys.exit(FAILED_STATUS)
        except OSError as e:
            click.secho(f"error: {os_error_message(e)}", fg="red", err=True)
            sys.exit(FAILED_STATUS)
        except Terminated:
            click.echo("Terminated (SIGTERM).", err=True)
            sys.exit(TERMINATED_STATUS)
        work_done()
        return result


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: object = None, line: str | None = None) -> None:
    """A warning as the program's other messages: one line on stderr, without Python's
    file, line number and source line."""
    click.secho(f"warning: {message}", fg="yellow", err=True)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="turbdb")
def main() -> None:
    """turbdb: a turbulence database.

    A database is a directory of datasets; each dataset is one simulation stored as Zarr v3
    shards of Morton-ordered atoms. Start with `turbdb simulate data --name isotropic64
    --grid 64 --steps 100`, then `turbdb info data`.
    """
