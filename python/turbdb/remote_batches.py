"""How ``turbdb.connect`` fits any query, cutout or track into requests a server accepts: it
reads the token's limits once (``GET /v1/limits``), splits the work into batches within
them, sends the batches concurrently while pacing them under the server's rate limit (a
client-side copy of the server's token bucket, so a long job does not run into 429s), and
shows a progress bar when there is more than one batch. JHTDB's own clients chunk for their
users the same way."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import math
import threading
import time as _time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from .exceptions import DatasetBusyError, QueryCancelledError, ServiceError
from .progress_bars import bar_disabled
from .step_versions import StepVersions

T = TypeVar("T")
# No batch is larger than this, whatever the token allows: a progress bar with steps, and
# requests that take a fraction of a second to a few seconds each.
BATCH_CAP = 1_000_000
# Requests in flight at once by default.
CONCURRENCY = 4
# Characters of one request's list of times (time=0.1,0.2,…): with the path and the other
# parameters, within nginx's default 8 KiB request line (large_client_header_buffers) and
# far below the server's own 64 KiB. About 270 times of 21 digits.
TIME_LIST_CHARS = 6000


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """What the server lets this client do (``GET /v1/limits``)."""

    max_points: int
    requests_per_minute: float
    burst: float
    max_track_rows: int
    max_track_steps: int = 2**62
    #: Whether the query endpoint takes several times in one request (an older server
    #: refuses ``time=0.1,0.2`` with a 400; its /v1/limits does not say this).
    time_series_queries: bool = False

    @classmethod
    def unknown(cls) -> ServerLimits:
        """A server without ``/v1/limits`` (older turbdb): send everything at once, unpaced."""
        return cls(max_points=2**62, requests_per_minute=math.inf, burst=math.inf, max_track_rows=2**62,
                   max_track_steps=2**62)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> ServerLimits:
        try:
            return cls(max_points=int(document["max_points"]), requests_per_minute=float(document["requests_per_minute"]),
                       burst=float(document.get("burst", document["requests_per_minute"])),
                       max_track_rows=int(document.get("max_track_rows", 2**62)),
                       max_track_steps=int(document.get("max_track_steps", 2**62)),
                       time_series_queries=document.get("time_series_queries") is True)
        except (KeyError, TypeError, ValueError) as e:
            raise ServiceError(f"the server's /v1/limits answer is not understood ({type(e).__name__}: {e})") from None

    @property
    def batch_points(self) -> int:
        return max(1, min(self.max_points, BATCH_CAP))


# The stop signal of the batch a thread is running (see run): a thread waiting in the pacer,
# a backoff or a Retry-After wakes up at once and sends nothing more once its call ended
# (Ctrl-C, another batch failed). Four requests reached the server after a Ctrl-C.
_batch = threading.local()


def pause(seconds: float) -> None:
    """Sleeps ``seconds``, or until the batch this thread runs is stopped; then raises
    :class:`QueryCancelledError` if it was (its caller must send nothing more)."""
    stop: threading.Event | None = getattr(_batch, "stop", None)
    if stop is None:
        _time.sleep(seconds)
        return
    stop.wait(seconds)
    check_stopped()


def check_stopped() -> None:
    """Raises :class:`QueryCancelledError` if the call this thread's batch belongs to ended."""
    stop: threading.Event | None = getattr(_batch, "stop", None)
    if stop is not None and stop.is_set():
        raise QueryCancelledError("the call this request belonged to ended (interrupted, or another batch failed)")


class Pacer:
    """A token bucket like the server's: ``per_minute`` requests a minute, ``burst`` at once.
    :meth:`wait` blocks until the next request may go; threads share one pacer. ``margin``
    keeps a little below the server's figures, whose clock and bucket this one only copies."""

    def __init__(self, per_minute: float, burst: float, clock: Callable[[], float] = _time.monotonic,
                 sleep: Callable[[float], None] = pause, margin: float = 0.0):
        self.rate = per_minute / 60.0 * (1.0 - margin)
        self.capacity = max(1.0, burst * (1.0 - margin))
        self.level = self.capacity
        self.clock, self.sleep = clock, sleep
        self.stamp = clock()
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Takes one request's worth, waiting if the bucket is empty; returns the wait."""
        if math.isinf(self.rate):
            return 0.0
        with self._lock:
            now = self.clock()
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now
            self.level -= 1.0  # reserved now; a negative level is the queue of waiting requests
            delay = 0.0 if self.level >= 0 else -self.level / self.rate
        if delay > 0:
            self.sleep(delay)
        return delay

    def refused(self, wait: float) -> bool:
        """The server refused a request for its rate (a 429) and asks for ``wait`` seconds:
        its bucket is empty whatever this copy counted (another process with the same token
        drained it). The next request here goes in ``wait`` seconds and the others after it
        at the rate, instead of each thread asking again after its own wait (a client whose
        bucket another process had drained failed after 8 refusals of one of its requests).
        False where this pacer paces nothing: the caller waits itself."""
        if math.isinf(self.rate):
            return False
        with self._lock:
            now = self.clock()
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate, 1.0 - wait * self.rate)
            self.stamp = now
        return True


