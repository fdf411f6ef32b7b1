"""The shared sweep work list (``db.models.WorkListEntry``): filling it, claiming, renewing, finishing.

Protocol. A sweeper puts the shapes it still has to measure on the list (``add_entries``), then
repeatedly claims the first free entry in position order (``claim_next``), measures that shape's items,
renews its lease after each item (``renew``) and marks the entry done (``finish``) or, when it stops
early, gives it back (``release``). An entry is free when pending, or claimed with an expired lease (its
holder died or hung on another host), or claimed by a process of this host that no longer exists
(``release_dead_local_claims``: a ``kill -9`` rerun need not wait out the lease).

Claims run in a ``claiming`` session: on PostgreSQL the candidate row is locked with
``SELECT ... FOR UPDATE SKIP LOCKED``, so concurrent claimers each get a different row without waiting;
on SQLite the transaction takes the database write lock before it reads (the equivalent of ``BEGIN
IMMEDIATE``), so claimers are serialised and none can read an entry another is about to take.

Lease times come from the database server on PostgreSQL (hosts' clocks may disagree) and from this
host on SQLite (a SQLite file is shared by processes of one host only).
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Iterable, Iterator, Sequence

from sqlalchemy import Engine, and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import SweepProcess, SweepRun, WorkListEntry, utcnow

log = logging.getLogger(__name__)

Shape = tuple[int, int, str]


@dataclass(frozen=True)
class Claimer:
    """Who holds a claim: a host, a process on it, the sweep run, and the slot (GPU thread) within it."""

    host: str
    pid: int
    run_id: int | None = None
    slot: int = 0

    @property
    def tag(self) -> str:
        return f"{self.host}:{self.pid}:{self.run_id}:{self.slot}"


@contextmanager
def claiming(engine: Engine) -> Iterator[Session]:
    """A session whose transaction is fit for claiming (see the module docstring); commits on a normal
    exit, rolls back on an exception. On SQLite the transaction begins ``IMMEDIATE`` (through the
    engine's begin hook, ``db/engine.py``), taking the write lock before anything is read; it waits up
    to the busy timeout and then fails with "database is locked" (retry with ``db.retry``)."""
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            connection.execution_options(sqlite_begin="IMMEDIATE")
        with connection.begin():
            # Bound to a connection already in a transaction, the session joins it (it neither commits
            # nor rolls it back); connection.begin() above does both.
            with Session(bind=connection, expire_on_commit=False) as session:
                yield session
                session.flush()


def database_now(session: Session) -> datetime:
    if session.get_bind().dialect.name == "postgresql":
        return session.scalar(select(func.now()))
    return utcnow()


def _insert_ignoring_duplicates(session: Session, rows: list[dict]) -> None:
    """Insert entries; one another sweeper inserted meanwhile is left as it is (not an error)."""
    dialect = session.get_bind().dialect.name
    if dialect in ("postgresql", "sqlite"):
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        session.execute(insert(WorkListEntry).on_conflict_do_nothing(), rows)
        return
    for row in rows:
        try:
            with session.begin_nested():
                session.add(WorkListEntry(**row))
        except IntegrityError:
            pass


def add_entries(session: Session, list_key: str, shapes: Sequence[Shape]) -> None:
    """Put ``shapes`` on the list in this order. Entries already there keep their claims; a "done" one
    is reopened, because the caller found work left on it (a copy reference that failed, say)."""
    existing = {(e.m, e.n, e.dtype): e for e in session.scalars(
        select(WorkListEntry).where(WorkListEntry.list_key == list_key))}
    rows = []
    for position, (m, n, dtype) in enumerate(shapes):
        entry = existing.get((m, n, dtype))
        if entry is None:
            rows.append({"list_key": list_key, "position": position, "m": m, "n": n, "dtype": dtype,
                         "status": "pending", "attempts": 0})
        elif entry.status == "done":
            entry.status, entry.done_at = "pending", None
    if rows:
        _insert_ignoring_duplicates(session, rows)
    session.flush()


def release_dead_local_claims(session: Session, host: str, alive: Callable[[int], bool]) -> list[int]:
    """Reopen every entry (of any list) claimed by a process of ``host`` that ``alive`` says is gone;
    returns the ids of the sweep runs those processes were running (they ended without a word)."""
    statement = (select(WorkListEntry)
                 .where(WorkListEntry.status == "claimed", WorkListEntry.claim_host == host)
                 .with_for_update(skip_locked=True))
    runs: set[int] = set()
    for entry in session.scalars(statement):
        if entry.claim_pid is not None and not alive(entry.claim_pid):
            log.info("reopening %dx%d %s: its claimer %s is no longer running", entry.m, entry.n, entry.dtype,
                     entry.claimed_by)
            if entry.claim_run_id is not None:
                runs.add(entry.claim_run_id)
            _reopen(entry)
    session.flush()
    return sorted(runs)


def register_process(session: Session, run_id: int, host: str, pid: int) -> None:
    """Note which process runs ``run_id`` (see ``dead_local_runs``); the latest one if noted twice."""
    row = session.get(SweepProcess, run_id)
    if row is None:
        session.add(SweepProcess(run_id=run_id, host=host, pid=pid))
    else:
        row.host, row.pid = host, pid
    session.flush()


def dead_local_runs(session: Session, host: str, alive: Callable[[int], bool]) -> list[int]:
    """Runs of ``host`` still marked "running" whose process ``alive`` says is gone (killed)."""
    statement = (select(SweepProcess.run_id, SweepProcess.pid)
                 .join(SweepRun, SweepRun.id == SweepProcess.run_id)
                 .where(SweepProcess.host == host, SweepRun.status == "running"))
    return sorted(run_id for run_id, pid in session.execute(statement) if not alive(pid))


def claim_next(session: Session, list_key: str, claimer: Claimer, lease_s: float,
               skip_ids: Iterable[int] = ()) -> WorkListEntry | None:
    """Claim the first free entry of the list (position order), or None when none is free. Entries
    in ``skip_ids`` (shapes this claimer has no plan for) are passed over."""
    now = database_now(session)
    free = or_(WorkListEntry.status == "pending",
               and_(WorkListEntry.status == "claimed", WorkListEntry.lease_expires_at < now))
    statement = (select(WorkListEntry)
                 .where(WorkListEntry.list_key == list_key, free)
                 .order_by(WorkListEntry.position, WorkListEntry.id)
                 .limit(1)
                 .with_for_update(skip_locked=True))
    skip = list(skip_ids)
    if skip:
        statement = statement.where(WorkListEntry.id.not_in(skip))
    entry = session.scalars(statement).first()
    if entry is None:
        return None
    if entry.status == "claimed":
        log.warning("taking over %dx%d %s from %s, whose lease expired", entry.m, entry.n, entry.dtype,
                    entry.claimed_by)
    entry.status = "claimed"
    entry.claimed_by, entry.claim_host, entry.claim_pid = claimer.tag, claimer.host, claimer.pid
    entry.claim_run_id = claimer.run_id
    entry.claimed_at, entry.lease_expires_at = now, now + timedelta(seconds=lease_s)
    entry.attempts = (entry.attempts or 0) + 1
    session.flush()
    return entry


def _held(entry_id: int, claimer: Claimer):  # noqa: ANN202 - a SQL condition
    return and_(WorkListEntry.id == entry_id, WorkListEntry.status == "claimed",
                WorkListEntry.claimed_by == claimer.tag)


def renew(session: Session, entry_id: int, claimer: Claimer, lease_s: float) -> bool:
    """Extend the lease; False if the claim was lost (it expired and another sweeper took it)."""
    expires = database_now(session) + timedelta(seconds=lease_s)
    result = session.execute(update(WorkListEntry).where(_held(entry_id, claimer)).values(lease_expires_at=expires))
    return result.rowcount == 1


def finish(session: Session, entry_id: int, claimer: Claimer) -> bool:
    """Mark the entry done (the claimer stays named as who did it); False if the claim was lost."""
    result = session.execute(update(WorkListEntry).where(_held(entry_id, claimer))
                             .values(status="done", done_at=database_now(session), lease_expires_at=None))
    return result.rowcount == 1


def release(session: Session, entry_id: int, claimer: Claimer) -> None:
    """Give the entry back untouched, for anyone to claim at once (a sweep that stops early)."""
    entry = session.scalars(select(WorkListEntry).where(_held(entry_id, claimer))).first()
    if entry is not None:
        _reopen(entry)
        session.flush()


def _reopen(entry: WorkListEntry) -> None:
    entry.status = "pending"
    entry.claimed_by = entry.claim_host = entry.claim_pid = entry.claim_run_id = None
    entry.claimed_at = entry.lease_expires_at = None


def entry_counts(session: Session, list_key: str | None = None) -> dict[str, int]:
    """Entries by status, of one list or of all."""
    statement = select(WorkListEntry.status, func.count()).group_by(WorkListEntry.status)
    if list_key is not None:
        statement = statement.where(WorkListEntry.list_key == list_key)
    return {status: int(count) for status, count in session.execute(statement)}


def claimed_entries(session: Session) -> list[WorkListEntry]:
    """Entries claimed now, oldest claim first (for ``autotuner status``)."""
    statement = select(WorkListEntry).where(WorkListEntry.status == "claimed").order_by(WorkListEntry.claimed_at)
    return list(session.scalars(statement))
