"""One-pass softmax with the row cached in registers plus dynamic shared memory (``smem_cache.cu``).

Two variants of one kernel template, told apart by how much shared memory a block may take:

- ``cuda_smem_cache_medium``: at most 48 KB (no opt-in), so several blocks share an SM;
- ``cuda_smem_cache_extreme``: more than 48 KB, up to the device's opt-in limit per block
  (227 KB on an H100, read from ``loader.device_limits()``; the H100 figure where no GPU is present).

A config is (block, regs): threads per row and 16-byte vectors each thread keeps in registers; the
rest of the row goes to shared memory, sized from N at every launch. ``n_min`` keeps each variant
to the rows it exists for (rows that fit the registers belong to the register-resident variants;
rows that fit 48 KB of shared memory to ``medium``).
"""
from __future__ import annotations

from typing import ClassVar

from kernels.base import KernelConfig, LaunchGeometry
from kernels.cuda import loader
from kernels.cuda.common import CudaVariant
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.two_pass import MAX_GRID_X, VECTOR_BYTES, vector_width

DEFAULT_LIMIT = 48 * 1024  # dynamic shared memory a launch gets without the opt-in attribute
H100_OPTIN = 232448  # cudaDevAttrMaxSharedMemoryPerBlockOptin of sm_90 (227 KB)
STATIC_RESERVE = 1024  # the block reduction's static scratch (<= 256 B), rounded up


def cache_geometry(block: int, regs: int, dtype: str) -> LaunchGeometry:
    """One block per row; dynamic shared memory for rows of n: the body vectors past the register part
    (REGS per thread), 16 B each. A row has at most n // VEC whole vectors (the kernel's smx::row_split)."""
    return LaunchGeometry(vec=vector_width(dtype), held=regs * block)


def cache_bytes(block: int, regs: int, n: int, dtype: str) -> int:
    """Dynamic shared memory for rows of n (``cache_geometry``'s)."""
    return cache_geometry(block, regs, dtype)(1, n)[1]


def capacity(block: int, regs: int, smem_bytes: int, dtype: str) -> int:
    """Longest row (elements) whose body fits the registers plus ``smem_bytes`` of cache."""
    return (regs * block + smem_bytes // VECTOR_BYTES) * vector_width(dtype)


class _SmemCacheCuda(CudaVariant):
    seed = "004"
    source = "smem_cache.cu"
    CONFIGS: ClassVar[tuple[tuple[int, int], ...]]

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=block, regs=regs) for block, regs in self.CONFIGS]

    def smem_budget(self) -> int:
        """Dynamic shared memory one block may use (bytes)."""
        raise NotImplementedError

    def n_floor(self, block: int, regs: int, dtype: str) -> int:
        """Rows at or below this length are another variant's business."""
        return regs * block * vector_width(dtype)

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        block, regs = int(config["block"]), int(config["regs"])
        return {
            "n_min": self.n_floor(block, regs, dtype) + 1,
            "n_max": capacity(block, regs, self.smem_budget(), dtype),
            "m_max": MAX_GRID_X,
        }

    def requirements(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        block, regs = int(config["block"]), int(config["regs"])
        n_max = capacity(block, regs, self.smem_budget(), dtype)
        return {"min_arch": self.min_arch, "smem_per_block": cache_bytes(block, regs, n_max, dtype) + STATIC_RESERVE}

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return f"softmax_smem_cache<{CUDA_TYPE[dtype]}, {config['block']}, {config['regs']}>"

    def geometry(self, config: KernelConfig, dtype: str):
        return cache_geometry(int(config["block"]), int(config["regs"]), dtype)


class SmemCacheMediumCuda(_SmemCacheCuda):
    name = "cuda_smem_cache_medium"
    description = (
        "One block per row, read once: REGS 16-byte vectors per thread in registers, the rest of the "
        "row in at most 48 KB of dynamic shared memory (cp.async), then one MaxSum reduction."
    )
    CONFIGS = ((256, 8), (512, 4), (512, 8), (1024, 4), (1024, 8))

    def smem_budget(self) -> int:
        return DEFAULT_LIMIT - STATIC_RESERVE


class SmemCacheExtremeCuda(_SmemCacheCuda):
    name = "cuda_smem_cache_extreme"
    description = (
        "One block per row, read once: registers plus more than 48 KB of dynamic shared memory, up "
        "to the device's opt-in limit per block (227 KB on Hopper)."
    )
    CONFIGS = ((512, 8), (1024, 4), (512, 16), (1024, 8))

    def __init__(self, optin_smem: int | None = None) -> None:
        self._optin = optin_smem  # tests pin it; None: the current device's, H100's without one

    def smem_budget(self) -> int:
        return self.optin_smem() - STATIC_RESERVE

    def optin_smem(self) -> int:
        if self._optin is None:
            try:
                self._optin = int(loader.device_limits()[1])
            except Exception:  # no CuPy or no GPU: describe the configs for an H100
                self._optin = H100_OPTIN
        return self._optin

    def n_floor(self, block: int, regs: int, dtype: str) -> int:
        # rows that fit the registers plus 48 KB are medium's (same kernel, no opt-in needed)
        return capacity(block, regs, DEFAULT_LIMIT - STATIC_RESERVE, dtype)
