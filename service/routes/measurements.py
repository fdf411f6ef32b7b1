"""``GET /measurements``: raw sweep rows, filtered and paged (every status, not only the winners)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from fastapi import APIRouter, Query

from autotuner.records.exchange import MAX_DIM, MEASUREMENT_STATUSES, TIMING_METHODS
from db.queries import MEASUREMENT_FIELDS, search_measurements
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES
from service.params import DTYPE_HELP, DtypeName, canonical_dtype, gpu_key
from service.schemas import MeasurementOut, MeasurementPage

router = APIRouter(tags=["measurements"])

MAX_PAGE = 1000
MAX_OFFSET = 2**31 - 1
# An unauthenticated caller must not be able to pull tens of MB per request: a failure's error text
# (a compiler log can be 64 KB) is cut, and a page stops adding items past PAGE_BYTES of JSON.
ERROR_CHARS = 2000
PAGE_BYTES = 1 << 20


@router.get("/measurements", response_model=MeasurementPage, responses={**ERROR_RESPONSES},
            summary="Measurements matching the filters, one page at a time")
def measurements(
    session: SessionDep,
    gpu: Annotated[Optional[str], Query(max_length=128, description="GPU model key")] = None,
    dtype: Annotated[Optional[DtypeName], Query(description=DTYPE_HELP)] = None,
    variant: Annotated[Optional[str], Query(max_length=64)] = None,
    status: Annotated[Optional[Literal[MEASUREMENT_STATUSES]], Query()] = None,  # type: ignore[valid-type]
    m: Annotated[Optional[int], Query(ge=0, le=MAX_DIM)] = None,
    n: Annotated[Optional[int], Query(ge=1, le=MAX_DIM)] = None,
    timing_method: Annotated[Optional[Literal[TIMING_METHODS]], Query()] = None,  # type: ignore[valid-type]
    run_id: Annotated[Optional[int], Query(ge=1, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"page size, 1..{MAX_PAGE}")] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="rows to skip")] = 0,
) -> MeasurementPage:
    # A blank gpu filter matches nothing (it names no GPU) rather than being ignored.
    gpu_model = None if gpu is None else (gpu_key(gpu) or "")
    total, rows = search_measurements(
        session, gpu_key=gpu_model, dtype=canonical_dtype(dtype) if dtype else None, variant=variant, status=status, m=m, n=n,
        timing_method=timing_method, run_id=run_id, limit=limit, offset=offset,
    )
    items: list[MeasurementOut] = []
    size = 0
    for row, candidate, run, gpu_model in rows:
        fields = {field: getattr(row, field) for field in MEASUREMENT_FIELDS}
        error = fields.pop("error")
        item = MeasurementOut(
            id=row.id, run_id=row.run_id, gpu=gpu_model.key, timing_method=run.timing_method,
            variant=candidate.variant, config_key=candidate.config_key, config=candidate.config,
            source_hash=candidate.source_hash, m=row.m, n=row.n, dtype=row.dtype, created_at=row.created_at,
            error=error[:ERROR_CHARS] if error else error, error_chars=len(error) if error else None, **fields,
        )
        size += len(item.model_dump_json())
        if items and size > PAGE_BYTES:
            break
        items.append(item)
    following = offset + len(items)
    return MeasurementPage(total=total, limit=limit, offset=offset, items=items,
                           next_offset=following if following < total else None)
