"""Workloads shaped like the JHTDB log (Wang et al., SC10, §3): :mod:`.trace` generates a
trace of jobs and their queries and reads and writes it as JSON lines; :mod:`.replay`
replays one against a database from concurrent clients and reports throughput, response
times by query size and what the node engine read."""

from .replay import ReplayReport, replay
from .trace import Query, draw_points, generate, read_trace, write_trace

__all__ = ["Query", "generate", "draw_points", "read_trace", "write_trace", "replay", "ReplayReport"]
