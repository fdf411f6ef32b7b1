"""Seed 004 (split-k softmax): few rows, long rows; S programs share one row.

Kernel 1 (grid S x M) reduces chunk c of row r (``chunk_tiles`` tiles of BLOCK) to a partial
(max, sum), online as in ``online_tiled``, and writes it to a float32 workspace: maxes at
``[r * S + c]``, sums at ``[M * S + r * S + c]``. Kernel 2 (same grid) merges the S partials of its
row, then normalizes its chunk, re-reading it from L2 (small M is the case this variant is for, so
the tensor fits in L2). Two launches on one stream order the kernels; no grid-wide sync is needed.

S is chosen per launch so that about ``per_sm`` programs run per SM: S = ceil(per_sm * SMs / M),
at most one chunk per tile. Chunks are whole tiles of the 16-element-aligned row window (see
``tiles``), so every chunk starts aligned whatever N is. Kernel 2 reads the partials with one
vector of ``SP`` = next power of two of per_sm * SMs lanes (the most S can be), fixed per device.

The workspace is allocated once per (device, stream), sized by ``build`` for the largest M the
constraints allow, and only grown (once) if a launch ever needs more: never per call. Keying by
stream keeps concurrent launches on different streams from sharing partials.
"""
from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from kernels.base import Build, KernelConfig, cdiv, next_power_of_two
from kernels.triton_impl.common import TritonVariant, config_options
from kernels.triton_impl.device import interpreting, probe_tensor, resources_of, sm_count
from kernels.triton_impl.launch import launcher_for
from kernels.triton_impl.tiles import NEG_BIG, merge_lanes, row_window, window_normalize, window_online

M_MAX = 512  # beyond this one program per row fills the GPU: the row variants serve it
CHUNKS_MIN = 4  # declared only for N of at least this many tiles
# (block, num_warps, num_stages, per_sm). (8192, 16, 2, 1) was dropped: on the recorded H200 sweep
# it was never within 5 % of the best of our kernels (docs/SWEEP.md, "Pruned configs").
TABLE: tuple[tuple[int, int, int, int], ...] = (
    (1024, 4, 1, 4),
    (2048, 4, 1, 4),
    (2048, 8, 1, 4),
    (4096, 8, 1, 2),
    (4096, 16, 2, 2),
)


@triton.jit(do_not_specialize=["M", "S", "chunk_tiles"])
def _partials_kernel(x_ptr, ws_ptr, M, N, S, chunk_tiles, BLOCK: tl.constexpr, STAGES: tl.constexpr,
                     ALIGNED: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1)
    start, lo, hi = row_window(row, N, ALIGNED)
    # chunk bounds as multiples of BLOCK, so that Triton sees them aligned
    a = tl.maximum(lo, c * chunk_tiles * BLOCK)
    b = tl.minimum(hi, (c + 1) * chunk_tiles * BLOCK)
    m, s = window_online(x_ptr + start, a, b, BLOCK, STAGES)
    part_m, part_s = merge_lanes(m, s)
    tl.store(ws_ptr + row * S + c, part_m)
    tl.store(ws_ptr + M * S + row * S + c, part_s)


@triton.jit(do_not_specialize=["M", "S", "chunk_tiles"])
def _normalize_kernel(x_ptr, y_ptr, ws_ptr, M, N, S, chunk_tiles, BLOCK: tl.constexpr, STAGES: tl.constexpr,
                      ALIGNED: tl.constexpr, SP: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1)
    k = tl.arange(0, SP)
    part_m = tl.load(ws_ptr + row * S + k, mask=k < S, other=NEG_BIG)
    part_s = tl.load(ws_ptr + M * S + row * S + k, mask=k < S, other=0.0)
    big_m, big_s = merge_lanes(part_m, part_s)
    start, lo, hi = row_window(row, N, ALIGNED)
    a = tl.maximum(lo, c * chunk_tiles * BLOCK)
    b = tl.minimum(hi, (c + 1) * chunk_tiles * BLOCK)
    window_normalize(x_ptr + start, y_ptr + start, a, b, big_m, 1.0 / big_s, BLOCK, STAGES, False)


_workspaces: dict[tuple[Any, int], Any] = {}


def _stream_key(x: Any) -> tuple[Any, int]:
    if x.device.type != "cuda":
        return (str(x.device), 0)
    import torch

    index = x.get_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return (index, raw(index) if raw else torch.cuda.current_stream(index).cuda_stream)


def workspace(x: Any, floats: int) -> Any:
    """The float32 workspace of x's device and current stream, at least ``floats`` long."""
    key = _stream_key(x)
    buffer = _workspaces.get(key)
    if buffer is None or buffer.numel() < floats:
        import torch

        buffer = _workspaces[key] = torch.empty(max(floats, 1024), dtype=torch.float32, device=x.device)
    return buffer


def split_plan(m: int, n: int, block: int, programs: int) -> tuple[int, int]:
    """(S, tiles per chunk) for an (m, n) launch aiming at ``programs`` programs in all. The window
    of a row ends at most 15 elements past N (unaligned rows); S chunks cover it."""
    span = n if n % 16 == 0 else n + 15
    tiles = cdiv(span, block)
    chunk_tiles = cdiv(tiles, max(1, min(cdiv(programs, m), tiles)))
    return cdiv(tiles, chunk_tiles), chunk_tiles


class TritonSplitRow(TritonVariant):
    name = "triton_split_row"
    seed = "004"
    description = "Triton split-k: S programs per row write partial (max, sum); a second kernel merges and normalizes"

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=b, num_warps=w, num_stages=s, per_sm=p) for b, w, s, p in TABLE]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        return {"n_min": CHUNKS_MIN * int(config["block"]), "m_max": M_MAX}

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        options = config_options(config)
        block, stages, per_sm = int(config["block"]), options["num_stages"], int(config["per_sm"])
        partials = launcher_for(_partials_kernel, ("BLOCK", "STAGES", "ALIGNED"), **options)
        normalize = launcher_for(_normalize_kernel, ("BLOCK", "STAGES", "ALIGNED", "SP"), **options)
        kernels = []
        if not interpreting():
            probe = probe_tensor(dtype)
            programs = per_sm * sm_count(probe)
            sp = next_power_of_two(programs)
            consts = (block, stages, n % 16 == 0)
            ws = workspace(probe, 2 * (programs + M_MAX))
            kernels.append(partials.compile((probe, ws, 2, n, 2, 2), consts))
            kernels.append(normalize.compile((probe, probe, ws, 2, n, 2, 2), (*consts, sp)))
        resources = resources_of(kernels, options["num_warps"])

        def launch(x: Any, out: Any) -> None:
            m, n_cols = x.shape
            if m == 0:
                return
            programs = per_sm * sm_count(x)
            s, chunk_tiles = split_plan(m, n_cols, block, programs)
            ws = workspace(x, 2 * m * s)
            consts = (block, stages, n_cols % 16 == 0)
            partials((s, m), (x, ws, m, n_cols, s, chunk_tiles), consts)
            sp = next_power_of_two(programs)
            normalize((s, m), (x, out, ws, m, n_cols, s, chunk_tiles), (*consts, sp))

        return Build(self.name, config, dtype, launch, resources)
