"""Opening databases: default location, WAL, and clear refusals of foreign or damaged files."""
from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text

from db.engine import DatabaseError, default_database_path, make_engine, resolve_database_url


def test_default_url_follows_environment_then_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("AUTOTUNER_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_database_path() == tmp_path / "softmax-autotuner" / "tuning.sqlite"
    assert resolve_database_url() == f"sqlite:///{tmp_path / 'softmax-autotuner' / 'tuning.sqlite'}"
    assert resolve_database_url(str(tmp_path / "x.db")) == f"sqlite:///{tmp_path / 'x.db'}"


def test_sqlite_database_is_created_in_wal_mode(tmp_path):
    engine = make_engine(str(tmp_path / "deep" / "t.sqlite"))
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30000


def test_damaged_file_is_refused_with_its_path(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not a database at all, just text" * 10)
    with pytest.raises(DatabaseError, match="not an SQLite database"):
        make_engine(str(path))


def test_foreign_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(DatabaseError, match="not a softmax-autotuner database"):
        make_engine(str(path))


def test_other_schema_version_is_refused(tmp_path):
    path = tmp_path / "t.sqlite"
    make_engine(str(path)).dispose()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE schema_info SET value='999' WHERE key='schema_version'")
    with pytest.raises(DatabaseError, match="schema version 999"):
        make_engine(str(path))


def test_bad_url_is_refused_with_what_is_accepted():
    with pytest.raises(DatabaseError, match="postgresql"):
        make_engine("notadialect://what")


def test_unreachable_server_is_a_database_error_without_password():
    with pytest.raises(DatabaseError) as caught:
        make_engine("postgresql+psycopg://nobody:secret@127.0.0.1:1/none")
    assert "secret" not in str(caught.value)
