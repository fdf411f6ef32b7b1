#!/usr/bin/env python3
"""Bounded load generator for ``GET /dispatch`` on this machine (loopback only).

    # against a running server
    python scripts/load_dispatch.py --url http://127.0.0.1:8000 --gpu h100 --dtype bf16
    # start a server on a free loopback port over a database, measure, stop it
    python scripts/load_dispatch.py --serve-db sqlite:///tuning.sqlite --workers 2 --gpu h100

Sends exactly ``--requests`` requests (or fewer if ``--max-seconds`` passes first) over
``--connections`` keep-alive HTTP/1.1 connections, each waiting for its answer before the next
request (closed loop), and reports requests/s and p50 / p90 / p99 / max latency, measured from just
before a request is written to when its whole body has been read. The shapes are drawn (fixed seed)
from ``--distinct-shapes`` random (m, n) pairs, log-uniform over [1, 65536] × [1, 262144]: a runtime
asks for the shapes its model has, again and again. The client is raw asyncio streams (no HTTP
library) so that as little of the two cores as possible goes to the measuring side.
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


def request_lines(host: str, port: int, gpu: str, dtype: str, shapes: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    lines = []
    for _ in range(shapes):
        m = int(2 ** rng.uniform(0, 16))
        n = int(2 ** rng.uniform(0, 18))
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


async def run_load(host: str, port: int, lines: list[bytes], total: int, connections: int, max_seconds: float) -> LoadReport:
    latencies: list[float] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + max_seconds

    async def worker(index: int) -> None:
        nonlocal issued, errors
        reader, writer = await asyncio.open_connection(host, port)
        try:
            cursor = index
            while issued < total and time.perf_counter() < deadline:
                issued += 1
                line = lines[cursor % len(lines)]
                cursor += connections
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
        connections=connections, distinct_shapes=len(lines),
    )


def start_server(database_url: str, workers: int, gpu: str) -> tuple[subprocess.Popen, int]:
    """uvicorn over ``database_url`` on a free loopback port; returns when /healthz answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "AUTOTUNER_DB": database_url, "AUTOTUNER_DEFAULT_GPU": gpu}
    command = [sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory", "--host", "127.0.0.1",
               "--port", str(port), "--workers", str(workers), "--no-access-log", "--log-level", "warning",
               "--timeout-graceful-shutdown", "10"]
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
    parser.add_argument("--distinct-shapes", type=int, default=512)
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
        lines = request_lines(host, port, args.gpu, args.dtype, args.distinct_shapes, args.seed)
        run = _event_loop_runner()
        if args.warmup:
            run(run_load(host, port, lines, args.warmup, args.connections, args.max_seconds))
        report = run(run_load(host, port, lines, args.requests, args.connections, args.max_seconds))
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    if args.json:
        sys.stdout.write(json.dumps(asdict(report)) + "\n")
    else:
        log.info("%d requests (%d errors) in %.2f s over %d connections, %d distinct shapes: %.0f req/s; "
                 "latency p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms",
                 report.requests, report.errors, report.seconds, report.connections, report.distinct_shapes,
                 report.requests_per_s, report.p50_ms, report.p90_ms, report.p99_ms, report.max_ms)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
