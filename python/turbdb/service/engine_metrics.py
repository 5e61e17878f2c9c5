"""The node engine's counters as Prometheus metrics, read from ``engine_stats()`` at every
scrape of ``/metrics`` (so they are the figures ``GET /v1/engine`` returns): queue depth,
atoms and bytes read, the cache's hits and hit ratio, the current α, batch sizes, the
engine thread's time and response-time histograms by query size."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

#: Gauges: (name, stats key, help).
_GAUGES = (
    ("turbdb_engine_queue_depth", "pending", "Queries submitted to the node engine and not yet answered"),
    ("turbdb_engine_held_queries", "held", "Queries held by job gates so that overlapping jobs run together"),
    ("turbdb_engine_queued_subqueries", "queued_subqueries", "Sub-queries (one time level, one atom) waiting"),
    ("turbdb_engine_queued_atoms", "queued_atoms", "Distinct atoms that waiting sub-queries need"),
    ("turbdb_engine_pending_points", "pending_points", "Points of the queries not yet answered"),
    ("turbdb_engine_cache_bytes", "cache_bytes", "Bytes of decoded atoms in the engine's cache"),
    ("turbdb_engine_cache_capacity_bytes", "cache_capacity", "Most bytes the engine's cache may hold"),
    ("turbdb_engine_cache_atoms", "cache_atoms", "Atoms in the engine's cache"),
    ("turbdb_engine_cache_hit_ratio", "hit_ratio", "Atom lookups served from the cache, of all lookups"),
    ("turbdb_engine_alpha", "alpha", "The scheduler's current ageing weight α (JAWS adapts it every run)"),
)

#: Counters: (name without _total, stats key, help).
_COUNTERS = (
    ("turbdb_engine_queries_submitted", "submitted", "Queries submitted to the node engine"),
    ("turbdb_engine_atoms_read", "atoms_read", "Atoms the node engine read from storage"),
    ("turbdb_engine_bytes_read", "bytes_read", "Bytes the node engine read from storage"),
    ("turbdb_engine_read_requests", "read_requests", "Read requests (adjacent atoms are read in one)"),
    ("turbdb_engine_cache_hits", "cache_hits", "Atom lookups served from the cache"),
    ("turbdb_engine_cache_misses", "cache_misses", "Atom lookups that had to read"),
    ("turbdb_engine_cache_evictions", "cache_evictions", "Atoms evicted from the cache"),
    ("turbdb_engine_batches", "batches", "Batches the scheduler ran"),
    ("turbdb_engine_served_from_cache", "served_from_cache",
     "Queries served at submission because all their atoms were cached"),
    ("turbdb_engine_served_alone", "served_alone",
     "Large queries that found the engine idle and ran alone by the streaming executor"),
)


def _cumulative(counts: Sequence[int], bounds: Sequence[float]) -> list[tuple[str, float]]:
    """Prometheus buckets (cumulative, ``+Inf`` last) from per-bucket counts."""
    total, out = 0, []
    for bound, count in zip([*map(repr, map(float, bounds)), "+Inf"], counts):
        total += count
        out.append((bound, float(total)))
    return out


class EngineCollector(Collector):
    """Yields the engine's metrics from ``stats()`` (``Database.engine_stats``)."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.stats = stats

    def describe(self) -> list[Metric]:
        return []  # collected only at a scrape: the registry must not call stats() when registering

    def collect(self) -> Iterator[Metric]:
        s = self.stats()
        for name, key, doc in _GAUGES:
            yield GaugeMetricFamily(name, doc, value=s[key])
        for name, key, doc in _COUNTERS:
            yield CounterMetricFamily(name, doc, value=s[key])
        finished = CounterMetricFamily("turbdb_engine_queries_finished", "Queries the engine finished, by outcome",
                                       labels=["outcome"])
        for outcome in ("completed", "failed", "cancelled"):
            finished.add_metric([outcome], s[outcome])
        yield finished
        thread = CounterMetricFamily("turbdb_engine_thread_seconds",
                                     "Where the engine's thread spent its time", labels=["state"])
        for state in ("busy", "read_wait", "schedule", "idle"):
            thread.add_metric([state], s[f"{state}_seconds"])
        yield thread
        gating = CounterMetricFamily("turbdb_engine_gating_events", "Job gating: edges made and refused, "
                                     "gates timed out or let go idle, queries run together", labels=["event"])
        for event, count in s["gating"].items():
            gating.add_metric([event], count)
        yield gating
        batches = HistogramMetricFamily("turbdb_engine_batch_atoms", "Atoms per batch")
        # With its sum, so that Prometheus can give the mean atoms a batch.
        batches.add_metric([], _cumulative(s["batch_sizes"], s["batch_size_bounds"]), sum_value=s["batch_atoms_sum"])
        yield batches
        response = HistogramMetricFamily("turbdb_engine_response_seconds", "Response time inside the engine, by "
                                         "query size (small ≤ 1 000 points, medium ≤ 100 000, large more)",
                                         labels=["size"])
        for size, h in s["response"].items():
            response.add_metric([size], _cumulative(h["counts"], s["response_bounds_seconds"]),
                                sum_value=h["sum_seconds"])
        yield response
