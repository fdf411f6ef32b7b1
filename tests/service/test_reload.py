"""A fitted table replacing an older one is picked up without restarting the server."""
from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from db import queries
from db.engine import make_engine, transaction
from service.app import create_app
from tests.service.fixture_data import table_payload

QUERY = {"m": 4096, "n": 32000, "dtype": "bf16", "gpu": "h100"}


def refit(database_url: str, speedup: float) -> None:
    """What `autotuner fit` does: store a new current table for (h100, bf16, cold)."""
    engine = make_engine(database_url)
    with transaction(engine) as session:
        gpu = queries.gpu_by_key(session, "h100")
        queries.save_table(session, gpu, "bf16", "cold", table_payload("h100", gpu.name, "bf16", 1, speedup=speedup),
                           source_runs=[1], candidate_count=5)
    engine.dispose()


def test_a_refit_table_is_served_without_a_restart(client, database_url):
    before = client.get("/dispatch", params=QUERY).json()["predicted_us"]
    etag = client.get("/tables/h100/bf16").headers["etag"]
    generation = client.get("/healthz").json()["tables"]["generation"]
    refit(database_url, speedup=2.0)
    after = client.get("/dispatch", params=QUERY).json()["predicted_us"]
    assert after == pytest.approx(before / 2)
    assert client.get("/tables/h100/bf16", headers={"If-None-Match": etag}).status_code == 200
    assert client.get("/healthz").json()["tables"]["generation"] == generation + 1


def test_the_database_is_checked_at_most_once_per_interval(settings, database_url):
    app = create_app(settings.model_copy(update={"reload_interval_s": 0.5}))
    table_payload("h100", "NVIDIA H100 80GB HBM3", "bf16", 1, speedup=4.0)  # its index built before the clock matters
    with TestClient(app) as client:
        before = client.get("/dispatch", params=QUERY).json()["predicted_us"]
        refit(database_url, speedup=4.0)
        assert client.get("/dispatch", params=QUERY).json()["predicted_us"] == before  # cached until the check
        time.sleep(0.6)
        assert client.get("/dispatch", params=QUERY).json()["predicted_us"] == pytest.approx(before / 4)


def test_an_unreadable_database_keeps_the_loaded_tables(client, monkeypatch, auth):
    before = client.get("/dispatch", params=QUERY).json()

    def unreachable(_session):
        raise OperationalError("SELECT", {}, Exception("database is locked"))

    monkeypatch.setattr("service.tables.current_tables_stamp", unreachable)
    assert client.get("/dispatch", params=QUERY).json() == before
    health = client.get("/healthz", headers=auth).json()  # the error's text: upload token holders only
    assert "database is locked" in health["tables"]["last_error"]
    assert health["tables"]["count"] == 4
