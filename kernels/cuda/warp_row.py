"""A warp, or a group of 1..32 lanes of one, per row; several rows per block; row in registers;
no barriers (seeds 000 / 004). Source: ``warp_row.cu``."""
from __future__ import annotations

from kernels.base import DTYPE_BYTES, KernelConfig, LaunchGeometry
from kernels.cuda.common import CudaVariant
from kernels.cuda.loader import CUDA_TYPE

BLOCK = 128
# (lanes per row, elements per lane): N fits when N <= lanes * elems, for every dtype. Short rows
# take sub-warp groups so a warp still works on 32 lanes' worth of data.
LANES_ELEMS: tuple[tuple[int, int], ...] = (
    (4, 4), (8, 8), (16, 8),
    (32, 8), (32, 16), (32, 32), (32, 64), (32, 128),
)


def vec_items(elems: int, dtype: str) -> tuple[int, int]:
    """(elements per load, loads per lane): 16-byte loads where a lane holds that much."""
    vec = min(16 // DTYPE_BYTES[dtype], elems)
    return vec, elems // vec


class WarpRowCuda(CudaVariant):
    name = "cuda_warp_row"
    seed = "000/004"
    source = "warp_row.cu"
    description = (
        "a warp (or 1..32 lanes) per row, several rows per block, row in registers with vector "
        "loads (any N via scalar head/tail), shuffle-only MaxSum reduction, no barriers"
    )

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=BLOCK, lanes=lanes, elems=elems) for lanes, elems in LANES_ELEMS]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        rows = int(config["block"]) // int(config["lanes"])
        return {"n_max": int(config["lanes"]) * int(config["elems"]), "m_max": (2**31 - 1) * rows}

    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        vec, items = vec_items(int(config["elems"]), dtype)
        return (
            f"softmax_warp_row<{CUDA_TYPE[dtype]}, {int(config['lanes'])}, {int(config['block'])}, {vec}, {items}>"
        )

    def geometry(self, config: KernelConfig, dtype: str):
        rows = int(config["block"]) // int(config["lanes"])  # rows per block
        return LaunchGeometry(rows=rows)
