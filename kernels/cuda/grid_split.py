"""Split-row softmax in one launch, blocks of a row meeting in global memory (``grid_split.cu``).

S blocks share each row and keep their chunk in registers; they trade partial (max, sum) pairs
through epoch-tagged slots in global memory (no atomics, nothing to reset), then write their chunk.
The row is read once and written once, in one launch, over as many SMs as S asks (cluster_split
stops at 8 or 16), which is what few long rows need: at M = 1 a row of 0.5 MB otherwise waits on a
handful of SMs.

A config is (split, block, packs): S blocks per row, threads per block, 16-byte vectors per thread.
The exchange only completes when every block of a launch is resident at once, so a launch takes at
most (blocks per SM from the driver's occupancy query x SMs) / S rows; longer batches go as several
launches, so every M stays correct (the sweep's ``m_max`` keeps it to one launch on a 132-SM GPU).

Slot arrays (two int64 per (row, split), zero-filled once) are kept per (device, stream, S): two
streams running this kernel at once must not share slots, and the slots of a row must always be
written by launches of one S.
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kernels.base import DTYPE_BYTES, Build, KernelConfig, cdiv
from kernels.cuda import loader
from kernels.cuda.common import CudaVariant
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.two_pass import vector_width

REFERENCE_SMS = 132  # H100 SXM / H200: where the declared m_max keeps a sweep to one launch
MAX_ROW = 2**31 - 1


def guaranteed_blocks_per_sm(block: int, packs: int) -> int:
    """The blocks per SM the kernel's __launch_bounds__ asks for (smx::row_min_blocks(block, 4 *
    packs, spare), spare = 48 registers at packs <= 2, else 32: what keeps the bf16 instances
    spill-free under ptxas), a floor for the driver's figure, used for the declared m_max."""
    spare = 48 if packs <= 2 else 32
    per_thread = (4 * packs + spare + 7) // 8 * 8
    return max(1, min(2048 // block, 65536 // (block * per_thread)))


def rows_per_launch(blocks_per_sm: int, sm_count: int, split: int) -> int:
    """Rows one launch may take so that all of its blocks are resident at once (at least 1: a
    launch of one row needs split <= resident blocks, which the constraints guarantee)."""
    return max(1, blocks_per_sm * sm_count // split)


class GridSplitCuda(CudaVariant):
    name = "cuda_grid_split"
    seed = "beyond-seeds"
    source = "grid_split.cu"
    description = (
        "S blocks per row in one launch: each holds its chunk in registers, partial (max, sum) pairs "
        "meet in epoch-tagged slots in global memory; row read once, any number of SMs per row."
    )
    # (split, block, packs). S = 64-128 spreads one row of 0.25-1 MB over (nearly) every SM; S = 8-32
    # serve M = 4..32, where the rows together fill the GPU with fewer blocks each.
    CONFIGS: ClassVar[tuple[tuple[int, int, int], ...]] = (
        (128, 256, 2), (128, 128, 4), (64, 256, 4), (64, 512, 2), (32, 256, 4), (32, 512, 4),
        (16, 512, 4), (16, 256, 8), (8, 512, 8),
    )

    def __init__(self) -> None:
        self._slots: dict[tuple[int, int, int], Any] = {}  # (device, stream, S) -> int64 tensor

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(split=s, block=b, packs=p) for s, b, p in self.CONFIGS]

    @staticmethod
    def _shape(config: KernelConfig) -> tuple[int, int, int]:
        return int(config["split"]), int(config["block"]), int(config["packs"])

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        split, block, packs = self._shape(config)
        vec = vector_width(dtype)
        return {
            # at least a warp's worth of vectors per block; at most what the registers hold
            "n_min": split * 32 * vec,
            "n_max": min(MAX_ROW, split * block * packs * vec),
            "m_max": max(1, guaranteed_blocks_per_sm(block, packs) * REFERENCE_SMS // split),
        }

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return f"softmax_grid_split<{CUDA_TYPE[dtype]}, {config['block']}, {config['packs']}>"

    def all_name_expressions(self, dtype: str) -> list[str]:
        # configs differing only in S (a run-time argument) share their kernel
        return list(dict.fromkeys(super().all_name_expressions(dtype)))

    def slots(self, device_index: int, stream: int, rows: int, split: int) -> Any:
        """The int64 slot array for ``rows`` rows of ``split`` blocks on this device and stream,
        zero-filled when allocated (every epoch 0) and grown by doubling."""
        import torch

        key = (device_index, stream, split)
        slots = self._slots.get(key)
        if slots is None or slots.numel() < 2 * rows * split:
            size = max(2 * rows * split, 2 * (slots.numel() if slots is not None else 2048))
            slots = self._slots[key] = torch.zeros(size, dtype=torch.int64, device=torch.device("cuda", device_index))
        return slots

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        function, seconds = loader.get_function(self.source, self.name_expression(config, dtype), code=self.source_code())
        threads = self.threads(config)
        resources = loader.resources_of(function, threads, 0, compile_seconds=seconds)
        return Build(self.name, config, dtype, self._launcher(function, config, dtype, resources.blocks_per_sm), resources)

    def _launcher(self, function: Any, config: KernelConfig, dtype: str, blocks_per_sm: int | None):
        split, block, packs = self._shape(config)
        _, _, sm_count = loader.device_limits()
        batch = rows_per_launch(blocks_per_sm or 1, sm_count, split)
        if split > (blocks_per_sm or 0) * sm_count:
            raise ValueError(
                f"{self.name} {config.key}: {split} blocks per row cannot all be resident on this GPU "
                f"({blocks_per_sm} per SM x {sm_count} SMs)"
            )
        held = block * packs  # vectors one block holds
        vec = vector_width(dtype)
        elem_bytes = DTYPE_BYTES[dtype]

        def launch(x: Any, out: Any) -> None:
            m, n = x.shape
            if m == 0:
                return
            if cdiv(n // vec, split) > held:
                raise ValueError(f"{self.name} {config.key}: N={n} exceeds the row capacity {split * held * vec}")
            device = x.device.index
            stream = loader.current_raw_stream(device)
            rows = min(m, batch)
            slots = self.slots(device, stream, rows, split)
            for first in range(0, m, rows):
                count = min(rows, m - first)
                shift = first * n * elem_bytes
                args = (
                    np.uint64(x.data_ptr() + shift), np.uint64(out.data_ptr() + shift),
                    np.uint64(slots.data_ptr()), np.int64(n), np.int32(split),
                )
                loader.launch(function, (count * split, 1, 1), (block, 1, 1), args)

        return launch
