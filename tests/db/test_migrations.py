"""Schema upgrades: the committed schema-1 database (tests/data/tuning_schema_v1.sqlite: the first
1,500 measurements of each run of h200_heldout.json.gz imported by schema-1 code) reaches the head
revision with every row kept, on SQLite and on PostgreSQL."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect, text
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.records.exchange import export_runs, import_runs
from db.engine import DatabaseError, make_engine, transaction
from db.migrate import alembic_config, current_revision, head_revision, upgrade
from db.models import SCHEMA_VERSION, Base

OLD_DATABASE = Path(__file__).resolve().parents[1] / "data" / "tuning_schema_v1.sqlite"
DATA_TABLES = [name for name in Base.metadata.tables if name != "schema_info"]


def row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {name: connection.execute(text(f"SELECT count(*) FROM {name}")).scalar() for name in DATA_TABLES}


def schema_version(engine: Engine) -> str:
    with engine.connect() as connection:
        return connection.execute(text("SELECT value FROM schema_info WHERE key = 'schema_version'")).scalar()


@pytest.fixture
def old_copy(tmp_path) -> Path:
    path = tmp_path / "tuning.sqlite"
    shutil.copyfile(OLD_DATABASE, path)
    return path


def test_the_committed_database_is_small_old_and_real():
    assert OLD_DATABASE.stat().st_size < 1 << 20
    raw = create_engine(f"sqlite:///{OLD_DATABASE}")
    try:
        assert schema_version(raw) == "1" and "alembic_version" not in inspect(raw).get_table_names()
        counts = row_counts(raw)
    finally:
        raw.dispose()
    assert counts["measurements"] == 2432 and counts["candidates"] == 167 and counts["sweep_runs"] == 4


def test_a_writer_upgrades_an_old_sqlite_file_after_a_backup(old_copy):
    raw = create_engine(f"sqlite:///{old_copy}")
    before = row_counts(raw)
    raw.dispose()
    engine = make_engine(str(old_copy), create=True)
    try:
        assert row_counts(engine) == before  # 0 rows lost
        assert schema_version(engine) == str(SCHEMA_VERSION)
        with engine.connect() as connection:
            assert current_revision(connection) == head_revision()
        assert "ix_measurements_shape" in {ix["name"] for ix in inspect(engine).get_indexes("measurements")}
    finally:
        engine.dispose()
    backup = old_copy.with_name(old_copy.name + ".schema-v1.bak")
    kept = create_engine(f"sqlite:///{backup}")
    assert schema_version(kept) == "1" and row_counts(kept) == before
    kept.dispose()


def test_a_reader_is_told_the_one_command_that_upgrades(old_copy):
    with pytest.raises(DatabaseError, match="schema version 1.*autotuner db upgrade --db"):
        make_engine(str(old_copy), create=False)
    assert not list(old_copy.parent.glob("*.bak"))  # a reader changes nothing


def test_db_upgrade_command(old_copy):
    runner = CliRunner()
    result = runner.invoke(app, ["db", "upgrade", "--db", str(old_copy)])
    assert result.exit_code == 0, result.output
    assert "upgraded from revision 0001 to 0002" in result.output
    assert old_copy.with_name(old_copy.name + ".schema-v1.bak").exists()
    again = runner.invoke(app, ["db", "upgrade", "--db", str(old_copy)])
    assert again.exit_code == 0 and "already at revision 0002" in again.output
    missing = runner.invoke(app, ["db", "upgrade", "--db", str(old_copy.with_name("absent.sqlite"))])
    assert missing.exit_code == 1 and "no database at" in missing.output


def test_a_new_database_is_stamped_at_the_head(tmp_path):
    engine = make_engine(str(tmp_path / "new.sqlite"))
    with engine.connect() as connection:
        assert current_revision(connection) == head_revision() == f"{SCHEMA_VERSION:04d}"
    engine.dispose()


def test_postgres_database_downgraded_filled_and_upgraded(postgres_url):
    from alembic import command

    engine = make_engine(postgres_url)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0001")  # the schema-1 layout and version
    old = create_engine(f"sqlite:///{OLD_DATABASE}")
    from sqlalchemy.orm import Session

    with Session(old) as session:
        document = export_runs(session)
    old.dispose()
    with transaction(engine) as session:
        import_runs(session, document)
    before = row_counts(engine)
    assert schema_version(engine) == "1" and before["measurements"] == 2432
    engine.dispose()
    with pytest.raises(DatabaseError, match="autotuner db upgrade --db"):
        make_engine(postgres_url, create=True)  # a server database is never upgraded behind its admin's back
    engine = make_engine(postgres_url, check=False)
    try:
        assert upgrade(engine) == ("0001", head_revision())
        assert row_counts(engine) == before and schema_version(engine) == str(SCHEMA_VERSION)
    finally:
        engine.dispose()
