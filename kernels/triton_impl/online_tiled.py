"""Seeds 000 / 001 (online softmax, tiled): any N in two passes over the row.

Pass 1 reads the row tile by tile and keeps a running (max, sum) per lane (``tiles.online_update``:
one exp2 per element, no cross-thread reduction inside the loop); one block reduction merges the
lanes. Pass 2 reads the row again, right to left so that the tiles pass 1 read last are still in L2,
and writes exp(x - max) / sum. DRAM traffic is one write and one or two reads, depending on whether
the rows in flight fit in L2.

``per_sm`` (``TiledRowVariant``) bounds the rows in flight: 0 launches one program per row
(occupancy decides how many run at once); k > 0 launches k programs per SM that loop over rows, so
that only k * SMs rows are in flight and their second read comes from L2. Only two per_sm = 0
configs are declared, the only ones of this variant that came within 5 % of the best of our kernels
anywhere on the recorded H200 sweep (fp32); the 1024 tile also serves every N. The others (the
4-warp 2048 tile, the 4096 and 8192 tiles, and the persistent ones with k = 1, 2 and num_stages
2-3) never did and were dropped (docs/SWEEP.md, "Pruned configs").
"""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.triton_impl.common import TiledRowVariant
from kernels.triton_impl.tiles import merge_lanes, row_window, window_normalize, window_online


@triton.jit(do_not_specialize=["M"])
def _online_kernel(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr, STAGES: tl.constexpr, ALIGNED: tl.constexpr):
    for row in tl.range(tl.program_id(0), M, tl.num_programs(0)):
        start, lo, hi = row_window(row, N, ALIGNED)
        m, s = window_online(x_ptr + start, lo, hi, BLOCK, STAGES)
        big_m, big_s = merge_lanes(m, s)
        window_normalize(x_ptr + start, y_ptr + start, lo, hi, big_m, 1.0 / big_s, BLOCK, STAGES, True)


class TritonOnlineTwoPass(TiledRowVariant):
    name = "triton_online_two_pass"
    seed = "000"
    description = "Triton: online (max, sum) over 16-element-aligned tiles, then a normalize pass (any N)"
    kernel = _online_kernel
    # (block, num_warps, num_stages, per_sm); values per thread per tile = block / (32 * num_warps)
    table = (
        (1024, 4, 1, 0),
        (2048, 8, 1, 0),
    )
