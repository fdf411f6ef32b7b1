"""Online two-pass softmax (``two_pass.cu``): any N with O(1) registers per thread.

One block per row; pass 1 streams the row into an online (max, sum), pass 2 re-reads it (L2) and
writes the output. It is the variant that runs every shape, and the yardstick for the one-pass
variants that keep the row on chip (``smem_cache``, ``cluster_split``).

The small helpers here (vector width, row and grid limits) are shared by the other large-row
variants of this package.
"""
from __future__ import annotations

from typing import ClassVar

from kernels.base import DTYPE_BYTES, KernelConfig
from kernels.cuda.common import CudaVariant, ONE_BLOCK_PER_ROW
from kernels.cuda.loader import CUDA_TYPE

VECTOR_BYTES = 16  # every load and store of a row body is one 16-byte vector
MAX_ROW = 2**31 - 1  # smx::row_split counts a row's elements in int
MAX_GRID_X = 2**31 - 1  # gridDim.x limit


def vector_width(dtype: str) -> int:
    """Elements per 16-byte vector: 4 for fp32, 8 for fp16 / bf16."""
    return VECTOR_BYTES // DTYPE_BYTES[dtype]


class TwoPassCuda(CudaVariant):
    name = "cuda_online_two_pass"
    seed = "000/004"
    source = "two_pass.cu"
    description = (
        "One block per row, two passes over the row: an online (max, sum) of 16-byte vectors with "
        "UNROLL loads in flight, then a read-only re-read (L2) that writes exp(x - max) / sum. Any N."
    )
    # (block, unroll): threads per row and 16-byte loads in flight per thread.
    CONFIGS: ClassVar[tuple[tuple[int, int], ...]] = ((256, 4), (256, 8), (512, 4), (512, 8), (1024, 2), (1024, 4))

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=block, unroll=unroll) for block, unroll in self.CONFIGS]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        return {"n_max": MAX_ROW, "m_max": MAX_GRID_X}

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return f"softmax_two_pass<{CUDA_TYPE[dtype]}, {config['block']}, {config['unroll']}>"

    def geometry(self, config: KernelConfig, dtype: str):
        return ONE_BLOCK_PER_ROW
