"""The persistent tuning database: SQLAlchemy 2 models, engine set-up and query helpers.

Knows tables and queries, nothing of GPUs. SQLite is the embedded default; any SQLAlchemy URL
(PostgreSQL through psycopg) works too.

The names below are imported on first use (PEP 562), so ``import db.location`` (what the embedded
lookup needs) does not import SQLAlchemy.
"""
from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the embedded lookup imports this package
if TYPE_CHECKING:
    from typing import Any

_HOMES = {
    "DatabaseError": "db.engine", "DatabasePathError": "db.engine", "EmptyDatabaseError": "db.engine",
    "MissingDatabaseError": "db.engine", "reader_engine": "db.engine",
    "make_engine": "db.engine", "resolve_database_url": "db.engine",
    "transaction": "db.engine", "default_database_path": "db.location",
    **{name: "db.models" for name in ("Base", "CandidateRow", "CopyReference", "DispatchTableRow", "Environment",
                                      "GpuModel", "Measurement", "SweepRun")},
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'db' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
