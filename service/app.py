"""``create_app(settings)``: the FastAPI application over the tuning database and dispatch tables.

The app owns one engine, one session factory and one :class:`~service.tables.LiveTables`, all on
``app.state``; the lifespan loads the tables before the first request and disposes the engine at
shutdown. A new database path gets the schema (a fresh server can take uploads); a file that is not
a tuning database, or one that is damaged (``db.integrity.check_integrity``: SQLite ``quick_check``), or
read-only while uploads are enabled, is refused at start-up with ``db.DatabaseError``.
"""
from __future__ import annotations

import functools
import gc
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from sqlalchemy import Engine

from autotuner.records.exchange import ExchangeDocument
from db.engine import DatabaseError, make_engine, session_factory
from db.integrity import check_integrity
from service.config import Settings, SettingsError
from service.deps import reject_repeated_parameters
from service.errors import install_error_handlers, internal_error_body
from service.fast_dispatch import FastDispatch
from service.integrity import DatabaseCondition
from service.middleware import ServiceMiddleware
from service.reads import BoundedReads
from service.routes import dispatch, docs, health, kernels, measurements, page, runs, tables
from service.tables import LiveTables
from service.upload_worker import UploadWorker

log = logging.getLogger(__name__)

DESCRIPTION = """Which softmax kernel to run for (m, n, dtype, GPU model), from tables fitted to measured
sweeps; the measurements themselves; and uploads of new sweeps. Every error is a JSON object whose
`message` says what was wrong. See docs/SERVICE.md."""


class ServiceApp(FastAPI):
    """FastAPI with the ``/dispatch`` fast path in front of its whole stack (``service/fast_dispatch.py``):
    a well-formed query is answered before FastAPI's own per-request layers run. Everything else, and
    every error, passes straight through."""

    fast_dispatch: FastDispatch

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI callables
        await self.fast_dispatch(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    engine = make_engine(settings.database_url, create=True)
    condition = DatabaseCondition()
    refuse_damaged_database(engine, condition, uploads=bool(settings.upload_grants))
    in_memory = engine.url.get_backend_name() == "sqlite" and engine.url.database in (None, "", ":memory:")
    reads = BoundedReads(condition, None if in_memory else settings.database_url, engine=engine)
    live = LiveTables(engine, settings.reload_interval_s, settings.shipped_tables, on_failure=condition.note_failure)
    if settings.default_gpu is not None:
        refuse_unanswered_default_gpu(settings.default_gpu, live.gpus_with_tables(), engine)
    upload_worker = UploadWorker(settings.database_url)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        reads.start()
        live.refresh(force=True)
        # Everything made at start-up (modules, routes, schemas, the tables) lives as long as the
        # process: out of the collector's scans, a full pass covers only what requests leave behind.
        gc.collect()
        gc.freeze()
        log.info("serving %d dispatch tables for GPUs %s from %s", len(live.store.tables()),
                 ", ".join(live.store.gpus()) or "none", engine.url.render_as_string(hide_password=True))
        try:
            yield
        finally:
            upload_worker.close()
            reads.close()
            engine.dispose()

    app = ServiceApp(title="Softmax autotuner", version="1", description=DESCRIPTION, lifespan=lifespan,
                     docs_url=None, redoc_url=None,  # service/routes/docs.py serves both without a CDN
                     dependencies=[Depends(reject_repeated_parameters)])
    app.fast_dispatch = FastDispatch(functools.partial(FastAPI.__call__, app), live, settings, dispatch.answer_dispatch)
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = session_factory(engine)
    app.state.tables = live
    app.state.condition = condition
    app.state.reads = reads
    app.state.pages = page.PageCache(reads)
    app.state.upload_worker = upload_worker
    install_error_handlers(app)
    app.add_middleware(ServiceMiddleware, internal_error=internal_error_body)
    for module in (dispatch, tables, kernels, measurements, runs, health, page, docs):
        app.include_router(module.router)
    docs.mount_assets(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def refuse_damaged_database(engine: Engine, condition: DatabaseCondition, *, uploads: bool) -> None:
    """Start-up check: a damaged database is refused, and so is a read-only one where uploads are
    enabled by any token setting (``AUTOTUNER_UPLOAD_TOKEN`` or ``_TOKENS``; a server without an upload
    token may serve from a read-only copy)."""
    problem = check_integrity(engine, write_probe=uploads)
    condition.record_check(problem)
    if problem is not None:
        engine.dispose()
        where = engine.url.render_as_string(hide_password=True)
        raise DatabaseError(f"refusing to serve {where}: {problem.reason}")


def refuse_unanswered_default_gpu(gpu: str, answered: set[str], engine: Engine) -> None:
    """Start-up check: ``AUTOTUNER_DEFAULT_GPU`` names a model this server has a table for; otherwise
    every ``/dispatch`` without ``gpu`` would be a 404."""
    if gpu not in answered:
        engine.dispose()
        raise SettingsError(f"AUTOTUNER_DEFAULT_GPU={gpu!r}: this server has no table for that GPU model, so every "
                            f"/dispatch without gpu would be refused; models with a table: {', '.join(sorted(answered))}")


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus the upload document's, which ``POST /runs`` references by hand (it reads
    its body itself, see ``service/routes/runs.py``). ``/dispatch``'s ``gpu`` is required in the schema
    of a server without ``AUTOTUNER_DEFAULT_GPU``, as it is in its answers (422 without it)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        if app.state.settings.default_gpu is None:
            for parameter in schema["paths"]["/dispatch"]["get"]["parameters"]:
                if parameter["name"] == "gpu":
                    parameter["required"] = True
                    parameter["description"] = "GPU model key (h100) or device name; required: this server has no AUTOTUNER_DEFAULT_GPU"
        upload = ExchangeDocument.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(upload.pop("$defs", {}))
        components["ExchangeDocument"] = upload
        app.openapi_schema = schema
    return app.openapi_schema
