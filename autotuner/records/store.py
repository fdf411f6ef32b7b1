"""Dispatch tables in the tuning database: reading the current ones for the lookup and the service."""
from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from autotuner.lookup.table import DispatchTable, TableFormatError
from db.engine import reader_engine
from db.location import chosen_database_url, missing_sqlite_file
from db.queries import current_tables

log = logging.getLogger(__name__)


def tables_in_database(url: str | None = None, engine=None) -> list[DispatchTable]:  # noqa: ANN001
    """The current table of every (GPU, dtype, method) in the database at ``url`` (or ``engine``); none
    from an empty database or a default one not yet made (``db.engine.reader_engine``: never creates one);
    a table of an older format is left out, with a warning naming the command that refits it."""
    owned = engine is None
    engine = engine or reader_engine(url)
    if engine is None:
        return []
    try:
        with Session(engine) as session:
            tables = []
            for row in current_tables(session):
                try:
                    tables.append(DispatchTable(row.payload))
                except TableFormatError as exc:
                    log.warning("the database's %s/%s/%s table is not used: %s (`autotuner fit --gpu %s` refits it)",
                                row.payload.get("gpu"), row.dtype, row.timing_method, exc, row.payload.get("gpu"))
            return tables
    finally:
        if owned:
            engine.dispose()


def default_database_tables() -> list[DispatchTable]:
    """Current tables of the default database, only if its file already exists (never creates one);
    an unreadable database leaves the shipped tables in force (logged), never an error."""
    try:
        url = chosen_database_url()
    except ValueError:
        return []
    if missing_sqlite_file(url):
        return []
    try:
        return tables_in_database(url)
    except Exception as exc:
        log.warning("ignoring the tuning database's tables: %s", exc)
        return []
