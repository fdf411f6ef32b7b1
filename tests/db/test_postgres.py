"""The same database code against a real PostgreSQL server (started by scripts/test.sh in CI)."""
from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from db import make_engine, queries

URL = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not URL, reason="no PostgreSQL server: scripts/test.sh starts one where initdb exists")


@pytest.fixture
def engine():
    schema = f"t_{uuid.uuid4().hex[:10]}"
    raw = create_engine(URL)
    with raw.begin() as connection:
        connection.execute(text(f"CREATE SCHEMA {schema}"))
    url = f"{URL}?options=-csearch_path%3D{schema}"
    engine = make_engine(url)
    yield engine
    engine.dispose()
    with raw.begin() as connection:
        connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    raw.dispose()


def test_schema_is_created_and_rerecording_is_idempotent(engine):
    with Session(engine) as session, session.begin():
        gpu = queries.get_or_create_gpu(session, "h100", "NVIDIA H100 80GB HBM3", sm_count=132)
        env = queries.get_or_create_environment(session, "fp", torch="2.11")
        run = queries.create_run(session, gpu, env, "cold")
        cand = queries.get_or_create_candidate(session, "v", "block=256", {"block": 256}, "abc")
        gpu_id = gpu.id
        for median in (5.0, 4.0):
            queries.record_measurement(session, run.id, cand.id, 1, 1024, "bf16", status="ok", median_us=median)
    with Session(engine) as session:
        rows = queries.measurements_for(session, "h100", "bf16", "cold")
        assert [(m.median_us, c.config) for m, c, _ in rows] == [(4.0, {"block": 256})]
        assert queries.get_or_create_gpu(session, "h100", "x").id == gpu_id
