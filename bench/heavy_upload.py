"""Heavy ``POST /runs`` documents against a real server: what one of them costs the server, its upload
process and the uploads queued behind it (loopback only; CPU).

    python -m bench.heavy_upload --kind candidates --count 1000000   # one run listing 1M candidates (~107 MB)
    python -m bench.heavy_upload --kind rows --count 1800000         # 1.8M plausible rows (~250 MB)
    python -m bench.heavy_upload --kind deep --count 5000            # a field nested 5,000 deep

Starts a one-worker server on a temporary SQLite database (``scripts/load_dispatch.start_server``),
sends the heavy document from a file while a second client sends a small genuine upload every
``--small-every`` seconds, and prints one JSON line: the heavy upload's status, seconds and message;
the small uploads' statuses and latencies; the peak resident memory (VmHWM) and CPU time of the server
and of each upload process that served (sampled while they run, so a process that is replaced is
counted too; CPU time is the cost on a shared machine, where wall time is mostly the neighbours').
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.load_dispatch import start_server  # noqa: E402
from scripts.load_serve import H100_DEVICE, TOKEN, peak_memory_mb, upload_document  # noqa: E402


def write_candidates_document(handle: IO[str], count: int) -> None:
    """One H100 run listing ``count`` distinct candidates (``cuda_block_online`` with made-up configs,
    about 107 bytes each) and one row."""
    handle.write('{"format_version": 1, "runs": [{"gpu": %s, "environment": {"fingerprint": "heavy"}, '
                 '"timing_method": "cold", "started_at": "2026-01-02T00:00:00Z", "host": "heavy", "candidates": ['
                 % json.dumps(H100_DEVICE))
    for index in range(count):
        block, items = 32 * (1 + index % 32), index // 32
        handle.write('%s{"variant":"cuda_block_online","config_key":"block=%d,items=%d",'
                     '"config":{"block":%d,"items":%d},"source_hash":"0a1b2c"}' % ("," if index else "", block, items, block, items))
    handle.write('], "measurements": [{"candidate": 0, "m": 4096, "n": 4096, "dtype": "bf16", "status": "ok", '
                 '"median_us": 50.0}], "copy_references": []}]}')


def write_rows_document(handle: IO[str], count: int) -> None:
    """One plausible H100 run of ``count`` rows, the rows of ``scripts/load_serve.upload_document``
    (written one at a time: the client need not hold the document)."""
    document = json.loads(upload_document(0, 50))
    head, tail = json.dumps({**document["runs"][0], "measurements": "@"}).split('"@"')
    candidates = len(document["runs"][0]["candidates"])
    handle.write('{"format_version": 1, "runs": [' + head + "[")
    for index in range(count):
        shape, candidate = divmod(index, candidates)
        handle.write('%s{"candidate": %d, "m": %d, "n": %d, "dtype": "bf16", "status": "ok", "median_us": %.2f, '
                     '"p20_us": 4.9, "p80_us": %.2f, "repetitions": 100}'
                     % ("," if index else "", candidate, 1 + shape // 512, 64 + shape % 512,
                        5.0 + candidate * 0.01, 5.2 + candidate * 0.01))
    handle.write("]" + tail + "]}")


def write_deep_document(handle: IO[str], depth: int) -> None:
    """A genuine small document whose run's ``grid`` holds a list nested ``depth`` deep."""
    document = json.loads(upload_document(1, 10))
    document["runs"][0]["grid"] = {"deep": "@"}
    head, tail = json.dumps(document).split('"@"')
    handle.write(head + "[" * depth + "]" * depth + tail)


WRITERS = {"candidates": write_candidates_document, "rows": write_rows_document, "deep": write_deep_document}


