#!/usr/bin/env python3
"""Every serving figure of issue 20 in one bounded run, loopback only (needs ``wrk``: apt-get install wrk).

    python scripts/load_serve.py                     # starts its own server (1 worker) on a temp database
    python scripts/load_serve.py --seconds 60 --workers 1

Phases, each printed with ``uptime``'s load average (the machine may be shared: a figure means little
without it):

1. ``/dispatch``, wrk, ``--connections`` keep-alive connections for ``--seconds``, every request a shape
   the server has not answered before (:class:`NewShapes`: log-uniform m in [1, 65536], n in
   [1, 262144], distinct across every phase of the run): req/s, p50 / p99 / max, non-2xx, socket
   errors, and the check: requests that repeated a shape (0 unless the pool ran out) and answers the
   server replayed from its cache (``/healthz``, 0 when every shape was new to it). Long enough to meet
   full garbage-collection passes (max shows them).
2. The same with ``--repeated`` distinct shapes asked again and again: repeated-shape figures, reported
   apart (they are answered from the replay cache).
3. ``--upload-clients`` clients × ``--uploads-each`` ``POST /runs`` of ``--upload-rows`` rows each, while
   wrk loads ``/dispatch``: status counts, connection resets, and stored rows against acknowledged ones.
4. One upload of ``--big-rows`` rows while wrk loads ``/dispatch`` with repeated shapes: rows/s of the
   upload and ``/dispatch`` p99 / max during it.
5. ``/dispatch`` with a new shape every request (as phase 1) while ``--measurement-readers`` connections page through
   ``/measurements`` (a random ``after`` cursor each request) and ``--page-readers`` fetch the page ``/``
   (gzip accepted, as a browser does), each load its own wrk: ``/dispatch`` figures, and the readers'.
6. ``--big-uploads`` concurrent uploads of ``--big-upload-mb`` MB each: their statuses, and the peak
   resident memory (VmHWM) of the server and of its upload process (Linux).
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
import urllib.request
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotuner.records.exchange import FORMAT_VERSION  # noqa: E402
from scripts.load_dispatch import fast_path_hits, new_shapes, shape_keys, start_server  # noqa: E402

TOKEN = "load-serve-token"
# Each wrk thread reads its own file of shapes (one "m n" a line) and sends them in order; done()
# prints how many requests repeated a shape (sent after a thread's file ran out: it starts again).
NEW_SHAPE_LUA = """
local counter, threads = 0, {}
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end
function init(args)
  ms, ns, count, i, repeated = {}, {}, 0, 0, 0
  for line in io.lines("%s." .. id) do
    local m, n = line:match("(%%d+) (%%d+)")
    count = count + 1
    ms[count], ns[count] = m, n
  end
end
function request()
  i = i + 1
  if i > count then repeated = repeated + 1 end
  local k = (i - 1) %% count + 1
  return wrk.format("GET", "/dispatch?m=" .. ms[k] .. "&n=" .. ns[k] .. "&dtype=bf16&gpu=h100")
end
function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("repeated") end
  io.write("REPEATED " .. total .. "\\n")
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


MEASUREMENTS_LUA = """
math.randomseed(%d)
request = function()
  return wrk.format("GET", "/measurements?limit=100&after=" .. math.random(0, %d))
end
"""
PAGE_LUA = """
wrk.headers["Accept-Encoding"] = "gzip"
"""


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class NewShapes:
    """Shapes for the new-shape phases: distinct across the whole run (no phase sends one an earlier
    phase sent), ``per_second`` for each second of a phase (more than the server can answer), split
    into one file per wrk thread."""

    def __init__(self, folder: Path, per_second: int = 40_000, seed: int = 2045):
        self.folder, self.per_second, self.seed = folder, per_second, seed
        self.sent = np.empty(0, dtype=np.int64)

    def lua(self, seconds: float, threads: int) -> tuple[str, int]:
        """The wrk script of a phase of ``seconds`` over ``threads`` threads, and how many shapes it has."""
        shapes = new_shapes(int(self.per_second * seconds), self.seed + len(self.sent), exclude=self.sent)
        self.sent = np.concatenate([self.sent, shape_keys(shapes)])
        prefix = self.folder / f"shapes-{len(self.sent)}"
        for thread, part in enumerate(np.array_split(shapes, threads)):
            np.savetxt(f"{prefix}.{thread}", part, fmt="%d")
        return NEW_SHAPE_LUA % prefix, len(shapes)


def new_shape_wrk(port: int, pool: NewShapes, seconds: float, connections: int, threads: int = 2) -> dict:
    """wrk with a new shape every request (:class:`NewShapes`), and the check that every shape was new:
    ``repeated_shapes`` (requests past a thread's share of the pool) and ``server_replays`` (answers
    the server replayed from its cache meanwhile) are both 0 when it holds."""
    threads = min(threads, connections)
    lua, shapes = pool.lua(seconds, threads)
    replays = fast_path_hits("127.0.0.1", port)
    figures = wrk(port, lua, seconds, connections, threads)
    figures.update(shapes_in_pool=shapes, server_replays=fast_path_hits("127.0.0.1", port) - replays)
    return figures


