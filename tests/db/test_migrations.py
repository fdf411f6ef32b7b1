"""Schema upgrades: the committed schema-1 database (tests/data/tuning_schema_v1.sqlite: the first
1,500 measurements of each run of h200_heldout.json.gz imported by schema-1 code) reaches the head
revision with every row kept, on SQLite and on PostgreSQL."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import Engine, MetaData, create_engine, inspect, text
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
    assert f"upgraded from revision 0001 to {head_revision()}" in result.output
    assert old_copy.with_name(old_copy.name + ".schema-v1.bak").exists()
    again = runner.invoke(app, ["db", "upgrade", "--db", str(old_copy)])
    assert again.exit_code == 0 and f"already at revision {head_revision()}" in again.output
    missing = runner.invoke(app, ["db", "upgrade", "--db", str(old_copy.with_name("absent.sqlite"))])
    assert missing.exit_code == 1 and "no database at" in missing.output


def test_a_new_database_is_stamped_at_the_head(tmp_path):
    engine = make_engine(str(tmp_path / "new.sqlite"))
    with engine.connect() as connection:
        assert current_revision(connection) == head_revision() == f"{SCHEMA_VERSION:04d}"
    engine.dispose()


def copy_rows(source: Engine, target: Engine) -> None:
    """Every data row of ``source`` into the same tables of ``target``, as stored (both reflected, so
    either may be at any revision that has the tables)."""
    read_tables, write_tables = MetaData(), MetaData()
    read_tables.reflect(source)
    write_tables.reflect(target)
    with source.connect() as reading, target.begin() as writing:
        for table in read_tables.sorted_tables:
            rows = [dict(row._mapping) for row in reading.execute(table.select())]
            if table.name in DATA_TABLES and rows:
                writing.execute(write_tables.tables[table.name].insert(), rows)


def duplicate_first_run(engine: Engine) -> None:
    """Store run 1 a second time, rows and all, as the race of two servers did before revision 0003."""
    with engine.begin() as connection:
        top = connection.execute(text("SELECT max(id) FROM sweep_runs")).scalar()
        columns = [c["name"] for c in inspect(connection).get_columns("sweep_runs") if c["name"] != "id"]
        listed = ", ".join(columns)
        connection.execute(text(f"INSERT INTO sweep_runs (id, {listed}) SELECT :id, {listed} FROM sweep_runs "
                                f"WHERE id = 1"), {"id": top + 1})
        columns = [c["name"] for c in inspect(connection).get_columns("measurements") if c["name"] not in ("id", "run_id")]
        listed = ", ".join(columns)
        connection.execute(text(f"INSERT INTO measurements (run_id, {listed}) SELECT :id, {listed} FROM measurements "
                                f"WHERE run_id = 1"), {"id": top + 1})


def check_provenance(engine: Engine, runs: int) -> None:
    """After 0003: every run kept, each with an identity of its own, and no uploader recorded."""
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT identity, uploader FROM sweep_runs")).all()
    assert len(rows) == runs and len({identity for identity, _ in rows}) == runs
    assert all(len(identity) == 64 and uploader is None for identity, uploader in rows)
    assert "uq_sweep_runs_identity" in {ix["name"] for ix in inspect(engine).get_indexes("sweep_runs")}


def test_runs_stored_twice_before_revision_3_are_both_kept(old_copy, caplog):
    raw = create_engine(f"sqlite:///{old_copy}")
    duplicate_first_run(raw)
    before = row_counts(raw)
    raw.dispose()
    engine = make_engine(str(old_copy), create=True)
    try:
        assert row_counts(engine) == before and before["sweep_runs"] == 5
        check_provenance(engine, 5)
    finally:
        engine.dispose()
    assert "sweep run 5 has the identity of run 1" in caplog.text


def test_postgres_database_downgraded_filled_and_upgraded(postgres_url):
    from alembic import command

    engine = make_engine(postgres_url)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0001")  # the schema-1 layout and version
    old = create_engine(f"sqlite:///{OLD_DATABASE}")
    copy_rows(old, engine)
    old.dispose()
    with engine.begin() as connection:  # ids were given: the sequences move past them
        for table in DATA_TABLES:
            if "id" in {c["name"] for c in inspect(connection).get_columns(table)}:
                connection.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                        f"(SELECT coalesce(max(id), 0) + 1 FROM {table}), false)"))
    duplicate_first_run(engine)
    before = row_counts(engine)
    assert schema_version(engine) == "1" and before["measurements"] == 2432 + 1500
    engine.dispose()
    with pytest.raises(DatabaseError, match="autotuner db upgrade --db"):
        make_engine(postgres_url, create=True)  # a server database is never upgraded behind its admin's back
    engine = make_engine(postgres_url, check=False)
    try:
        assert upgrade(engine) == ("0001", head_revision())
        assert row_counts(engine) == before and schema_version(engine) == str(SCHEMA_VERSION)
        check_provenance(engine, 5)
        with transaction(engine) as session:  # the migration's identities are the ones an import computes
            summary = import_runs(session, export_runs(session))
        assert (summary.runs_created, summary.runs_reused, summary.measurements) == (0, 5, 0)
        assert row_counts(engine) == before
    finally:
        engine.dispose()