def spans(total: int, size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` pieces of ``range(total)`` of at most ``size`` each."""
    return [(start, min(total, start + size)) for start in range(0, total, max(1, size))] or [(0, 0)]


def series_pieces(points: int, times: Sequence[str], size: int) -> list[tuple[int, int, int, int]]:
    """``(t0, t1, a, b)``: times ``t0:t1`` of points ``a:b``, the requests of a query of
    ``points`` points at ``times`` (as sent), each of at most ``size`` points × times. As
    many times as fit with all the points, their list within :data:`TIME_LIST_CHARS`; one
    time at a time, its points in spans of ``size``, when the points alone fill a request."""
    per_request = size // max(points, 1)
    if per_request <= 1:
        return [(k, k + 1, a, b) for k in range(len(times)) for a, b in spans(points, size)]
    pieces, first, chars = [], 0, 0
    for k, text in enumerate(times):
        if k > first and (k - first == per_request or chars + 1 + len(text) > TIME_LIST_CHARS):
            pieces.append((first, k, 0, points))
            first, chars = k, 0
        chars += len(text) + (k > first)
    pieces.append((first, len(times), 0, points))
    return pieces


def boxes(shape: tuple[int, int, int], limit: int, strides: tuple[int, int, int] = (1, 1, 1),
          width: int = 1, extents: tuple[int | None, int | None, int | None] = (None, None, None),
          ) -> Iterator[tuple[tuple[int, int], tuple[int, int], tuple[int, int]]]:
    """Sub-boxes of an output box ``(nz, ny, nx)``, as ``(z, y, x)`` output-index spans each
    reading at most ``limit`` nodes on the server: whole planes when a plane fits, else whole
    rows, else pieces of rows. ``strides`` are ``(z, y, x)``; with a box filter ``width``
    nodes wide a span of n outputs reads (n − 1)·stride + width nodes, which the server
    counts against the limit — at most the axis's nodes along a bounded axis (``extents``,
    ``(z, y, x)``, None for a periodic one), where the box is cut at the walls."""

    def read(n: int, stride: int, extent: int | None) -> int:
        if width == 1:  # unfiltered: one node an output (never more than the axis holds)
            return n
        nodes = (n - 1) * stride + width
        return nodes if extent is None else min(nodes, extent)

    def most(budget: int, stride: int, extent: int | None) -> int:  # outputs whose reads fit in budget nodes
        if width > 1 and extent is not None and extent <= budget:
            return 1 << 62  # however many: they read the whole axis at most
        return max(1, budget if width == 1 else (budget - width) // stride + 1)

    nz, ny, nx = shape
    sz, sy, sx = strides
    ez, ey, ex = extents
    row, one_z, one_y = read(nx, sx, ex), read(1, sz, ez), read(1, sy, ey)
    if nz * ny * nx == 0:  # an empty box: one request, for the server to say what is wrong
        yield (0, nz), (0, ny), (0, nx)
    elif row * read(ny, sy, ey) * one_z <= limit:
        for z in spans(nz, most(limit // (row * read(ny, sy, ey)), sz, ez)):
            yield z, (0, ny), (0, nx)
    elif row * one_y * one_z <= limit:
        for z in range(nz):
            for y in spans(ny, most(limit // (row * one_z), sy, ey)):
                yield (z, z + 1), y, (0, nx)
    else:  # pieces of rows (a single node whose filter reads more than the limit: the server says so)
        for z in range(nz):
            for y in range(ny):
                for x in spans(nx, most(limit // (one_y * one_z), sx, ex)):
                    yield (z, z + 1), (y, y + 1), x


def run(tasks: Sequence[Callable[[], T]], *, concurrency: int, progress: bool | None, sizes: Sequence[int],
        unit: str, description: str) -> list[T]:
    """Runs ``tasks`` (each one paced request) at most ``concurrency`` at a time; results in
    order. The first error cancels what has not started and is raised as soon as it happens,
    without waiting for the requests still in flight (the first in order, if several have
    failed by then); so does Ctrl-C. ``progress``: True, False, or None (a bar on a terminal,
    for more than one task).

    The threads are daemons: requests left in flight end in the background at their
    timeout and never hold up the program's exit. A ThreadPoolExecutor's workers are joined
    at exit, so a Ctrl-C during a request to a server that did not answer ended the program
    only at that request's timeout (300 s by default)."""
    if len(tasks) == 1:
        return [tasks[0]()]
    from tqdm.auto import tqdm

    futures: list[concurrent.futures.Future[T]] = [concurrent.futures.Future() for _ in tasks]
    waiting = collections.deque(zip(tasks, sizes, futures))
    stop = threading.Event()
    with tqdm(total=sum(sizes), unit=unit, unit_scale=True, desc=description, leave=False,
              disable=bar_disabled() if progress is None else not progress) as bar:

        def work() -> None:
            _batch.stop = stop
            while True:
                try:
                    task, size, future = waiting.popleft()
                except IndexError:
                    return
                if not future.set_running_or_notify_cancel():  # dropped after an error
                    continue
                try:
                    result = task()
                except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                    future.set_exception(e)
                else:
                    bar.update(size)
                    future.set_result(result)

        for k in range(min(max(1, concurrency), len(tasks))):
            threading.Thread(target=work, name=f"turbdb-batch-{k}", daemon=True).start()
        try:
            done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and f.exception() is not None), None)
            if failed is not None:
                raise failed.exception()  # type: ignore[misc]
            return [future.result() for future in futures]
        finally:
            stop.set()  # running ones send nothing more
            for future in futures:  # those not started are dropped; running ones cannot be
                future.cancel()


#: How often the pieces of one split query or cutout that read another version of a step
#: than the others (a rewrite between their requests) are asked again before giving up.
RESEND_ROUNDS = 4


def stale_pieces(tags: Sequence[str | None]) -> list[int]:
    """The pieces of one request split into several that must be asked again, by the
    versions the server read each at (its ``X-Turbdb-Versions``,
    :meth:`~turbdb.step_versions.StepVersions.tag`; None from a server that does not send
    them): those that read an older version of a step than another piece did, one that read
    one step at two versions, and all of them where they read different datasets (one
    created again between them: which is the newer is not known)."""
    read = {i: StepVersions.read_tag(tag) for i, tag in enumerate(tags) if tag}
    if len({made for made, _, _ in read.values()}) > 1 or any(len(made) > 1 for made, _, _ in read.values()):
        return sorted(read)
    newest: dict[int, int] = {}
    for _, counts, _ in read.values():
        for step, count in counts.items():
            newest[step] = max(newest.get(step, 0), count)
    return sorted(i for i, (_, counts, mixed) in read.items()
                  if mixed or any(count < newest[step] for step, count in counts.items()))


def resent_until_one_version(answers: list[tuple[Any, str | None]], ask_again: Callable[[list[int]], list[Any]],
                             what: str) -> list[Any]:
    """``answers`` (each the piece's value and its versions' tag) once every piece read the
    same version of each step: the stale ones (:func:`stale_pieces`) asked again with
    ``ask_again(indices)``, up to :data:`RESEND_ROUNDS` times; then
    :class:`DatasetBusyError`. Each piece alone is one version; joined, they were not always
    (a step rewritten between two requests)."""
    answers = list(answers)
    for _ in range(RESEND_ROUNDS):
        stale = stale_pieces([tag for _, tag in answers])
        if not stale:
            break
        for i, answer in zip(stale, ask_again(stale)):
            answers[i] = answer
    else:
        if stale_pieces([tag for _, tag in answers]):
            raise DatasetBusyError(f"the stored steps {what} reads were rewritten while its {len(answers)} requests "
                                   f"were answered, {RESEND_ROUNDS} times over; ask again once the rewrites are done")
    return [value for value, _ in answers]
