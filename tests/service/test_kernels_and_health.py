"""GET /kernels and GET /healthz."""
from __future__ import annotations

from fastapi.testclient import TestClient

from service.app import create_app


def test_kernels_lists_every_registered_variant_with_its_seed(client):
    body = client.get("/kernels").json()
    names = [entry["name"] for entry in body]
    assert "torch_softmax" in names and len(names) == len(set(names))
    torch_entry = next(entry for entry in body if entry["name"] == "torch_softmax")
    assert torch_entry["seed"] == "torch" and torch_entry["configs"] == [{}]
    assert set(torch_entry["dtypes"]) == {"fp32", "fp16", "bf16"}
    assert all(entry["available"] is None for entry in body)  # not checked: the server needs no GPU


def test_healthz_reports_database_and_tables(client, auth):
    body = client.get("/healthz").json()
    assert body["status"] == "ok"
    assert body["database"]["reachable"] is True and body["database"]["backend"] == "sqlite"
    assert body["database"].get("url") is None  # no file path for an unauthenticated caller
    assert client.get("/healthz", headers=auth).json()["database"]["url"].startswith("sqlite:///")
    assert (body["tables"]["count"], body["tables"]["from_database"], body["tables"]["shipped"]) == (4, 4, 0)
    assert body["tables"]["last_error"] is None and body["tables"]["loaded_at"].endswith("Z")


def test_healthz_is_degraded_but_answers_when_the_database_is_gone(settings, tmp_path, auth):
    from sqlalchemy import create_engine

    app = create_app(settings)
    with TestClient(app) as client:
        app.state.engine = create_engine(f"sqlite:///{tmp_path / 'missing-dir' / 'x.sqlite'}")
        body = client.get("/healthz").json()
        detailed = client.get("/healthz", headers=auth).json()
        dispatch = client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16", "gpu": "h100"})
    assert body["status"] == "degraded" and body["database"]["reachable"] is False
    assert body["database"]["error"] == "OperationalError (details only with an upload token)"
    assert "unable to open database file" in detailed["database"]["error"]  # the driver's text: token holders only
    assert dispatch.status_code == 200  # answered from the tables already loaded