def wrk(port: int, lua: str, seconds: float, connections: int, threads: int = 2, path: str = "") -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    try:
        done = subprocess.run(["wrk", f"-t{min(threads, connections)}", f"-c{connections}", f"-d{int(seconds)}s",
                               "--latency", "--timeout", "10s", "-s", script.name, f"http://127.0.0.1:{port}{path}"],
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
    if (repeated := re.search(r"REPEATED (\d+)", output)) is not None:
        result["repeated_shapes"] = int(repeated.group(1))
    return result


# The device of the recorded H100 sweeps (tests/data/h100_sweep.json.gz), as a sweep records it.
H100_DEVICE = {"key": "h100", "name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "l2_bytes": 52428800,
               "memory_bytes": 85017493504, "compute_capability": "9.0"}


def declared_candidates(count: int, dtype: str = "bf16", gpu: str = "h100") -> list[dict]:
    """The first ``count`` configs the registered variants declare for ``dtype`` and run on ``gpu``, as
    a run's candidates (what an upload may list: ``autotuner/records/plausibility.py``)."""
    from autotuner.lookup.gpu_models import GPU_MODELS, runs_on
    from kernels import all_variants

    found = [{"variant": variant.name, "config_key": config.key, "config": config.as_dict(), "source_hash": "0" * 16}
             for variant in all_variants() if dtype in variant.dtypes for config in variant.all_configs()
             if runs_on(variant.requirements(config, dtype), GPU_MODELS[gpu])]
    if len(found) < count:
        raise ValueError(f"only {len(found)} declared configs run {dtype} on {gpu}")
    return found[:count]


def upload_document(run_index: int, rows: int, candidates: int = 50) -> bytes:
    """A valid, plausible exchange document: one H100 run of ``rows`` synthetic measurements (distinct
    shapes, ``candidates`` declared configs, times above every floor)."""
    started = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=run_index)
    shapes = (rows + candidates - 1) // candidates
    measurements = [
        {"candidate": c, "m": 1 + s // 512, "n": 64 + s % 512, "dtype": "bf16", "status": "ok",
         "median_us": 5.0 + c * 0.01, "p20_us": 4.9, "p80_us": 5.2 + c * 0.01, "repetitions": 100}
        for s in range(shapes) for c in range(candidates)
    ][:rows]
    document = {
        "format_version": FORMAT_VERSION, "exported_at": started.isoformat(),
        "runs": [{
            "source_id": run_index, "gpu": H100_DEVICE,
            "environment": {"fingerprint": "load-serve-env"}, "timing_method": "cold", "status": "finished",
            "started_at": started.isoformat(), "finished_at": started.isoformat(), "host": f"load-{run_index}",
            "candidates": declared_candidates(candidates),
            "measurements": measurements, "copy_references": [],
        }],
    }
    return json.dumps(document).encode()


