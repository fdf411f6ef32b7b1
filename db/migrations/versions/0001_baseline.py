"""Baseline: the schema of schema_version 1 (tables as ``Base.metadata.create_all`` made them).

Revision ID: 0001
A database made before Alembic (``schema_info.schema_version`` = 1, no ``alembic_version`` table) is
at this revision; ``db.migrate`` records it so and upgrades from here. Nothing to create: such a
database already has these tables, and a new database gets the head schema whole (create_all, then
stamped at head).
"""
from __future__ import annotations

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
