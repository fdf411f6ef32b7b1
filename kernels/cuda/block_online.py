"""One block per row, row in registers, online (max, sum) per thread and a single MaxSum block
reduction (seeds 000 / 002 / 003). Source: ``block_online.cu``.

``BlockRowVariant`` is the geometry the block-per-row register kernels share (block_fused,
packed16): config ``block`` x ``items`` 16-byte vectors per thread, one block per row.
"""
from __future__ import annotations

from typing import ClassVar

from kernels.base import DTYPE_BYTES, KernelConfig
from kernels.cuda.common import CudaVariant, ONE_BLOCK_PER_ROW
from kernels.cuda.loader import CUDA_TYPE

GRID_X_MAX = 2**31 - 1


def vec_of(dtype: str) -> int:
    """Elements in one 16-byte load."""
    return 16 // DTYPE_BYTES[dtype]


# The (block, items) geometries the block-per-row kernels are swept at, each kernel leaving out the
# ones it does not sweep (``left_out``). Small blocks serve many short rows; 1024-thread blocks reach
# 40960 fp32 / 81920 16-bit elements, where one row fills most of an SM's register file.
BLOCK_ITEMS: tuple[tuple[int, int], ...] = (
    (128, 1), (128, 2), (128, 4), (128, 8),
    (256, 4), (256, 8),
    (512, 4), (512, 8),
    (1024, 4), (1024, 8), (1024, 10),
)


class BlockRowVariant(CudaVariant):
    """One block of ``block`` threads per row, each thread holding ``items`` 16-byte vectors: a row
    of N fits when N <= block * items * (16 / dtype bytes), any N below that (scalar head/tail)."""

    kernel: ClassVar[str]  # the template: kernel<T, block, items>
    left_out: ClassVar[tuple[tuple[int, int], ...]] = ()  # geometries of BLOCK_ITEMS this kernel is not swept at

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=block, items=items) for block, items in BLOCK_ITEMS
                if (block, items) not in self.left_out]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        return {"n_max": int(config["block"]) * int(config["items"]) * vec_of(dtype), "m_max": GRID_X_MAX}

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return f"{self.kernel}<{CUDA_TYPE[dtype]}, {int(config['block'])}, {int(config['items'])}>"

    def geometry(self, config: KernelConfig, dtype: str):
        return ONE_BLOCK_PER_ROW


class BlockOnlineCuda(BlockRowVariant):
    name = "cuda_block_online"
    seed = "000/002/003"
    source = "block_online.cu"
    kernel = "softmax_block_online"
    description = (
        "one block per row, row in registers (16-byte loads, any N via scalar head/tail), per-thread "
        "(max, sum) merged in one MaxSum block reduction, then normalize from registers"
    )
