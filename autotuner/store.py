"""Dispatch tables in the tuning database: reading the current ones for the lookup."""
from __future__ import annotations

from sqlalchemy.orm import Session

from autotuner.table import DispatchTable
from db.engine import make_engine
from db.queries import current_tables


def tables_in_database(url: str | None = None, engine=None) -> list[DispatchTable]:  # noqa: ANN001
    """The current table of every (GPU, dtype, method) in the database at ``url`` (or ``engine``)."""
    owned = engine is None
    engine = engine or make_engine(url, create=False)
    try:
        with Session(engine) as session:
            return [DispatchTable(row.payload) for row in current_tables(session)]
    finally:
        if owned:
            engine.dispose()
