"""Writing an SQLite database's current tables as files beside it (``db.location``: the folder, its
mark, and why), so that the embedded lookup reads them without SQLAlchemy.

Every write is atomic (a reader sees the old file or the new one), and a stored table's file is written
only once its transaction has committed: the folder never holds a table the database does not.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

from sqlalchemy import Engine, event, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from db.location import COMPLETE_MARK, sqlite_file, tables_folder
from db.models import DispatchTableRow, GpuModel

log = logging.getLogger(__name__)


def table_file_name(gpu: str, dtype: str, timing_method: str) -> str:
    return f"{gpu}_{dtype}_{timing_method}.json"


def database_file(engine: Engine) -> Path | None:
    """The SQLite file behind ``engine``, None for another database or one in memory."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return sqlite_file(f"sqlite:///{url.database}")


_PENDING = "db.mirror.pending"  # session.info key: (database file, document) to write at the commit


def mirror_on_commit(session: Session, key: tuple[str, str, str], document: Mapping[str, Any]) -> None:
    """Write ``document`` (a table just stored as current in ``session``) to the folder once the
    session's transaction commits; nothing where it rolls back or the database is not an SQLite file."""
    database = database_file(session.get_bind())
    if database is not None:
        session.info.setdefault(_PENDING, []).append((database, key, document))


@event.listens_for(Session, "after_commit")
def _write_pending(session: Session) -> None:
    for database, key, document in session.info.pop(_PENDING, ()):
        try:
            tables_folder(database).mkdir(exist_ok=True)
            _write_atomic(tables_folder(database) / table_file_name(*key), json.dumps(document))
        except OSError as exc:  # the table is stored; only its copy is missing: readers then read the database
            log.warning("could not write the table file beside %s (%s); lookups read the database instead", database, exc)
            _unmark(database)


@event.listens_for(Session, "after_rollback")
def _drop_pending(session: Session) -> None:
    session.info.pop(_PENDING, None)


def start_folder(engine: Engine) -> None:
    """A database just created holds no table: an empty folder, marked complete (files left from an
    earlier database of the same path are removed)."""
    database = database_file(engine)
    if database is None:
        return
    folder = tables_folder(database)
    try:
        folder.mkdir(exist_ok=True)
        for stale in folder.glob("*.json"):
            stale.unlink()
        _write_atomic(folder / COMPLETE_MARK, "")
    except OSError as exc:
        log.warning("could not make the tables folder %s (%s); lookups read the database instead", folder, exc)


def complete_folder(engine: Engine) -> None:
    """Write every current table and mark the folder complete, where it is not yet (a database made
    before the folder existed, or whose folder was lost); a file of no current table is removed."""
    database = database_file(engine)
    if database is None or (tables_folder(database) / COMPLETE_MARK).is_file():
        return
    try:
        with Session(engine) as session:
            documents = {table_file_name(gpu, dtype, method): payload for gpu, dtype, method, payload in session.execute(
                select(GpuModel.key, DispatchTableRow.dtype, DispatchTableRow.timing_method, DispatchTableRow.payload)
                .join(GpuModel, DispatchTableRow.gpu_model_id == GpuModel.id).where(DispatchTableRow.is_current.is_(True)))}
    except SQLAlchemyError as exc:  # left unmarked: readers read the database, as before
        log.warning("could not read the current tables of %s to write them beside it (%s)", database, exc)
        return
    folder = tables_folder(database)
    try:
        folder.mkdir(exist_ok=True)
        for stale in folder.glob("*.json"):
            if stale.name not in documents:
                stale.unlink()
        for name, document in documents.items():
            _write_atomic(folder / name, json.dumps(document))
        _write_atomic(folder / COMPLETE_MARK, "")
    except OSError as exc:
        log.warning("could not write the tables folder %s (%s); lookups read the database instead", folder, exc)


def _unmark(database: Path) -> None:
    try:
        (tables_folder(database) / COMPLETE_MARK).unlink(missing_ok=True)
    except OSError:
        pass


def _write_atomic(target: Path, text: str) -> None:
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, target)
