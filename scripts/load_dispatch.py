#!/usr/bin/env python3
"""Bounded load generator for ``GET /dispatch`` on this machine (loopback only).

    # against a running server
    python scripts/load_dispatch.py --url http://127.0.0.1:8000 --gpu h100 --dtype bf16
    # start a server on a free loopback port over a database, measure, stop it
    python scripts/load_dispatch.py --serve-db sqlite:///tuning.sqlite --workers 2 --gpu h100

Sends exactly ``--requests`` requests (or fewer if ``--max-seconds`` passes first) over
``--connections`` keep-alive HTTP/1.1 connections, each waiting for its answer before the next
request (closed loop), and reports requests/s and p50 / p90 / p99 / max latency, measured from just
before a request is written to when its whole body has been read. Two workloads, never mixed in one
figure:

- repeated (default): the shapes are drawn (fixed seed) from ``--distinct-shapes`` random (m, n)
  pairs, log-uniform over [1, 65536] × [1, 262144], asked again and again, as a runtime asks for the
  shapes its model has;
- ``--new-shapes``: every request a shape drawn once (:func:`new_shapes`: distinct pairs from the same
  log-uniform law, none repeated in the run, warm-up included), as a runtime meets growing key lengths
  and every prompt length. The report counts the shapes sent twice (0 unless ``--requests`` outgrew
  the pool) and, for a server started here, the answers it replayed from its cache (``/healthz``'s
  ``dispatch_fast_path.hits``: 0 when every shape was new to it).

The client is raw asyncio streams (no HTTP library) so that as little of the two cores as possible
goes to the measuring side.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import math
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from urllib.parse import urlencode, urlparse

import numpy as np

log = logging.getLogger("load_dispatch")


@dataclass
class LoadReport:
    requests: int
    errors: int
    seconds: float
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    connections: int
    distinct_shapes: int
    repeated_requests: int = 0  # requests that asked a shape this run had asked before
    server_replays: int | None = None  # answers the server replayed from its cache (None: not known)


def require_loopback(host: str) -> None:
    """Load is only ever sent to this machine."""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise SystemExit(f"refusing to send load to {host!r}: only loopback addresses (127.0.0.0/8, ::1, localhost)")


M_LOG2, N_LOG2 = 16, 18  # shapes are log-uniform over [1, 2**16] x [1, 2**18]


def new_shapes(count: int, seed: int, exclude: np.ndarray | None = None) -> np.ndarray:
    """``count`` distinct (m, n) pairs (an array of shape (count, 2)), log-uniform, in random order, none
    of whose keys (``shape_keys``) is in ``exclude`` (the shapes an earlier phase sent). Distinctness
    thins the small shapes (there are only so many of them), so the draw is a little larger-skewed
    than the law it starts from."""
    rng = np.random.default_rng(seed)
    excluded = np.unique(exclude) if exclude is not None else np.empty(0, dtype=np.int64)
    found = np.empty(0, dtype=np.int64)
    while len(found) < count:
        draw = 2 * (count - len(found)) + 1024
        m = np.floor(np.exp2(rng.uniform(0, M_LOG2, draw))).astype(np.int64)
        n = np.floor(np.exp2(rng.uniform(0, N_LOG2, draw))).astype(np.int64)
        keys = np.concatenate([found, m << 32 | n])
        _, first = np.unique(keys, return_index=True)
        keys = keys[np.sort(first)]  # distinct, in order of drawing
        found = keys[~np.isin(keys, excluded)][:count]
    return np.stack([found >> 32, found & 0xFFFFFFFF], axis=1)


def shape_keys(shapes: np.ndarray) -> np.ndarray:
    return shapes[:, 0] << 32 | shapes[:, 1]


def request_lines(host: str, port: int, gpu: str, dtype: str, shapes: int, seed: int,
                  new: bool = False) -> list[bytes]:
    """One request per shape: ``shapes`` random ones, distinct (``new``: :func:`new_shapes`) or not."""
    if new:
        pairs = [(int(m), int(n)) for m, n in new_shapes(shapes, seed)]
    else:
        rng = random.Random(seed)
        pairs = [(int(2 ** rng.uniform(0, M_LOG2)), int(2 ** rng.uniform(0, N_LOG2))) for _ in range(shapes)]
    lines = []
    for m, n in pairs:
        query = urlencode({"m": m, "n": n, "dtype": dtype, "gpu": gpu})
        lines.append(f"GET /dispatch?{query} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n\r\n".encode())
    return lines


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    if length:
        await reader.readexactly(length)
    return status


async def run_load(host: str, port: int, lines: list[bytes], total: int, connections: int, max_seconds: float,
                   first: int = 0) -> LoadReport:
    """``total`` requests (at most ``max_seconds``): request i sends ``lines[(first + i) % len(lines)]``."""
    latencies: list[float] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + max_seconds

    async def worker(index: int) -> None:
        nonlocal issued, errors
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while issued < total and time.perf_counter() < deadline:
                line = lines[(first + issued) % len(lines)]
                issued += 1
                started = time.perf_counter()
                writer.write(line)
                status = await _read_response(reader)
                latencies.append(time.perf_counter() - started)
                if status != 200:
                    errors += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(connections)))
    elapsed = time.perf_counter() - started
    latencies.sort()

    def quantile(q: float) -> float:
        return latencies[min(len(latencies) - 1, max(0, math.ceil(q * len(latencies)) - 1))] * 1e3 if latencies else math.nan

    return LoadReport(
        requests=len(latencies), errors=errors, seconds=round(elapsed, 3),
        requests_per_s=round(len(latencies) / elapsed, 1) if elapsed else 0.0,
        p50_ms=round(quantile(0.50), 3), p90_ms=round(quantile(0.90), 3), p99_ms=round(quantile(0.99), 3),
        max_ms=round(latencies[-1] * 1e3, 3) if latencies else math.nan,
        connections=connections, distinct_shapes=min(len(lines), len(latencies)),
        repeated_requests=max(0, first + len(latencies) - len(lines)),
    )


def start_server(database_url: str, workers: int, gpu: str) -> tuple[subprocess.Popen, int]:
    """uvicorn over ``database_url`` on a free loopback port, as ``autotuner serve`` runs it (the
    service's HTTP protocol); returns when /healthz answers."""
    from service.http_protocol import uvicorn_http

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "AUTOTUNER_DB": database_url, "AUTOTUNER_DEFAULT_GPU": gpu}
    command = [sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory", "--host", "127.0.0.1",
               "--port", str(port), "--workers", str(workers), "--no-access-log", "--log-level", "warning",
               "--timeout-graceful-shutdown", "10", "--http", uvicorn_http()]
    process = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                if answer.status == 200:
                    return process, port
        except OSError:
            time.sleep(0.1)
    process.terminate()
    raise SystemExit("server did not answer /healthz within 60 s")


