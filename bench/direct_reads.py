"""How fast this machine's disk serves direct reads (O_DIRECT: no page cache), by request size
and by how many requests are in flight: the ceiling the node engine's reads run against with
io="direct". bench/workload.py uses it to say how far sharing reads can take a scheduler on
this disk (its I/O bound, beside the compute bound).

    python bench/direct_reads.py [--data /tmp/turbdb-bench-workload] [--sizes 64,256,1024] [--depths 1,2,4,8]

Reads the shard files under --data (the workload benchmark's database, created by
bench/workload.py) in aligned blocks, from one thread per request in flight, each file once
per setting. Writes bench/results/direct_reads.json.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
#: O_DIRECT wants offsets, sizes and buffers aligned to the device's block (4 KiB covers it).
ALIGN = 4096


def shard_files(data: Path, min_bytes: int = 1 << 20) -> list[Path]:
    """The database's shard files big enough to read in blocks, largest first."""
    files = [p for p in data.rglob("*") if p.is_file() and p.stat().st_size >= min_bytes]
    if not files:
        raise SystemExit(f"{data}: no shard files of 1 MB or more; run bench/workload.py first to create the data")
    return sorted(files, key=lambda p: -p.stat().st_size)


def direct_read_rate(files: list[Path], block: int, depth: int, budget_bytes: int = 64 << 20) -> float:
    """Bytes per second reading ``files`` in ``block``-byte direct reads, ``depth`` at a time,
    until about ``budget_bytes`` are read (or the files end)."""
    block = max(ALIGN, block // ALIGN * ALIGN)
    jobs: list[tuple[int, int]] = []
    fds = []
    try:
        for path in files:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            fds.append(fd)
            size = os.fstat(fd).st_size // block * block
            jobs += [(fd, offset) for offset in range(0, size, block)]
            if len(jobs) * block >= budget_bytes:
                break
        buffers = [mmap.mmap(-1, block) for _ in range(depth)]  # page-aligned, one per reader

        def read_every(k: int) -> int:
            return sum(os.preadv(fd, [buffers[k]], offset) for fd, offset in jobs[k::depth])

        start = time.perf_counter()
        with ThreadPoolExecutor(depth) as pool:
            total = sum(pool.map(read_every, range(depth)))
        return total / (time.perf_counter() - start)
    finally:
        for fd in fds:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/tmp/turbdb-bench-workload"),
                        help="a database whose shard files are read (default: bench/workload.py's)")
    parser.add_argument("--sizes", default="16,64,256,1024", help="request sizes in KiB, comma-separated")
    parser.add_argument("--depths", default="1,2,4,8", help="requests in flight, comma-separated")
    args = parser.parse_args()
    files = shard_files(args.data)
    rows = []
    for kib in (int(s) for s in args.sizes.split(",")):
        for depth in (int(d) for d in args.depths.split(",")):
            rate = direct_read_rate(files, kib << 10, depth)
            rows.append({"request_KiB": kib, "in_flight": depth, "MB_per_s": rate / 1e6})
            print(f"  {kib:>5} KiB requests, {depth} in flight: {rate / 1e6:7.0f} MB/s", flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = {"benchmark": "direct reads", "data": str(args.data), "files": len(files), "load_average": os.getloadavg(),
           "results": rows}
    (RESULTS / "direct_reads.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'direct_reads.json'}")


if __name__ == "__main__":
    main()
