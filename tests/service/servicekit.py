"""What the service tests share: the small analytic database, the tokens file, and a real
server started as a subprocess (`python -m turbdb.cli serve`) on a free loopback port."""

import asyncio
import contextlib
import dataclasses
import hashlib
import io
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

import turbdb

TWO_PI = 2 * math.pi
N = 32
TIMES = (0.0, 0.5, 1.0, 1.5)

FULL, SMALL, SLOW, OTHER_ONLY, HASHED = "full-secret", "small-secret", "slow-secret", "other-secret", "hashed-secret"
TOKENS_TOML = f"""
[anonymous]
max_points = 4096
requests_per_minute = 100000

[[token]]
token = "{FULL}"
name = "full"
max_points = 2_000_000
requests_per_minute = 1_000_000

[[token]]
token = "{SMALL}"
name = "small"
max_points = 100
requests_per_minute = 100000

[[token]]
token = "{SLOW}"
name = "slow"
requests_per_minute = 2

[[token]]
token = "{OTHER_ONLY}"
name = "other-only"
datasets = ["other"]

[[token]]
sha256 = "{hashlib.sha256(HASHED.encode()).hexdigest()}"
name = "hashed"
"""


def velocity(p, t):
    """An analytic, time-dependent velocity: smooth, so every method gives sane numbers."""
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    return np.stack([np.sin(x) * np.cos(2 * y) * (1 + t), np.cos(z) * np.sin(x + y), np.sin(3 * z) + np.cos(x) * t], -1)


def build_database(root: Path) -> Path:
    db = root / "db"
    axis = np.arange(N) * TWO_PI / N
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    grid = np.stack([x, y, z], -1)
    ds = turbdb.create_dataset(db, "trig", grid=(N, N, N), times=TIMES, atom=8, partition=16,
                               fields={"velocity": {"ncomp": 3, "units": "m/s"}, "pressure": 1})
    for t, time_ in enumerate(TIMES):
        ds.write("velocity", t, velocity(grid, time_))
        ds.write("pressure", t, np.cos(x + y) * np.sin(z) + time_)
    other = turbdb.create_dataset(db, "other", grid=(16, 12, 8), spacing=(0.5, 0.5, 0.5), periodic=(False,) * 3,
                                  times=[0.0, 1.0], fields={"pressure": 1}, atom=4, partition=8)
    zz, yy, xx = np.meshgrid(np.arange(8) * 0.5, np.arange(12) * 0.5, np.arange(16) * 0.5, indexing="ij")
    for t in range(2):
        other.write("pressure", t, xx + 2 * yy - zz + t)
    return db


@dataclasses.dataclass
class Server:
    url: str
    process: subprocess.Popen
    log: Path

    def get(self, path, **kwargs):
        return httpx.get(self.url + path, timeout=30, **kwargs)

    def post(self, path, **kwargs):
        return httpx.post(self.url + path, timeout=30, **kwargs)

    def request(self, method, path, **kwargs):
        return httpx.request(method, self.url + path, timeout=30, **kwargs)

    def alive(self) -> bool:
        return self.process.poll() is None and self.get("/healthz").status_code == 200

    def metric(self, name: str, **labels) -> float:
        """The value of one Prometheus sample (0 when absent)."""
        wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
        sample = f"{name}{{{wanted}}}" if wanted else name
        match = re.search(rf"^{re.escape(sample)} (\S+)$", self.get("/metrics").text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0


@contextlib.contextmanager
def running_server(db: Path, log: Path, *args: str):
    """Starts `turbdb serve DB --port 0 …`, reads the address it prints, waits for /healthz."""
    with _running([sys.executable, "-m", "turbdb.cli", "serve", str(db), "--port", "0", "--log-level", "warning",
                   *args], log) as server:
        yield server


@contextlib.contextmanager
def running_serve(db: Path, log: Path, **options):
    """Starts `turbdb.service.server.serve(DB, port=0, **options)` in a process of its own: for
    the server's options that `turbdb serve` does not take (yet)."""
    options = {"port": 0, "log_level": "warning", **options}
    code = "import json, sys; from turbdb.service.server import serve; serve(sys.argv[1], **json.loads(sys.argv[2]))"
    with _running([sys.executable, "-c", code, str(db), json.dumps(options)], log) as server:
        yield server


@contextlib.contextmanager
def _running(command: list[str], log: Path):
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url, deadline = None, time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            if url is None:
                found = re.search(r"at (http://\S+)", log.read_text())
                url = found.group(1) if found else None
            if url is not None:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                        break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"the server did not start:\n{log.read_text()}")
        yield Server(url, process, log)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def random_points(count, seed=0, low=0.0, high=TWO_PI):
    return np.random.default_rng(seed).uniform(low, high, (count, 3))


def npy_body(points: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, points)
    return buffer.getvalue()


class Exchange:
    """One HTTP request to an app, driven at the ASGI level: its body sent in 4 KiB pieces
    when asked for, and the time of the first ask; then the client stays connected, or
    (``leaves``) disconnects at once."""

    def __init__(self, app, path: str, query: str, body: bytes, content_type: str, leaves: bool = False):
        self.app, self.body, self.first_read, self.leaves = app, body, None, leaves
        self.scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
            "root_path": "", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
            "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
                        (b"accept", b"application/x-npy"), (b"host", b"turbdb")],
        }
        self.status, self.answer, self.sent = None, b"", 0

    async def receive(self):
        if self.first_read is None:
            self.first_read = time.monotonic()
        if self.sent < len(self.body):
            piece = self.body[self.sent:self.sent + 4096]
            self.sent += len(piece)
            return {"type": "http.request", "body": piece, "more_body": self.sent < len(self.body)}
        if not self.leaves:
            await asyncio.sleep(3600)  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(self, message):
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.answer += message.get("body", b"")

    async def run(self):
        await self.app(self.scope, self.receive, self.send)


@contextlib.contextmanager
def prefix_proxy(upstream: str, prefix: str):
    """A reverse proxy on a free loopback port that serves ``upstream`` under ``prefix``
    and strips it, as nginx's ``location /turbdb/ { proxy_pass http://up/; }`` does, passing
    the Host header on and adding X-Forwarded-For and X-Forwarded-Proto; yields its address."""
    import http.server
    import threading

    client = httpx.Client(timeout=60)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self):
            if not self.path.startswith(prefix + "/"):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("content-length", "connection")}
            seen = self.headers.get("X-Forwarded-For")
            headers["X-Forwarded-For"] = f"{seen}, {self.client_address[0]}" if seen else self.client_address[0]
            headers["X-Forwarded-Proto"] = "http"
            answer = client.request(self.command, upstream + self.path[len(prefix):], content=body, headers=headers)
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer.content)

        do_GET = do_POST = do_HEAD = do_DELETE = forward

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        client.close()
