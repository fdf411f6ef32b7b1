"""db.integrity: the quick check and write probe, and how driver errors are read."""
from __future__ import annotations

import os
import shutil
import sqlite3

import pytest

from db.engine import make_engine, transaction
from db.integrity import check_integrity, storage_problem
from tests.service.fixture_data import populate


@pytest.fixture(scope="module")
def whole_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("integrity") / "whole.sqlite"
    engine = make_engine(f"sqlite:///{path}")
    with transaction(engine) as session:
        populate(session)
    with engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


def damage(path, size: int = 65536) -> None:
    """``size`` bytes of garbage written over the middle of the file."""
    with open(path, "r+b") as handle:
        handle.seek(max(0, os.path.getsize(path) // 2 - size // 2))
        handle.write(os.urandom(size))


def test_a_whole_writable_database_passes(whole_file, tmp_path):
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(whole_file, copy)
    engine = make_engine(f"sqlite:///{copy}")
    assert check_integrity(engine) is None
    engine.dispose()


def test_garbage_in_the_middle_is_named_as_damage(whole_file, tmp_path):
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(whole_file, copy)
    engine = make_engine(f"sqlite:///{copy}")
    engine.dispose()
    damage(copy)
    problem = check_integrity(engine)
    assert problem is not None and problem.kind == "damaged" and problem.status == 503
    assert "quick_check" in problem.reason and "restore it from a backup" in problem.reason


def test_a_read_only_database_fails_the_write_probe(whole_file):
    engine = make_engine(f"sqlite:///file:{whole_file}?mode=ro&uri=true", create=False)
    problem = check_integrity(engine)
    assert problem is not None and problem.kind == "read_only" and "read-only" in problem.reason
    assert check_integrity(engine, write_probe=False) is None  # reading it is fine
    engine.dispose()


def test_driver_errors_are_read_as_full_read_only_or_damaged(tmp_path):
    connection = sqlite3.connect(tmp_path / "tiny.sqlite")
    connection.execute("CREATE TABLE t (x BLOB)")
    connection.execute("PRAGMA max_page_count = 4")  # SQLite's own "disk full" once the file would grow
    with pytest.raises(sqlite3.OperationalError) as full:
        for _ in range(10):
            connection.execute("INSERT INTO t VALUES (zeroblob(4096))")
    connection.close()
    problem = storage_problem(full.value)
    assert problem is not None and problem.kind == "full" and problem.status == 507
    assert storage_problem(sqlite3.OperationalError("attempt to write a readonly database")).kind == "read_only"
    assert storage_problem(sqlite3.DatabaseError("database disk image is malformed")).kind == "damaged"
    assert storage_problem(sqlite3.OperationalError("database is locked")) is None
