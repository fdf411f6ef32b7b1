#!/usr/bin/env python3
"""Every serving figure of issue 20 in one bounded run, loopback only (needs ``wrk``: apt-get install wrk).

    python scripts/load_serve.py                     # starts its own server (1 worker) on a temp database
    python scripts/load_serve.py --seconds 60 --workers 1

Phases, each printed with ``uptime``'s load average (the machine may be shared: a figure means little
without it):

1. ``/dispatch``, wrk, ``--connections`` keep-alive connections for ``--seconds``, a new random shape
   every request (log-uniform m in [1, 65536], n in [1, 262144]): req/s, p50 / p99 / max, non-2xx,
   socket errors. Long enough to meet full garbage-collection passes (max shows them).
2. The same with ``--repeated`` distinct shapes asked again and again.
3. ``--upload-clients`` clients × ``--uploads-each`` ``POST /runs`` of ``--upload-rows`` rows each, while
   wrk loads ``/dispatch``: status counts, connection resets, and stored rows against acknowledged ones.
4. One upload of ``--big-rows`` rows while wrk loads ``/dispatch`` with repeated shapes: rows/s of the
   upload and ``/dispatch`` p99 / max during it.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotuner.records.exchange import FORMAT_VERSION  # noqa: E402
from scripts.load_dispatch import start_server  # noqa: E402

TOKEN = "load-serve-token"
NEW_SHAPE_LUA = """
math.randomseed(%d)
local function logrand(hi) return math.floor(math.exp(math.random() * math.log(hi))) end
request = function()
  return wrk.format("GET", "/dispatch?m=" .. logrand(65536) .. "&n=" .. logrand(262144) .. "&dtype=bf16&gpu=h100")
end
"""
REPEATED_LUA = """
math.randomseed(%d)
local paths = {}
for i = 1, %d do
  paths[i] = "/dispatch?m=" .. math.floor(math.exp(math.random() * math.log(65536))) ..
             "&n=" .. math.floor(math.exp(math.random() * math.log(262144))) .. "&dtype=bf16&gpu=h100"
