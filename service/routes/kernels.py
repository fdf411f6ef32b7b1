"""``GET /kernels``: every registered variant, its configs and the seed it comes from."""
from __future__ import annotations

from fastapi import APIRouter

from autotuner.report.catalog import describe_variants
from service.schemas import KernelInfo

router = APIRouter(tags=["kernels"])


@router.get("/kernels", response_model=list[KernelInfo], summary="Registered softmax variants and their configs")
def kernels() -> list[KernelInfo]:
    # Availability is not checked: the server usually has no GPU, and checking would import GPU
    # libraries. A sync route, so the registry's first (importing) call runs off the event loop.
    return [KernelInfo.model_validate(entry) for entry in describe_variants(check_available=False)]
