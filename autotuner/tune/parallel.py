"""Sharing one sweep among several GPUs, processes and hosts.

The unit of work is a *shape group*: the copy reference and every candidate of one (M, N, dtype). A
GPU worker takes whole groups, so it allocates the shape's input once and the quick-drop hint (best
time so far on the shape) is known to the worker measuring it.

Groups are handed out through the work list in the database (``db/worklist.py``), also when one
process sweeps on one GPU: the same mechanism then keeps two processes on one SQLite file, or hosts on
one PostgreSQL server, from measuring the same shape twice. Sweepers share a list exactly when they
tune the same GPU model, environment and timing method with the same variants at the same source
(``work_list_key``); their grids may differ (a shape on the list that a sweeper has no plan for is
left to others). Every database write here is retried on a busy database (``db/retry.py``).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Callable, Iterable, Sequence

from sqlalchemy import Engine

from db import queries, worklist
from db.retry import in_transaction, retrying
from kernels.base import hash_text

log = logging.getLogger(__name__)

Shape = tuple[int, int, str]
DEFAULT_LEASE_S = 600.0  # must exceed one item's worst case: its timeout plus a worker restart


def work_list_key(gpu_key: str, environment_fingerprint: str, timing_method: str,
                  variant_sources: Iterable[tuple[str, str]]) -> str:
    """Name of the list that sweepers of the same GPU model, environment, method and kernels share."""
    return hash_text(gpu_key, environment_fingerprint, timing_method,
                     *(f"{name}@{source}" for name, source in sorted(set(variant_sources))))


def open_shared_database(url: str | None, attempts: int = 6) -> Engine:
    """``make_engine`` for a database other sweepers may be creating at this very moment.

    Two sweeps started together on a new SQLite file both find it empty and both create the schema;
    the slower one fails ("table ... already exists", or a half-made schema). When the file was new,
    empty or written in the last few seconds on the first try, the open is retried until the other
    process has finished creating it; an old file is opened once, so a foreign database is still
    refused at once. (The lasting fix belongs in ``db.engine.check_schema``; this keeps sweeps safe.)"""
    from db.engine import DatabaseError, make_engine, resolve_database_url

    resolved = resolve_database_url(url)
    path = resolved.removeprefix("sqlite:///") if resolved.startswith("sqlite:///") else None
    try:
        fresh = path is not None and (os.path.getsize(path) == 0 or time.time() - os.path.getmtime(path) < 10)
    except OSError:  # no file yet
        fresh = path is not None
    for attempt in range(attempts):
        try:
            return make_engine(resolved)
        except DatabaseError as exc:
            if not fresh or attempt == attempts - 1:
                raise
            delay = 0.1 * 2**attempt
            log.info("database %s is being created by another sweeper (%s); retrying in %.1f s", path, exc, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def process_alive(pid: int) -> bool:
    """Whether a process of this host with this pid exists (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class SharedWorkList:
    """One sweep run's view of a work list: fill it, then claim, renew, finish or release groups."""

    def __init__(self, engine: Engine, list_key: str, run_id: int, lease_s: float = DEFAULT_LEASE_S,
                 host: str | None = None):
        self.engine = engine
        self.list_key = list_key
        self.run_id = run_id
        self.lease_s = lease_s
        self.host = host or socket.gethostname()
        self.pid = os.getpid()
        self._held: dict[tuple[int, Shape], int] = {}  # (slot, shape) → entry id
        self._foreign: set[int] = set()  # entries of shapes this run has no plan for
        self._lock = threading.Lock()

    def claimer(self, slot: int) -> worklist.Claimer:
        return worklist.Claimer(self.host, self.pid, self.run_id, slot)

    def fill(self, shapes: Sequence[Shape]) -> list[int]:
        """Free what dead processes of this host held, mark their runs interrupted, then list
        ``shapes``; returns the runs found dead. A new plan starts here (a strategy's next round), so
        the entries this run passed over for want of a plan are claimable again: without that, a
        resumed domain sweep passed over the pending shapes of the round its first run was stopped in
        while it replayed the earlier, finished rounds, and then skipped them in their own round."""
        with self._lock:
            self._foreign.clear()
        def reap(session):  # noqa: ANN001, ANN202
            dead = set(worklist.release_dead_local_claims(session, self.host, process_alive))
            dead.update(worklist.dead_local_runs(session, self.host, process_alive))
            queries.mark_runs_interrupted(session, sorted(dead))
            return sorted(dead)

        dead = retrying(lambda: self._in_claim_transaction(reap), what="releasing dead claims")
        in_transaction(self.engine, lambda s: worklist.add_entries(s, self.list_key, list(shapes)),
                       what="filling the work list")
        return dead

    def _in_claim_transaction(self, work):  # noqa: ANN001, ANN202
        with worklist.claiming(self.engine) as session:
            return work(session)

    def claim(self, slot: int, planned: Callable[[Shape], bool]) -> Shape | None:
        """The next free group this run has a plan for, now held by ``slot``; None when none is left."""
        claimer = self.claimer(slot)
        while True:
            with self._lock:
                skip = sorted(self._foreign)

            def take(session):  # noqa: ANN001, ANN202
                entry = worklist.claim_next(session, self.list_key, claimer, self.lease_s, skip)
                if entry is None:
                    return None
                shape = (entry.m, entry.n, entry.dtype)
                if not planned(shape):
                    worklist.release(session, entry.id, claimer)
                return entry.id, shape

            taken = retrying(lambda: self._in_claim_transaction(take), what="claiming work")
            if taken is None:
                return None
            entry_id, shape = taken
            if planned(shape):
                with self._lock:
                    self._held[(slot, shape)] = entry_id
                return shape
            with self._lock:
                self._foreign.add(entry_id)

    def _entry(self, slot: int, shape: Shape) -> int:
        with self._lock:
            return self._held[(slot, shape)]

    def renew(self, slot: int, shape: Shape) -> bool:
        entry_id = self._entry(slot, shape)
        return in_transaction(self.engine, lambda s: worklist.renew(s, entry_id, self.claimer(slot), self.lease_s),
                              what="renewing a claim")

    def finish(self, slot: int, shape: Shape) -> None:
        entry_id = self._entry(slot, shape)
        if not in_transaction(self.engine, lambda s: worklist.finish(s, entry_id, self.claimer(slot)),
                              what="finishing a claim"):
            log.warning("shape %s was taken over by another sweeper before it was marked done", shape)
        with self._lock:
            del self._held[(slot, shape)]

    def release(self, slot: int, shape: Shape) -> None:
        entry_id = self._entry(slot, shape)
        in_transaction(self.engine, lambda s: worklist.release(s, entry_id, self.claimer(slot)),
                       what="releasing a claim")
        with self._lock:
            del self._held[(slot, shape)]


def run_threads(targets: Sequence[Callable[[], None]], stop: threading.Event, poll_s: float = 0.2) -> None:
    """Run each target in its own thread until all return. The first exception of any thread sets
    ``stop`` (the others finish their item and return) and is raised here; so is a KeyboardInterrupt of
    the calling thread, after the others stopped. One target runs in the calling thread itself."""
    if len(targets) == 1:
        targets[0]()
        return
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                target()
            except BaseException as exc:  # handed to the calling thread below
                errors.append(exc)
                stop.set()
        return body

    threads = [threading.Thread(target=guarded(t), name=f"sweep-slot-{i}", daemon=True) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(poll_s)
    except KeyboardInterrupt:
        stop.set()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]
