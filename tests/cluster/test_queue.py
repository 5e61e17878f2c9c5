"""Graduated declustering, simulated: workers pull units of their mirrored groups at their
own rates; a slowed worker ends up with proportionally less work and the batch finishes
near the aggregate rate, where static placement waits for the slow worker's share. Failed
units go to another worker of their group."""

import heapq

import numpy as np
import pytest

from turbdb.cluster.placement import chained_declustering, virtual_count
from turbdb.cluster.queue import WorkQueue
from turbdb.cluster.routing import Unit


def units_for(workers: int, per_group: int = 24, cost: int = 100) -> list[Unit]:
    slots = [str(i) for i in range(workers)]
    groups = sorted({tuple(h) for h in chained_declustering(slots, 2, virtual_count(workers, 2))})
    return [Unit(g, [], cost=cost) for g in groups for _ in range(per_group)]


def simulate(units: list[Unit], speeds: dict[str, float], policy: str) -> tuple[float, dict[str, int]]:
    """Event simulation: each worker takes a unit when free and needs cost/speed seconds.
    Returns the time the last unit finishes and the work each worker did."""
    queue = WorkQueue(units, policy)
    alive = set(speeds)
    clock: list[tuple[float, str]] = [(0.0, s) for s in sorted(speeds)]
    done = dict.fromkeys(speeds, 0)
    end = 0.0
    while clock:
        now, slot = heapq.heappop(clock)
        unit = queue.take(slot, alive)
        if unit is None:
            continue
        done[slot] += unit.cost
        finish = now + unit.cost / speeds[slot]
        end = max(end, finish)
        heapq.heappush(clock, (finish, slot))
    assert len(queue) == 0
    return end, done


@pytest.mark.parametrize("workers", [3, 4, 8])
def test_a_worker_at_half_speed_gets_about_half_the_work(workers):
    speeds = {str(i): 1.0 for i in range(workers)}
    speeds["0"] = 0.5
    end, done = simulate(units_for(workers), speeds, "graduated")
    others = np.mean([done[s] for s in speeds if s != "0"])
    assert 0.35 < done["0"] / others < 0.65
    total = sum(u.cost for u in units_for(workers))
    ideal = total / sum(speeds.values())
    assert end <= 1.1 * ideal  # within 10% of the aggregate rate (River: 93% of peak)
    static_end, static_done = simulate(units_for(workers), speeds, "static")
    assert len(set(static_done.values())) == 1  # static: everyone does its primary share …
    assert static_end >= 1.9 * total / workers  # … and the batch waits for the slow one


def test_with_equal_speeds_work_is_shared_equally():
    end, done = simulate(units_for(3), {"0": 1.0, "1": 1.0, "2": 1.0}, "graduated")
    assert max(done.values()) - min(done.values()) <= 100


def test_static_policy_falls_back_to_the_mirror_of_a_lost_primary():
    units = units_for(3)
    queue = WorkQueue(units, "static")
    taken = []
    while (unit := queue.take("1", {"1", "2"})) is not None:
        taken.append(unit)
    # Worker 0 is lost: 1 takes its own primaries and the units whose primary was 0.
    groups = {u.holders for u in units}
    assert {u.holders for u in taken} == {g for g in groups if g[0] == "1" or g == ("0", "1")}


def test_a_failed_unit_goes_to_its_other_worker_first():
    queue = WorkQueue([Unit(("0", "1"), [], cost=1)])
    unit = queue.take("0", {"0", "1"})
    unit.avoid.add("0")
    queue.put(unit, front=True)
    assert queue.take("0", {"0", "1"}) is None
    assert queue.take("1", {"0", "1"}) is unit


def test_the_unit_taken_is_the_one_removed_when_a_retried_one_waits_before_it():
    # A unit a worker failed waits at the front for the other worker; the failed worker
    # (restarted) takes the next one. Units of one group share their holders and
    # partitions and differ in their points: the queue must remove the unit it hands out,
    # not the first one that compares equal (with arrays, comparing them raised).
    partitions = [(0, (0, 0, 0))]
    retried = Unit(("0", "1"), partitions, points=np.arange(0, 10), cost=10, avoid={"1"})
    later = Unit(("0", "1"), partitions, points=np.arange(10, 20), cost=10)
    queue = WorkQueue([later])
    queue.put(retried, front=True)
    assert queue.take("1", {"0", "1"}) is later
    assert queue.take("0", {"0", "1"}) is retried
    assert len(queue) == 0


def test_units_with_no_live_worker_are_stranded():
    queue = WorkQueue(units_for(3, per_group=1))
    assert queue.stranded({"0", "1", "2"}) == []
    assert {u.holders for u in queue.stranded({"2"})} == {("0", "1"), ("1", "0")} & {u.holders for u in units_for(3)}
