"""Softmax kernel variants: CUDA C++ (through CuPy), Triton, CuTe DSL, torch and third-party peers.

``all_variants()`` is the registry (``kernels/registry.py``), ``kernels/base.py`` the contract every
variant honours, ``kernels/dtypes.py`` the dtype names. Importing this package imports neither torch,
CuPy nor Triton, nor those modules until one of their names is read.
"""
from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (several ms of a first lookup)
if TYPE_CHECKING:
    from typing import Any

    from kernels.base import DTYPES, Build, KernelConfig, Resources, Support, Variant
    from kernels.dtypes import normalize_dtype
    from kernels.registry import all_variants, get_variant, register_variant, unregister_variant

# name -> the module that defines it. The names are read from there on first access (PEP 562): importing
# ``kernels.dtypes`` (the embedded lookup does) must not import the kernel contract and the registry.
_HOMES: dict[str, str] = {
    "DTYPES": "kernels.dtypes", "normalize_dtype": "kernels.dtypes",
    "Build": "kernels.base", "KernelConfig": "kernels.base", "Resources": "kernels.base", "Support": "kernels.base",
    "Variant": "kernels.base",
    "all_variants": "kernels.registry", "get_variant": "kernels.registry",
    "register_variant": "kernels.registry", "unregister_variant": "kernels.registry",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = sorted(_HOMES)
