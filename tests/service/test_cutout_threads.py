"""Large cutout slabs are long work: two large cutouts side by side held both of a 2-worker
server's threads between them, and a small request waited for a slab to end (long work
holds one of ``workers - 1`` threads, so that short work always finds one)."""

import time

import anyio
import pytest

from turbdb.service import cutout
from turbdb.service.backend import Backend
from turbdb.service.metrics import Metrics
from turbdb.service.tokens import Tokens


async def _long_threads_held_while_reading(backend: Backend, plan) -> int:
    """The most long-work threads seen held while the first slab of ``plan`` is read."""
    most = 0
    done = anyio.Event()

    async def read() -> None:
        await cutout._read(backend, plan, plan.slabs()[0])
        done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        while not done.is_set():
            if backend._long is not None:
                most = max(most, backend._long.borrowed_tokens)
            await anyio.sleep(0.0005)
    return most


@pytest.mark.parametrize(("box", "width", "long"), [((0, 4), 1, False), ((0, 32), 31, True)])
def test_a_large_slab_holds_a_long_work_thread_and_a_small_one_does_not(service_db, box, width, long):
    backend = Backend(service_db, Tokens(), Metrics(), workers=2, max_points_in_flight=4_000_000,
                      cutout_chunk_bytes=1 << 22, queue_timeout=10)
    plan = cutout.plan(backend.database["trig"], "velocity", time=0.0, x=box, y=box, z=box, strides=(1, 1, 1),
                       filter_width=width, chunk_bytes=backend.cutout_chunk_bytes)
    start = time.monotonic()
    held = anyio.run(_long_threads_held_while_reading, backend, plan)
    assert held == int(long), f"{held} long-work threads held reading {plan.shape} in {time.monotonic() - start:.3f} s"
