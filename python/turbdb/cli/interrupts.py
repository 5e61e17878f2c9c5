"""How the ``turbdb`` program ends when it is stopped: SIGTERM (``kill``, a batch system's
time limit, a container stopping) takes the path Ctrl-C takes, so that the same cleanup runs,
and the program exits with status 143; once a command's work is done, neither signal turns
its success into a failure."""

from __future__ import annotations

import signal
import threading

#: The status of a program stopped by SIGTERM, as a shell reports one killed by it.
TERMINATED_STATUS = 128 + signal.SIGTERM

# Whether this process is the program: a command run from Python (click's CliRunner, a
# script) leaves the signals of its process alone.
_as_program = False


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt: every cleanup that runs on
    Ctrl-C (``except BaseException``, ``finally``: temporary outputs removed, a dataset that
    stored no step deleted) runs on it too. Without it the program died at once, skipping
    them (an empty dataset with every time declared blocked the rerun)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def handle_as_program() -> None:
    """This process is the ``turbdb`` program: from now on SIGTERM raises
    :class:`Terminated` in the main thread (only there can signals be handled)."""
    global _as_program
    if threading.current_thread() is not threading.main_thread():
        return
    _as_program = True
    signal.signal(signal.SIGTERM, _raise_terminated)


def work_done() -> None:
    """The command's outputs are in place: from now on the program ignores SIGINT and
    SIGTERM, and what is left is saying so and the exit, where Ctrl-C ended it with status
    -2 or "Aborted!" although its output was complete (freeing a dataset's engine takes a
    while). An ignored signal stays ignored while Python shuts down, where a handler of
    its own is reset to the default. Nothing from Python."""
    if _as_program:
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)


def as_program() -> bool:
    """Whether this process is the ``turbdb`` program (see :func:`handle_as_program`)."""
    return _as_program
