"""``autotuner db upgrade`` / ``autotuner db current``: the tuning database's schema revision."""
from __future__ import annotations

import typer

from autotuner.cli.app import DbOption, app, command, out

db_app = typer.Typer(help="The tuning database's schema: show its revision, upgrade it.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@command("current", on=db_app)
def current_command(db: DbOption = None) -> None:
    """Print the database's schema revision and the newest this program knows."""
    from db.engine import make_engine
    from db.migrate import current_revision, head_revision

    engine = make_engine(db, create=False, check=False)
    try:
        with engine.connect() as connection:
            revision = current_revision(connection)
    finally:
        engine.dispose()
    out.print(f"revision {revision or 'none (not a tuning database)'}; newest known {head_revision()}")


@command("upgrade", on=db_app)
def upgrade_command(db: DbOption = None) -> None:
    """Upgrade the database's schema to this program's (Alembic revisions; one transaction). An SQLite
    file is first copied beside itself as <file>.schema-v<N>.bak; back a PostgreSQL database up first."""
    from pathlib import Path

    from db.engine import DatabaseError, make_engine, missing_sqlite_file, resolve_database_url
    from db.migrate import backup_sqlite, current_revision, head_revision, known_revisions, upgrade

    url = resolve_database_url(db)
    if missing_sqlite_file(url):
        raise DatabaseError(f"no database at {url.removeprefix('sqlite:///')}; nothing to upgrade")
    engine = make_engine(url, create=False, check=False)
    try:
        with engine.connect() as connection:
            before = current_revision(connection)
        if before == head_revision():
            out.print(f"already at revision {before}; nothing to do")
            return
        if before is None:
            raise DatabaseError(f"{engine.url.render_as_string(hide_password=True)} is not a tuning database")
        if before not in known_revisions():  # checked before the backup: each try would leave one
            raise DatabaseError(f"{engine.url.render_as_string(hide_password=True)} is at schema revision {before}, which "
                                f"this program does not know (newest known {head_revision()}): it was made by a newer "
                                f"softmax-autotuner; upgrade the program, not the database")
        if engine.url.get_backend_name() == "sqlite":
            out.print(f"backup: {backup_sqlite(Path(engine.url.database), str(int(before)))}")
        before, after = upgrade(engine)
    finally:
        engine.dispose()
    out.print(f"upgraded from revision {before} to {after}")
