"""One block per row, row in registers, three fused phases: block max, exp and block sum,
normalize and store (seed 000). Source: ``block_fused.cu``."""
from __future__ import annotations

from kernels.cuda.block_online import BlockRowVariant


class BlockFusedCuda(BlockRowVariant):
    name = "cuda_block_fused"
    seed = "000"
    source = "block_fused.cu"
    kernel = "softmax_block_fused"
    description = (
        "one block per row, row in registers (16-byte loads, any N via scalar head/tail), block max, "
        "then exp and block sum, then normalize from registers"
    )
    left_out = ((128, 1), (512, 4))
