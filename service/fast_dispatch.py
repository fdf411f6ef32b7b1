"""The fast path of ``GET /dispatch``: an ASGI wrapper in front of the whole app.

Why: FastAPI's per-request work (routing, dependency solving, per-parameter validation, response
validation) costs several times more than the lookup itself, and ``/dispatch`` is the endpoint a
fleet of runtimes calls. This answers a well-formed ``/dispatch`` request without it, with the same
model (:class:`~service.schemas.DispatchQuery`) and the same function (``answer_dispatch``) the route
uses, and replays the bytes of recent answers.

Contract:
- only ``GET /dispatch`` is touched; everything else goes straight to the app;
- ``HEAD`` of any path is answered as its ``GET`` (status and headers, ``content-length`` included)
  without the body: FastAPI's routes take only the methods they declare, and a GET route's HEAD
  would be a 405 (RFC 9110 9.3.2: a server supports HEAD wherever it supports GET);
- anything this path does not answer with 200 (invalid parameters, unknown GPU, a repeated or blank
  parameter, any exception) goes to the route, which produces the documented error; so the route
  stays the single definition of errors, and this path of answers;
- while a reload check is due the request goes to the route (which performs the check): a newer
  table is picked up as promptly as without this path;
- answers are cached by raw query string for one table generation (``LiveTables.generation``); a
  reload empties the cache; at most ``max_entries`` are kept (oldest dropped first).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl

from pydantic import ValidationError

from autotuner.lookup.select import TableStore
from service.config import Settings
from service.middleware import API_CSP, RAW_COMMON_HEADERS
from service.schemas import DispatchAnswer, DispatchQuery
from service.tables import LiveTables

Message = dict[str, Any]
ASGIApp = Callable[[Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]
Answer = Callable[[TableStore, Settings, DispatchQuery], DispatchAnswer]

DEFAULT_MAX_ENTRIES = 16_384
# the headers service.middleware adds to every other response (this path answers before it runs)
FIXED_HEADERS = [(b"content-type", b"application/json"), *RAW_COMMON_HEADERS,
                 (b"content-security-policy", API_CSP.encode())]


class FastDispatch:
    def __init__(self, app: ASGIApp, live: LiveTables, settings: Settings, answer: Answer,
                 path: str = "/dispatch", max_entries: int = DEFAULT_MAX_ENTRIES):
        self.app = app
        self.live = live
        self.settings = settings
        self.answer = answer
        self.path = path
        self.max_entries = max_entries
        self.hits = 0
        self.fast_answers = 0
        self._entries: dict[bytes, bytes] = {}
        self._generation = -1

    def __len__(self) -> int:
        return len(self._entries)

    async def __call__(self, scope: Message, receive, send) -> None:  # noqa: ANN001 - ASGI callables
        if scope["type"] == "http" and scope["method"] == "HEAD":
            await self({**scope, "method": "GET"}, receive, _without_body(send))
            return
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "GET" or self.live.due():
            await self.app(scope, receive, send)
            return
        if self.live.generation != self._generation:
            self._entries = {}
            self._generation = self.live.generation
        key = scope.get("query_string", b"")
        body = self._entries.get(key)
        if body is not None:
            self.hits += 1
        else:
            body = self._answer(key)
            if body is None:
                await self.app(scope, receive, send)
                return
            self.fast_answers += 1
            if len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = body
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*FIXED_HEADERS, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def _answer(self, query_string: bytes) -> bytes | None:
        """The 200 body for this query, or None where the route must answer (see the contract)."""
        try:
            pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
        except ValueError:
            return None
        params = dict(pairs)
        if len(params) != len(pairs) or any(value == "" for value in params.values()):
            return None  # repeated or blank parameters: leave their reading to FastAPI
        try:
            query = DispatchQuery.model_validate(params)
            return self.answer(self.live.store, self.settings, query).model_dump_json().encode()
        except (ValidationError, Exception):  # every refusal is the route's to word
            return None


def _without_body(send: Callable[[Message], Awaitable[None]]) -> Callable[[Message], Awaitable[None]]:
    """``send`` for a HEAD request: the response's start as is, every body chunk emptied."""
    async def send_head(message: Message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return send_head