def post_file(port: int, path: Path, timeout_s: float) -> tuple[int, float, str]:
    """The status, seconds and first 300 characters of the answer of one upload sent from ``path``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    started = time.perf_counter()
    with open(path, "rb") as body:
        connection.request("POST", "/runs", body=body, headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
            "Content-Length": str(path.stat().st_size)})
        response = connection.getresponse()
        answer = response.read().decode(errors="replace")
    connection.close()
    return response.status, time.perf_counter() - started, answer[:300]


class SmallUploads:
    """A genuine 200-row upload every ``every`` seconds until stopped: statuses and latencies."""

    def __init__(self, port: int, every: float, timeout_s: float):
        self.port, self.every, self.timeout_s = port, every, timeout_s
        self.statuses: dict[int | str, int] = {}
        self.latencies: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        index = 0
        while not self.stop.is_set():
            body = upload_document(100_000 + index, 200)
            index += 1
            started = time.perf_counter()
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
                connection.request("POST", "/runs", body=body, headers={
                    "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                status: int | str = response.status
                connection.close()
            except OSError as exc:
                status = type(exc).__name__
            self.latencies.append(time.perf_counter() - started)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            self.stop.wait(self.every)


def cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU time the process has used (Linux /proc): its cost whatever the machine's load."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, TypeError):
        return None


class PeakMemory:
    """VmHWM and CPU time of the server and of every upload process seen (``/healthz``), sampled every
    ``every`` s."""

    def __init__(self, port: int, server_pid: int, every: float = 0.5):
        self.port, self.server_pid, self.every = port, server_pid, every
        self.peaks: dict[int, float] = {}
        self.cpu: dict[int, float] = {}
        self.stop = threading.Event()

    def sample(self) -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=10) as answer:
                child = json.loads(answer.read())["upload_process"]["pid"]
        except (OSError, ValueError, KeyError):
            child = None
        for pid in (self.server_pid, child):
            peak, cpu = peak_memory_mb(pid), cpu_seconds(pid)
            if pid is not None and peak is not None:
                self.peaks[pid] = max(peak, self.peaks.get(pid, 0.0))
            if pid is not None and cpu is not None:
                self.cpu[pid] = cpu

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.sample()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=sorted(WRITERS), default="candidates")
    parser.add_argument("--count", type=int, default=1_000_000, help="candidates, rows or nesting depth")
    parser.add_argument("--small-every", type=float, default=2.0, help="seconds between the small uploads")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds a client waits for its answer")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="heavy-upload-"))
    document = folder / "heavy.json"
    with open(document, "w") as handle:
        WRITERS[args.kind](handle, args.count)
    os.environ["AUTOTUNER_UPLOAD_TOKEN"] = TOKEN
    process, port = start_server(f"sqlite:///{folder / 'tuning.sqlite'}", 1, "h100")
    small = SmallUploads(port, args.small_every, args.timeout)
    memory = PeakMemory(port, process.pid)
    helpers = [threading.Thread(target=small.run), threading.Thread(target=memory.run)]
    try:
        for thread in helpers:
            thread.start()
        time.sleep(1.0)
        try:
            status, seconds, answer = post_file(port, document, args.timeout)
        except OSError as exc:  # no answer within --timeout (or the connection dropped)
            status, seconds, answer = type(exc).__name__, args.timeout, str(exc)
        time.sleep(args.small_every + 1)  # one small upload after the heavy one
        small.stop.set()
        memory.stop.set()
        for thread in helpers:
            thread.join()
        memory.sample()
    finally:
        process.terminate()
        process.wait(timeout=30)
    latencies = sorted(small.latencies)
    print(json.dumps({
        "kind": args.kind, "count": args.count, "document_mib": round(document.stat().st_size / 2**20, 1),
        "load_average": os.getloadavg(), "status": status, "seconds": round(seconds, 2), "answer": answer,
        "small_uploads": {"statuses": small.statuses, "count": len(latencies),
                          "median_s": round(statistics.median(latencies), 3) if latencies else None,
                          "max_s": round(latencies[-1], 3) if latencies else None},
        "peak_rss_mib": {"server": memory.peaks.get(process.pid),
                         "upload_processes": [peak for pid, peak in memory.peaks.items() if pid != process.pid]},
        "cpu_s": {"server": memory.cpu.get(process.pid),
                  "upload_processes": [round(cpu, 1) for pid, cpu in memory.cpu.items() if pid != process.pid]},
    }))
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
