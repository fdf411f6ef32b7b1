"""Dependencies handed to routes through ``Annotated`` aliases: settings, a database session, the
live table store, and the upload token check. State lives on ``app.state`` (set by ``create_app``),
never in module globals, so two apps in one process (tests) stay apart."""
from __future__ import annotations

import secrets
from typing import Annotated, Iterator

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from autotuner.lookup.select import TableStore
from service.config import Settings
from service.errors import ApiError
from service.tables import LiveTables


async def get_settings(request: Request) -> Settings:
    # async on purpose, here and below: FastAPI runs a sync dependency in its thread pool, and that
    # hand-off would cost more than everything else on the /dispatch path.
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """A session for one request; routes that write commit it themselves, anything else is rolled back."""
    with request.app.state.sessions() as session:
        yield session


async def get_live_tables(request: Request) -> LiveTables:
    """The live tables, refreshed first if the reload interval has passed (in a worker thread: the
    check reads the database). Between checks this is one clock read."""
    live: LiveTables = request.app.state.tables
    if live.due():
        await run_in_threadpool(live.refresh)
    return live


async def get_table_store(live: Annotated[LiveTables, Depends(get_live_tables)]) -> TableStore:
    return live.store


_bearer = HTTPBearer(auto_error=False, description="the server's AUTOTUNER_UPLOAD_TOKEN")


async def require_upload_token(
    settings: Annotated[Settings, Depends(get_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """401 unless the request carries ``Authorization: Bearer <AUTOTUNER_UPLOAD_TOKEN>``; with no token
    configured every upload is refused (an open write endpoint is never the default)."""
    challenge = {"WWW-Authenticate": "Bearer"}
    if settings.upload_token is None:
        raise ApiError(401, "uploads are disabled: the server has no AUTOTUNER_UPLOAD_TOKEN configured", headers=challenge)
    if credentials is None:
        raise ApiError(401, "missing bearer token: send 'Authorization: Bearer <token>'", headers=challenge)
    if not bearer_matches(settings, credentials):
        raise ApiError(401, "wrong bearer token", headers=challenge)


def bearer_from_header(request: Request) -> HTTPAuthorizationCredentials | None:
    """The request's bearer credentials, read without declaring a security scheme (for a route that
    is open to all and only shows more to the token holder: its schema must not demand a token)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return HTTPAuthorizationCredentials(scheme="Bearer", credentials=token.strip())


def bearer_matches(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> bool:
    """The request carries the server's upload token (never true with no token configured)."""
    if settings.upload_token is None or credentials is None:
        return False
    expected = settings.upload_token.get_secret_value().encode()
    return secrets.compare_digest(credentials.credentials.encode(), expected)


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
LiveTablesDep = Annotated[LiveTables, Depends(get_live_tables)]
TableStoreDep = Annotated[TableStore, Depends(get_table_store)]
UploadAuthDep = Annotated[None, Depends(require_upload_token)]
