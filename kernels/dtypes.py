"""Dtype names: the three a variant may declare, their spellings and sizes.

A leaf module (it imports only ``sys``, to check the package is ours): the embedded lookup (``autotuner/lookup/select.py``) normalises a
caller's dtype with it, and a first lookup in a fresh process must not pay for the kernel contract's
imports (``kernels.base`` re-exports these names).
"""
from __future__ import annotations

import sys

if not getattr(sys.modules.get("kernels"), "__softmax_autotuner__", False):  # kernels/__init__.py says why
    raise ImportError(
        f"the package `kernels` ({getattr(sys.modules.get('kernels'), '__file__', None) or 'a folder without __init__.py'}) "
        "is not softmax-autotuner's: its `kernels/__init__.py` is missing or another distribution's (Hugging Face's "
        "kernel hub, which transformers loads, installs one too). Install softmax-autotuner into an environment of "
        "its own (python -m venv); where it was alone, reinstall it: pip install --force-reinstall --no-deps softmax-autotuner")

DTYPES: tuple[str, ...] = ("fp32", "fp16", "bf16")
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}
DTYPE_ALIASES: dict[str, str] = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
}


def normalize_dtype(name: str) -> str:
    """Map a dtype spelling (``float16``, ``half``, ``torch.bfloat16``...) to fp32 / fp16 / bf16."""
    key = str(name).strip().lower().removeprefix("torch.")
    try:
        return DTYPE_ALIASES[key]
    except KeyError:
        raise ValueError(
            f"unknown dtype {name!r}; accepted: {', '.join(sorted(DTYPE_ALIASES))}"
        ) from None
