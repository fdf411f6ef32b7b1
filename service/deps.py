"""Dependencies handed to routes through ``Annotated`` aliases: settings, a database session, the
live table store, and the upload token check. State lives on ``app.state`` (set by ``create_app``),
never in module globals, so two apps in one process (tests) stay apart."""
from __future__ import annotations

import secrets
from typing import Annotated, Iterator

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from autotuner.lookup.select import TableStore
from service.config import Settings, UploadGrant
from service.errors import ApiError
from service.tables import LiveTables


async def reject_repeated_parameters(request: Request) -> None:
    """Every route's first check (an app-wide dependency): a query parameter given more than once is a
    422, whatever the route and the parameter; read as its first or last value, ``m=1&m=2`` would be
    answered for a shape the client may not have meant."""
    params = request.query_params
    names = [name for name, _ in params.multi_items()]
    if len(names) != len(set(names)):
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise RequestValidationError([
            {"type": "repeated", "loc": ("query", name), "input": [v for k, v in params.multi_items() if k == name],
             "msg": f"given {names.count(name)} times; give each parameter once"} for name in repeated])


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


_bearer = HTTPBearer(auto_error=False, description="an upload token of the server (AUTOTUNER_UPLOAD_TOKEN or _TOKENS)")


async def require_upload_token(
    settings: Annotated[Settings, Depends(get_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> UploadGrant:
    """The uploader whose token the request carries (``Authorization: Bearer <token>``), else 401;
    with no token configured every upload is refused (an open write endpoint is never the default).
    Which GPU models it may upload is checked once the body is read (403)."""
    challenge = {"WWW-Authenticate": "Bearer"}
    if not settings.upload_grants:
        raise ApiError(401, "uploads are disabled: the server has no AUTOTUNER_UPLOAD_TOKEN(S) configured", headers=challenge)
    if credentials is None:
        raise ApiError(401, "missing bearer token: send 'Authorization: Bearer <token>'", headers=challenge)
    grant = matching_grant(settings, credentials)
    if grant is None:
        raise ApiError(401, "wrong bearer token", headers=challenge)
    return grant


def bearer_from_header(request: Request) -> HTTPAuthorizationCredentials | None:
    """The request's bearer credentials, read without declaring a security scheme (for a route that
    is open to all and only shows more to the token holder: its schema must not demand a token)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return HTTPAuthorizationCredentials(scheme="Bearer", credentials=token.strip())


def matching_grant(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> UploadGrant | None:
    """The uploader whose token this is (None with no token configured or none matching). Every token
    is compared, in constant time each, so the time taken says nothing about which one came close."""
    if credentials is None:
        return None
    given = credentials.credentials.encode()
    found = None
    for grant in settings.upload_grants:
        if secrets.compare_digest(given, grant.token):
            found = grant
    return found


def bearer_matches(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> bool:
    """The request carries one of the server's upload tokens (never true with none configured)."""
    return matching_grant(settings, credentials) is not None


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
LiveTablesDep = Annotated[LiveTables, Depends(get_live_tables)]
TableStoreDep = Annotated[TableStore, Depends(get_table_store)]
UploadAuthDep = Annotated[UploadGrant, Depends(require_upload_token)]
