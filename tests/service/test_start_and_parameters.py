"""What the server refuses: a query parameter given twice, on any endpoint (docs/SERVICE.md: an error,
never read as one of its values), and, at start, a default GPU it has no table for (every gpu-less
/dispatch would be a 404) or a variable value it does not accept."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.config import Settings, SettingsError
from tests.service.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
GOOD = "m=4096&n=4096&dtype=bf16&gpu=h100"


@pytest.mark.parametrize("query", [
    "m=1&m=2&n=4096&dtype=bf16&gpu=h100",          # the case: answered 200 for m=2
    f"{GOOD}&gpu=h200",                             # a different GPU's answer for the same query
    f"{GOOD}&dtype=bf16",                           # even the same value twice
    f"{GOOD}&timing_method=cold&timing_method=warm",
    f"{GOOD}&unknown=1&unknown=2",                  # a parameter no route reads
])
def test_dispatch_refuses_a_repeated_parameter(client, query):
    first = client.get(f"/dispatch?{query}")
    again = client.get(f"/dispatch?{query}")  # the fast path's cache never answers it either
    for response in (first, again):
        assert response.status_code == 422, response.text
        body = response.json()
        assert "given 2 times; give each parameter once" in body["message"]
        assert body["detail"][0]["type"] == "repeated"
    assert client.get(f"/dispatch?{GOOD}").status_code == 200


@pytest.mark.parametrize("path", ["/gpus?x=1&x=2", "/kernels?x=1&x=1", "/measurements?limit=1&limit=2",
                                  "/tables/h100/bf16?timing_method=cold&timing_method=cold", "/healthz?deep=false&deep=true",
                                  "/?gpu=h100&gpu=h200", "/openapi.json?a=1&a=2"])
def test_every_endpoint_refuses_a_repeated_parameter(client, path):
    response = client.get(path)
    if path.startswith("/openapi.json"):  # not a route of ours: its schema, whatever the query
        assert response.status_code == 200
        return
    assert response.status_code == 422, (path, response.status_code, response.text[:200])
    name = path.split("?")[1].split("=")[0]
    assert response.json()["message"].startswith(f"query parameter '{name}': given 2 times")


def test_a_head_request_is_refused_alike(client):
    assert client.head("/dispatch?m=1&m=2&n=4096&dtype=bf16&gpu=h100").status_code == 422


@pytest.mark.parametrize("gpu", ["h999", "a800"])  # unknown, and a listed model without a table
def test_a_default_gpu_without_a_table_is_refused_at_start_naming_the_models(tmp_path, gpu):
    settings = Settings(database_url=str(tmp_path / "x.sqlite"), default_gpu=gpu)
    with pytest.raises(SettingsError) as refused:
        create_app(settings)
    message = str(refused.value)
    assert f"AUTOTUNER_DEFAULT_GPU='{gpu}'" in message and "h100" in message and "h200" in message


def test_a_default_gpu_with_a_table_answers_gpu_less_dispatch(tmp_path):
    with TestClient(create_app(Settings(database_url=str(tmp_path / "x.sqlite"), default_gpu="NVIDIA H100 80GB HBM3"))) as client:
        response = client.get("/dispatch?m=4096&n=4096&dtype=bf16")
    assert response.status_code == 200 and response.json()["gpu"] == "h100"


def test_a_default_gpu_of_the_database_only_is_accepted(database_url):
    """A table fitted into the database (a GPU no file ships) answers for the default GPU too."""
    from db.engine import make_engine
    from sqlalchemy.orm import Session
    from db.queries import current_tables

    engine = make_engine(database_url)
    with Session(engine) as session:
        fitted = sorted({row.payload["gpu"] for row in current_tables(session)})
    engine.dispose()
    assert fitted
    create_app(Settings(database_url=database_url, default_gpu=fitted[0], shipped_tables=False))


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("AUTOTUNER_DEFAULT_GPU", "h999", "AUTOTUNER_DEFAULT_GPU='h999': this server has no table for that GPU model"),
    ("AUTOTUNER_MAX_M", "many", "AUTOTUNER_MAX_M='many': Input should be a valid integer"),
])
def test_autotuner_serve_refuses_to_start_in_one_line(tmp_path, variable, value, said):
    """The command itself, as a user starts it: exit 2 and one line, never a server answering 404s."""
    env = {**os.environ, variable: value, "AUTOTUNER_DB": str(tmp_path / "x.sqlite"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "autotuner", "serve", "--port", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in " ".join(lines[0].split()), done.stderr
