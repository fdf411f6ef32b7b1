"""fp16 / bf16 only: one block per row, 8 x 16-bit values per 128-bit load, row packed in
registers, half2 / bfloat162 max and pairwise conversions (seed 004). Source: ``packed16.cu``."""
from __future__ import annotations

from kernels.cuda.block_online import BlockRowVariant


class Packed16Cuda(BlockRowVariant):
    name = "cuda_packed16"
    seed = "004"
    source = "packed16.cu"
    kernel = "softmax_packed16"
    dtypes = ("fp16", "bf16")
    description = (
        "fp16/bf16: one block per row, 8 values per 128-bit load, row packed in registers, "
        "half2/bfloat162 max, one MaxSum block reduction, pairwise float conversions"
    )
    left_out = ((128, 8),)  # N fits when N <= block * items * 8
