"""Column ranges that SQLite forgives and PostgreSQL does not (found by the shared-database tests)."""
from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from db import make_engine, queries


def test_an_h100s_memory_size_fits_the_gpu_table(postgres_url):
    engine = make_engine(postgres_url)
    try:
        with Session(engine) as session, session.begin():
            queries.get_or_create_gpu(session, "h100", "NVIDIA H100 80GB HBM3", memory_bytes=85_899_345_920)
    finally:
        engine.dispose()
