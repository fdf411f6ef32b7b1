"""The service under a real uvicorn on 127.0.0.1 (a random free port), through a real HTTP client."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import httpx
import pytest
from sqlalchemy.orm import Session

from autotuner.records.exchange import export_runs
from db.engine import make_engine
from scripts.load_dispatch import request_lines, run_load
from service.config import Settings
from service.main import settings_environment
from tests.service.conftest import free_port
from tests.service.fixture_data import UPLOAD_TOKEN


def test_endpoints_answer_over_http(live_server):
    with httpx.Client(base_url=live_server.base_url, timeout=10) as http:
        assert http.get("/healthz").json()["status"] == "ok"
        answer = http.get("/dispatch", params={"m": 4096, "n": 32000, "dtype": "bfloat16", "gpu": "h100"})
        assert answer.status_code == 200 and answer.json()["dtype"] == "bf16"
        assert http.get("/dispatch", params={"m": 1, "n": 1, "dtype": "bf16", "gpu": "x9"}).status_code == 404
        etag = http.get("/tables/h100/bf16").headers["etag"]
        assert http.get("/tables/h100/bf16", headers={"If-None-Match": etag}).status_code == 304
        assert [g["gpu"] for g in http.get("/gpus").json()] == ["a100", "h100"]
        assert http.get("/kernels").status_code == 200
        assert http.get("/measurements", params={"limit": 3}).json()["items"][2]["id"] == 3
        assert "<svg" in http.get("/").text


def test_upload_over_http(live_server, database_url):
    engine = make_engine(database_url)
    with Session(engine) as session:
        document = export_runs(session, gpu_key="h100")  # the fixture's a100 rows are H100 timings: implausible
    engine.dispose()
    with httpx.Client(base_url=live_server.base_url, timeout=30) as http:
        assert http.post("/runs", json=document).status_code == 401
        response = http.post("/runs", json=document, headers={"Authorization": f"Bearer {UPLOAD_TOKEN}"})
    # it came from this database, whose own host wrote it: an uploader may not send it again as theirs
    assert response.status_code == 409 and "rule run-identity" in response.json()["message"], response.text
    document["runs"][0]["started_at"] = "2030-01-02T03:04:05.000006Z"  # a run of its own
    with httpx.Client(base_url=live_server.base_url, timeout=30) as http:
        response = http.post("/runs", json=document, headers={"Authorization": f"Bearer {UPLOAD_TOKEN}"})
    assert response.status_code == 201 and response.json()["runs_created"] == 1, response.text


def test_a_short_bounded_load_gets_only_200s(live_server):
    port = int(live_server.base_url.rsplit(":", 1)[1])
    lines = request_lines("127.0.0.1", port, "h100", "bf16", shapes=64, seed=1)
    report = asyncio.run(run_load("127.0.0.1", port, lines, total=600, connections=4, max_seconds=30))
    assert report.requests == 600 and report.errors == 0
    assert report.p50_ms > 0 and report.p99_ms >= report.p50_ms


@pytest.mark.slow
def test_service_main_run_serves_until_stopped(database_url):
    """``service.main.run`` (what `autotuner serve` calls) in its own process, stopped with SIGTERM."""
    port = free_port()
    code = ("import sys; from service.main import run; from service.config import Settings; "
            f"run('127.0.0.1', {port}, Settings(database_url={database_url!r}, shipped_tables=False), log_level='warning')")
    process = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                assert process.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        assert answer.json()["tables"]["count"] == 4
    finally:
        process.terminate()
        # uvicorn shuts down gracefully, then re-raises the signal it caught (exit status -SIGTERM).
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)


def test_settings_travel_to_worker_processes_through_the_environment(monkeypatch, database_url):
    settings = Settings(database_url=database_url, upload_token="tok-of-sixteen-chars", default_gpu="H100", max_m=4096, reload_interval_s=2.5)
    for name, value in settings_environment(settings).items():
        monkeypatch.setenv(name, value)
    again = Settings()
    assert again == settings and again.default_gpu == "h100"
