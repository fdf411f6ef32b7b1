"""Softmax kernel variants: CUDA C++ (through CuPy), Triton, CuTe DSL, torch and third-party peers.

``all_variants()`` is the registry (``kernels/registry.py``), ``kernels/base.py`` the contract every
variant honours, ``kernels/dtypes.py`` the dtype names. Importing this package imports neither torch,
CuPy nor Triton, nor those modules until one of their names is read.
"""
from __future__ import annotations

import importlib
import os

# The mark ``kernels.dtypes`` looks for: this file, not another distribution's ``kernels/__init__.py``,
# defines the package (see below).
__softmax_autotuner__ = True

# Hugging Face's kernel hub (the ``kernels`` distribution, which transformers loads) installs a top-level
# ``kernels`` package too; installed into one folder, the two overwrite each other's files. Its files
# beside ours (``_internals/`` since 0.11, ``layer.py`` and ``lockfile.py`` before) mean such a shared
# folder: refused here, on every import of it, rather than half-working (pip installs a wheel without
# running code, so a prebuilt wheel cannot refuse earlier; an install from the source tree does:
# scripts/build_backend.py).
_FOREIGN = {"_internals", "_rust.pyi", "layer.py", "lockfile.py"}
if not _FOREIGN.isdisjoint(os.listdir(os.path.dirname(os.path.abspath(__file__)))):
    raise ImportError(
        f"the package folder {os.path.dirname(os.path.abspath(__file__))} holds both softmax-autotuner's `kernels` "
        "and Hugging Face's `kernels` (the kernel hub transformers loads), which overwrite each other's files. "
        "Install softmax-autotuner into an environment of its own (python -m venv), then reinstall the other "
        "here: pip uninstall -y softmax-autotuner kernels && pip install kernels")

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
