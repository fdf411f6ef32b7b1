"""Transactions that survive a concurrent writer: retried with jittered exponential backoff.

SQLite has one writer at a time. ``busy_timeout`` (``db/engine.py``) makes a writer wait for the lock,
but a transaction that read first and then writes after another connection committed cannot wait: its
snapshot is stale (WAL ``SQLITE_BUSY_SNAPSHOT``) and SQLite answers "database is locked" at once. Two
sweep processes on one file meet this routinely, so every write a sweep makes goes through
:func:`in_transaction`, which reruns the whole unit of work on such an error. PostgreSQL's equivalents
(serialization failure, deadlock detected) are retried the same way.

A unit of work passed here must be safe to run again from the start: it runs in a fresh session each
time, and its effects are only visible once it returns.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Callable, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

T = TypeVar("T")

SQLITE_TRANSIENT = ("database is locked", "database is busy", "database table is locked")
POSTGRES_TRANSIENT = {"40001", "40P01"}  # serialization_failure, deadlock_detected
ATTEMPTS = 12
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 5.0


def is_transient(error: BaseException) -> bool:
    """A lock or serialization conflict that the same work, run again, can get past."""
    if not isinstance(error, DBAPIError):
        return False
    original = error.orig
    if getattr(original, "sqlstate", None) in POSTGRES_TRANSIENT:
        return True
    text = str(original).lower()
    return any(marker in text for marker in SQLITE_TRANSIENT)


def backoff_delays(attempts: int = ATTEMPTS, first_s: float = FIRST_BACKOFF_S, cap_s: float = MAX_BACKOFF_S,
                   rng: random.Random | None = None) -> list[float]:
    """Waits between attempts: doubling from ``first_s`` up to ``cap_s``, each jittered to 50-100 %
    so two sweepers that collided do not collide again in step."""
    rng = rng or random.Random()
    return [min(cap_s, first_s * 2**i) * (0.5 + 0.5 * rng.random()) for i in range(attempts - 1)]


def retrying(work: Callable[[], T], *, what: str = "database write", attempts: int = ATTEMPTS,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``work()``, rerun after a transient database error; the last error propagates."""
    delays = backoff_delays(attempts)
    for attempt in range(attempts):
        try:
            return work()
        except DBAPIError as exc:
            if not is_transient(exc) or attempt == attempts - 1:
                raise
            delay = delays[attempt]
            log.info("%s hit a busy database (%s); retry %d/%d in %.2f s", what, exc.orig, attempt + 1,
                     attempts - 1, delay)
            sleep(delay)
    raise AssertionError("unreachable")


def in_transaction(engine: Engine, work: Callable[[Session], T], *, what: str = "database write",
                   attempts: int = ATTEMPTS) -> T:
    """Run ``work(session)`` in its own transaction, committed on return, retried as a whole on a
    transient conflict. ORM objects it returns stay usable (``expire_on_commit=False``)."""

    def once() -> T:
        with Session(engine, expire_on_commit=False) as session, session.begin():
            return work(session)

    return retrying(once, what=what, attempts=attempts)
