"""Persistent, pipelined split-row softmax over thread-block clusters (``cluster_stream.cu``, Hopper).

As many C-block clusters as fit on the GPU at once (the driver's cuOccupancyMaxActiveClusters)
each take every G-th row; a block keeps its 1/C share of a row in one of two shared-memory buffers
and copies the next row's share into the other (cp.async) while it reduces and writes the current
one. The row is read once and written once, and the loads of one row overlap the stores of the one
before: what ``cluster_split`` (one row per cluster, load then store) lacks at M ~ 128 with rows
of 0.5-1 MB, where it reached 0.86-0.88 of copy speed on the H100.

A config is (cluster, block, stages): blocks per row, threads per block, and shares in shared
memory per block (the row in hand plus stages - 1 rows arriving). The shared memory is sized from
N at each launch (stages buffers of ceil((N / VEC) / C) vectors), so C and stages bound the row
(two stages: 0.45 MB at C = 4, 0.9 MB at 8, 1.8 MB at 16, non-portable).
"""
from __future__ import annotations

from typing import Any, ClassVar

from kernels.base import KernelConfig, cdiv
from kernels.cuda import loader
from kernels.cuda.clusters import ClusterVariant, max_active_clusters
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.smem_cache import H100_OPTIN, STATIC_RESERVE
from kernels.cuda.two_pass import MAX_GRID_X, VECTOR_BYTES, vector_width

def buffer_bytes(cluster: int, stages: int, n: int, dtype: str) -> int:
    """Dynamic shared memory of one block for rows of n: ``stages`` shares (the row being written
    and the rows arriving) of ceil((n // VEC) / C) 16-byte vectors each (a row has at most n // VEC
    whole vectors; smx::row_split)."""
    return stages * cdiv(n // vector_width(dtype), cluster) * VECTOR_BYTES


def row_capacity(cluster: int, stages: int, dtype: str, optin: int = H100_OPTIN) -> int:
    """Longest row (elements) whose ``stages`` shares fit a block's opt-in shared memory (the same
    227 KB on every sm_90 GPU)."""
    share_vectors = (optin - STATIC_RESERVE) // (stages * VECTOR_BYTES)
    return cluster * share_vectors * vector_width(dtype)


class ClusterStreamCuda(ClusterVariant):
    name = "cuda_cluster_stream"
    seed = "beyond-seeds"
    source = "cluster_stream.cu"
    headers = ("softmax_common.cuh", "cluster_common.cuh")
    description = (
        "Persistent grid of C-block clusters (as many as fit at once), each taking every G-th row: the "
        "next row's share is copied into shared memory (cp.async) while the current one is reduced, "
        "exchanged over distributed shared memory and written; row read once (sm_90+)."
    )
    # (cluster, block, stages): 256 or 512 threads over a share of 4-64 KB per buffer; C = 4 / 8 / 16
    # by row length (the buffers must fit one block's shared memory); 3 stages keep two rows in flight.
    CONFIGS: ClassVar[tuple[tuple[int, int, int], ...]] = (
        (4, 512, 2), (8, 256, 2), (8, 512, 2), (16, 256, 2), (16, 512, 2),
        (8, 256, 3), (16, 256, 3), (16, 512, 3),
    )

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(cluster=c, block=b, stages=s) for c, b, s in self.CONFIGS]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        cluster, block, stages = int(config["cluster"]), int(config["block"]), int(config["stages"])
        # from one vector per thread up to what the stages' shares of opt-in shared memory hold
        return {"n_min": cluster * block * vector_width(dtype), "n_max": row_capacity(cluster, stages, dtype),
                "m_max": MAX_GRID_X}

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return (f"softmax_cluster_stream<{CUDA_TYPE[dtype]}, {config['cluster']}, {config['block']}, "
                f"{config['stages']}>")

    def dynamic_smem(self, config: KernelConfig, dtype: str, n: int) -> int:
        return buffer_bytes(int(config["cluster"]), int(config["stages"]), n, dtype)

    def grid(self, config: KernelConfig, m: int, n: int) -> tuple[int, int, int]:
        return (int(config["cluster"]) * m, 1, 1)  # one cluster per row: an upper bound

    def launch_grid(self, function: Any, config: KernelConfig, dtype: str, m: int, n: int) -> tuple[int, int, int]:
        """min(M, clusters resident at once) clusters: each loops over its rows, so more would only
        queue behind the first wave, and fewer would leave SMs idle."""
        import cupy

        cluster, threads = int(config["cluster"]), self.threads(config)
        smem = self.dynamic_smem(config, dtype, n)
        loader.set_dynamic_smem(function, smem)  # the occupancy query counts the opted-in size
        handle = loader.function_handle(function)
        per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(handle, threads, smem)
        _, _, sm_count = loader.device_limits()
        resident = max_active_clusters(handle, cluster, threads, smem, per_sm * sm_count // cluster)
        return (cluster * min(m, resident), 1, 1)
