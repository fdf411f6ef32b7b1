"""Alembic's environment for the tuning database. ``db.migrate`` runs it with a live connection in
``config.attributes["connection"]``; the ``alembic`` command line (``-x url=...``) works too."""
from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from db.models import Base

config = context.config
target_metadata = Base.metadata


def run_with(connection) -> None:  # noqa: ANN001 - a SQLAlchemy Connection
    # render_as_batch: SQLite alters most tables only by copying them, which Alembic's batch mode does
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run_with(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    engine = create_engine(url)
    with engine.connect() as own:
        run_with(own)
    engine.dispose()
