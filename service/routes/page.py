"""``GET /``: the dispatch-map page (rendered by ``service.page``)."""
from __future__ import annotations

from typing import Annotated, Optional

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from autotuner.gpu import validate_gpu_key
from kernels.base import normalize_dtype
from service.deps import LiveTablesDep
from service.errors import ERROR_RESPONSES, invalid
from service.page import render_page

router = APIRouter(tags=["page"])


@router.get("/", response_class=HTMLResponse, responses={**ERROR_RESPONSES},
            summary="Dispatch maps of every table (HTML), optionally of one GPU and/or dtype")
def page(
    live: LiveTablesDep,
    gpu: Annotated[Optional[str], Query(max_length=128, description="only this GPU model")] = None,
    dtype: Annotated[Optional[str], Query(max_length=32, description="only this dtype (aliases accepted)")] = None,
) -> HTMLResponse:
    # A sync route: rendering many tables is CPU work that should not hold the event loop.
    try:
        gpu_key = validate_gpu_key(gpu) if gpu else None
    except ValueError as exc:
        raise invalid("query", "gpu", str(exc), gpu) from None
    try:
        canonical_dtype = normalize_dtype(dtype) if dtype else None
    except ValueError as exc:
        raise invalid("query", "dtype", str(exc), dtype) from None
    return HTMLResponse(render_page(live, gpu_key, canonical_dtype))
