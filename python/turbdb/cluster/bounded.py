"""Waiting on workers that may not answer. A stopped (SIGSTOP) or hung worker stays in the
scheduler's list for minutes (its worker-ttl), and a Dask call that involves it —
registering a worker plugin, running a function on it, a task bound to it — waits for as
long as it stays stopped, ignoring Ctrl-C while it waits in a lock. The waits of
``turbdb cluster up``, ``place`` and ``repair`` go through here, each with a limit."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from distributed import Client

T = TypeVar("T")

#: How long a worker may take to say that it is there (a function run on it).
ASK_SECONDS = 3.0
#: Workers asked at once (each question holds a thread while it waits).
ASK_AT_ONCE = 64


def within(seconds: float, work: Callable[[], T], what: str) -> T:
    """``work()``, run in a thread of its own so that this one gives up after ``seconds``
    (raising :class:`TimeoutError` naming ``what``) and stays open to Ctrl-C; a call left
    waiting ends with its client."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread as it is
            outcome["error"] = e

    thread = threading.Thread(target=run, name=f"turbdb-{what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not finish in {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def ask_each(client: Client, function: Callable[..., Any], *args: Any, addresses: list[str],
             seconds: float | None = None) -> dict[str, Any]:
    """``function(*args)`` run on each worker at ``addresses`` at once: per address its
    answer, the exception it raised, or a :class:`TimeoutError` if it did not answer in
    ``seconds`` (default ``ASK_SECONDS``; one call for all would lose every answer to one
    stopped worker)."""
    if not addresses:
        return {}
    seconds = ASK_SECONDS if seconds is None else seconds

    def ask(address: str) -> Any:
        try:
            answers = client.run(function, *args, workers=[address], on_error="return", callback_timeout=seconds)
        except Exception as e:  # noqa: BLE001 - timed out, or the scheduler is gone: no answer from this one
            return e if not isinstance(e, (TimeoutError, OSError)) else TimeoutError(
                f"worker {address} did not answer in {seconds:g} s ({type(e).__name__})")
        return answers.get(address, TimeoutError(f"worker {address} did not answer"))

    pool = concurrent.futures.ThreadPoolExecutor(min(len(addresses), ASK_AT_ONCE), thread_name_prefix="turbdb-ask")
    try:
        futures = {a: pool.submit(ask, a) for a in addresses}
        return {a: f.result() for a, f in futures.items()}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def answering(client: Client, live: dict[str, str], seconds: float | None = None) -> tuple[dict[str, str], list[str]]:
    """Of ``live`` (``{slot: address}``), the workers that answer within ``seconds`` (default
    ``ASK_SECONDS``), and the slots of those that do not (stopped or hung, though still in
    the scheduler's list)."""
    answers = ask_each(client, _here, addresses=list(live.values()), seconds=seconds)
    ok = {slot: address for slot, address in live.items() if answers.get(address) is True}
    return ok, sorted(set(live) - set(ok))


def _here() -> bool:
    return True
