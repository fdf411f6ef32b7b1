"""``GET /measurements``: raw sweep rows, filtered and paged (every status, not only the winners).

The endpoint is open to anyone, so one request's cost is bounded and it cannot starve ``/dispatch``:
keyset paging (``after`` = the previous page's ``next_after``; no count, no OFFSET scan; at most
``db.queries.SCAN_WINDOW`` ids scanned per request), the query and the JSON built in a worker thread
in the app's read process (:class:`~service.reads.BoundedReads`: its own GIL; one request at a time,
waiting requests cost the event loop nothing), each item serialised once.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy.orm import Session, sessionmaker

from autotuner.records.exchange import MAX_DIM, MEASUREMENT_STATUSES, TIMING_METHODS
from db.queries import search_measurements
from service.errors import ERROR_RESPONSES, invalid
from service.params import DTYPE_HELP, DtypeName, canonical_dtype, gpu_key
from service.schemas import MeasurementOut, MeasurementPage

router = APIRouter(tags=["measurements"])

MAX_PAGE = 1000
MAX_ID = 2**62
# An unauthenticated caller must not be able to pull tens of MB per request: a failure's error text
# (a compiler log can be 64 KB) is cut, and a page stops adding items past PAGE_BYTES of JSON.
ERROR_CHARS = 2000
PAGE_BYTES = 1 << 20
OFFSET_REPLACED = ("offset paging was replaced by keyset paging: send after=<next_after of the previous page> "
                   "(no after, or offset=0, starts at the first row)")


@router.get("/measurements", response_model=MeasurementPage, responses={**ERROR_RESPONSES},
            summary="Measurements matching the filters, one page at a time")
async def measurements(
    request: Request,
    gpu: Annotated[Optional[str], Query(max_length=128, description="GPU model key")] = None,
    dtype: Annotated[Optional[DtypeName], Query(description=DTYPE_HELP)] = None,
    variant: Annotated[Optional[str], Query(max_length=64)] = None,
    status: Annotated[Optional[Literal[MEASUREMENT_STATUSES]], Query()] = None,  # type: ignore[valid-type]
    m: Annotated[Optional[int], Query(ge=0, le=MAX_DIM)] = None,
    n: Annotated[Optional[int], Query(ge=1, le=MAX_DIM)] = None,
    timing_method: Annotated[Optional[Literal[TIMING_METHODS]], Query()] = None,  # type: ignore[valid-type]
    run_id: Annotated[Optional[int], Query(ge=1, le=MAX_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"page size, 1..{MAX_PAGE}")] = 100,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="start after this id: the previous page's next_after")] = 0,
    # Validated up to 2**31 - 1 so that a larger offset gets the message naming `after`; documented as 0 only.
    offset: Annotated[Optional[int], Query(ge=0, le=2**31 - 1, deprecated=True, json_schema_extra={"maximum": 0},
                                           description="replaced by after; only 0 is accepted")] = None,
) -> Response:
    if offset:
        raise invalid("query", "offset", OFFSET_REPLACED, offset)
    filters = {
        # A blank gpu filter matches nothing (it names no GPU) rather than being ignored.
        "gpu_key": None if gpu is None else (gpu_key(gpu) or ""),
        "dtype": canonical_dtype(dtype) if dtype else None, "variant": variant, "status": status, "m": m, "n": n,
        "timing_method": timing_method, "run_id": run_id,
    }
    body = await request.app.state.reads.run_in_process(request.app.state.sessions, page_json, filters, limit, after)
    return Response(body, media_type="application/json")


def page_json(sessions: sessionmaker[Session], filters: dict[str, Any], limit: int, after: int) -> bytes:
    """The page's JSON (a :class:`MeasurementPage`), each item serialised once."""
    with sessions() as session:
        rows, following = search_measurements(session, **filters, limit=limit, after=after)
    items: list[bytes] = []
    size, last_id = 0, after
    for row in rows:
        fields = row._asdict()  # one call: attribute access on a Row costs a lookup per column
        error = fields["error"]
        fields.update(error=error[:ERROR_CHARS] if error else error, error_chars=len(error) if error else None)
        item = MeasurementOut.model_validate(fields).model_dump_json().encode()
        size += len(item) + 1
        if items and size > PAGE_BYTES:
            following = last_id
            break
        items.append(item)
        last_id = fields["id"]
    tail = "null" if following is None else str(following)
    return b'{"limit":%d,"after":%d,"items":[%s],"next_after":%s}' % (limit, after, b",".join(items), tail.encode())
