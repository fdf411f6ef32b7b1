"""Blocking work of the read endpoints (database reads, rendering the page) off the event loop, a
bounded number at a time.

Why: ``/dispatch`` answers on the event loop. A read endpoint run as a sync route takes one of the
thread pool's 40 threads per request, so 16 busy readers meant 16 threads taking the GIL from the
loop in turn (``/dispatch`` p99 went from 4 ms to about a second). Here every such call goes through
one :class:`anyio.CapacityLimiter`: at most ``threads`` run at once, the others wait as coroutines
(costing the loop nothing), and the loop competes for the GIL with at most ``threads`` threads.

A failure that says the database is damaged, read-only or full is reported to the app's
:class:`~service.integrity.DatabaseCondition` on its way out, so ``/healthz`` and uploads know.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

import anyio
import anyio.to_thread

from service.integrity import DatabaseCondition

T = TypeVar("T")

READ_THREADS = 2


class BoundedReads:
    def __init__(self, condition: DatabaseCondition, threads: int = READ_THREADS):
        self.condition = condition
        self.threads = threads
        self._limiter: anyio.CapacityLimiter | None = None
        self.waiting = 0

    def start(self) -> None:
        """A fresh limiter for the event loop now running (the app's lifespan calls this)."""
        self._limiter = anyio.CapacityLimiter(self.threads)

    @property
    def running(self) -> int:
        return int(self._limiter.borrowed_tokens) if self._limiter is not None else 0

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        if self._limiter is None:
            self.start()
        self.waiting += 1
        try:
            return await anyio.to_thread.run_sync(function, *args, limiter=self._limiter)
        except Exception as exc:
            self.condition.note_failure(exc)
            raise
        finally:
            self.waiting -= 1
