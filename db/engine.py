"""Opening the tuning database: URL resolution, SQLite pragmas, schema creation and checks.

The default is an SQLite file at ``~/.local/share/softmax-autotuner/tuning.sqlite`` (or under
``$XDG_DATA_HOME``), overridden by ``$AUTOTUNER_DB`` and by an explicit URL (``--db``). Any
SQLAlchemy URL works; ``postgresql+psycopg://...`` is the supported server database.

A file that is not SQLite, or an SQLite database that is not ours, or ours at another schema version,
is refused with a :class:`DatabaseError` that names the file and what was expected.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import Engine, create_engine, event, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError as SADatabaseError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from db.location import (  # noqa: F401 - ENV_VAR, default_database_path, missing_sqlite_file re-exported
    ENV_VAR, chosen_database_url, default_database_path, is_default_database, missing_sqlite_file,
)
from db.mirror import complete_folder, start_folder
from db.models import APPLICATION_ID, SCHEMA_VERSION, Base, SchemaInfo

SQLITE_BUSY_TIMEOUT_MS = 30_000

log = logging.getLogger(__name__)


class DatabaseError(RuntimeError):
    """A database that cannot be used, with a message fit to show a user."""


class DatabasePathError(DatabaseError):
    """The database path itself cannot be used (a directory, or its folder cannot be created)."""


class EmptyDatabaseError(DatabaseError):
    """The database has no tables yet (a fresh install), where a reader asked not to create them."""


class MissingDatabaseError(DatabasePathError):
    """A reader (``create=False``) named an SQLite file that does not exist: nothing is created."""


def resolve_database_url(url: str | None = None) -> str:
    """Explicit URL, else ``$AUTOTUNER_DB``, else the default SQLite file. A bare path is SQLite."""
    chosen = chosen_database_url(url)
    try:
        make_url(chosen)
    except ArgumentError as exc:
        raise DatabaseError(
            f"not a database URL: {chosen!r} (expected a path, sqlite:///PATH or "
            f"postgresql+psycopg://USER:PASS@HOST/DB): {exc}"
        ) from None
    return chosen


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001 - DB-API types vary
    # pysqlite's own transaction handling commits at a SAVEPOINT's release outside an explicit BEGIN;
    # take it over (SQLAlchemy's pysqlite recipe) so nested transactions roll back with their parent.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin(connection) -> None:  # noqa: ANN001
    """Every SQLite transaction starts here (the driver's implicit BEGIN is off). A writer that must
    hold the lock from the start asks with ``connection.execution_options(sqlite_begin="IMMEDIATE")``
    (never by executing its own BEGIN, which would nest)."""
    mode = connection.get_execution_options().get("sqlite_begin", "")
    connection.exec_driver_sql(f"BEGIN {mode}".strip())


def make_engine(url: str | None = None, *, create: bool = True, check: bool = True) -> Engine:
    """An engine for ``url`` (resolved as above), schema created if ``create`` and checked (an older
    SQLite schema upgraded, see ``check_schema``). ``check=False`` skips all of that (for
    ``autotuner db upgrade``, which must open a database at any version)."""
    resolved = resolve_database_url(url)
    parsed = make_url(resolved)
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite and parsed.database and parsed.database != ":memory:":
        # ``sqlite:///file:/path?mode=ro&uri=true``: SQLite's URI form names the same file
        uri = parsed.query.get("uri") == "true" and parsed.database.startswith("file:")
        path = Path(parsed.database.removeprefix("file:") if uri else parsed.database)
        if not create and not path.exists():  # connecting would create the file
            raise MissingDatabaseError(f"no database at {path}; check --db or ${ENV_VAR} "
                                       f"(a command that only reads creates none)")
        if not create and check and path.is_file() and path.stat().st_size == 0:  # connecting would write a header
            raise EmptyDatabaseError(f"database {path} is empty; run `autotuner sweep` to fill it")
        if path.exists() and path.is_dir():
            raise DatabasePathError(f"database path {path} is a directory, expected an SQLite file")
        if path.exists() and path.stat().st_size > 0:
            with open(path, "rb") as handle:
                if handle.read(16) != b"SQLite format 3\x00":
                    raise DatabaseError(
                        f"{path} is not an SQLite database (damaged, or another kind of file); "
                        f"point --db or ${ENV_VAR} at a tuning database or a new path"
                    )
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabasePathError(
                f"cannot use database path {path}: its folder {path.parent} cannot be created ({exc.strerror}); "
                f"point --db or ${ENV_VAR} at a writable location"
            ) from None
    try:
        engine = create_engine(resolved, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000} if is_sqlite else {})
    except (ArgumentError, ImportError) as exc:  # unknown dialect, or its driver is not installed
        raise DatabaseError(
            f"cannot use database URL {parsed.render_as_string(hide_password=True)}: {exc}; accepted: an SQLite "
            f"path or sqlite:///PATH, or postgresql+psycopg://... with the 'postgres' extra installed"
        ) from None
    if is_sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
    if not check:
        return engine
    try:
        check_schema(engine, create=create)
    except (OperationalError, SADatabaseError, ValueError) as exc:
        engine.dispose()
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())  # a driver's message may span lines
        raise DatabaseError(f"cannot open database {parsed.render_as_string(hide_password=True)}: {reason}") from None
    except DatabaseError:
        engine.dispose()
        raise
    if create:
        complete_folder(engine)
    return engine


def reader_engine(url: str | None = None) -> Engine | None:
    """An engine for a command that only reads: never creates a file, folder or table. None where the
    database is empty, or is the default one (no ``url``, no ``$AUTOTUNER_DB``) and does not exist yet
    (a fresh install reads as empty); a database named explicitly that does not exist raises
    :class:`MissingDatabaseError` (a typo must not read as "nothing measured")."""
    try:
        return make_engine(url, create=False)
    except EmptyDatabaseError:
        return None
    except MissingDatabaseError:
        if is_default_database(url):
            return None
        raise


def check_schema(engine: Engine, *, create: bool) -> None:
    """Create our tables in an empty database (stamped at the Alembic head); refuse a foreign one.
    An older schema is upgraded where ``create`` and the database is an SQLite file (after a backup
    copy beside it), else refused with the command that upgrades it; a newer one is refused."""
    tables = set(inspect(engine).get_table_names())
    where = engine.url.render_as_string(hide_password=True)
    if not tables:
        if not create:
            raise EmptyDatabaseError(f"database {where} is empty; run `autotuner sweep` to fill it")
        try:
            Base.metadata.create_all(engine)
            with Session(engine) as session, session.begin():
                session.add_all([
                    SchemaInfo(key="application", value=APPLICATION_ID),
                    SchemaInfo(key="schema_version", value=str(SCHEMA_VERSION)),
                ])
            from db.migrate import stamp_head

            stamp_head(engine)
            start_folder(engine)
            return
        except (OperationalError, SADatabaseError):
            # Another process created the schema between our look and our create (two sweeps started
            # together on a new file): check what it made instead of failing.
            tables = set(inspect(engine).get_table_names())
            if SchemaInfo.__tablename__ not in tables:
                raise
    if SchemaInfo.__tablename__ not in tables:
        raise DatabaseError(
            f"database {where} holds tables {sorted(tables)[:5]} but is not a softmax-autotuner "
            f"database (no schema_info table); use another path"
        )
    info: dict[str, str] = {}
    for _attempt in range(50):  # a concurrent creator may not have written its rows yet
        with Session(engine) as session:
            info = dict(session.execute(select(SchemaInfo.key, SchemaInfo.value)).all())
        if info:
            break
        time.sleep(0.1)
    if info.get("application") != APPLICATION_ID:
        raise DatabaseError(f"database {where} belongs to {info.get('application')!r}, not {APPLICATION_ID}")
    if info.get("schema_version") != str(SCHEMA_VERSION):
        _older_schema(engine, str(info.get("schema_version")), create=create)
    missing = set(Base.metadata.tables) - tables
    if missing:
        Base.metadata.create_all(engine, tables=[Base.metadata.tables[t] for t in sorted(missing)])


def _older_schema(engine: Engine, version: str, *, create: bool) -> None:
    """Upgrade an older SQLite file opened by a writer (backup first); refuse anything else."""
    where = engine.url.render_as_string(hide_password=True)
    if not version.isdigit() or int(version) > SCHEMA_VERSION:
        raise DatabaseError(f"database {where} has schema version {version}, newer than this program's "
                            f"{SCHEMA_VERSION}: upgrade softmax-autotuner to use it")
    database = engine.url.database
    if create and engine.url.get_backend_name() == "sqlite" and database and database != ":memory:":
        from db.migrate import backup_sqlite, upgrade

        backup = backup_sqlite(Path(database), version)
        upgrade(engine)
        log.warning("upgraded %s from schema version %s to %s; the old file is kept as %s", where, version,
                    SCHEMA_VERSION, backup)
        return
    raise DatabaseError(
        f"database {where} has schema version {version}, this program reads version {SCHEMA_VERSION}; "
        f"upgrade it (back it up first) with: autotuner db upgrade --db '{where}'"
    )


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    """A session whose work commits on success and rolls back on error (for callers, not helpers)."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        yield session