end
local i = 0
request = function() i = i %% #paths + 1; return wrk.format("GET", paths[i]) end
"""


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def wrk(port: int, lua: str, seconds: float, connections: int, threads: int = 2) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    try:
        done = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{int(seconds)}s", "--latency",
                               "--timeout", "10s", "-s", script.name, f"http://127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=seconds + 60, check=True)
    finally:
        os.unlink(script.name)
    return parse_wrk(done.stdout)


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def parse_wrk(output: str) -> dict:
    latency = re.search(r"Latency\s+(\S+)\s+(\S+)\s+(\S+)", output)
    result = {"req_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
              "max_ms": _ms(latency.group(3)),
              "requests": int(re.search(r"(\d+) requests in", output).group(1)),
              "non_2xx": int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", output)) else 0,
              "socket_errors": (m.group(0) if (m := re.search(r"Socket errors:.*", output)) else "none")}
    for pct in ("50", "99"):
        result[f"p{pct}_ms"] = _ms(re.search(rf"\s{pct}(?:\.000)?%\s+(\S+)", output).group(1))
    return result


def upload_document(run_index: int, rows: int, candidates: int = 50) -> bytes:
    """A valid exchange document: one run of ``rows`` synthetic measurements (distinct shapes)."""
    started = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=run_index)
    shapes = (rows + candidates - 1) // candidates
    measurements = [
        {"candidate": c, "m": 1 + s // 512, "n": 64 + s % 512, "dtype": "bf16", "status": "ok",
         "median_us": 3.0 + c * 0.01, "p20_us": 2.9, "p80_us": 3.2 + c * 0.01, "repetitions": 100}
        for s in range(shapes) for c in range(candidates)
    ][:rows]
    document = {
        "format_version": FORMAT_VERSION, "exported_at": started.isoformat(),
        "runs": [{
            "source_id": run_index, "gpu": {"key": "h100", "name": "NVIDIA H100 80GB HBM3"},
            "environment": {"fingerprint": "load-serve-env"}, "timing_method": "cold", "status": "finished",
            "started_at": started.isoformat(), "finished_at": started.isoformat(), "host": f"load-{run_index}",
            "candidates": [{"variant": "torch_softmax", "config_key": f"load={c}", "config": {"load": c},
                            "source_hash": "0" * 16} for c in range(candidates)],
            "measurements": measurements, "copy_references": [],
        }],
    }
    return json.dumps(document).encode()


class Uploads:
    """``clients`` threads, each with one keep-alive connection, posting its documents in turn."""

    def __init__(self, port: int, documents: list[list[bytes]]):
        self.port, self.documents = port, documents
        self.statuses: Counter = Counter()
        self.resets = 0
        self.acknowledged_rows = 0
        self.lock = threading.Lock()

    def _client(self, documents: list[bytes]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        for body in documents:
            try:
                connection.request("POST", "/runs", body=body, headers=headers)
                response = connection.getresponse()
                answer = response.read()
                status = response.status
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                with self.lock:
                    self.resets += 1
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
                continue
            with self.lock:
                self.statuses[status] += 1
                if status == 201:
                    self.acknowledged_rows += json.loads(answer)["measurements"]
        connection.close()

    def run(self) -> float:
        threads = [threading.Thread(target=self._client, args=(docs,)) for docs in self.documents]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started


def with_background_wrk(port: int, lua: str, seconds: float, connections: int, work):  # noqa: ANN001, ANN201
    """Run ``work()`` while wrk loads /dispatch for ``seconds``; returns (work's result, wrk's figures)."""
    figures: dict = {}
    loader = threading.Thread(target=lambda: figures.update(wrk(port, lua, seconds, connections)))
    loader.start()
    time.sleep(1.0)  # wrk connected and running
    result = work()
    loader.join()
    return result, figures


def stored_measurements(database: Path) -> int:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT count(*) FROM measurements").fetchone()[0]


def show(title: str, figures: dict) -> None:
    print(f"{title} [{load_average()}]")
    print("    " + json.dumps(figures))
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60, help="length of each /dispatch phase")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeated", type=int, default=256, help="distinct shapes of the repeated phase")
    parser.add_argument("--upload-clients", type=int, default=8)
    parser.add_argument("--uploads-each", type=int, default=5)
    parser.add_argument("--upload-rows", type=int, default=200)
    parser.add_argument("--big-rows", type=int, default=100_000)
    parser.add_argument("--skip", default="", help="comma list of phases (1-4) to leave out")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    skip = {int(x) for x in args.skip.split(",") if x}
    folder = Path(tempfile.mkdtemp(prefix="load-serve-"))
    database = folder / "tuning.sqlite"
    os.environ["AUTOTUNER_UPLOAD_TOKEN"] = TOKEN
    process, port = start_server(f"sqlite:///{database}", args.workers, "h100")
    print(f"server: {args.workers} worker(s) on 127.0.0.1:{port}, database {database}, {os.cpu_count()} CPUs, "
          f"python {sys.version.split()[0]}")
    try:
        if 1 not in skip:
            show(f"1. /dispatch, new shape every request, {args.connections} connections, {args.seconds:.0f} s",
                 wrk(port, NEW_SHAPE_LUA % 1, args.seconds, args.connections))
        if 2 not in skip:
            show(f"2. /dispatch, {args.repeated} repeated shapes, {args.connections} connections, {args.seconds:.0f} s",
                 wrk(port, REPEATED_LUA % (2, args.repeated), args.seconds, args.connections))
        if 3 not in skip:
            before = stored_measurements(database)
            documents = [[upload_document(1000 + c * args.uploads_each + i, args.upload_rows)
                          for i in range(args.uploads_each)] for c in range(args.upload_clients)]
            uploads = Uploads(port, documents)
            seconds, figures = with_background_wrk(port, NEW_SHAPE_LUA % 3, 20, args.connections, uploads.run)
            stored = stored_measurements(database) - before
            show(f"3. {args.upload_clients} clients x {args.uploads_each} uploads of {args.upload_rows} rows "
                 f"during /dispatch load", {
                     "statuses": dict(uploads.statuses), "connection_resets": uploads.resets,
                     "rows_acknowledged": uploads.acknowledged_rows, "rows_stored": stored,
                     "upload_seconds": round(seconds, 2), "dispatch_during": figures})
        if 4 not in skip:
            body = upload_document(9999, args.big_rows)
            uploads = Uploads(port, [[body]])
            seconds, figures = with_background_wrk(port, REPEATED_LUA % (4, args.repeated), 15, args.connections,
                                                   uploads.run)
            show(f"4. one upload of {args.big_rows} rows ({len(body) / 2**20:.1f} MiB) during repeated-shape "
                 f"/dispatch load", {
                     "statuses": dict(uploads.statuses), "rows_per_s": round(uploads.acknowledged_rows / seconds),
                     "upload_seconds": round(seconds, 2), "dispatch_during": figures})
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
