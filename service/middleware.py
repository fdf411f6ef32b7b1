"""ASGI middleware of the whole app: security headers on every response, and a 500 that keeps the
connection.

Starlette answers an unhandled exception with the app's 500 handler and then re-raises it, and
uvicorn closes the connection after any exception that reaches it, without ``Connection: close``: a
keep-alive client's next request on it fails with ECONNRESET. :class:`ServiceMiddleware` catches the
exception before that, logs it, and sends the same JSON 500 as ``service.errors``; the connection stays
usable. (Where the response had already started, nothing valid can be sent and the exception goes on.)
A request still running when uvicorn's graceful shutdown runs out of time is cancelled; its client gets
a 503 saying so (retry), not Starlette's plain-text 500.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable

from starlette.datastructures import MutableHeaders

log = logging.getLogger(__name__)

Message = dict[str, Any]
ASGIApp = Callable[[Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

# JSON and plain answers may not run anything; the page has inline styles only; the docs pages run
# their own inline start-up script and the bundles under /docs-assets (ReDoc starts a blob: worker).
API_CSP = "default-src 'none'; frame-ancestors 'none'"
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
DOCS_CSP = ("default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
            "frame-ancestors 'none'; base-uri 'none'")
COMMON_HEADERS = (("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
                  ("X-Frame-Options", "DENY"), ("Cross-Origin-Resource-Policy", "same-origin"))
RAW_COMMON_HEADERS = [(name.lower().encode(), value.encode()) for name, value in COMMON_HEADERS]
STOPPING_BODY = json.dumps({"message": "the server stopped before this request finished; retry it (an upload "
                                       "that was stored is stored once however often it is sent)"}).encode()
STOPPING_RETRY_AFTER_S = 5


def content_security_policy(path: str) -> str:
    if path == "/":
        return PAGE_CSP
    if path in ("/docs", "/redoc") or path.startswith("/docs-assets/"):
        return DOCS_CSP
    return API_CSP


class ServiceMiddleware:
    def __init__(self, app: ASGIApp, internal_error: Callable[[Exception], bytes]):
        self.app = app
        self.internal_error = internal_error  # the JSON body of a 500 for an unexpected error

    async def __call__(self, scope: Message, receive, send) -> None:  # noqa: ANN001 - ASGI callables
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        csp = content_security_policy(scope["path"])

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in COMMON_HEADERS:
                    headers.setdefault(name, value)
                headers.setdefault("Content-Security-Policy", csp)
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except asyncio.CancelledError:
            if started:
                raise
            log.warning("%s %s cancelled: the server is stopping", scope.get("method"), scope.get("path"))
            await send_with_headers({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(STOPPING_BODY)).encode()),
                (b"retry-after", str(STOPPING_RETRY_AFTER_S).encode()), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": STOPPING_BODY})
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):  # answered: the request's task ends normally
                task.uncancel()
        except Exception as exc:
            if started:
                raise
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            body = self.internal_error(exc)
            await send_with_headers({"type": "http.response.start", "status": 500, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
