"""``cuda_short_rows`` for 16-bit rows, keeping each element's exponential in fp32 registers between
the sum and the store (``short_rows_keep.cu``): one exp an element instead of two, a two-phase
shuffle reduction, one row tile a block.

Why a variant of its own: ``short_rows.cu`` exponentiates 16-bit rows twice so that a lane's row
stays packed in half the registers; changing that file would retire its recorded H100 and H200 rows,
and no H100 is lent to record them again. fp32 rows keep their exps there already, so this variant is
16-bit only.

A config is (lanes, elems, block): ``lanes`` threads share a row, each holding ``elems`` of its
elements (N <= lanes * elems); ``block`` threads a block, block / lanes rows a block, one block per
tile of rows (no persistent grid: ``m_max`` is what one grid dimension holds). The (lanes, elems)
shapes are ``cuda_short_rows``', and so is the rule that keeps a config of capacity over 32 to rows
over a quarter of it.
"""
from __future__ import annotations

from typing import ClassVar

from kernels.base import KernelConfig, LaunchGeometry
from kernels.cuda.loader import CUDA_TYPE
from kernels.cuda.short_rows import MAX_GRID_X, SHAPES, ShortRowsCuda
from kernels.cuda.warp_row import vec_items

# One block size, to halve the sweep: in cuda_short_rows' H200 recording (16-bit, 110 shapes with both)
# its best 128-thread config took 0.994x the time of its best 256-thread one (geomean), more than 1.03x
# at 8 shapes (worst 1.063x).
BLOCKS = (128,)


class ShortRowsKeepCuda(ShortRowsCuda):
    name = "cuda_short_rows_keep"
    source = "short_rows_keep.cu"
    dtypes = ("fp16", "bf16")
    # none of short_rows.cu's sm_100 spills: every instance of this kernel compiles without (CPU test)
    spill_past_sm90_16bit: ClassVar[frozenset[tuple[int, int]]] = frozenset()
    description = (
        "cuda_short_rows for 16-bit rows (N <= 1024): each element's exp kept in fp32 registers "
        "between sum and store (one exp per element, not two), max then sum by shuffles, one row tile a block"
    )

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(lanes=lanes, elems=elems, block=block)
                for lanes, elems, rows in SHAPES if rows == 1 for block in BLOCKS]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        return {**super().constraints(config, dtype), "m_max": MAX_GRID_X * self.tile_rows(config)}

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        vec, items = vec_items(int(config["elems"]), dtype)
        return (
            f"softmax_short_keep<{CUDA_TYPE[dtype]}, {int(config['lanes'])}, {int(config['block'])}, "
            f"{vec}, {items}>"
        )

    def tile_rows(self, config: KernelConfig) -> int:
        return int(config["block"]) // int(config["lanes"])

    def geometry(self, config: KernelConfig, dtype: str):
        return LaunchGeometry(rows=self.tile_rows(config))
