"""A write that meets a locked SQLite database waits and retries instead of failing the sweep."""
from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import event, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from db import GpuModel, make_engine, queries
from db.retry import backoff_delays, in_transaction, is_transient, retrying


def short_busy_timeout(engine, ms: int = 100):
    """The same engine, its connections waiting only ``ms`` for a lock (the default waits 30 s)."""
    engine.dispose()

    @event.listens_for(engine, "connect")
    def _short(dbapi_connection, _record):  # noqa: ANN001
        dbapi_connection.execute(f"PRAGMA busy_timeout={ms}")

    return engine


def test_a_write_blocked_past_the_busy_timeout_is_retried_until_it_succeeds(tmp_path):
    path = tmp_path / "t.sqlite"
    engine = short_busy_timeout(make_engine(str(path)))
    holder = make_engine(str(path))
    locked, release = threading.Event(), threading.Event()

    def hold_the_write_lock() -> None:
        with holder.connect().execution_options(sqlite_begin="IMMEDIATE") as connection, connection.begin():
            locked.set()
            release.wait(10)

    thread = threading.Thread(target=hold_the_write_lock)
    thread.start()
    locked.wait(10)
    threading.Timer(0.6, release.set).start()
    attempts = []

    def write(session: Session) -> None:
        attempts.append(time.monotonic())
        queries.get_or_create_gpu(session, "h100", "NVIDIA H100")

    in_transaction(engine, write)
    thread.join()
    assert len(attempts) >= 2, "the first attempt should have met the lock"
    with Session(engine) as session:
        assert session.scalars(select(GpuModel.key)).all() == ["h100"]


def test_the_lock_error_itself_is_recognised(tmp_path):
    path = tmp_path / "t.sqlite"
    engine = short_busy_timeout(make_engine(str(path)), ms=10)
    holder = make_engine(str(path))
    with holder.connect().execution_options(sqlite_begin="IMMEDIATE") as connection, connection.begin():
        with pytest.raises(OperationalError) as caught:
            with Session(engine) as session, session.begin():
                queries.get_or_create_gpu(session, "h100", "NVIDIA H100")
    assert is_transient(caught.value)


def test_a_write_on_a_stale_read_snapshot_is_retried(tmp_path):
    """The usual clash of two sweepers: this transaction read, another committed a write, and this one
    then writes. SQLite refuses at once ("database is locked", no busy wait); the rerun succeeds."""
    path = tmp_path / "t.sqlite"
    engine, other = make_engine(str(path)), make_engine(str(path))
    attempts = []

    def read_then_write(session: Session) -> None:
        attempts.append(1)
        session.scalars(select(GpuModel)).all()  # the transaction's snapshot is taken here
        if len(attempts) == 1:
            with Session(other) as meanwhile, meanwhile.begin():
                queries.get_or_create_gpu(meanwhile, "a100", "NVIDIA A100")
        queries.get_or_create_gpu(session, "h100", "NVIDIA H100")

    in_transaction(engine, read_then_write)
    assert len(attempts) == 2
    with Session(engine) as session:
        assert sorted(session.scalars(select(GpuModel.key))) == ["a100", "h100"]


def test_other_errors_are_not_retried():
    calls = []

    def clash() -> None:
        calls.append(1)
        raise IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed"))

    with pytest.raises(IntegrityError):
        retrying(clash, sleep=lambda _s: None)
    assert len(calls) == 1


def test_retries_give_up_after_the_last_attempt():
    calls = []

    def always_locked() -> None:
        calls.append(1)
        raise OperationalError("UPDATE", {}, Exception("database is locked"))

    with pytest.raises(OperationalError):
        retrying(always_locked, attempts=4, sleep=lambda _s: None)
    assert len(calls) == 4


def test_backoff_doubles_with_jitter_up_to_a_cap():
    delays = backoff_delays(8, first_s=0.1, cap_s=1.0)
    assert len(delays) == 7
    assert all(0.05 <= d <= 0.1 for d in delays[:1]) and all(0.5 <= d <= 1.0 for d in delays[4:])
