"""``GET /dispatch``: which kernel to run for (m, n, dtype) on a GPU model.

``answer_dispatch`` is the whole behaviour; the route and the fast path (``service/fast_dispatch.py``)
both call it with a validated :class:`~service.schemas.DispatchQuery`.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from autotuner.lookup.select import FALLBACK_VARIANT, TableStore, UnknownGpuError
from service.config import Settings
from service.deps import SettingsDep, TableStoreDep
from service.errors import ERROR_RESPONSES, ApiError, invalid
from service.params import canonical_dtype, gpu_key
from service.schemas import DispatchAnswer, DispatchQuery, ErrorBody

router = APIRouter(tags=["dispatch"])


@router.get(
    "/dispatch",
    response_model=DispatchAnswer,
    responses={404: {"model": ErrorBody, "description": "no table for this GPU model (body lists the known ones) or dtype"},
               **ERROR_RESPONSES},
    summary="The kernel to run for one softmax shape",
)
async def dispatch(store: TableStoreDep, settings: SettingsDep, query: Annotated[DispatchQuery, Query()]) -> DispatchAnswer:
    return answer_dispatch(store, settings, query)


def answer_dispatch(store: TableStore, settings: Settings, query: DispatchQuery) -> DispatchAnswer:
    """The answer for a valid query; raises the 422 / 404 errors the API documents. Only this GPU's
    own table answers (never another model's, unlike the embedded ``select_kernel``); a shape that no
    candidate of it admits gets ``torch_softmax``, which runs any shape."""
    m, n, method = query.m, query.n, query.timing_method
    if m > settings.max_m:
        raise invalid("query", "m", f"m must be at most {settings.max_m} on this server", m)
    if n > settings.max_n:
        raise invalid("query", "n", f"n must be at most {settings.max_n} on this server", n)
    dtype = canonical_dtype(query.dtype)
    gpu = gpu_key(query.gpu) or settings.default_gpu
    if gpu is None:
        raise invalid("query", "gpu", "gpu is required: this server has no AUTOTUNER_DEFAULT_GPU")
    if store.get(gpu, dtype, method) is None:  # a table answers: its GPU is known (the list is not made)
        known = store.gpus()
        if gpu not in known:
            raise ApiError(404, f"no dispatch table for GPU {gpu!r}; known GPUs: {', '.join(known) or 'none'}",
                           known_gpus=known)
        present = [f"{t.dtype}/{t.timing_method}" for t in store.tables() if t.gpu == gpu]
        raise ApiError(404, f"GPU {gpu!r} has no {dtype}/{method} table; it has: {', '.join(present)}",
                       known_gpus=known)
    try:
        choice = store.select_canonical(m, n, dtype, gpu, method, allow_fallback=False)  # names normalised above, once
    except UnknownGpuError:  # the table exists, but no candidate of it admits this shape
        return DispatchAnswer(m=m, n=n, dtype=dtype, gpu=gpu, timing_method=method, variant=FALLBACK_VARIANT,
                              config={}, config_key="", predicted_us=None, source="fallback", exact=False)
    return DispatchAnswer(m=m, n=n, dtype=choice.dtype, gpu=choice.gpu, timing_method=method,
                          variant=choice.variant, config=choice.config, config_key=choice.config_key,
                          predicted_us=choice.predicted_us, source=choice.source, exact=choice.exact)
