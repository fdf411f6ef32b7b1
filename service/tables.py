"""The tables the server answers from, kept current without a restart.

Shipped tables (``autotuner/tables/*.json``) are overlaid by the database's current fitted tables.
A request finds out whether a newer table was stored by comparing the database's table stamp
(``db.queries.current_tables_stamp``) with the one loaded; it asks at most once every
``reload_interval_s``, so the lookup path costs one clock read between checks. A database that cannot
be read leaves the tables already loaded in force (and is reported by ``/healthz``: ``on_failure``
hears of the error, so that damage it names is known to the app).
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from autotuner.lookup.select import TableStore, load_shipped_tables
from autotuner.records.store import tables_in_database
from autotuner.lookup.table import DispatchTable
from db.queries import current_table_gpus, current_tables_stamp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EncodedTable:
    """A table document as the wire carries it, and its entity tag (a hash of those bytes)."""

    body: bytes
    etag: str


# /dispatch answers are cached as response bytes (service/fast_dispatch.py, not tracked by the
# garbage collector); the store's own cache of answer objects only needs to cover a burst.
STORE_CACHE_LIMIT = 2048


class LiveTables:
    """A :class:`TableStore` plus where each table came from, reloaded when the database changes.

    ``generation`` grows on every reload: response caches keyed by it never serve a stale answer."""

    def __init__(self, engine: Engine, reload_interval_s: float, include_shipped: bool = True,
                 on_failure: Callable[[BaseException], Any] | None = None):
        self.engine = engine
        self.on_failure = on_failure
        self.reload_interval_s = reload_interval_s
        self.include_shipped = include_shipped
        self.store = TableStore(cache_limit=STORE_CACHE_LIMIT)
        self.generation = 0
        self.database_keys: frozenset[tuple[str, str, str]] = frozenset()
        self.loaded_at: float | None = None
        self.last_error: str | None = None
        self._stamp: tuple[int | None, int] | None = None
        self._next_check = 0.0
        self._encoded: dict[tuple[str, str, str], EncodedTable] = {}
        self._lock = threading.Lock()

    def due(self) -> bool:
        """Whether a request should look for a newer table now (cheap: one clock read)."""
        return time.monotonic() >= self._next_check

    def refresh(self, force: bool = False) -> bool:
        """Reload if the database's tables changed since the last load; True if it reloaded.

        Blocking (database I/O): the async request path calls it in a worker thread. Concurrent
        callers do not queue: one checks, the others go on with the tables they have."""
        if not self._lock.acquire(blocking=force):
            return False
        try:
            if not force and not self.due():
                return False
            self._next_check = time.monotonic() + self.reload_interval_s
            try:
                with Session(self.engine) as session:
                    stamp = current_tables_stamp(session)
                if not force and stamp == self._stamp:
                    return False
                database_tables = tables_in_database(engine=self.engine)
            except Exception as exc:  # the database may be down or mid-migration: keep serving what we have
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self.on_failure is not None:
                    self.on_failure(exc)
                log.warning("could not read dispatch tables from the database: %s", self.last_error)
                if self.loaded_at is None:
                    self._install(self._shipped(), [])
                return False
            self.last_error = None
            self._install(self._shipped(), database_tables)
            self._stamp = stamp
            log.info("loaded %d dispatch tables (%d from the database, stamp %s)",
                     len(self.store.tables()), len(database_tables), stamp)
            return True
        finally:
            self._lock.release()

    def gpus_with_tables(self) -> set[str]:
        """The GPU models the store will hold a table of (the shipped files' and the database's current
        tables), found without reading the tables themselves."""
        from autotuner.lookup.select import shipped_table_files

        shipped = {path.stem.rsplit("_", 2)[0] for path in shipped_table_files()} if self.include_shipped else set()
        with Session(self.engine) as session:
            return shipped | current_table_gpus(session)

    def _shipped(self) -> list[DispatchTable]:
        return load_shipped_tables() if self.include_shipped else []

    def _install(self, shipped: list[DispatchTable], from_database: list[DispatchTable]) -> None:
        # Later tables win in replace_all, so the database's overlay the shipped ones of the same key.
        self.store.replace_all([*shipped, *from_database])
        self.database_keys = frozenset(table.key for table in from_database)
        self._encoded = {}
        self.generation += 1
        self.loaded_at = time.time()

    def source_of(self, table: DispatchTable) -> str:
        return "database" if table.key in self.database_keys else "shipped"

    def encoded(self, table: DispatchTable) -> EncodedTable:
        """The table's JSON bytes and ETag, computed once per load (the page and the API share them)."""
        found = self._encoded.get(table.key)
        if found is None:
            body = canonical_json(table.document)
            found = EncodedTable(body, f'"{hashlib.sha256(body).hexdigest()[:32]}"')
            self._encoded[table.key] = found
        return found


def canonical_json(document: Any) -> bytes:
    """Sorted keys, no spaces: equal documents give equal bytes, so the ETag is a content hash."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
