"""The persistent tuning database: SQLAlchemy 2 models, engine set-up and query helpers.

Knows tables and queries, nothing of GPUs. SQLite is the embedded default; any SQLAlchemy URL
(PostgreSQL through psycopg) works too.
"""
from db.engine import DatabaseError, default_database_path, make_engine, resolve_database_url, transaction
from db.models import (
    Base,
    CandidateRow,
    CopyReference,
    DispatchTableRow,
    Environment,
    GpuModel,
    Measurement,
    SweepRun,
)

__all__ = [
    "Base", "CandidateRow", "CopyReference", "DatabaseError", "DispatchTableRow", "Environment", "GpuModel",
    "Measurement", "SweepRun", "default_database_path", "make_engine", "resolve_database_url", "transaction",
]
