"""Third-party softmax kernels as candidates: QuACK (CuTe DSL) and Liger (Triton).

They are peers to measure against, and may win shapes. ``available()`` holds only where the package
imports and torch sees a GPU; importing this module imports neither package. ``build`` finds the
library's forward entry point that writes into a caller's tensor, so the timed launch allocates
nothing, as the project's contract asks:

- QuACK: ``quack.softmax._softmax_fwd(x, out)``, what its public ``softmax`` calls.
- Liger: its own Triton kernels (``_softmax_single_block_forward_kernel`` and, in versions that have
  it, ``_softmax_multi_block_forward_kernel``) launched with its ``calculate_settings``, the way its
  ``_softmax_forward`` does, but into ``out`` instead of a fresh tensor.

Where a version lacks those names, the public function is called and its result copied into ``out``:
correct, but the timing then includes an allocation and a copy; the build logs a warning saying so.
Shapes a library rejects raise from ``launch`` (QuACK asserts, Liger raises RuntimeError past 64K in
versions without the multi-block kernel): the sweep records the failure and goes on. Nothing here
raises on import.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
from pathlib import Path
from typing import Any, Callable, ClassVar

from kernels.base import (
    DTYPE_BYTES,
    Build,
    KernelConfig,
    Resources,
    Support,
    Variant,
    hash_files,
    hash_text,
    torch_cuda_support,
)

log = logging.getLogger(__name__)


def _package_available(module: str, pip_name: str) -> Support:
    try:
        importlib.import_module(module)
    except Exception as exc:  # a missing package, or one that fails on import (no CUDA toolkit, ...)
        return Support(False, f"{module} (pip {pip_name}) not importable: {type(exc).__name__}: {exc}")
    return torch_cuda_support()


def _takes_out(fn: Any) -> bool:
    """Whether ``fn(x, out)`` is its call form. A torch custom op (QuACK registers ``_softmax_fwd``
    as one) shows only ``(*args, **kwargs)``; the function it wraps has the real parameters."""
    try:
        return "out" in inspect.signature(getattr(fn, "_init_fn", fn)).parameters
    except (TypeError, ValueError):  # no introspectable signature: trust the name
        return True


def _copying(forward: Callable[[Any], Any], what: str) -> Callable[[Any, Any], None]:
    log.warning("%s: no entry point writing into a given tensor; launches allocate and copy", what)

    def launch(x: Any, out: Any) -> None:
        if x.shape[0]:
            out.copy_(forward(x))

    return launch


class ExternalVariant(Variant):
    """A library's softmax: its code is the installed distribution, so the source hash stored with
    every measurement covers this wrapper and the distribution's version."""

    seed = "external"
    backend = "external"
    distribution: ClassVar[str]

    def source_files(self) -> list[Path]:
        return [Path(__file__)]

    def source_hash(self) -> str:
        try:
            version = importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        return hash_text(hash_files(self.source_files()), self.distribution, version)


class QuackSoftmax(ExternalVariant):
    name = "quack_softmax"
    distribution = "quack-kernels"
    description = "QuACK (Dao-AILab) CuTe DSL softmax forward, one CTA or a cluster per row"

    def available(self) -> Support:
        return _package_available("quack.softmax", self.distribution)

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig()]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        # QuACK copies rows with 128-bit accesses and asserts N is a whole number of them
        return {"n_multiple_of": 16 // DTYPE_BYTES[dtype]}

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        module = importlib.import_module("quack.softmax")
        forward = getattr(module, "_softmax_fwd", None)
        if forward is not None and _takes_out(forward):

            def launch(x: Any, out: Any) -> None:
                if x.shape[0]:
                    forward(x, out)

        else:
            public = getattr(module, "softmax_fwd", None) or module.softmax
            launch = _copying(public, self.name)
        return Build(self.name, config, dtype, launch, Resources())


_LIGER_SIGNATURE = ["Y_ptr", "Y_row_stride", "X_ptr", "X_row_stride", "n_cols", "BLOCK_SIZE"]


class LigerSoftmax(ExternalVariant):
    name = "liger_softmax"
    distribution = "liger-kernel"
    min_arch = 80  # Triton's oldest supported architecture; QuACK (the backend default, 90) needs clusters
    description = "Liger-Kernel Triton softmax forward (one program per row; tiled past 64K where it has it)"

    def available(self) -> Support:
        return _package_available("liger_kernel.ops.softmax", self.distribution)

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig()]

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        module = importlib.import_module("liger_kernel.ops.softmax")
        single = getattr(module, "_softmax_single_block_forward_kernel", None)
        multi = getattr(module, "_softmax_multi_block_forward_kernel", None)
        settings = getattr(module, "calculate_settings", None)
        fused_max = getattr(module, "MAX_FUSED_SIZE", None)  # newer versions tile rows past it
        kernels_match = all(
            k is None or list(getattr(k, "arg_names", [])) == _LIGER_SIGNATURE for k in (single, multi)
        )
        if single is None or settings is None or not kernels_match:
            public = getattr(module, "LigerSoftmaxFunction")
            return Build(self.name, config, dtype, _copying(public.apply, self.name), Resources())

        def launch(x: Any, out: Any) -> None:
            rows, cols = x.shape
            if rows == 0:
                return
            if fused_max is None or cols <= fused_max:
                block, warps = settings(cols)  # raises past 64K in versions without the tiled path
                kernel = single if cols <= block or multi is None else multi
            else:
                block, warps = settings(fused_max)
                kernel = multi
            kernel[(rows,)](out, out.stride(0), x, x.stride(0), cols, BLOCK_SIZE=block, num_warps=warps)

        return Build(self.name, config, dtype, launch, Resources())
