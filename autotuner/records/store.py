"""Dispatch tables in the tuning database: reading the current ones for the lookup, and the files
``fit`` writes beside an SQLite database so that the lookup reads them without SQLAlchemy."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

from sqlalchemy.orm import Session

from autotuner.lookup.select import fitted_tables_folder
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


def write_table_file(session: Session, document: Mapping[str, Any]) -> Path | None:
    """Write a fitted table beside the session's SQLite database (``fitted_tables_folder``), atomically
    (a reader sees the old file or the new one); None for a database that is not an SQLite file."""
    url = session.get_bind().url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    folder = fitted_tables_folder(Path(url.database))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{document['gpu']}_{document['dtype']}_{document['timing_method']}.json"
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(document))
    os.replace(partial, target)
    return target
