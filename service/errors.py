"""Every error leaves the API as an :class:`~service.schemas.ErrorBody` JSON object.

422 keeps pydantic's error list in ``detail`` (so clients can still point at a field) and adds a
``message`` a person can read: ``query parameter 'm': Input should be greater than or equal to 1
(got 0)``. Unexpected exceptions are logged with their traceback and answered 500 without it.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.schemas import ErrorBody

log = logging.getLogger(__name__)

_PLACES = {"query": "query parameter", "path": "path parameter", "header": "header", "cookie": "cookie"}
_ECHO_LIMIT = 80  # longest offending value echoed back in a message


class ApiError(Exception):
    """An error a route raises on purpose, with everything its JSON body should say."""

    def __init__(self, status_code: int, message: str, *, detail: Any = None,
                 known_gpus: Sequence[str] | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.body = ErrorBody(message=message, detail=detail,
                              known_gpus=list(known_gpus) if known_gpus is not None else None)
        self.headers = headers


def invalid(location: str, name: str, message: str, value: Any = None) -> RequestValidationError:
    """A 422 for a check made in a route (a bound from settings, an unknown dtype spelling), shaped as
    FastAPI's own validation errors are."""
    return RequestValidationError([{"type": "value_error", "loc": (location, name), "msg": message, "input": value}])


def describe_location(loc: Iterable[Any]) -> str:
    parts = list(loc)
    if not parts:
        return "request"
    place, rest = parts[0], parts[1:]
    if place in _PLACES and rest:
        return f"{_PLACES[place]} '{rest[0]}'" + _path(rest[1:])
    if place == "body":
        return "body" + (f" field {_path(rest).lstrip('.')}" if rest else "")
    return _path(parts).lstrip(".")


def _path(parts: Iterable[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def readable_message(errors: Sequence[dict[str, Any]]) -> str:
    """One line per problem, the place first: what a person needs to fix the request."""
    lines = []
    for error in errors:
        text = f"{describe_location(error.get('loc', ()))}: {error.get('msg', 'invalid')}"
        value = error.get("input")
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and error.get("type") != "missing":
            shown = repr(value)
            text += f" (got {shown if len(shown) <= _ECHO_LIMIT else shown[:_ECHO_LIMIT] + '...'})"
        lines.append(text)
    return "; ".join(lines) or "invalid request"


def _plain_errors(errors: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic's errors made JSON-safe: ``ctx`` may hold exception objects, ``input`` a whole body."""
    plain = []
    for error in errors:
        item = {"type": error.get("type"), "loc": list(error.get("loc", ())), "msg": error.get("msg")}
        if "ctx" in error:
            item["ctx"] = {key: value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
                           for key, value in error["ctx"].items()}
        value = error.get("input")
        if value is None or isinstance(value, (str, int, float, bool)):
            item["input"] = value[:_ECHO_LIMIT * 4] if isinstance(value, str) else value
        plain.append(item)
    return plain


async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    body = ErrorBody(message=readable_message(errors), detail=_plain_errors(errors))
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=422)


async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    message = exc.detail if isinstance(exc.detail, str) else f"HTTP {exc.status_code}"
    body = ErrorBody(message=message, detail=exc.detail)
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body.model_dump(mode="json", exclude_none=True), status_code=exc.status_code,
                        headers=exc.headers)


def internal_error_body(exc: Exception) -> bytes:
    """The JSON body of a 500: the exception's type only, never its text or traceback."""
    body = ErrorBody(message=f"internal error ({type(exc).__name__}); the server log has the details")
    return body.model_dump_json(exclude_none=True).encode()


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    # Reached only where service.middleware.ServiceMiddleware is not installed (it answers first).
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return Response(internal_error_body(exc), status_code=500, media_type="application/json")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(Exception, _unexpected_error)


# Documented on every route that can answer them, so the OpenAPI schema matches what is sent.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorBody, "description": "invalid parameters or body; `message` says which and why"},
}
# The same for a route whose own responses are not JSON (the page): FastAPI would otherwise document
# the error under the route's media type.
JSON_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"description": ERROR_RESPONSES[422]["description"],
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}},
}
