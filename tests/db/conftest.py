"""Database fixtures: a fresh schema on the PostgreSQL test server (scripts/test.sh starts one and
sets AUTOTUNER_TEST_POSTGRES_URL), and an engine for either backend."""
from __future__ import annotations

import os
import uuid
from typing import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from db import make_engine

POSTGRES_URL = os.environ.get("AUTOTUNER_TEST_POSTGRES_URL")
NO_POSTGRES = "no PostgreSQL server: AUTOTUNER_TEST_POSTGRES_URL is unset (scripts/test.sh starts one where initdb exists)"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """URL of a schema of its own on the test server, dropped afterwards; skips without a server."""
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    schema = f"t_{uuid.uuid4().hex[:10]}"
    raw = create_engine(POSTGRES_URL)
    with raw.begin() as connection:
        connection.execute(text(f"CREATE SCHEMA {schema}"))
    yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    with raw.begin() as connection:
        connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    raw.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.sqlite'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def engine(database_url) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()
