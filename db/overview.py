"""Queries that summarise a tuning database for ``autotuner status``: runs and measurements per GPU
model, and the provenance of fitted tables. Each takes an open session; the caller opens and closes it.
"""
from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.models import CandidateRow, GpuModel, Measurement, SweepRun


def _status_counts_by_gpu(session: Session, status: Any, *joins: tuple[Any, Any]) -> dict[str, dict[str, int]]:
    """{gpu key: {status: count}} over the table of the ``status`` column, tied to the GPU model by
    ``joins``: (table, on clause) pairs, joined in that order."""
    statement = select(GpuModel.key, status, func.count())
    for table, on in joins:
        statement = statement.join(table, on)
    counts: dict[str, dict[str, int]] = {}
    for key, value, count in session.execute(statement.group_by(GpuModel.key, status)):
        counts.setdefault(key, {})[value] = int(count)
    return counts


def run_counts_by_gpu(session: Session) -> dict[str, dict[str, int]]:
    """{gpu key: {run status: count}}."""
    return _status_counts_by_gpu(session, SweepRun.status, (SweepRun, SweepRun.gpu_model_id == GpuModel.id))


def latest_runs(session: Session, gpu_key: str, timing_method: str | None = None, limit: int = 1) -> list[SweepRun]:
    """The newest runs of one GPU model (optionally of one timing method), newest first."""
    statement = (
        select(SweepRun)
        .join(GpuModel, SweepRun.gpu_model_id == GpuModel.id)
        .where(GpuModel.key == gpu_key)
        .order_by(SweepRun.id.desc())
        .limit(limit)
    )
    if timing_method is not None:
        statement = statement.where(SweepRun.timing_method == timing_method)
    return list(session.scalars(statement))


def measurement_counts_by_gpu(session: Session) -> dict[str, dict[str, int]]:
    """{gpu key: {measurement status: count}} over every run."""
    return _status_counts_by_gpu(session, Measurement.status, (SweepRun, Measurement.run_id == SweepRun.id),
                                 (GpuModel, SweepRun.gpu_model_id == GpuModel.id))


def source_hashes_of_runs(session: Session, run_ids: Sequence[int], dtype: str | None = None) -> dict[str, set[str]]:
    """{variant: source hashes of its candidates measured "ok"} in these runs (a table's provenance)."""
    if not run_ids:
        return {}
    statement = (
        select(CandidateRow.variant, CandidateRow.source_hash)
        .join(Measurement, Measurement.candidate_id == CandidateRow.id)
        .where(Measurement.run_id.in_(list(run_ids)), Measurement.status == "ok")
        .distinct()
    )
    if dtype is not None:
        statement = statement.where(Measurement.dtype == dtype)
    hashes: dict[str, set[str]] = {}
    for variant, source_hash in session.execute(statement):
        hashes.setdefault(variant, set()).add(source_hash)
    return hashes
