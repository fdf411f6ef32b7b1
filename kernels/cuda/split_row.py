"""Split-row softmax (``split_row.cu``): S blocks per row in two launches, for few rows of many
elements, where one block per row would leave most SMs idle.

Launch 1 writes each block's partial (max, sum) to a float2 workspace [M, S]; launch 2 merges a
row's S partials and normalizes the block's chunk. The workspace is a torch tensor kept on the
variant, one per device, grown (doubling) when a call needs more and never allocated otherwise.
Two calls on different streams of one device share it, so they must not run concurrently.

S is a config value or ``auto``: enough blocks for one resident wave (SMs x 2048 / block), never
more splits than leave every thread at least one 16-byte vector of the row.
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kernels.base import Build, KernelConfig, Resources, cdiv
from kernels.cuda import loader
from kernels.cuda.common import CudaVariant
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.two_pass import MAX_GRID_X, MAX_ROW, vector_width

UNROLL = 4  # 16-byte loads in flight per thread, both launches
MAX_SPLITS = 4096
FIXED_SPLIT_M_MAX = 1024  # beyond this many rows one block per row already fills an H100
THREADS_PER_SM = 2048  # sm_80 and sm_90
INITIAL_PARTIALS = 1 << 14  # workspace allocated by build(): 128 KB of float2


def split_count(split: int | str, block: int, m: int, n: int, dtype: str, sm_count: int) -> int:
    """Blocks per row for a launch: ``split`` itself, or one resident wave for ``auto``, capped so
    that each block's threads get at least one 16-byte vector each."""
    vecs = max(1, n // vector_width(dtype))
    most = max(1, min(vecs // block, MAX_SPLITS))
    if split == "auto":
        want = cdiv(sm_count * max(1, THREADS_PER_SM // block), max(1, m))
    else:
        want = int(split)
    return max(1, min(want, most))


def merge_resources(a: Resources, b: Resources) -> Resources:
    """One report for a pair of kernels launched back to back: the worse of each figure."""
    return Resources(
        registers=max(a.registers or 0, b.registers or 0),
        spill_bytes=max(a.spill_bytes or 0, b.spill_bytes or 0),
        static_smem=max(a.static_smem or 0, b.static_smem or 0),
        dynamic_smem=max(a.dynamic_smem or 0, b.dynamic_smem or 0),
        threads_per_block=a.threads_per_block,
        blocks_per_sm=min(a.blocks_per_sm or 0, b.blocks_per_sm or 0),
        occupancy=min(a.occupancy or 0.0, b.occupancy or 0.0),
        compile_seconds=(a.compile_seconds or 0.0) + (b.compile_seconds or 0.0),
    )


class SplitRowCuda(CudaVariant):
    name = "cuda_split_row"
    seed = "000/004"
    source = "split_row.cu"
    description = (
        "S blocks per row (split-k), two launches: partial online (max, sum) per chunk into a float2 "
        "workspace, then merge of the S partials and normalization of each chunk (re-read from L2)."
    )
    # (block, split). 256 threads with ``auto`` serve every shape; the fixed splits few long rows.
    # (512 | 1024, auto), (256, 64), (512, 32) and (1024, 16) were dropped: on the recorded H200
    # sweep they were never within 5 % of the best of our kernels (docs/SWEEP.md, "Pruned configs").
    CONFIGS: ClassVar[tuple[tuple[int, int | str], ...]] = ((256, "auto"), (256, 16), (512, 8))

    def __init__(self) -> None:
        self._workspaces: dict[int, Any] = {}  # device index -> float32 tensor of 2 * partials

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=block, split=split) for block, split in self.CONFIGS]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        split = config["split"]
        if split == "auto":
            return {"n_max": MAX_ROW, "m_max": MAX_GRID_X // 2}
        # A fixed split that would leave threads without a vector is clamped at launch: the same
        # kernel as a smaller split, so the sweep need not time it.
        return {
            "n_min": int(split) * int(config["block"]) * vector_width(dtype),
            "n_max": MAX_ROW,
            "m_max": FIXED_SPLIT_M_MAX,
        }

    def name_expressions(self, config: KernelConfig, dtype: str) -> tuple[str, str]:
        args = f"{CUDA_TYPE[dtype]}, {config['block']}, {UNROLL}"
        return f"softmax_split_stats<{args}>", f"softmax_split_normalize<{args}>"

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return self.name_expressions(config, dtype)[0]

    def all_name_expressions(self, dtype: str) -> list[str]:
        # configs differing only in the (run-time) split share their two kernels
        names = (name for config in self.all_configs() for name in self.name_expressions(config, dtype))
        return list(dict.fromkeys(names))

    def splits(self, config: KernelConfig, m: int, n: int, dtype: str) -> int:
        _, _, sm_count = loader.device_limits()
        return split_count(config["split"], int(config["block"]), m, n, dtype, sm_count)

    def grid(self, config: KernelConfig, m: int, n: int) -> tuple[int, int, int]:
        raise NotImplementedError("split_row launches two kernels; see make_launcher")

    def workspace(self, device_index: int, partials: int) -> Any:
        """The device's float2 workspace with room for ``partials`` pairs, grown by doubling."""
        import torch

        ws = self._workspaces.get(device_index)
        if ws is None or ws.numel() < 2 * partials:
            size = max(2 * partials, 2 * (ws.numel() if ws is not None else INITIAL_PARTIALS))
            ws = torch.empty(size, dtype=torch.float32, device=torch.device("cuda", device_index))
            self._workspaces[device_index] = ws
        return ws

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        import torch

        threads = int(config["block"])
        code = self.source_code()
        stats_name, normalize_name = self.name_expressions(config, dtype)
        stats, stats_seconds = loader.get_function(self.source, stats_name, code=code)
        normalize, normalize_seconds = loader.get_function(self.source, normalize_name, code=code)
        resources = merge_resources(
            loader.resources_of(stats, threads, 0, compile_seconds=stats_seconds),
            loader.resources_of(normalize, threads, 0, compile_seconds=normalize_seconds),
        )
        self.workspace(torch.cuda.current_device(), INITIAL_PARTIALS)
        return Build(self.name, config, dtype, self._launcher(stats, normalize, config, dtype, threads), resources)

    def _launcher(self, stats: Any, normalize: Any, config: KernelConfig, dtype: str, threads: int):
        def launch(x: Any, out: Any) -> None:
            m, n = x.shape
            if m == 0:
                return
            s = self.splits(config, m, n, dtype)
            ws = self.workspace(x.device.index, m * s)
            sizes = (np.int64(m), np.int64(n), np.int64(s))
            block = (threads, 1, 1)
            grid = (m * s, 1, 1)
            loader.launch(stats, grid, block, (np.uint64(x.data_ptr()), np.uint64(ws.data_ptr()), *sizes))
            loader.launch(
                normalize, grid, block,
                (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.uint64(ws.data_ptr()), *sizes),
            )

        return launch
