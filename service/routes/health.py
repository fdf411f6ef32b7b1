"""``GET /healthz``: is the server up, can it reach its database, how many tables does it hold."""
from __future__ import annotations

from datetime import datetime, timezone

from fastapi import APIRouter, Request
from sqlalchemy import text

from service.deps import LiveTablesDep, SettingsDep, bearer_from_header, bearer_matches
from service.schemas import DatabaseHealth, FastPathHealth, Health, TablesHealth

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness, database reachability and table count")
def healthz(request: Request, live: LiveTablesDep, settings: SettingsDep) -> Health:
    """Always 200 while the process serves: with the database down ``/dispatch`` still answers from the
    tables already loaded, so ``status`` says "degraded" rather than the probe failing. The database's
    URL (a file path, a host name) and the text of its errors (a driver's names host, port and SQL) are
    shown only to a caller with an upload token; others see its kind and the errors' type names."""
    engine = request.app.state.engine
    authorised = bearer_matches(settings, bearer_from_header(request))
    fast = request.app.fast_dispatch
    error = None
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # any driver error means "not reachable"; its text is the diagnosis
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    tables = live.store.tables()
    from_database = sum(1 for table in tables if live.source_of(table) == "database")
    return Health(
        status="ok" if error is None else "degraded",
        database=DatabaseHealth(
            reachable=error is None, backend=engine.url.get_backend_name(), error=error if authorised else _redacted(error),
            url=engine.url.render_as_string(hide_password=True) if authorised else None),
        tables=TablesHealth(
            count=len(tables), from_database=from_database, shipped=len(tables) - from_database,
            generation=live.generation, last_error=live.last_error if authorised else _redacted(live.last_error),
            loaded_at=datetime.fromtimestamp(live.loaded_at, timezone.utc) if live.loaded_at else None,
        ),
        dispatch_fast_path=FastPathHealth(entries=len(fast), hits=fast.hits, answers=fast.fast_answers),
    )


def _redacted(error: str | None) -> str | None:
    """``TypeName: driver text`` -> ``TypeName``: what an unauthenticated caller may see of an error."""
    if error is None:
        return None
    return f"{error.split(':', 1)[0]} (details only with an upload token)"
