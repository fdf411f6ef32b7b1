"""Query and path parameter types shared by the routes.

``dtype`` is a fixed set, documented as an enum in the OpenAPI schema: every spelling
``kernels.dtypes.normalize_dtype`` accepts (``fp16``, ``float16``, ``half``, ``bfloat16``...), also with a
``torch.`` prefix, in any letter case. GPU keys are an open set (new models appear), so an unknown
one is a 404 listing the known ones rather than a validation error.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from autotuner.lookup.gpu import validate_gpu_key
from kernels.dtypes import DTYPE_ALIASES, normalize_dtype

DTYPE_SPELLINGS: tuple[str, ...] = tuple(sorted(DTYPE_ALIASES)) + tuple(f"torch.{name}" for name in sorted(DTYPE_ALIASES))


def _folded(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


DtypeName = Annotated[Literal[DTYPE_SPELLINGS], BeforeValidator(_folded)]  # type: ignore[valid-type]
DTYPE_HELP = "fp32, fp16 or bf16, or an alias (float16, half, bfloat16, ...; any case, torch. prefix allowed)"


def canonical_dtype(spelling: str) -> str:
    """fp32 / fp16 / bf16 for a spelling that ``DtypeName`` already accepted."""
    return normalize_dtype(spelling)


def gpu_key(text: str | None) -> str | None:
    """The table key for a GPU as a client names it (``h100``, ``NVIDIA H100 80GB HBM3``); None when
    blank, so that the caller decides what "no GPU" means (the default GPU, or no filter)."""
    if text is None or not text.strip():
        return None
    return validate_gpu_key(text)
