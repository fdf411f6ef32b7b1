"""Dispatch tables in the tuning database: reading the current ones for the lookup and the service."""
from __future__ import annotations

import logging
from typing import Iterable

from sqlalchemy.orm import Session

from autotuner.lookup.select import TableStore, add_shipped_tables
from autotuner.lookup.table import DispatchTable, TableFormatError
from db.engine import reader_engine
from db.location import chosen_database_url, missing_sqlite_file
from db.queries import current_tables

log = logging.getLogger(__name__)


def tables_in_database(url: str | None = None, engine=None) -> list[DispatchTable]:  # noqa: ANN001
    """The current table of every (GPU, dtype, method) in the database at ``url`` (or ``engine``); none
    from an empty database or a default one not yet made (``db.engine.reader_engine``: never creates one)."""
    owned = engine is None
    engine = engine or reader_engine(url)
    if engine is None:
        return []
    try:
        with Session(engine) as session:
            return database_tables(session)
    finally:
        if owned:
            engine.dispose()


def database_tables(session: Session) -> list[DispatchTable]:
    """The current table of every (GPU, dtype, method) the session's database holds; a table of an older
    format is left out, with a warning naming the command that refits it."""
    tables = []
    for row in current_tables(session):
        try:
            tables.append(DispatchTable(row.payload))
        except TableFormatError as exc:
            log.warning("the database's %s/%s/%s table is not used: %s (`autotuner fit --gpu %s` refits it)",
                        row.payload.get("gpu"), row.dtype, row.timing_method, exc, row.payload.get("gpu"))
    return tables


def answering_store(tables: Iterable[DispatchTable]) -> TableStore:
    """What ``select_kernel`` answers from beside a database holding ``tables``: the shipped tables,
    overlaid by them."""
    store = TableStore()
    add_shipped_tables(store)
    for table in tables:
        store.add(table)
    return store


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
