"""SQLAlchemy 2 typed models of the tuning database.

One row per thing measured, never only the winner: every candidate's timing (or failure) on every
shape is kept, so tables can be refitted and audited later. Times are microseconds, sizes bytes.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    Index,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

SCHEMA_VERSION = 3  # = the Alembic head's (db/migrations/versions); each revision sets it
APPLICATION_ID = "softmax-autotuner"

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class SchemaInfo(Base):
    """Marks a database as ours and records its schema version (foreign files are refused)."""

    __tablename__ = "schema_info"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


class GpuModel(Base):
    __tablename__ = "gpu_models"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(32), unique=True)  # normalised: "h100", "a100", "h200"
    name: Mapped[str] = mapped_column(String(128))  # as the driver reports it
    sm_count: Mapped[Optional[int]]
    l2_bytes: Mapped[Optional[int]] = mapped_column(BigInteger)
    memory_bytes: Mapped[Optional[int]] = mapped_column(BigInteger)  # 80 GB overflows a 32-bit column
    compute_capability: Mapped[Optional[str]] = mapped_column(String(8))  # "9.0"


class Environment(Base):
    """Software versions a measurement was taken under; rows from another environment are stale."""

    __tablename__ = "environments"
    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    driver: Mapped[Optional[str]] = mapped_column(String(32))
    cuda: Mapped[Optional[str]] = mapped_column(String(32))
    torch: Mapped[Optional[str]] = mapped_column(String(64))
    triton: Mapped[Optional[str]] = mapped_column(String(32))
    cupy: Mapped[Optional[str]] = mapped_column(String(32))
    python: Mapped[Optional[str]] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def run_identity(gpu_key: str, fingerprint: str, timing_method: str, started_at: datetime, host: str | None) -> str:
    """What makes a sweep run the same run in every database: its GPU model, environment, timing method,
    start time (UTC, to the microsecond; a naive time is UTC) and host, hashed. ``sweep_runs.identity``
    holds it under a unique index, so one run is stored once however many servers receive it at once.
    Changing the formula needs a migration that recomputes the column (revision 0003 computes it)."""
    started = started_at.replace(tzinfo=timezone.utc) if started_at.tzinfo is None else started_at.astimezone(timezone.utc)
    fields = [gpu_key, fingerprint, timing_method, started.isoformat(timespec="microseconds"), host]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()


class SweepRun(Base):
    """One sweep (or import, or confirmation) of one GPU model in one environment. Stored once per
    :func:`run_identity` and never rewritten. ``uploader`` is the name of the upload token that sent it
    over HTTP (``POST /runs``); NULL for a run this database's own host wrote (a local sweep,
    ``autotuner import``, ``autotuner confirm``) and for runs stored before schema version 3."""

    __tablename__ = "sweep_runs"
    __table_args__ = (Index("uq_sweep_runs_identity", "identity", unique=True),)
    id: Mapped[int] = mapped_column(primary_key=True)
    gpu_model_id: Mapped[int] = mapped_column(ForeignKey("gpu_models.id"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    timing_method: Mapped[str] = mapped_column(String(16))  # "cold" | "warm" | "graph"
    status: Mapped[str] = mapped_column(String(16), default="running")  # running|finished|interrupted|failed
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    host: Mapped[Optional[str]] = mapped_column(String(128))
    command: Mapped[Optional[str]] = mapped_column(Text)
    grid: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    uploader: Mapped[Optional[str]] = mapped_column(String(128))
    identity: Mapped[str] = mapped_column(String(64))

    gpu_model: Mapped[GpuModel] = relationship()
    environment: Mapped[Environment] = relationship()


class CandidateRow(Base):
    """A variant, one launch config of it, and the hash of the source that generated its code."""

    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("variant", "config_key", "source_hash"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    variant: Mapped[str] = mapped_column(String(64))
    config_key: Mapped[str] = mapped_column(String(256))  # "block=256,vec=4"
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    source_hash: Mapped[str] = mapped_column(String(64))


class Measurement(Base):
    """One candidate on one shape in one run. ``status`` is "ok" only for verified, timed rows;
    failures keep their error text and are never timed or chosen."""

    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("run_id", "candidate_id", "m", "n", "dtype"),
                      Index("ix_measurements_shape", "dtype", "m", "n"))
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("sweep_runs.id"), index=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"), index=True)
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(16))  # ok|wrong|unsupported|compile_error|launch_error|fault|timeout
    median_us: Mapped[Optional[float]] = mapped_column(Float)
    p20_us: Mapped[Optional[float]] = mapped_column(Float)
    p80_us: Mapped[Optional[float]] = mapped_column(Float)
    repetitions: Mapped[Optional[int]]
    gbps: Mapped[Optional[float]] = mapped_column(Float)  # bytes read + written over the median time
    registers: Mapped[Optional[int]]
    spill_bytes: Mapped[Optional[int]]
    static_smem: Mapped[Optional[int]]
    dynamic_smem: Mapped[Optional[int]]
    threads_per_block: Mapped[Optional[int]]
    blocks_per_sm: Mapped[Optional[int]]
    occupancy: Mapped[Optional[float]] = mapped_column(Float)
    max_rel_error: Mapped[Optional[float]] = mapped_column(Float)
    compile_seconds: Mapped[Optional[float]] = mapped_column(Float)
    error: Mapped[Optional[str]] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    run: Mapped[SweepRun] = relationship()
    candidate: Mapped[CandidateRow] = relationship()


class CopyReference(Base):
    """Time of a plain copy of the same bytes (one read, one write of M*N): the speed of light."""

    __tablename__ = "copy_references"
    __table_args__ = (UniqueConstraint("run_id", "m", "n", "dtype"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("sweep_runs.id"), index=True)
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    median_us: Mapped[float] = mapped_column(Float)
    p20_us: Mapped[Optional[float]] = mapped_column(Float)
    p80_us: Mapped[Optional[float]] = mapped_column(Float)
    repetitions: Mapped[Optional[int]]
    gbps: Mapped[Optional[float]] = mapped_column(Float)


class DispatchTableRow(Base):
    """A fitted dispatch table for one (GPU model, dtype, timing method). ``payload`` is the
    versioned JSON document that ``select_kernel`` reads; only one row per key is current."""

    __tablename__ = "dispatch_tables"
    id: Mapped[int] = mapped_column(primary_key=True)
    gpu_model_id: Mapped[int] = mapped_column(ForeignKey("gpu_models.id"), index=True)
    dtype: Mapped[str] = mapped_column(String(8))
    timing_method: Mapped[str] = mapped_column(String(16))
    format_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    source_runs: Mapped[list[int]] = mapped_column(JSON)
    environment_id: Mapped[Optional[int]] = mapped_column(ForeignKey("environments.id"))
    candidate_count: Mapped[int] = mapped_column(Integer)
    regret_geomean: Mapped[Optional[float]] = mapped_column(Float)
    regret_p95: Mapped[Optional[float]] = mapped_column(Float)
    regret_max: Mapped[Optional[float]] = mapped_column(Float)
    is_current: Mapped[bool] = mapped_column(Boolean, default=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)

    gpu_model: Mapped[GpuModel] = relationship()


class WorkListEntry(Base):
    """One shape of a shared sweep work list: what several sweepers (threads, processes, hosts) claim so
    that no two measure the same shape at once. ``list_key`` names the list: sweepers share one when
    they tune the same GPU model, environment, timing method and kernel sources (see
    ``autotuner/tune/parallel.py``). A claim holds until ``lease_expires_at``; the holder renews it after
    every item, and anyone may take over an expired one (or, on the same host, one whose process died).
    Measurements stay the record of what was measured; this table only says who works on what."""

    __tablename__ = "work_list"
    __table_args__ = (UniqueConstraint("list_key", "m", "n", "dtype"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    list_key: Mapped[str] = mapped_column(String(64), index=True)
    position: Mapped[int] = mapped_column(Integer)  # claim order: coarse to fine
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending|claimed|done
    claimed_by: Mapped[Optional[str]] = mapped_column(String(192))  # "host:pid:run:slot"
    claim_host: Mapped[Optional[str]] = mapped_column(String(128))
    claim_pid: Mapped[Optional[int]]
    claim_run_id: Mapped[Optional[int]] = mapped_column(ForeignKey("sweep_runs.id"))
    claimed_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    lease_expires_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # claims taken, takeovers included
    done_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))


class SweepProcess(Base):
    """The process that runs (or ran) a sweep run, so that a later sweep on the same host can tell a
    run that was killed (its process is gone, its status still "running") and mark it interrupted."""

    __tablename__ = "sweep_processes"
    run_id: Mapped[int] = mapped_column(ForeignKey("sweep_runs.id"), primary_key=True)
    host: Mapped[str] = mapped_column(String(128), index=True)
    pid: Mapped[int] = mapped_column(Integer)
