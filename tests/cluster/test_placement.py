"""Placement by chained declustering over virtual partitions: every partition on distinct
workers, workers balanced to within one virtual partition, a lost worker's load spread over
all the others; partitions map to virtual partitions in spatially contiguous blocks."""

import time
from collections import Counter

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from turbdb.cluster.placement import PartitionMap, chained_declustering, virtual_count

workers_and_replicas = st.integers(1, 12).flatmap(lambda w: st.tuples(st.just(w), st.integers(1, min(w, 3))))


@given(workers_and_replicas)
def test_every_virtual_partition_lives_on_distinct_workers(wr):
    workers, replicas = wr
    slots = [f"w{i}" for i in range(workers)]
    for holders in chained_declustering(slots, replicas, virtual_count(workers, replicas)):
        assert len(holders) == replicas
        assert len(set(holders)) == replicas


@given(workers_and_replicas)
def test_workers_hold_equal_shares_of_primaries_and_copies(wr):
    workers, replicas = wr
    slots = [f"w{i}" for i in range(workers)]
    virtual = virtual_count(workers, replicas)
    assert virtual >= 8 * workers  # Perlman et al.: eight or more per node
    holders = chained_declustering(slots, replicas, virtual)
    primaries = Counter(h[0] for h in holders)
    copies = Counter(s for h in holders for s in h)
    assert set(primaries.values()) == {virtual // workers}
    assert set(copies.values()) == {virtual * replicas // workers}


@given(st.integers(3, 12))
def test_a_lost_workers_partitions_are_mirrored_evenly_on_all_the_others(workers):
    slots = [f"w{i}" for i in range(workers)]
    holders = chained_declustering(slots, 2, virtual_count(workers, 2))
    for lost in slots:
        # Where its partitions' other copies are: the workers that take over its load.
        takers = Counter(h[1] if h[0] == lost else h[0] for h in holders if lost in h)
        assert set(takers) == set(slots) - {lost}
        assert max(takers.values()) - min(takers.values()) <= 1


@settings(max_examples=60)
@given(st.tuples(st.integers(2, 9), st.integers(2, 9), st.integers(2, 9)), st.integers(1, 40), st.integers(2, 6),
       st.sampled_from([1, 4, 8]))
def test_partitions_per_worker_differ_by_at_most_one_virtual_partition_per_copy(shards, nt, workers, span):
    # Datasets with at least as many shards per step as virtual partitions (smaller ones
    # cannot be balanced by virtual partitions at all: a step is a few shards).
    slots = [str(i) for i in range(workers)]
    virtual = virtual_count(workers, 2)
    assume(np.prod(shards) >= virtual)
    holders = chained_declustering(slots, 2, virtual)
    pmap = PartitionMap(shards, virtual, span, "ds")
    all_shards = np.arange(pmap.count)
    per_virtual = Counter()
    for t in range(nt):
        per_virtual.update(pmap.virtual_of(t, all_shards).tolist())
    assert all(0 <= v < virtual for v in per_virtual)
    held = Counter()
    for v, count in per_virtual.items():
        for s in holders[v]:
            held[s] += count
    loads = [held.get(s, 0) for s in slots]
    assert max(loads) - min(loads) <= 2 * max(per_virtual.values())


def test_a_regions_consecutive_steps_stay_together_and_spans_move_on():
    pmap = PartitionMap((4, 4, 4), virtual=24, span=8, name="ds")
    shards = np.arange(64)
    first = pmap.virtual_of(0, shards)
    assert np.array_equal(first, pmap.virtual_of(7, shards))  # one span: the same place
    assert not np.array_equal(first, pmap.virtual_of(8, shards))  # the next span moves on
    # Spatially contiguous: the 8 shards of each octant (a Morton-aligned cube) share at most
    # two virtual partitions (24 blocks over 64 shards: blocks of 2 or 3 shards).
    x, y, z = (shards % 4), (shards // 4 % 4), (shards // 16)
    for octant in range(8):
        inside = (x // 2 == octant % 2) & (y // 2 == octant // 2 % 2) & (z // 2 == octant // 4)
        assert len(set(first[inside].tolist())) <= 4


def test_a_dataset_with_one_shard_a_step_spreads_its_steps_over_workers():
    pmap = PartitionMap((1, 1, 1), virtual=24, span=1, name="isotropic64")
    assert len(set(pmap.virtual_of(np.arange(24), np.zeros(24, dtype=int)).tolist())) == 24


def test_the_cli_says_when_the_workers_hold_fewer_copies_than_asked_and_refuses_a_bad_address(tmp_path):
    import turbdb
    from click.testing import CliRunner
    from turbdb.cli import main

    db = tmp_path / "db"
    turbdb.create_dataset(db, "box", grid=(8, 8, 8), times=[0.0], fields={"velocity": 3})
    runner = CliRunner()
    asked = runner.invoke(main, ["cluster", "place", str(db), "--workers", "2", "--replicas", "5"])
    assert asked.exit_code == 0 and "2 copies" in asked.stdout
    assert "not the 5 asked for: the cluster survives 1 lost worker, not 4" in asked.stderr
    default = runner.invoke(main, ["cluster", "place", str(db), "--workers", "1"])
    assert default.exit_code == 0 and "asked for" not in default.stderr  # the default of 2 fits what there is
    for address in ("garbage", "tcp://host-without-port", "tcp://127.0.0.1:99999"):
        began = time.monotonic()
        refused = runner.invoke(main, ["cluster", "status", str(db), "--scheduler", address])
        assert refused.exit_code != 0 and "is not a Dask scheduler address" in refused.output, refused.output
        assert time.monotonic() - began < 5  # at once, not after the connect timeout
