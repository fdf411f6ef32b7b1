"""An index on measurements (dtype, m, n): ``/measurements?m=&n=&dtype=`` and the fit's per-shape
reads no longer scan every row of a large database. Schema version 2.

Revision ID: 0002
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

schema_info = sa.table("schema_info", sa.column("key", sa.String), sa.column("value", sa.String))


def upgrade() -> None:
    op.create_index("ix_measurements_shape", "measurements", ["dtype", "m", "n"])
    op.execute(schema_info.update().where(schema_info.c.key == "schema_version").values(value="2"))


def downgrade() -> None:
    op.drop_index("ix_measurements_shape", table_name="measurements")
    op.execute(schema_info.update().where(schema_info.c.key == "schema_version").values(value="1"))
