"""Blocking work of the read endpoints off the event loop, a bounded number at a time.

Why: ``/dispatch`` answers on the event loop. A read endpoint run as a sync route takes one of the
thread pool's 40 threads per request, so 16 busy readers meant 16 threads taking the GIL from the
loop in turn (``/dispatch`` p99 went from 4 ms to about a second). Even one reader thread is too
many: SQLite's driver releases and retakes the GIL at every row, and each retake waits for the loop's
switch interval, so a 100-row page took half a second and held ``/dispatch`` p99 at 300 ms.

So the database reads of ``/measurements`` run in a **read process** (``run_in_process``): it has
its own GIL and engine, a lower CPU priority (``BACKGROUND_NICENESS``), and what comes back is the
page's JSON bytes. Short or in-memory work (the
page's render, once per table generation; the health probes) runs in a thread (``run``). Each path
goes through an :class:`anyio.CapacityLimiter`: at most ``READ_PROCESSES`` / ``READ_THREADS`` at once,
the other requests wait as coroutines, costing the loop nothing. The read process is started on first
use from the event loop's thread, dies with the server (as the upload process does:
``upload_worker.die_with_parent``) and is replaced if it dies.

A failure that says the database is damaged, read-only or full is reported to the app's
:class:`~service.integrity.DatabaseCondition` on its way out, so ``/healthz`` and uploads know, and is
answered 503 naming it (never a 500); once damage is known, a read through here is answered so without
touching the file. Before each read in the read process (and on plain ``/healthz``), :meth:`look` takes
the cheap look at the file (``db.integrity.header_problem``: a connection opened before the damage may
go on answering from its cache, and a new one would fail) and has a quick check confirm what it sees. The read process opens its database on first use, not at start: a file that cannot
be opened fails that read (503), never the process (a pool whose start fails breaks on every request).
"""
from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, TypeVar

import anyio
import anyio.to_thread

from db.integrity import check_integrity, header_problem
from service.errors import ApiError
from service.integrity import DatabaseCondition

T = TypeVar("T")

READ_THREADS = 2
READ_PROCESSES = 1
RETRY_AFTER_S = 5
# The read and upload processes yield the CPU to the serving process: on a small machine the scheduler
# otherwise shares the cores evenly, and a reader's pages cost /dispatch its latency.
BACKGROUND_NICENESS = 10


class ReadFailed(RuntimeError):
    """A read in the read process failed; the message is the original error's type and text (database
    exceptions do not all survive pickling)."""


_sessions: Any = None  # in the read process: the session factory of its engine, once opened
_database_url = ""


def _start_reader(parent_pid: int, database_url: str) -> None:
    from service.upload_worker import die_with_parent

    global _database_url
    die_with_parent(parent_pid)
    os.nice(BACKGROUND_NICENESS)
    _database_url = database_url


def _in_reader(function: Callable[..., T], *args: Any) -> T:
    global _sessions
    try:
        if _sessions is None:
            from db.engine import make_engine, session_factory

            _sessions = session_factory(make_engine(_database_url, create=False))
        return function(_sessions, *args)
    except Exception as exc:
        raise ReadFailed(f"{type(exc).__name__}: {exc}".splitlines()[0]) from None


class BoundedReads:
    def __init__(self, condition: DatabaseCondition, database_url: str | None = None,
                 threads: int = READ_THREADS, processes: int = READ_PROCESSES, engine: Any = None):
        self.condition = condition
        self.engine = engine  # the app's engine, for look()
        self.database_url = database_url  # None: no read process (a private in-memory database)
        self.threads = threads
        self.processes = processes
        self._limiters: tuple[anyio.CapacityLimiter, anyio.CapacityLimiter] | None = None
        self._pool: ProcessPoolExecutor | None = None

    def start(self) -> None:
        """Fresh limiters for the event loop now running (the app's lifespan calls this)."""
        self._limiters = (anyio.CapacityLimiter(self.threads), anyio.CapacityLimiter(self.processes))

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a worker thread (a failure naming the database's condition: 503)."""
        if self._limiters is None:
            self.start()
        try:
            return await anyio.to_thread.run_sync(function, *args, limiter=self._limiters[0])
        except Exception as exc:
            raise self._unavailable(exc) from None

    async def run_in_process(self, sessions: Any, function: Callable[..., T], *args: Any) -> T:
        """``function(sessions, *args)`` in the read process, with that process's own session factory
        (``sessions``, this process's, serves where there is no read process). A database known to be
        damaged is not read: 503 naming the damage."""
        await self.look()
        if self.condition.damage is not None:
            raise ApiError(503, f"the database cannot be read: {self.condition.damage.reason}")
        if self.database_url is None:
            return await self.run(function, sessions, *args)
        if self._limiters is None:
            self.start()
        async with self._limiters[1]:
            for attempt in range(2):
                try:
                    return await asyncio.get_running_loop().run_in_executor(self._executor(), _in_reader, function, *args)
                except BrokenProcessPool:  # the read process died: a new one, and one more try
                    self.close()
                    if attempt:
                        raise ApiError(503, "the read process died twice on this request; retry",
                                       headers={"Retry-After": str(RETRY_AFTER_S)}) from None
                except Exception as exc:
                    raise self._unavailable(exc) from None
        raise AssertionError("unreachable")

    async def look(self) -> None:
        """Record damage the database file's header shows, once a quick check (in a thread) confirms it."""
        if self.engine is None or self.condition.damage is not None or header_problem(self.engine) is None:
            return
        self.condition.record_check(await self.run(functools.partial(check_integrity, write_probe=False), self.engine))

    def _unavailable(self, exc: Exception) -> Exception:
        """The exception to raise for a failed read: a 503 naming the database's condition where the
        failure tells one (recorded for ``/healthz`` and uploads), else the failure itself."""
        problem = self.condition.note_failure(exc)
        if problem is None:
            return exc
        return ApiError(problem.status, f"the database cannot be read: {problem.reason}")

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_reader, initargs=(os.getpid(), self.database_url))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
