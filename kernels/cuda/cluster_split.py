"""Split-row softmax in one launch with thread-block clusters (``cluster_split.cu``, Hopper only).

A cluster of C blocks shares each row: every block keeps its share on chip (registers, then dynamic
shared memory), the blocks trade partial (max, sum) pairs through distributed shared memory, and
each writes its share. The row is read once and written once, in one launch, so few long rows
(M = 1, N = 262144) spread over C SMs per row, and long rows at large M stay on chip where one
block could not hold them.

A config is (cluster, block, packs, smem): C blocks per row, threads per block, 16-byte vectors per
thread in registers, and KB of shared memory per block for the rest of the share (0: registers
only). The shared memory is sized from N at each launch. C is compiled in (``__cluster_dims__``)
so CuPy's ordinary launch forms the clusters. C = 16 is beyond the portable limit of 8: its build
sets CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, and the launch fails (recorded by the
sweep) where the GPU cannot co-schedule 16 blocks.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar

from kernels.base import SUPPORTED, Build, KernelConfig, LaunchGeometry, Support, unsupported
from kernels.cuda import loader
from kernels.cuda.common import CudaVariant
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.two_pass import MAX_GRID_X, VECTOR_BYTES, vector_width

PORTABLE_CLUSTER = 8
LONE_SHARE_KB = 128  # a block with more shared memory than this is alone on its SM (228 KB on Hopper)
STATIC_SMEM_RESERVE = 1024  # the reductions' static scratch, rounded up (for ``requirements``)
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # cuda.h, CUDA 12 and 13


def row_capacity(cluster: int, block: int, packs: int, smem_kb: int, dtype: str) -> int:
    """Longest row (elements) a config holds: its body vectors fill every register and shared-memory
    slot of the cluster (the head/tail scalars a misaligned row adds are held beside them)."""
    per_block = block * packs + smem_kb * 1024 // VECTOR_BYTES
    return cluster * per_block * vector_width(dtype)


class ClusterSplitCuda(CudaVariant):
    name = "cuda_cluster_split"
    seed = "beyond-seeds"
    source = "cluster_split.cu"
    min_arch: ClassVar[int] = 90  # thread-block clusters and distributed shared memory
    description = (
        "C-block thread-block cluster per row, one launch: each block holds its share in registers "
        "(and shared memory), partial (max, sum) exchanged through distributed shared memory, row "
        "read once (sm_90+)."
    )
    # (cluster, block, packs, smem KB). C = 8 spreads few rows over the most SMs (down to rows of
    # 4K elements, where one block per row is latency-bound at small M); C = 2 / 4 keep
    # long rows on chip at large M; 64 KB of shared memory beside 64 registers of row lets two
    # 512-thread blocks share an SM (load of one overlapping the store of the other) with twice
    # the share (C = 4 is declared with it only); C = 16 (non-portable) halves the share instead.
    # (8, 256, 8, 32 | 96): 256-thread blocks with 32 KB of row in registers and 32 / 96 KB in shared
    # memory, so 3-4 (2) blocks share an SM on rows of 0.25-0.5 MB (0.5-1 MB) at M = 128, where the
    # 512-thread configs run one block per SM and reached 0.82-0.88 of copy on the H100.
    # (16, 128 | 256, 8, 32) and (16, 256, 8, 0): 16-block clusters of small blocks, 4-8 blocks per SM;
    # on the H100 (cold-L2 timer, rotating rounds) the fastest at M = 128 with rows of 1 MB (bf16 /
    # fp16 128x262144: 56.3 / 57.1 us against 57.4 / 58.1; fp32 128x262144: 105.3 against 106.8) and
    # at M = 32 (bf16 32x262144: 21.0 against 23.5), where the 512-thread C = 16 config ran 30-50 % slower.
    # Few rows of 16K-64K elements (M = 1-16, the decode shapes): more, lighter blocks. (16, 128 | 256,
    # 2 | 4, 0) and (8, 128, 2, 0) hold 2-4 vectors a thread; on the H100 (cold-L2 timer, 2026-11-25;
    # their rows are in tests/data/h100_sweep.json.gz) they beat the best older config by 3-10 % at
    # M = 1-4 (fp16 1x32000: 5.42 against 5.82 us; fp16 4x50257: 6.06 against 6.66; fp32 1x50257: 5.71 against 6.00; bf16 4x50257: 6.08
    # against 6.59), by 1.5-3 % at M = 16-32. (16, 512, 4, 0) is the same idea for rows of 128K-256K.
    # (16, 512, 8, 0) was dropped on 2026-11-25: the fastest of our kernels on no shape of the H100
    # recording (419 grid shapes, 120 held-out) nor of the H200's (347), and within 5 % of it on 7.
    # No 1024-thread block: (8, 1024, 4 | 8, 0), (4, 1024, 8, 0), (2, 1024, 8, 0), (16, 1024, 4, 0)
    # and (4, 512, 8, 0) were dropped because on the recorded H200 sweep they were never within 5 %
    # of the best of our kernels on any shape or dtype (docs/SWEEP.md, "Pruned configs").
    # (16, 256, 8, 96) and (16, 512, 8, 64) hold rows of 2 MB in 16 blocks (fp32 N = 524288, 16-bit
    # N = 1048576), half in shared memory: many such rows (fp32 128x524288) ran at 0.73 of copy split
    # over CTAs by cuda_long_split, 1.23x QuACK's time (one 16-block cluster a row), H100 2026-11-25.
    # (16, 512, 8, 160), the same kernel with 160 KB of shared memory, holds rows of 3.5 MB (fp32
    # N = 917504, 16-bit N = 1835008; one block an SM): past 2 MB the rows went to cuda_long_split,
    # which reads a row twice. H100 (bench/data/cluster_rows_h100.json.gz): at M = 128-256 fp32
    # 0.77-0.93x long_split's time, 16-bit 0.88x at 1310720, a tie beyond; at M <= 4 1.2-2x slower,
    # left to long_split by the fit. (16, 256, 8, 192), recorded beside it, was never the faster.
    CONFIGS: ClassVar[tuple[tuple[int, int, int, int], ...]] = (
        (8, 128, 4, 0), (8, 256, 4, 0), (8, 512, 4, 0), (8, 256, 8, 0), (8, 512, 8, 0), (8, 512, 8, 64),
        (8, 256, 8, 32), (8, 256, 8, 96),
        (4, 512, 8, 64),
        (2, 512, 8, 0), (2, 512, 8, 64),
        (16, 256, 8, 0), (16, 256, 8, 32), (16, 128, 8, 32),
        (8, 128, 2, 0), (16, 128, 2, 0), (16, 128, 4, 0), (16, 256, 2, 0), (16, 256, 4, 0), (16, 512, 4, 0),
        (16, 256, 8, 96), (16, 512, 8, 64), (16, 512, 8, 160),
    )

    def available(self) -> Support:
        ok = super().available()
        if not ok:
            return ok
        import cupy

        cc = int(cupy.cuda.Device().compute_capability)
        if cc < self.min_arch:
            return unsupported(
                f"{self.name} needs compute capability {self.min_arch // 10}.{self.min_arch % 10} "
                f"(thread-block clusters); this GPU is {cc // 10}.{cc % 10}"
            )
        return SUPPORTED

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(cluster=c, block=b, packs=p, smem=s) for c, b, p, s in self.CONFIGS]

    def spill_free(self, config: KernelConfig) -> bool:
        """Whether every instance of ``config`` compiles without local memory (the CPU compile check
        holds the declared ones to it). Not (16, 256, 4, 0): nvcc 13.0's ptxas spills 4 bytes of its
        fp32 instance at the 48 registers the launch bounds allow, where NVRTC on the H100, which
        builds what runs, gives it 46 registers and no spill (every recorded row: spill_bytes 0)."""
        return self._shape(config) != (16, 256, 4, 0)

    @staticmethod
    @lru_cache(maxsize=None)  # read on every launch's geometry; bounded by the configs
    def _shape(config: KernelConfig) -> tuple[int, int, int, int]:
        return int(config["cluster"]), int(config["block"]), int(config["packs"]), int(config["smem"])

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        cluster, block, packs, smem_kb = self._shape(config)
        cap = row_capacity(cluster, block, packs, smem_kb, dtype)
        # n_min: a shared-memory config starts where its registers alone no longer hold the row;
        # a registers-only config where a quarter of its slots are used (smaller configs serve
        # shorter rows with fewer idle threads). The quarter itself is admitted: it is a grid N
        # (capacities are powers of two), and a config measured there is judged on all of its
        # neighbours when the fit predicts the next N up (its H100 leave-one-out maximum fell so). A share past
        # LONE_SHARE_KB (one block an SM) starts where the largest smaller share of its kernel no longer
        # holds the row: below, it would launch the same kernel with the same shared memory (sized from N).
        below = max((s for c, b, p, s in self.CONFIGS if (c, b, p) == (cluster, block, packs) and s < smem_kb),
                    default=0) if smem_kb > LONE_SHARE_KB else 0
        n_min = row_capacity(cluster, block, packs, below, dtype) + 1 if smem_kb else cap // 4
        return {"n_min": n_min, "n_max": cap, "m_max": MAX_GRID_X // cluster}

    def requirements(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        cluster, block, packs, smem_kb = self._shape(config)
        needs = {"min_arch": self.min_arch, "cluster": cluster}
        if smem_kb:  # the dynamic share at the config's longest row, beside the static scratch
            needs["smem_per_block"] = smem_kb * 1024 + STATIC_SMEM_RESERVE
        return needs

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return (
            f"softmax_cluster_split<{CUDA_TYPE[dtype]}, {config['cluster']}, {config['block']}, "
            f"{config['packs']}>"
        )

    def geometry(self, config: KernelConfig, dtype: str):
        """C blocks per row; dynamic shared memory per block for rows of n: the share's vectors past
        the registers. A row has at most n // VEC whole vectors and a block at most a 1/C share of
        them, rounded up."""
        cluster, block, packs, _ = self._shape(config)
        return LaunchGeometry(per_row=cluster, vec=vector_width(dtype), parts=cluster, held=block * packs)

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        function, seconds = loader.get_function(self.source, self.name_expression(config, dtype), code=self.source_code())
        if int(config["cluster"]) > PORTABLE_CLUSTER:
            allow_non_portable_cluster(function)
        threads = self.threads(config)
        resources = loader.resources_of(function, threads, self.dynamic_smem(config, dtype, n), compile_seconds=seconds)
        launch, native = self.make_launcher(function, config, dtype, threads)
        return Build(self.name, config, dtype, launch, resources, native, native_rule=self.native_rule(config, dtype))

    def launch_row_limit(self, config: KernelConfig, dtype: str) -> int | None:
        return self.constraints(config, dtype)["n_max"]  # the cluster's registers and shared memory


def allow_non_portable_cluster(function: Any) -> None:
    """Let a CuPy kernel compiled with __cluster_dims__ above 8 launch, on every device
    (cuFuncSetAttribute on each device's CUfunction: ``loader.require_attribute``)."""
    loader.require_attribute(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
