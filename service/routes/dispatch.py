"""``GET /dispatch``: which kernel to run for (m, n, dtype) on a GPU model."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from fastapi import APIRouter, Query

from autotuner.exchange import TIMING_METHODS
from autotuner.gpu import validate_gpu_key
from autotuner.select import FALLBACK_VARIANT, UnknownGpuError
from kernels.base import DTYPE_ALIASES, normalize_dtype
from service.config import DIM_CEILING
from service.deps import LiveTablesDep, SettingsDep
from service.errors import ERROR_RESPONSES, ApiError, invalid
from service.schemas import DispatchAnswer, ErrorBody

router = APIRouter(tags=["dispatch"])

DTYPE_HELP = "fp32, fp16 or bf16, or an alias: " + ", ".join(sorted(DTYPE_ALIASES)) + " (case-insensitive, torch. prefix allowed)"


@router.get(
    "/dispatch",
    response_model=DispatchAnswer,
    responses={404: {"model": ErrorBody, "description": "no table for this GPU model (body lists the known ones) or dtype"},
               **ERROR_RESPONSES},
    summary="The kernel to run for one softmax shape",
)
async def dispatch(
    live: LiveTablesDep,
    settings: SettingsDep,
    m: Annotated[int, Query(ge=1, le=DIM_CEILING, description="rows; at most AUTOTUNER_MAX_M (default 2**31-1)")],
    n: Annotated[int, Query(ge=1, le=DIM_CEILING, description="row length; at most AUTOTUNER_MAX_N (default 2**31-1)")],
    dtype: Annotated[str, Query(min_length=1, max_length=32, description=DTYPE_HELP)],
    gpu: Annotated[Optional[str], Query(max_length=128, description="GPU model key (h100) or device name; default AUTOTUNER_DEFAULT_GPU")] = None,
    timing_method: Annotated[Literal[TIMING_METHODS], Query(description="which table: cold or warm L2, or CUDA graph")] = "cold",  # type: ignore[valid-type]
) -> DispatchAnswer:
    if m > settings.max_m:
        raise invalid("query", "m", f"m must be at most {settings.max_m} on this server", m)
    if n > settings.max_n:
        raise invalid("query", "n", f"n must be at most {settings.max_n} on this server", n)
    try:
        canonical_dtype = normalize_dtype(dtype)
    except ValueError as exc:
        raise invalid("query", "dtype", str(exc), dtype) from None
    gpu_key = _gpu_key(gpu, settings.default_gpu)
    store = live.store
    known = store.gpus()
    if gpu_key not in known:
        raise ApiError(404, f"no dispatch table for GPU {gpu_key!r}; known GPUs: {', '.join(known) or 'none'}",
                       known_gpus=known)
    if store.get(gpu_key, canonical_dtype, timing_method) is None:
        present = [f"{t.dtype}/{t.timing_method}" for t in store.tables() if t.gpu == gpu_key]
        raise ApiError(404, f"GPU {gpu_key!r} has no {canonical_dtype}/{timing_method} table; it has: {', '.join(present)}",
                       known_gpus=known)
    try:
        choice = store.select(m, n, canonical_dtype, gpu_key, timing_method, allow_fallback=False)
    except UnknownGpuError:
        # The table exists but no candidate of it admits this shape: torch.softmax runs any shape.
        return DispatchAnswer(m=m, n=n, dtype=canonical_dtype, gpu=gpu_key, timing_method=timing_method,
                              variant=FALLBACK_VARIANT, config={}, config_key="", predicted_us=None,
                              source="fallback", exact=False)
    return DispatchAnswer(m=m, n=n, dtype=choice.dtype, gpu=choice.gpu, timing_method=timing_method,
                          variant=choice.variant, config=choice.config, config_key=choice.config_key,
                          predicted_us=choice.predicted_us, source=choice.source, exact=choice.exact)


def _gpu_key(requested: str | None, default: str | None) -> str:
    if requested is None or not requested.strip():
        if default is None:
            raise invalid("query", "gpu", "gpu is required: this server has no AUTOTUNER_DEFAULT_GPU", requested)
        return default
    try:
        return validate_gpu_key(requested)
    except ValueError as exc:
        raise invalid("query", "gpu", str(exc), requested) from None
