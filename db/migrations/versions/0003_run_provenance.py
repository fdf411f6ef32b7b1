"""Run provenance: who uploaded each sweep run (``sweep_runs.uploader``), and the run's identity
(``sweep_runs.identity``, ``db.models.run_identity``) under a unique index, so one run is stored once
however many servers receive it at once. Schema version 3.

Every existing run is kept. Runs stored before this revision have no uploader recorded (NULL, as a run
of this database's own host). Should two runs share an identity already (the same upload raced into two
servers of one PostgreSQL database before this index existed), the first keeps it and each later one gets
an identity of its own derived from it and its id; both stay, and a warning names them.

Revision ID: 0003
Revises: 0002
"""
from __future__ import annotations

import hashlib
import logging

import sqlalchemy as sa
from alembic import op

from db.models import run_identity

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

log = logging.getLogger("alembic.runtime.migration")

schema_info = sa.table("schema_info", sa.column("key", sa.String), sa.column("value", sa.String))
runs = sa.table("sweep_runs", sa.column("id", sa.Integer), sa.column("gpu_model_id", sa.Integer),
                sa.column("environment_id", sa.Integer), sa.column("timing_method", sa.String),
                sa.column("started_at", sa.DateTime(timezone=True)), sa.column("host", sa.String),
                sa.column("identity", sa.String))
gpus = sa.table("gpu_models", sa.column("id", sa.Integer), sa.column("key", sa.String))
environments = sa.table("environments", sa.column("id", sa.Integer), sa.column("fingerprint", sa.String))


def upgrade() -> None:
    op.add_column("sweep_runs", sa.Column("uploader", sa.String(128), nullable=True))
    # NOT NULL from the start (SQLite adds such a column only with a default; it cannot alter one later
    # without copying the table, which foreign keys forbid here); every row gets its value below.
    op.add_column("sweep_runs", sa.Column("identity", sa.String(64), nullable=False, server_default=""))
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(runs.c.id, gpus.c.key, environments.c.fingerprint, runs.c.timing_method, runs.c.started_at,
                  runs.c.host)
        .select_from(runs.join(gpus, gpus.c.id == runs.c.gpu_model_id)
                     .join(environments, environments.c.id == runs.c.environment_id))
        .order_by(runs.c.id)).all()
    first: dict[str, int] = {}
    for run_id, gpu_key, fingerprint, method, started_at, host in rows:
        identity = run_identity(gpu_key, fingerprint, method, started_at, host)
        if identity in first:
            log.warning("sweep run %d has the identity of run %d (stored twice before schema 3); both are kept",
                        run_id, first[identity])
            identity = hashlib.sha256(f"{identity}:duplicate:{run_id}".encode()).hexdigest()
        else:
            first[identity] = run_id
        connection.execute(runs.update().where(runs.c.id == run_id).values(identity=identity))
    if connection.dialect.name != "sqlite":
        op.alter_column("sweep_runs", "identity", server_default=None)
    op.create_index("uq_sweep_runs_identity", "sweep_runs", ["identity"], unique=True)
    op.execute(schema_info.update().where(schema_info.c.key == "schema_version").values(value="3"))


def downgrade() -> None:
    op.drop_index("uq_sweep_runs_identity", table_name="sweep_runs")
    op.drop_column("sweep_runs", "identity")  # SQLite 3.35+ drops a column in place
    op.drop_column("sweep_runs", "uploader")
    op.execute(schema_info.update().where(schema_info.c.key == "schema_version").values(value="2"))
