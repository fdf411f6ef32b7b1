"""Seed 001 (Triton fused softmax, fast path): one program holds a whole row in registers.

BLOCK is the next power of two of N, so the row is read once and written once. The grid is
persistent, as in Triton's fused-softmax tutorial: a build compiles the kernel of each BLOCK (and N
alignment) on that bucket's first use, reads its registers and shared memory, asks the occupancy
calculator how many programs fit on one SM, and launches that many per SM (never more than M);
each program walks rows ``pid, pid + grid, ...``. ``num_stages`` (given to ``tl.range``) lets Triton prefetch the next rows into shared memory with cp.async while the
current one is reduced, at (num_stages - 1) * BLOCK elements of shared memory, which bounds N too.

Registers bound N: each thread holds BLOCK / (32 * num_warps) fp32 values (16-bit inputs are widened
on load, so the bound is the same for every dtype), and a thread can have at most 255 registers, or
65536 / (32 * num_warps) when the block alone fills the register file (16 and 32 warps). A config
is declared for the N whose values per thread fit its budget with about 24 registers to spare, and
for N at least 4 values per thread (fewer leaves most of the block idle); ``constraints`` says so as
data. Compiled for sm_90 with Triton 3.9 every declared (config, N) is spill-free up to N = 32768
(at most 254 registers: 2 warps, 2 stages, N = 8192). Only 32 warps are also declared up to
N = 65536, the tutorial's range, where ptxas spills a little (128 to 216 B per thread); the
resources report it and the sweep decides. Beyond that the tiled variants take over.
"""
from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from kernels.base import DTYPE_BYTES, Build, KernelConfig, next_power_of_two
from kernels.triton_impl.common import TritonVariant, config_options
from kernels.triton_impl.device import device_sms, interpreting, probe_tensor, resources_of, sm_count
from kernels.triton_impl.launch import OUT, X, hooks_idle_guard, launcher_for
from kernels.triton_impl.tiles import LOG2E

WARP_CHOICES = (1, 2, 4, 8, 16, 32)
STAGE_CHOICES = (1, 2)
PREFETCH_SMEM = 200 * 1024  # bytes of prefetched rows allowed per program (an H100 SM has 227 KB)
MIN_VALUES_PER_THREAD = 4
SPARE_REGISTERS = 24
SPILLING_N_MAX = 65536  # 32 warps only: one row of 64 values per thread, a light spill


@triton.jit(do_not_specialize=["M"])
def _fused_row_kernel(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    for row in tl.range(tl.program_id(0), M, tl.num_programs(0), num_stages=STAGES):
        offset = tl.cast(row, tl.int64) * N
        x = tl.load(x_ptr + offset + cols, mask=mask, other=float("-inf")).to(tl.float32)
        p = tl.exp2((x - tl.max(x, axis=0)) * LOG2E)
        y = p * (1.0 / tl.sum(p, axis=0))
        tl.store(y_ptr + offset + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def values_per_thread_limit(num_warps: int) -> int:
    """Largest power of two of fp32 values per thread that fits the register budget with spare."""
    budget = min(255, 65536 // (32 * num_warps)) - SPARE_REGISTERS
    return 1 << (budget.bit_length() - 1)


class TritonFusedRow(TritonVariant):
    name = "triton_fused_row"
    seed = "001"
    description = "Triton: whole row in registers (BLOCK = next pow2 of N), persistent grid sized by occupancy"

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(num_warps=w, num_stages=s) for w in WARP_CHOICES for s in STAGE_CHOICES]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        threads = 32 * int(config["num_warps"])
        n_max = threads * values_per_thread_limit(int(config["num_warps"]))
        if threads == 1024:
            n_max = SPILLING_N_MAX
        prefetched = (int(config["num_stages"]) - 1) * DTYPE_BYTES[dtype]
        if prefetched:
            n_max = min(n_max, 1 << (PREFETCH_SMEM // prefetched).bit_length() - 1)
        limits = {"n_max": n_max}
        if threads > 32:
            # next_pow2(N) >= MIN_VALUES_PER_THREAD * threads  <=>  N > that / 2
            limits["n_min"] = MIN_VALUES_PER_THREAD * threads // 2 + 1
        return limits

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        options = config_options(config)
        launcher = launcher_for(_fused_row_kernel, ("BLOCK", "STAGES"), **options)
        stages = options["num_stages"]
        # (BLOCK, N % 16 == 0) -> (programs per SM, resources): bounded by the buckets, never per N
        buckets: dict[tuple[int, bool], tuple[int, Any]] = {}

        def bucket_of(n_cols: int) -> tuple[int, Any]:
            """Programs per SM for rows of n_cols (the occupancy of that bucket's kernel, compiled on
            the bucket's first use as its first launch would; 1 under the interpreter), and the
            kernel's resources."""
            bucket = (next_power_of_two(n_cols), n_cols % 16 == 0)
            known = buckets.get(bucket)
            if known is None:
                probe_args = () if interpreting() else (probe_tensor(dtype),) * 2 + (2, n_cols)
                kernels = [launcher.compile(probe_args, (bucket[0], stages))] if probe_args else []
                report = resources_of(kernels, options["num_warps"])
                programs = report.blocks_per_sm if kernels else 1  # the interpreter has no occupancy
                if not programs:
                    raise RuntimeError(f"{self.name} {config}: no program fits on an SM ({report})")
                known = buckets[bucket] = (programs, report)
            return known

        resources = bucket_of(n)[1]

        def launch(x: Any, out: Any) -> None:
            m, n_cols = x.shape
            if m == 0:
                return
            programs = min(m, bucket_of(n_cols)[0] * sm_count(x))
            launcher((programs,), (x, out, m, n_cols), (next_power_of_two(n_cols), stages))

        def native(device: int, stream: int, m: int, n_cols: int) -> tuple | None:
            if m == 0:
                return None
            programs = min(m, bucket_of(n_cols)[0] * device_sms(device))
            launch_data = launcher.native(device, dtype, (programs,), (X, OUT, m, n_cols), (next_power_of_two(n_cols), stages))
            return None if launch_data is None else (launch_data,)

        return Build(self.name, config, dtype, launch, resources, native, native_guard=hooks_idle_guard())
