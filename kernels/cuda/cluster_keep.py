"""``cuda_cluster_split`` for few long 16-bit rows, keeping each element's exponential in fp32
registers between the sum and the store (``cluster_keep.cu``; Hopper only).

Why a variant of its own: ``cluster_split.cu`` exponentiates 16-bit rows twice (once for the sum,
once for the store) so that its large-M configs keep their occupancy; keeping the exps costs two
more registers per element, which only few rows can afford (M = 1-8: at most 8 * C blocks, one per
SM, within one wave for C = 16 on 132 SMs). Changing ``cluster_split.cu`` itself would retire its
recorded H100 and H200 rows, which cannot be re-recorded. fp32 rows already keep their exps in ``cluster_split``, so this variant is 16-bit only.

A config is (cluster, block, packs, smem = 0): the row lives in registers only; configs are the
register-only ``cluster_split`` shapes that hold rows of 128K-256K 16-bit elements.
"""
from __future__ import annotations

from typing import ClassVar

from kernels.base import KernelConfig
from kernels.cuda import loader
from kernels.cuda.cluster_split import ClusterSplitCuda
from kernels.cuda.loader import CUDA_TYPE

# Rows a launch is meant for: up to 8, M x 16 blocks stay within one wave on 132 SMs (one block an SM,
# as its launch bounds ask); beyond, cluster_split's occupancy matters more than the exps. It was 4
# until the H200 domain bench (2026-11-28) met M = 6 x 128256 at 1.05-1.06x QuACK with cluster_split.
M_MAX = 8


class ClusterKeepCuda(ClusterSplitCuda):
    name = "cuda_cluster_keep"
    source = "cluster_keep.cu"
    dtypes = ("fp16", "bf16")
    min_arch: ClassVar[int] = 90  # thread-block clusters and distributed shared memory
    description = (
        "cuda_cluster_split for M <= 4 long 16-bit rows: each element's exp kept in fp32 registers "
        "between sum and store (one exp per element, not two). sm_90+."
    )
    CONFIGS: ClassVar[tuple[tuple[int, int, int, int], ...]] = (
        (16, 512, 4, 0), (16, 256, 8, 0), (8, 512, 8, 0), (16, 256, 4, 0),
    )

    def spill_free(self, config: KernelConfig) -> bool:
        return True

    def source_files(self):
        return super().source_files() + [loader.SOURCE_DIR / "cluster_split.cu"]

    def source_code(self) -> str:
        text = (loader.SOURCE_DIR / self.source).read_text()
        text = text.replace('#include "cluster_split.cu"', (loader.SOURCE_DIR / "cluster_split.cu").read_text())
        return text.replace('#include "softmax_common.cuh"', (loader.SOURCE_DIR / "softmax_common.cuh").read_text())

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        return {**super().constraints(config, dtype), "m_max": M_MAX}

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return (
            f"softmax_cluster_keep<{CUDA_TYPE[dtype]}, {config['cluster']}, {config['block']}, "
            f"{config['packs']}>"
        )
