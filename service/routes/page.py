"""``GET /``: the dispatch-map page (rendered by ``service.page``)."""
from __future__ import annotations

from typing import Annotated, Optional

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from service.deps import LiveTablesDep
from service.errors import JSON_ERROR_RESPONSES
from service.page import render_page
from service.params import DTYPE_HELP, DtypeName, canonical_dtype, gpu_key

router = APIRouter(tags=["page"])


@router.get("/", response_class=HTMLResponse, responses={**JSON_ERROR_RESPONSES},
            summary="Dispatch maps of every table (HTML), optionally of one GPU and/or dtype")
def page(
    live: LiveTablesDep,
    gpu: Annotated[Optional[str], Query(max_length=128, description="only this GPU model")] = None,
    dtype: Annotated[Optional[DtypeName], Query(description="only this dtype: " + DTYPE_HELP)] = None,
) -> HTMLResponse:
    # A sync route: rendering many tables is CPU work that should not hold the event loop.
    return HTMLResponse(render_page(live, gpu_key(gpu), canonical_dtype(dtype) if dtype else None))