class Uploads:
    """``clients`` threads, each with one keep-alive connection, posting its documents in turn."""

    def __init__(self, port: int, documents: list[list[bytes]], timeout_s: float = 300):
        self.port, self.documents, self.timeout_s = port, documents, timeout_s
        self.statuses: Counter = Counter()
        self.resets = 0
        self.acknowledged_rows = 0
        self.lock = threading.Lock()

    def _client(self, documents: list[bytes]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
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
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
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


def with_background_wrk(load, work):  # noqa: ANN001, ANN201
    """Run ``work()`` while ``load()`` (wrk on /dispatch) runs; returns (work's result, load's figures)."""
    figures: dict = {}
    loader = threading.Thread(target=lambda: figures.update(load()))
    loader.start()
    time.sleep(1.0)  # wrk connected and running
    result = work()
    loader.join()
    return result, figures


def peak_memory_mb(pid: int | None) -> float | None:
    """The process's peak resident set (VmHWM) in MiB; None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status)
        return round(int(fields["VmHWM"].split()[0]) / 1024, 1)
    except (OSError, KeyError, TypeError, ValueError):
        return None


def upload_process_pid(port: int) -> int | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
        return json.loads(answer.read())["upload_process"]["pid"]


def during_reads(port: int, seconds: float, connections: int, measurement_readers: int, page_readers: int,
                 newest_id: int, pool: NewShapes) -> dict:
    """/dispatch (new shapes) while wrk loads /measurements and / in two more processes."""
    figures: dict = {}
    started = time.perf_counter()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=120) as answer:  # rendered once per table generation: not
        answer.read()  # part of the steady state measured here (its cost is printed apart)
    figures["first_page_render_s"] = round(time.perf_counter() - started, 2)
    loads = [("measurements", MEASUREMENTS_LUA % (5, max(newest_id, 1)), measurement_readers, ""),
             ("page", PAGE_LUA, page_readers, "/")]
    threads = [threading.Thread(target=lambda name=name, lua=lua, count=count, path=path: figures.update(
                   {name: wrk(port, lua, seconds, count, threads=2, path=path)}))
               for name, lua, count, path in loads if count]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # the readers at full pace (and the page rendered) before /dispatch is measured
    figures["dispatch"] = new_shape_wrk(port, pool, seconds - 4, connections)
    for thread in threads:
        thread.join()
    return figures


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
    parser.add_argument("--measurement-readers", type=int, default=16)
    parser.add_argument("--page-readers", type=int, default=4)
    parser.add_argument("--big-uploads", type=int, default=4)
    parser.add_argument("--big-upload-mb", type=float, default=250)
    parser.add_argument("--skip", default="", help="comma list of phases (1-6) to leave out")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    skip = {int(x) for x in args.skip.split(",") if x}
    folder = Path(tempfile.mkdtemp(prefix="load-serve-"))
    database = folder / "tuning.sqlite"
    pool = NewShapes(folder)
    os.environ["AUTOTUNER_UPLOAD_TOKEN"] = TOKEN
    process, port = start_server(f"sqlite:///{database}", args.workers, "h100")
    print(f"server: {args.workers} worker(s) on 127.0.0.1:{port}, database {database}, {os.cpu_count()} CPUs, "
          f"python {sys.version.split()[0]}")
    try:
        if 1 not in skip:
            show(f"1. /dispatch, new shape every request, {args.connections} connections, {args.seconds:.0f} s",
                 new_shape_wrk(port, pool, args.seconds, args.connections))
        if 2 not in skip:
            show(f"2. /dispatch, {args.repeated} repeated shapes, {args.connections} connections, {args.seconds:.0f} s",
                 wrk(port, REPEATED_LUA % (2, args.repeated), args.seconds, args.connections))
        if 3 not in skip:
            before = stored_measurements(database)
            documents = [[upload_document(1000 + c * args.uploads_each + i, args.upload_rows)
                          for i in range(args.uploads_each)] for c in range(args.upload_clients)]
            uploads = Uploads(port, documents)
            seconds, figures = with_background_wrk(lambda: new_shape_wrk(port, pool, 20, args.connections), uploads.run)
            stored = stored_measurements(database) - before
            show(f"3. {args.upload_clients} clients x {args.uploads_each} uploads of {args.upload_rows} rows "
                 f"during /dispatch load", {
                     "statuses": dict(uploads.statuses), "connection_resets": uploads.resets,
                     "rows_acknowledged": uploads.acknowledged_rows, "rows_stored": stored,
                     "upload_seconds": round(seconds, 2), "dispatch_during": figures})
        if 4 not in skip:
            body = upload_document(9999, args.big_rows)
            uploads = Uploads(port, [[body]])
            seconds, figures = with_background_wrk(
                lambda: wrk(port, REPEATED_LUA % (4, args.repeated), 15, args.connections), uploads.run)
            show(f"4. one upload of {args.big_rows} rows ({len(body) / 2**20:.1f} MiB) during repeated-shape "
                 f"/dispatch load", {
                     "statuses": dict(uploads.statuses), "rows_per_s": round(uploads.acknowledged_rows / seconds),
                     "upload_seconds": round(seconds, 2), "dispatch_during": figures})
        if 5 not in skip:
            if stored_measurements(database) < 20_000:
                Uploads(port, [[upload_document(5000, 20_000)]]).run()
            show(f"5. /dispatch, new shape every request, {args.connections} connections, {args.seconds:.0f} s, while "
                 f"{args.measurement_readers} connections read /measurements and {args.page_readers} read /",
                 during_reads(port, args.seconds, args.connections, args.measurement_readers, args.page_readers,
                              stored_measurements(database), pool))
        if 6 not in skip:
            rows = int(args.big_upload_mb * 2**20 / 137)  # about 137 bytes of JSON a row
            documents = [[upload_document(6000 + i, rows)] for i in range(args.big_uploads)]
            sizes = [len(docs[0]) / 2**20 for docs in documents]
            uploads = Uploads(port, documents, timeout_s=7200)  # they queue for the one upload process
            seconds = uploads.run()
            child = upload_process_pid(port)
            del documents
            show(f"6. {args.big_uploads} concurrent uploads of {min(sizes):.0f}-{max(sizes):.0f} MiB", {
                "statuses": dict(uploads.statuses), "rows_acknowledged": uploads.acknowledged_rows,
                "seconds": round(seconds, 1), "server_peak_rss_mib": peak_memory_mb(process.pid),
                "upload_process_peak_rss_mib": peak_memory_mb(child)})
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
