"""db.bulk: batched inserts store what record_measurement would, on SQLite and PostgreSQL, and never
overwrite a stored row."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from db import bulk, queries
from db.engine import transaction
from db.models import Measurement


def _run_and_candidate(engine) -> tuple[int, int]:  # noqa: ANN001
    with transaction(engine) as session:
        gpu = queries.get_or_create_gpu(session, "h100", "NVIDIA H100")
        environment = queries.get_or_create_environment(session, "fp-bulk")
        run = queries.create_run(session, gpu, environment, "cold")
        candidate = queries.get_or_create_candidate(session, "torch_softmax", "", {}, "0" * 16)
        return run.id, candidate.id


def test_insert_stores_rows_with_given_or_default_dates_and_never_overwrites(engine):
    run_id, candidate_id = _run_and_candidate(engine)
    given = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=timezone.utc)
    rows = [{"run_id": run_id, "candidate_id": candidate_id, "m": m, "n": 1024, "dtype": "bf16", "status": "ok",
             "median_us": float(m), "created_at": given if m == 1 else None} for m in range(1, 6)]
    with transaction(engine) as session:
        assert bulk.insert_measurements(session, rows) == 5
    with pytest.raises(IntegrityError), transaction(engine) as session:  # a stored row is never rewritten
        bulk.insert_measurements(session, [{**rows[0], "median_us": 99.0, "error": "x"}])
    with transaction(engine) as session:
        assert session.scalar(select(func.count()).select_from(Measurement)) == 5
        first = session.scalars(select(Measurement).where(Measurement.m == 1)).one()
        assert (first.median_us, first.error, first.status) == (1.0, None, "ok")
        assert first.created_at.replace(tzinfo=timezone.utc) == given
        others = session.scalars(select(Measurement).where(Measurement.m > 1)).all()
        assert [row.median_us for row in others] == [2.0, 3.0, 4.0, 5.0] and all(row.created_at for row in others)
        measurements, copies = bulk.stored_rows(session, run_id)
    assert measurements[(candidate_id, 3, 1024, "bf16")][:2] == ("ok", 3.0) and copies == {}
