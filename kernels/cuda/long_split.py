"""Softmax of rows past register capacity in one launch (``long_split.cu``): rows of 2^19-2^24+
elements (long-context attention rows, very large vocabularies), where ``cuda_grid_split`` and
``cuda_cluster_split`` cannot hold a row and one block per row leaves most SMs idle at small M.

S blocks share each row; each streams its chunk into an online (max, sum), the partial pairs meet
in epoch-tagged slots in global memory (``slot_exchange.cuh``, the protocol of ``grid_split``), and
each block re-reads its chunk, last vector first, to write the output (from L2 where it still sits).

A config is (block, unroll, chunk): threads per block, 16-byte loads in flight per thread, and the
most 16-byte vectors one block takes while the row still fills the GPU. S is chosen per launch:
ceil(vectors / chunk) blocks per row, raised to fill every resident block slot when the rows are
fewer than that (M = 1: one row over every SM), and never more than the resident blocks (a row's
blocks wait for each other). Beyond one resident wave, blocks take works in the order they start
from a ticket counter (``slot_exchange.cuh``), so any M runs in one launch.

Workspace per (device, stream, S) (``slot_workspace``): one int32 ticket counter and an int64 slot
array of 2 * rows * S words (16 bytes per block of the largest launch), zero-filled once, grown by doubling.
No dynamic shared memory; static shared memory is THREADS / 32 (max, sum) pairs and 20 bytes.
"""
from __future__ import annotations

from typing import Any, ClassVar

from kernels.base import KernelConfig, LaunchGeometry, NativeRule, Resources, RowSplit
from kernels.cuda import loader
from kernels.cuda.common import CudaVariant
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.slot_workspace import SlotWorkspace
from kernels.cuda.two_pass import MAX_GRID_X, MAX_ROW, vector_width

EXCHANGE_HEADER = "slot_exchange.cuh"


# Offered only past what the register-resident kernels hold (N > 262144, the classic grid's largest N).
# The kernel itself is correct for any N >= 1 (its GPU tests build it for N = 1); below this the H100
# domain sweep measured it 1.3-6x behind the best at N = 4096, and the classic grid never swept it,
# so no table could tell where in (4096, 262144] it pays.
N_MIN = 262145


class LongSplitCuda(SlotWorkspace, CudaVariant):
    name = "cuda_long_split"
    seed = "beyond-seeds"
    source = "long_split.cu"
    min_arch: ClassVar[int] = 70  # relaxed .gpu-scope loads / stores; nothing newer
    description = (
        "S blocks per row in one launch, row streamed in chunks (any N, O(1) registers): partial "
        "(max, sum) pairs meet in epoch-tagged global slots, then each block re-reads its chunk "
        "backwards (L2) to write. For rows past register capacity."
    )
    # (block, unroll, chunk vectors). 512 x 4 keeps 32 KB in flight per block; chunks of 2048-8192
    # vectors (32-128 KB) keep the data in flight of a full wave (132 SMs x 2-4 blocks) near the
    # H100's 50 MB L2, so the backwards re-read mostly hits it.
    CONFIGS: ClassVar[tuple[tuple[int, int, int], ...]] = (
        (256, 4, 2048), (512, 4, 4096), (512, 8, 8192), (1024, 4, 8192),
    )

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=b, unroll=u, chunk=c) for b, u, c in self.CONFIGS]

    @staticmethod
    def _shape(config: KernelConfig) -> tuple[int, int, int]:
        return int(config["block"]), int(config["unroll"]), int(config["chunk"])

    def source_files(self):
        return super().source_files() + [loader.SOURCE_DIR / EXCHANGE_HEADER]

    def source_code(self) -> str:
        include = f'#include "{EXCHANGE_HEADER}"'
        return super().source_code().replace(include, (loader.SOURCE_DIR / EXCHANGE_HEADER).read_text())

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        return {"n_min": N_MIN, "n_max": MAX_ROW, "m_max": MAX_GRID_X}

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        return f"softmax_long_split<{CUDA_TYPE[dtype]}, {config['block']}, {config['unroll']}>"

    def row_split(self, config: KernelConfig, dtype: str, resources: Resources) -> RowSplit:
        """S per launch (``RowSplit``): the argument slots are the kernel's (x, out, slots, tickets, N, S)."""
        block, unroll, chunk = self._shape(config)
        _, _, sm_count = loader.device_limits()
        resident = (resources.blocks_per_sm or 0) * sm_count
        if resident < 1:
            raise ValueError(f"{self.name} {config.key}: the driver reports no resident block of {block} threads")
        return RowSplit(chunk, block * unroll, resident, vector_width(dtype), s_slot=5, tickets_slot=3, slots_slot=2)

    def native_rule(self, config: KernelConfig, dtype: str, resources: Resources | None = None) -> NativeRule | None:
        """N in slot 4, grid M * S (``row_split``); None before the driver has reported the build's residency."""
        if resources is None or not resources.blocks_per_sm:
            return None
        return NativeRule(LaunchGeometry(), n_slot=4, split=self.row_split(config, dtype, resources))

    def build_launcher(self, function: Any, config: KernelConfig, dtype: str, resources: Resources):
        block, _, _ = self._shape(config)
        row_split = self.row_split(config, dtype, resources)
        resident = row_split.resident
        kernel = loader.KernelLauncher(function, (block, 1, 1), "PPPPqi")

        def arguments(device: int, stream: int, m: int, n: int) -> tuple[int, int, int]:
            """(S, slots, tickets) of an (m, n) launch on ``stream``; ValueError past the grid limit."""
            split = row_split(m, n)
            if m * split > MAX_GRID_X:
                raise ValueError(f"{self.name} {config.key}: M={m} needs more than {MAX_GRID_X} blocks")
            slots = self.slots(device, stream, m, split).data_ptr()
            tickets = 0 if m * split <= resident else self.tickets(device, stream, split).data_ptr()
            return split, slots, tickets

        def launch(x: Any, out: Any) -> None:
            m, n = x.shape
            if m == 0:
                return
            device = x.device.index
            split, slots, tickets = arguments(device, loader.current_raw_stream(device), m, n)
            kernel((m * split, 1, 1), 0, x.data_ptr(), out.data_ptr(), slots, tickets, n, split)

        def native(device: int, stream: int, m: int, n: int) -> tuple | None:
            if m == 0:
                return None
            try:
                split, slots, tickets = arguments(device, stream, m, n)
            except ValueError:  # launch raises it
                return None
            return kernel.native(device, (m * split, 1, 1), 0, (0, 0, slots, tickets, n, split))

        return launch, native
