"""Schema upgrades of the tuning database, with Alembic (revisions in ``db/migrations/versions``).

Revision ids are the schema version zero-padded ("0002" is ``schema_info.schema_version`` 2), and
each revision sets ``schema_version``; so a database made before Alembic (no ``alembic_version``
table) is at the revision its ``schema_version`` names, and is stamped so before upgrading.

Who upgrades: ``autotuner db upgrade`` always; a writer opening an SQLite file of an older version
(``make_engine(create=True)``: sweep, serve, import) upgrades it itself after copying the file to
``<file>.schema-v<N>.bak``; anything else (a reader, a PostgreSQL server, which an administrator
should back up first) is refused with a message naming the command.
"""
from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, f"no Alembic revisions under {MIGRATIONS}"
    return head


def known_revisions() -> frozenset[str]:
    """Every revision id under ``db/migrations/versions``."""
    return frozenset(script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions())


def revision_of_version(schema_version: str | int) -> str:
    return f"{int(schema_version):04d}"


def current_revision(connection: Connection) -> str | None:
    """The database's revision: Alembic's record, else the one its ``schema_version`` names."""
    recorded = MigrationContext.configure(connection).get_current_revision()
    if recorded is not None:
        return recorded
    if "schema_info" not in inspect(connection).get_table_names():
        return None
    version = connection.execute(text("SELECT value FROM schema_info WHERE key = 'schema_version'")).scalar()
    return revision_of_version(version) if version is not None and str(version).isdigit() else None


def stamp_head(engine: Engine) -> None:
    """Record a database whose tables were just created whole as being at the head revision."""
    with engine.begin() as connection:
        command.stamp(alembic_config(connection), "head")


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Upgrade to the head revision in one transaction (SQLite: holding the write lock from its start,
    so two processes upgrading at once run it once). Returns (revision before, revision after)."""
    writer = engine.execution_options(sqlite_begin="IMMEDIATE")
    with writer.begin() as connection:
        before = current_revision(connection)
        if before is None:
            raise ValueError(f"{engine.url.render_as_string(hide_password=True)} is not a tuning database "
                             f"(no schema_info table); nothing to upgrade")
        config = alembic_config(connection)
        if MigrationContext.configure(connection).get_current_revision() is None:
            command.stamp(config, before)  # made before Alembic: record where it is first
        command.upgrade(config, "head")
        after = current_revision(connection)
    log.info("database %s upgraded from revision %s to %s", engine.url.render_as_string(hide_password=True),
             before, after)
    return before, after or before


def backup_sqlite(path: Path, schema_version: str) -> Path:
    """A consistent copy of a live SQLite file (WAL included, through SQLite's backup API) beside it."""
    target = path.with_name(f"{path.name}.schema-v{schema_version}.bak")
    counter = 1
    while target.exists():
        target = path.with_name(f"{path.name}.schema-v{schema_version}.{counter}.bak")
        counter += 1
    source, copy = sqlite3.connect(path), sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()
    return target
