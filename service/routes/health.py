"""``GET /healthz``: is the server up, can it reach its database, is the database whole, how many
tables does it hold, and how is the upload process."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text

from db.integrity import check_integrity
from service.deps import LiveTablesDep, SettingsDep, bearer_from_header, bearer_matches
from service.errors import ApiError
from service.schemas import DatabaseHealth, ErrorBody, FastPathHealth, Health, TablesHealth, UploadProcessHealth

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness, database reachability and integrity, table count",
            responses={401: {"model": ErrorBody, "description": "deep=1 without the upload token"},
                       503: {"model": Health, "description": "the database is damaged, or the deep check found it "
                             "damaged, read-only or full: `database.problem` says which"}})
async def healthz(request: Request, live: LiveTablesDep, settings: SettingsDep,
                  deep: Annotated[bool, Query(description="also run the integrity check and a write probe "
                                              "(SQLite quick_check reads the whole file); needs the upload token")] = False,
                  ) -> JSONResponse:
    """200 while the process serves and its database is not known to be damaged: with the database
    unreachable ``/dispatch`` still answers from the tables already loaded, so ``status`` says
    "degraded" rather than the probe failing. 503 ("failing") when the database is damaged: seen at
    start, by a deep check, by a failed read or upload, or by this probe's look at the file's header
    and size (``BoundedReads.look``: what it sees is confirmed by a quick check), or when this
    request's deep check found a problem. The database's URL (a file path, a host name) and the text
    of its errors (a driver's names host, port and SQL) are shown only to a caller with the upload
    token; others see its kind and the errors' type names."""
    state = request.app.state
    authorised = bearer_matches(settings, bearer_from_header(request))
    if deep and not authorised:
        raise ApiError(401, "deep=1 runs an integrity check of the database and needs the upload token",
                       headers={"WWW-Authenticate": "Bearer"})
    engine: Engine = state.engine
    error = await state.reads.run(_reachability_error, engine)
    found = None
    if deep:
        found = await state.reads.run(check_integrity, engine)
        state.condition.record_check(found)
    else:
        await state.reads.look()
    problem = found or state.condition.damage
    tables = live.store.tables()
    from_database = sum(1 for table in tables if live.source_of(table) == "database")
    fast, worker = request.app.fast_dispatch, state.upload_worker
    checked_at = state.condition.checked_at
    health = Health(
        status="failing" if problem is not None else "ok" if error is None else "degraded",
        database=DatabaseHealth(
            reachable=error is None, backend=engine.url.get_backend_name(), error=error if authorised else _redacted(error),
            url=engine.url.render_as_string(hide_password=True) if authorised else None,
            problem=problem.reason if problem is not None else None,
            checked_at=datetime.fromtimestamp(checked_at, timezone.utc) if checked_at else None),
        tables=TablesHealth(
            count=len(tables), from_database=from_database, shipped=len(tables) - from_database,
            generation=live.generation, last_error=live.last_error if authorised else _redacted(live.last_error),
            loaded_at=datetime.fromtimestamp(live.loaded_at, timezone.utc) if live.loaded_at else None,
        ),
        dispatch_fast_path=FastPathHealth(entries=len(fast), hits=fast.hits, answers=fast.fast_answers),
        upload_process=UploadProcessHealth(state=worker.state, pid=worker.pid, restarts=worker.restarts,
                                           pending=worker.pending, last_exit=worker.last_exit),
    )
    return JSONResponse(health.model_dump(mode="json"), status_code=503 if problem is not None else 200)


def _reachability_error(engine: Engine) -> str | None:
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # any driver error means "not reachable"; its text is the diagnosis
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def _redacted(error: str | None) -> str | None:
    """``TypeName: driver text`` -> ``TypeName``: what an unauthenticated caller may see of an error."""
    if error is None:
        return None
    return f"{error.split(':', 1)[0]} (details only with an upload token)"
