"""A deliberately faulting variant, registered only in tests (``--setup`` hook / WorkerRunner setup):
its launch stores far outside any allocation, so the CUDA context reports an illegal address, as a
real kernel bug would. Importing this module imports nothing of the GPU; ``build`` does."""
from __future__ import annotations

from typing import Any

from kernels import all_variants, register_variant
from kernels.base import SUPPORTED, Build, KernelConfig, Support, Variant


class FaultingVariant(Variant):
    name = "test_faulting"
    seed = "test"
    backend = "triton"
    description = "stores 1 TiB past its output: an illegal address on every launch (tests only)"

    def available(self) -> Support:
        import torch

        return SUPPORTED if torch.cuda.is_available() else Support(False, "no CUDA device")

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=1)]

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        import triton
        import triton.language as tl

        @triton.jit
        def store_far_away(out_ptr):
            tl.store(out_ptr + (1 << 40), 1.0)

        def launch(x: Any, out: Any) -> None:
            store_far_away[(1,)](out)

        return Build(self.name, config, dtype, launch)


def register() -> None:
    """Setup hook; idempotent (the sweep process and every worker call it)."""
    if all(v.name != FaultingVariant.name for v in all_variants()):
        register_variant(FaultingVariant())
