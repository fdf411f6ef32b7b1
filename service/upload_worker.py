"""``POST /runs`` parsed and written in a separate process, so a large upload does not stall ``/dispatch``.

Why a process: validating a large document is one pydantic call that holds the GIL for its whole
length (about 0.5 s for 100k rows), and building the rows is Python work that takes the GIL from the
event loop every switch interval; in a thread of the serving process both show up directly in
``/dispatch`` latency. One worker process per app serves uploads one at a time (SQLite has one
writer anyway); it is started on the first upload and stopped at shutdown.

What crosses the process boundary is plain data: the body and the GPU models its uploader may send
in, and ``("ok", summary fields)``, ``("invalid", pydantic's error list)``, ``("refused", (status,
message, problems))`` (``autotuner/records/plausibility.py``) or ``("error", exception type name)`` out (database exceptions
do not all survive pickling; the worker logs the traceback itself).
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

_engines: dict[str, Any] = {}  # in the worker: one engine per database URL


def write_document(engine: Any, document: Any, allowed_gpus: frozenset[str] | None = None) -> Any:
    """One transaction for the whole document, retried as a whole on a lock or serialization
    conflict; on SQLite it takes the write lock at its start (``BEGIN IMMEDIATE``), so concurrent
    uploads wait for it (``busy_timeout``) instead of failing when a read cannot be upgraded."""
    from autotuner.records.exchange import import_runs
    from db.retry import in_transaction

    writer = engine.execution_options(sqlite_begin="IMMEDIATE")
    return in_transaction(writer, lambda session: import_runs(session, document, allowed_gpus=allowed_gpus),
                          what="upload of runs")


def import_document(database_url: str, body: bytes, allowed_gpus: frozenset[str] | None = None) -> tuple[str, Any]:
    """Runs in the worker: parse, validate, write in one retried transaction (see ``routes.runs``)."""
    from pydantic import ValidationError

    from autotuner.records.exchange import parse_document
    from autotuner.records.plausibility import RefusedUpload
    from db.engine import make_engine

    try:
        document = parse_document(body)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"]),
                   "ctx": {key: str(value) for key, value in error.get("ctx", {}).items()}}
                  for error in exc.errors(include_url=False)]
        return "invalid", errors
    try:
        engine = _engines.get(database_url)
        if engine is None:
            engine = _engines[database_url] = make_engine(database_url, create=False)
        summary = write_document(engine, document, allowed_gpus)
    except RefusedUpload as refused:
        return "refused", (refused.status, str(refused), refused.details())
    except Exception as exc:
        log.exception("upload failed")
        return "error", type(exc).__name__
    return "ok", summary.model_dump()


class UploadWorker:
    """The app's upload process, started on first use."""

    def __init__(self, database_url: str):
        self.database_url = database_url
        self._pool: ProcessPoolExecutor | None = None

    async def run(self, body: bytes, allowed_gpus: frozenset[str] | None = None) -> tuple[str, Any]:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return await asyncio.get_running_loop().run_in_executor(self._pool, import_document, self.database_url, body,
                                                                  allowed_gpus)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
