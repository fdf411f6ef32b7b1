"""Column ranges that SQLite forgives and PostgreSQL does not (found by the shared-database tests)."""
from __future__ import annotations

import pytest
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session

from db import make_engine, queries


@pytest.mark.xfail(strict=True, raises=DataError,
                   reason="gpu_models.memory_bytes (and l2_bytes) are 32-bit INTEGER on PostgreSQL; an H100's "
                          "80 GiB does not fit, so a sweep on a PostgreSQL database fails at its start. "
                          "Fix: BigInteger columns (a schema change for the lead), then drop this mark.")
def test_an_h100s_memory_size_fits_the_gpu_table(postgres_url):
    engine = make_engine(postgres_url)
    try:
        with Session(engine) as session, session.begin():
            queries.get_or_create_gpu(session, "h100", "NVIDIA H100 80GB HBM3", memory_bytes=85_899_345_920)
    finally:
        engine.dispose()
