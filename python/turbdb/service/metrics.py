"""Prometheus metrics of one app, in its own registry (several apps in one process, as in
tests, do not share counters): requests, points, bytes read, latency, work in flight, and
the refusals the connection guards answer before the app."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Metrics", "CONTENT_TYPE_LATEST", "endpoint_of"]

# Seconds: from sub-millisecond single points to minutes-long cutouts.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series: they double the output and nobody graphs them
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("turbdb_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("turbdb_request_seconds", "Time to answer a request, by endpoint",
                                 ["endpoint"], buckets=_LATENCY_BUCKETS, registry=r)
        self.points = Counter("turbdb_points", "Points evaluated (queries; tracks: particles times velocity "
                              "evaluations) or nodes cut out, by endpoint", ["endpoint"], registry=r)
        self.bytes_read = Counter("turbdb_bytes_read", "Decoded bytes of the atoms counted in turbdb_atoms_read",
                                  registry=r)
        self.atoms_read = Counter("turbdb_atoms_read", "Atoms the queries needed that were read from storage, summed "
                                  "over the queries (one read shared by several counts for each)", registry=r)
        self.bytes_sent = Counter("turbdb_response_bytes", "Bytes of response bodies sent, by endpoint",
                                  ["endpoint"], registry=r)
        self.cutout_chunks = Counter("turbdb_cutout_chunks", "Slabs streamed by cutouts", registry=r)
        self.in_flight = Gauge("turbdb_points_in_flight", "Points admitted and not yet answered", registry=r)
        self.in_flight_peak = Gauge("turbdb_points_in_flight_peak", "Largest number of points in flight so far",
                                    registry=r)
        self.refusals = Counter("turbdb_refusals", "Connections and requests the connection guards answered "
                                "themselves, instead of the app: past a cap, a head too large, too slow or unreadable "
                                "(service/refusals.py), by reason and status", ["reason", "status"], registry=r)
        self.in_flight_limit = Gauge("turbdb_points_in_flight_limit", "Capacity of the points-in-flight limiter",
                                     registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def endpoint_of(request: Any) -> str:
    """The ``endpoint`` label of a request: its route's path template, as
    ``turbdb_requests_total`` has it, so that the counters join on it."""
    return getattr(request.scope.get("route"), "path", "other")