def fast_path_hits(host: str, port: int) -> int:
    """How many ``/dispatch`` answers the server has replayed from its cache since it started."""
    with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=30) as answer:
        return json.loads(answer.read())["dispatch_fast_path"]["hits"]


def _event_loop_runner():  # noqa: ANN202 - asyncio.run or uvloop.run
    """uvloop when installed (uvicorn[standard] brings it): the client then costs less of the CPU."""
    try:
        import uvloop

        return uvloop.run
    except ImportError:
        return asyncio.run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="base URL of a running server on this machine")
    target.add_argument("--serve-db", help="start uvicorn over this database for the run, then stop it")
    parser.add_argument("--workers", type=int, default=1, help="with --serve-db: uvicorn worker processes")
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--requests", type=int, default=30_000, help="requests to send (upper bound)")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="stop sending after this long")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--distinct-shapes", type=int, default=512, help="shapes of the repeated workload")
    parser.add_argument("--new-shapes", action="store_true",
                        help="every request (warm-up included) a shape not asked before in the run")
    parser.add_argument("--warmup", type=int, default=2_000, help="requests sent (and not counted) first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not (0 < args.requests <= 10_000_000 and 0 < args.max_seconds <= 600 and 0 < args.connections <= 1024):
        raise SystemExit("bounds: 0 < --requests <= 1e7, 0 < --max-seconds <= 600, 0 < --connections <= 1024")

    process = None
    if args.serve_db:
        process, port = start_server(args.serve_db, args.workers, args.gpu)
        host = "127.0.0.1"
    else:
        parsed = urlparse(args.url)
        host, port = parsed.hostname or "", parsed.port or 80
        require_loopback(host)
    try:
        shapes = args.warmup + args.requests if args.new_shapes else args.distinct_shapes
        lines = request_lines(host, port, args.gpu, args.dtype, shapes, args.seed, new=args.new_shapes)
        run = _event_loop_runner()
        replays_before = fast_path_hits(host, port) if process is not None else None
        warmed = 0
        if args.warmup:
            warmed = run(run_load(host, port, lines, args.warmup, args.connections, args.max_seconds)).requests
        report = run(run_load(host, port, lines, args.requests, args.connections, args.max_seconds,
                              first=warmed if args.new_shapes else 0))
        if replays_before is not None:
            report.server_replays = fast_path_hits(host, port) - replays_before
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    if args.json:
        sys.stdout.write(json.dumps(asdict(report)) + "\n")
    else:
        log.info("%d requests (%d errors) in %.2f s over %d connections, %d distinct shapes (%d requests repeated "
                 "a shape, %s replayed by the server): %.0f req/s; latency p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, "
                 "max %.2f ms", report.requests, report.errors, report.seconds, report.connections,
                 report.distinct_shapes, report.repeated_requests,
                 "?" if report.server_replays is None else report.server_replays,
                 report.requests_per_s, report.p50_ms, report.p90_ms, report.p99_ms, report.max_ms)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
