"""Many short rows (N up to 1024, any M): 1..32 lanes per row, a grid-stride loop over row tiles so
the grid may be capped at the resident blocks (issue 17).
Source: ``short_rows.cu``.

A config is (lanes, elems, rows, block, persistent): ``lanes`` threads share a row, each holding
``elems`` of its elements (N <= lanes * elems); each group holds ``rows`` rows at once (their loads
all in flight together; the configs offer 1, see ``SHAPES``); ``block`` threads per block;
``persistent`` = 1 caps the grid at the blocks the GPU holds at once (threads per SM / block, times
SMs) and lets each block loop over tiles, 0 launches one block per tile. A config of capacity over 32 declares ``n_min`` above a quarter of
its capacity: a row that fills less of the registers is the job of a smaller config, and sweeping it
there is waste.
"""
from __future__ import annotations

from typing import ClassVar

from kernels.base import KernelConfig, LaunchGeometry
from kernels.cuda.common import CudaVariant, resident_blocks
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.warp_row import vec_items  # same 16-byte split of a lane's elements

# (threads per block, persistent): the grid cap pays off at large M, where 256-thread blocks
# loop; the block size alone matters little, so only the uncapped grid tries both.
LAUNCHES: tuple[tuple[int, int], ...] = ((128, 0), (256, 0), (256, 1))
MAX_GRID_X = 2**31 - 1
# (lanes per row, elements per lane, rows per group): capacities 32 .. 1024, rows per group 1. Two
# rows per group (4-8 rows of 8-16 elements per thread in flight) was swept at every capacity up to
# 256 on the H100 (bench/data/short_rows_h100.json.gz: 72 shapes, N 32..1024, M 16384 and 262144)
# and was never the best config, so it is no longer offered; the template keeps ROWS.
# Capacity 16 (two lanes a row) is for rows of 1-16 elements at large M, where a
# capacity-32 group leaves half its lanes or more idle (fp16 1048576x16 ran at 0.55 of copy with
# (4, 8, 1) in the H100 domain bench, 2026-11-25). One lane a row, (1, 8 | 16, 1), spills 8-12 B
# at the 56 registers the launch bounds allow its 16-bit instances (nvcc 13.0), so it is not offered.
# Fewer lanes with 32 elements each, (2 | 4 | 8, 32, 1) at capacities 64-256: at 16-bit N = 160-200
# (8, 32, 1) ran at 0.86-0.92 of copy where (16, 16, 1) ran at 0.72-0.79 (H200, M 65536-400000,
# bench.probes.variant_configs, 2026-11-28): half the shuffle steps and twice the bytes in flight a lane.
SHAPES: tuple[tuple[int, int, int], ...] = (
    (2, 8, 1),
    (2, 16, 1), (4, 8, 1),
    (4, 16, 1), (8, 8, 1), (2, 32, 1),
    (8, 16, 1), (16, 8, 1), (4, 32, 1),
    (16, 16, 1), (32, 8, 1), (8, 32, 1),
    (16, 32, 1), (32, 16, 1),
    (32, 32, 1),
)
SMALLEST_CAPACITY = 32  # configs up to this capacity admit every N from 1 (see ``constraints``)
# (lanes, elems) whose 16-bit instances spill on sm_100 at the 64 registers the launch bounds allow
# (nvcc 13.0: fp16 24-56 bytes, bf16 (2 | 4, 32) 12-32; none on sm_80, sm_89, sm_90): offered up to
# sm_90 at 16-bit (``requirements``), one rule for both 16-bit types.
SPILL_PAST_SM90_16BIT = frozenset({(2, 32), (4, 32), (8, 32)})


class ShortRowsCuda(CudaVariant):
    name = "cuda_short_rows"
    seed = "beyond-seeds"
    source = "short_rows.cu"
    min_arch: ClassVar[int] = 80  # 16-byte __ldg, bf16 arithmetic conversions: sm_80 and later
    spill_past_sm90_16bit: ClassVar[frozenset[tuple[int, int]]] = SPILL_PAST_SM90_16BIT  # (lanes, elems)
    description = (
        "1..32 lanes per short row (N <= 1024), grid-stride loop over row tiles (optionally a "
        "persistent grid), row in registers with vector loads, shuffle-only reduction, no barriers"
    )

    def all_configs(self) -> list[KernelConfig]:
        return [
            KernelConfig.of(lanes=lanes, elems=elems, rows=rows, block=block, persistent=persistent)
            for lanes, elems, rows in SHAPES
            for block, persistent in LAUNCHES
        ]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        capacity = int(config["lanes"]) * int(config["elems"])
        n_min = 1 if capacity <= SMALLEST_CAPACITY else capacity // 4 + 1
        return {"n_min": n_min, "n_max": capacity}

    def requirements(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        needs = super().requirements(config, dtype)
        if dtype != "fp32" and (int(config["lanes"]), int(config["elems"])) in self.spill_past_sm90_16bit:
            needs["max_arch"] = 90
        return needs

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        vec, items = vec_items(int(config["elems"]), dtype)
        return (
            f"softmax_short_rows<{CUDA_TYPE[dtype]}, {int(config['lanes'])}, {int(config['block'])}, "
            f"{vec}, {items}, {int(config['rows'])}>"
        )

    def tile_rows(self, config: KernelConfig) -> int:
        return int(config["block"]) // int(config["lanes"]) * int(config["rows"])

    def geometry(self, config: KernelConfig, dtype: str):
        """A block per tile of rows; a persistent config's grid is capped at the blocks the device
        holds at once (asked of the current device per call: a build serves every device)."""
        resident = int(config["block"]) if int(config["persistent"]) else 0
        return LaunchGeometry(rows=self.tile_rows(config), cap=MAX_GRID_X, resident_block=resident, residency=resident_blocks)
