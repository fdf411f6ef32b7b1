"""Seed 001 (Triton fused softmax, the tutorial's first kernel): one program per row, the row in
registers (BLOCK = next power of two of N), read once and written once, no loop over rows.

``triton_fused_row`` runs the same row code in a persistent grid (occupancy-sized, each program
walking rows). On the H100 the row loop costs time at small M: in the H100 sweep recording
(tests/data/h100_sweep.json.gz) the same row code with one program per row was 0.11 us faster (median
of 96 shapes M <= 128, N = 1024-8192, each variant's best config; from 0.21 us slower to 0.53 us
faster). The sweep decides between the two shape by shape.

Registers bound N exactly as for ``triton_fused_row`` with one stage (no prefetched rows): its
``constraints`` are reused for num_stages = 1.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import triton
import triton.language as tl

from kernels.base import Build, KernelConfig, next_power_of_two
from kernels.triton_impl.device import interpreting, probe_tensor, resources_of
from kernels.triton_impl.fused_row import WARP_CHOICES, TritonFusedRow
from kernels.triton_impl.launch import OUT, X, Launcher, hooks_idle_guard
from kernels.triton_impl.tiles import LOG2E

MAX_GRID_X = 2**31 - 1  # a launch's grid x limit: one program per row


@triton.jit
def _one_row_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    offset = tl.cast(tl.program_id(0), tl.int64) * N
    x = tl.load(x_ptr + offset + cols, mask=mask, other=float("-inf")).to(tl.float32)
    p = tl.exp2((x - tl.max(x, axis=0)) * LOG2E)
    y = p * (1.0 / tl.sum(p, axis=0))
    tl.store(y_ptr + offset + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@lru_cache(maxsize=None)
def _launcher(num_warps: int) -> Launcher:
    """One launcher (and compile cache) per num_warps; N stays specialised (its divisibility by 16
    lets Triton vectorise the row's loads and stores)."""
    return Launcher(_one_row_kernel, ("BLOCK",), {"num_warps": num_warps, "num_stages": 1})


class TritonOneRow(TritonFusedRow):
    name = "triton_one_row"
    seed = "001"
    description = "Triton: one program per row, whole row in registers (BLOCK = next pow2 of N), no row loop"

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(num_warps=w) for w in WARP_CHOICES]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        limits = super().constraints(KernelConfig.of(num_warps=int(config["num_warps"]), num_stages=1), dtype)
        return {**limits, "m_max": MAX_GRID_X}

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        num_warps = int(config["num_warps"])
        launcher = _launcher(num_warps)
        block = next_power_of_two(n)
        kernels = [] if interpreting() else [launcher.compile((probe_tensor(dtype),) * 2 + (n,), (block,))]
        resources = resources_of(kernels, num_warps)

        def launch(x: Any, out: Any) -> None:
            m, n_cols = x.shape
            if m:
                launcher((m,), (x, out, n_cols), (next_power_of_two(n_cols),))

        def native(device: int, stream: int, m: int, n_cols: int) -> tuple | None:
            launch_data = launcher.native(device, dtype, (m,), (X, OUT, n_cols), (next_power_of_two(n_cols),))
            return None if launch_data is None or not m else (launch_data,)

        return Build(self.name, config, dtype, launch, resources, native, native_guard=hooks_idle_guard())
