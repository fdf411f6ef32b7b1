"""``POST /runs``: a GPU host uploads its sweep results (the exchange document the CLI exports).

Order of checks, each before any work of the next: the bearer token (401), the body size (413), the
JSON and its schema (422), the runs' GPU models against the token's (403) and their plausibility
(422, ``autotuner/records/plausibility.py``), then one transaction for the whole document, so nothing is half written
(concurrent uploads queue for SQLite's write lock rather than fail: see ``write_document``). Parsing and
writing run in the app's upload process (``service/upload_worker.py``), off the serving process's GIL.
The body is read here rather than declared as a FastAPI body parameter because FastAPI parses a
declared body before it runs dependencies, and an unauthenticated caller must get 401 whatever it sent.
"""
from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy import Engine

from autotuner.records.exchange import ExchangeDocument, ImportSummary, parse_document
from autotuner.records.plausibility import RefusedUpload
from service.deps import SettingsDep, UploadAuthDep
from service.errors import ERROR_RESPONSES, ApiError, invalid
from service.schemas import ErrorBody
from service.upload_worker import write_document

log = logging.getLogger(__name__)
router = APIRouter(tags=["runs"])

UPLOAD_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ExchangeDocument"}}},
}


@router.post(
    "/runs",
    status_code=201,
    response_model=ImportSummary,
    responses={401: {"model": ErrorBody, "description": "no, or a wrong, bearer token (or uploads disabled)"},
               403: {"model": ErrorBody, "description": "a run of a GPU model this token may not upload"},
               413: {"model": ErrorBody, "description": "body larger than AUTOTUNER_MAX_UPLOAD_BYTES"},
               **ERROR_RESPONSES,
               422: {"model": ErrorBody, "description": "not an exchange document, or implausible rows: "
                                                        "`message` names the rule and the first rows"}},
    openapi_extra={"requestBody": UPLOAD_BODY},
    summary="Upload sweep results (bearer token required)",
)
async def upload_runs(request: Request, uploader: UploadAuthDep, settings: SettingsDep) -> ImportSummary:
    body = await _read_body(request, settings.max_upload_bytes)
    engine = request.app.state.engine
    if engine.url.get_backend_name() == "sqlite" and engine.url.database in (None, "", ":memory:"):
        try:  # a private in-memory database: this process only
            return await run_in_threadpool(_import, engine, body, uploader.gpus)
        except RefusedUpload as refused:
            raise _refusal(uploader.name, refused.status, str(refused), refused.details()) from None
    if not body.strip():
        _validated(body)  # the empty-body 422, without a trip to the worker
    outcome, value = await request.app.state.upload_worker.run(body, uploader.gpus)
    if outcome == "invalid":
        raise RequestValidationError(value)
    if outcome == "refused":
        raise _refusal(uploader.name, *value)
    if outcome == "error":
        raise UploadFailed(value)
    return ImportSummary.model_validate(value)


class UploadFailed(RuntimeError):
    """The upload worker's write failed; it logged the traceback. Answered as a 500."""


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"body of {declared} bytes is over this server's limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"body is over this server's limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _import(engine: Engine, body: bytes, allowed_gpus: frozenset[str] | None) -> ImportSummary:
    """Parse, validate and write in a worker thread of this process (a private in-memory database,
    which the upload process cannot see)."""
    return write_document(engine, _validated(body), allowed_gpus)


def _refusal(uploader: str, status: int, message: str, problems: list[dict[str, str]]) -> ApiError:
    log.warning("upload by %r refused: %s", uploader, message)
    return ApiError(status, message, detail=problems)


def _validated(body: bytes) -> ExchangeDocument:
    if not body.strip():
        raise invalid("body", "runs", "the body is empty; send the JSON document `autotuner export` writes")
    try:
        return parse_document(body)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None
