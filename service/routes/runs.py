"""``POST /runs``: a GPU host uploads its sweep results (the exchange document the CLI exports).

Order of checks, each before any work of the next: the bearer token (401), known damage to the
database (503), room for another upload (503 with ``Retry-After``), the body size (413, counted while
the body streams in, chunked bodies too), the JSON and its schema (422), the runs' GPU models against
the token's (403) and their plausibility (422, ``autotuner/records/plausibility.py``: the message names
the rule and the first rows), then one transaction for the whole document, so nothing is half written,
committed only while the client still waits for the answer (a client that closed its connection gets
nothing stored); its runs are stored with the token's uploader name, and a run stored already is never
rewritten (409, ``autotuner/records/provenance.py``). The body streams to a spool file (the server holds at
most ``SPOOL_BUFFER`` bytes of it at a time, and admits at most ``MAX_PENDING`` uploads at once: a
global memory bound), and the app's supervised upload process (``service/upload_worker.py``) checks
and writes it from there, off the serving process's GIL. A damaged or read-only database answers
503, a full disk 507, each with the reason. The body is read here rather than declared as a FastAPI
body parameter because FastAPI parses a declared body before it runs dependencies, and an
unauthenticated caller must get 401 whatever it sent.
"""
from __future__ import annotations

import logging
import os
import tempfile

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError

from autotuner.records.exchange import ImportSummary
from db.integrity import StorageProblem
from service.deps import SettingsDep, UploadAuthDep
from service.errors import ERROR_RESPONSES, ApiError, invalid
from service.schemas import ErrorBody
from service.upload_worker import UploadWorker, import_file

log = logging.getLogger(__name__)
router = APIRouter(tags=["runs"])

MAX_PENDING = 8  # uploads admitted at once (spooling, queued or being written)
SPOOL_BUFFER = 1 << 20  # bytes of one body held in memory before they are written to its spool file
RETRY_AFTER_S = 10

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
               409: {"model": ErrorBody, "description": "a run stored already: sent by another uploader, or "
                     "re-sent with other rows (a stored run is never rewritten)"},
               413: {"model": ErrorBody, "description": "body larger than AUTOTUNER_MAX_UPLOAD_BYTES"},
               503: {"model": ErrorBody, "description": "database damaged or read-only, too many uploads at once, or "
                     "the upload process died on this document (the last two with Retry-After)"},
               507: {"model": ErrorBody, "description": "no room on the database's disk, or for the spooled body"},
               **ERROR_RESPONSES,
               422: {"model": ErrorBody, "description": "not an exchange document, or implausible rows: "
                                                        "`message` names the rule and the first rows"}},
    openapi_extra={"requestBody": UPLOAD_BODY},
    summary="Upload sweep results (bearer token required)",
)
async def upload_runs(request: Request, uploader: UploadAuthDep, settings: SettingsDep) -> ImportSummary:
    state = request.app.state
    if state.condition.damage is not None:
        raise ApiError(503, f"uploads are refused: {state.condition.damage.reason}")
    worker: UploadWorker = state.upload_worker
    if worker.pending >= MAX_PENDING:
        raise ApiError(503, f"{worker.pending} uploads are already in progress; retry shortly",
                       headers={"Retry-After": str(RETRY_AFTER_S)})
    worker.pending += 1
    try:
        with tempfile.TemporaryDirectory(prefix="autotuner-upload-") as folder:
            path = os.path.join(folder, "body.json")
            await _spool_body(request, settings.max_upload_bytes, path)
            await request.is_disconnected()  # reading resumes, so that a client that goes is seen going

            async def still_wanted() -> bool:
                return not await request.is_disconnected()

            engine = state.engine
            if engine.url.get_backend_name() == "sqlite" and engine.url.database in (None, "", ":memory:"):
                # this process's own database, which the upload process cannot see
                outcome, value = await anyio.to_thread.run_sync(
                    import_file, engine, path, uploader.gpus, None, lambda: anyio.from_thread.run(still_wanted),
                    uploader.name)
            else:
                outcome, value = await worker.run(path, uploader.gpus, still_wanted, uploader.name)
    finally:
        worker.pending -= 1
    if outcome == "ok":
        return ImportSummary.model_validate(value)
    if outcome == "invalid":
        raise RequestValidationError(value)
    if outcome == "refused":
        status, message, problems = value
        log.warning("upload by %r refused: %s", uploader.name, message)
        raise ApiError(status, message, detail=problems)
    if outcome == "storage":
        problem = StorageProblem(*value)
        state.condition.note_problem(problem)
        raise ApiError(problem.status, f"upload not stored: {problem.reason}")
    if outcome == "abandoned":
        log.warning("upload by %r not stored: the client closed its connection before the commit", uploader.name)
        raise ApiError(499, "the client closed its connection before the upload was committed; nothing was stored")
    if outcome == "died":
        raise ApiError(503, f"the upload process died while importing this document ({value}); nothing of it was "
                       "stored; a new upload process is starting: retry", headers={"Retry-After": str(RETRY_AFTER_S)})
    raise UploadFailed(value)


class UploadFailed(RuntimeError):
    """The upload process's write failed; it logged the traceback. Answered as a 500."""


async def _spool_body(request: Request, limit: int, path: str) -> None:
    """The body into ``path``, refused with 413 as soon as it passes ``limit`` (declared or counted)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"body of {declared} bytes is over this server's limit of {limit} bytes")
    size, buffered = 0, []
    try:
        with open(path, "wb") as spool:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"body is over this server's limit of {limit} bytes")
                buffered.append(chunk)
                if sum(map(len, buffered)) >= SPOOL_BUFFER:
                    await anyio.to_thread.run_sync(spool.write, b"".join(buffered))
                    buffered.clear()
            await anyio.to_thread.run_sync(spool.write, b"".join(buffered))
    except OSError as exc:
        raise ApiError(507, f"upload not stored: no room to spool it on the server ({exc.strerror})") from None
    if size == 0 or not _has_content(path):
        raise invalid("body", "runs", "the body is empty; send the JSON document `autotuner export` writes")


def _has_content(path: str) -> bool:
    with open(path, "rb") as spool:
        while chunk := spool.read(1 << 16):
            if chunk.strip():
                return True
    return False
