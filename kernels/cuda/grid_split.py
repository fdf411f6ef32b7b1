"""Split-row softmax in one launch, blocks of a row meeting in global memory (``grid_split.cu``).

S blocks share each row and keep their chunk in registers; they trade partial (max, sum) pairs
through epoch-tagged slots in global memory (plain loads and stores, nothing to reset), then write
their chunk.
The row is read once and written once, in one launch, over as many SMs as S asks (cluster_split
stops at 8 or 16), which is what few long rows need: at M = 1 a row of 0.5 MB otherwise waits on a
handful of SMs.

A config is (split, block, packs): S blocks per row, threads per block, 16-byte vectors per thread.
Any M is one launch. Where every block fits on the GPU at once (blocks per SM from the driver's
occupancy query x SMs), block b takes work b, the lowest latency; beyond that blocks take works
from an atomic ticket counter in the order they start, so no block ever waits for a row-mate that
cannot be scheduled (the proof is in ``grid_split.cu``) and freed SMs take the next rows at once.
On the H100 that ticketed regime (M = 32-128, rows of 0.25-1 MB) ran 5-15 % behind the cluster and
smem-cache kernels. The declared ``m_max`` still lets sweeps and tables reach four waves on a 132-SM
GPU (``WAVES``), so that the fit sees where it loses instead of extrapolating its one-wave wins; a
direct call with more rows still runs correctly in one launch.

Slot arrays (two int64 per (row, split), zero-filled once) and ticket counters are kept per
(device, stream, S): two streams running this kernel at once must not share them, and the slots of
a row must always be written by launches of one S.
"""
from __future__ import annotations

from typing import Any, ClassVar

from kernels.base import KernelConfig, Resources, cdiv
from kernels.cuda import loader
from kernels.cuda.common import CudaVariant
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.slot_workspace import SlotWorkspace
from kernels.cuda.two_pass import MAX_GRID_X, MAX_ROW, vector_width

REFERENCE_SMS = 132  # H100 SXM / H200: the declared m_max counts waves of this many SMs
# Waves of resident blocks the declared m_max allows. With one wave the grid's M = 64 row had no
# times of this kernel, so the fit extrapolated its wins at M = 16 over M = 32 (leave-one-out regret
# 1.16-1.19 at fp16 / bf16 32x50257 and 32x65536, where the cluster kernel wins); two waves moved the
# edge to between M = 32 and 64 (fp32 32x50257: 1.41). Four put the ticketed times at M = 64-128
# into the sweep and the tables, which the H100 leave-one-out scores best.
WAVES = 4


def guaranteed_blocks_per_sm(block: int, packs: int) -> int:
    """The blocks per SM the kernel's __launch_bounds__ asks for (smx::row_min_blocks(block, 4 *
    packs, spare), spare = 48 registers at packs <= 2, else 32: what keeps the bf16 instances
    spill-free under ptxas), a floor for the driver's figure, used for the declared m_max."""
    spare = 48 if packs <= 2 else 32
    per_thread = (4 * packs + spare + 7) // 8 * 8
    return max(1, min(2048 // block, 65536 // (block * per_thread)))


def one_wave(m: int, split: int, resident_blocks: int) -> bool:
    """Whether all m * split blocks are resident at once (block b may then take work b)."""
    return m * split <= resident_blocks


class GridSplitCuda(SlotWorkspace, CudaVariant):
    name = "cuda_grid_split"
    seed = "beyond-seeds"
    source = "grid_split.cu"
    description = (
        "S blocks per row in one launch: each holds its chunk in registers, partial (max, sum) pairs "
        "meet in epoch-tagged slots in global memory; row read once, any number of SMs per row."
    )
    # (split, block, packs). S = 64-128 spreads one row of 0.25-1 MB over (nearly) every SM; S = 8-32
    # serve M = 4..32, where the rows together fill the GPU with fewer blocks each. S = 20 / 40 hold
    # 160K elements per row (fp32 N = 151936 at 93 %).
    CONFIGS: ClassVar[tuple[tuple[int, int, int], ...]] = (
        (128, 256, 2), (128, 128, 4), (64, 256, 4), (64, 512, 2), (32, 256, 4), (32, 512, 4),
        (16, 512, 4), (16, 256, 8), (8, 512, 8),
        (20, 256, 8), (40, 256, 4),
    )

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
            # WAVES waves on a 132-SM GPU: the ticketed regime beyond one wave runs correctly but is
            # rarely the fastest of our kernels; sweeps measure it that far, so fits see where it loses
            "m_max": max(1, WAVES * guaranteed_blocks_per_sm(block, packs) * REFERENCE_SMS // split),
        }

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return f"softmax_grid_split<{CUDA_TYPE[dtype]}, {config['block']}, {config['packs']}>"

    def build_launcher(self, function: Any, config: KernelConfig, dtype: str, resources: Resources):
        split, block, packs = self._shape(config)
        blocks_per_sm = resources.blocks_per_sm
        _, _, sm_count = loader.device_limits()
        resident = (blocks_per_sm or 0) * sm_count
        if split > resident:
            raise ValueError(
                f"{self.name} {config.key}: {split} blocks per row cannot all be resident on this GPU "
                f"({blocks_per_sm} per SM x {sm_count} SMs)"
            )
        held = block * packs  # vectors one block holds
        vec = vector_width(dtype)
        kernel = loader.KernelLauncher(function, (block, 1, 1), "PPPPqi")

        def arguments(device: int, stream: int, m: int, n: int) -> tuple[int, int]:
            """(slots, tickets) pointers of an (m, n) launch on ``stream``; ValueError past the limits."""
            if cdiv(n // vec, split) > held:
                raise ValueError(f"{self.name} {config.key}: N={n} exceeds the row capacity {split * held * vec}")
            if m * split > MAX_GRID_X:
                raise ValueError(f"{self.name} {config.key}: M={m} needs more than {MAX_GRID_X} blocks")
            slots = self.slots(device, stream, m, split).data_ptr()
            tickets = 0 if one_wave(m, split, resident) else self.tickets(device, stream, split).data_ptr()
            return slots, tickets

        def launch(x: Any, out: Any) -> None:
            m, n = x.shape
            if m == 0:
                return
            device = x.device.index
            slots, tickets = arguments(device, loader.current_raw_stream(device), m, n)
            kernel((m * split, 1, 1), 0, x.data_ptr(), out.data_ptr(), slots, tickets, n, split)

        def native(device: int, stream: int, m: int, n: int) -> tuple | None:
            if m == 0:
                return None
            try:
                slots, tickets = arguments(device, stream, m, n)
            except ValueError:  # launch raises it
                return None
            return kernel.native(device, (m * split, 1, 1), 0, (0, 0, slots, tickets, n, split))

        return launch, native
