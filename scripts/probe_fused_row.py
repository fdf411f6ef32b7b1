"""Diagnostic: Liger's single-block Triton softmax ran 0.35-0.5 us ahead of our triton_fused_row on small
16-bit shapes on the H100 (scripts/probe_bench_gap.py), with the same algorithm. This times variations
of our row kernel against Liger's, in rotating rounds with the sweep's cold-L2 timer, to find which
difference matters: the persistent row loop (triton_fused_row's kernel, here on a grid of at most 4
programs per SM), the store's cache policy, the load's, the num_warps rule.
Usage (on a GPU): python scripts/probe_fused_row.py"""
from __future__ import annotations

import statistics

import torch
import triton
import triton.language as tl

from autotuner.tune.timing import Timer
from kernels.base import next_power_of_two
from kernels.reference import check_softmax, random_input
from kernels.triton_impl.fused_row import _fused_row_kernel
from kernels.triton_impl.tiles import LOG2E


@triton.jit
def one_row(x_ptr, y_ptr, N, BLOCK: tl.constexpr, STORE_CS: tl.constexpr, LOAD_CA: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    offset = tl.cast(tl.program_id(0), tl.int64) * N
    if LOAD_CA:
        x = tl.load(x_ptr + offset + cols, mask=mask, other=float("-inf"), cache_modifier=".ca")
    else:
        x = tl.load(x_ptr + offset + cols, mask=mask, other=float("-inf"))
    x = x.to(tl.float32)
    p = tl.exp2((x - tl.max(x, axis=0)) * LOG2E)
    y = p * (1.0 / tl.sum(p, axis=0))
    if STORE_CS:
        tl.store(y_ptr + offset + cols, y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=".cs")
    else:
        tl.store(y_ptr + offset + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def liger_warps(block: int) -> int:
    return 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4


SHAPES = [(1, 1024, "bf16", 2), (1, 2048, "bf16", 2), (1, 8192, "bf16", 16), (32, 8192, "fp16", 8),
          (4, 1024, "fp16", 2), (1, 1024, "fp32", 4), (128, 4096, "bf16", 4), (4096, 1024, "bf16", 2),
          (1024, 4096, "fp32", 8)]
ROUNDS = 3


def main() -> None:
    from autotuner.report.benchrun import peer_launchers

    timer = Timer("cold", time_cap_s=0.3)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, dtype, our_warps in SHAPES:
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        block = next_power_of_two(n)
        lw = liger_warps(block)
        persistent = lambda warps: (lambda: _fused_row_kernel[(min(m, 4 * sms),)](
            x, out, m, n, BLOCK=block, STAGES=1, num_warps=warps))
        single = lambda warps, cs, ca: (lambda: one_row[(m,)](x, out, n, BLOCK=block, STORE_CS=cs, LOAD_CA=ca,
                                                              num_warps=warps))
        candidates = {
            f"persistent w{our_warps}": persistent(our_warps),
            f"persistent w{lw}": persistent(lw),
            f"one-row w{lw}": single(lw, False, False),
            f"one-row w{lw} .cs": single(lw, True, False),
            f"one-row w{lw} .cs .ca": single(lw, True, True),
            f"one-row w{our_warps} .cs": single(our_warps, True, False),
        }
        peers = peer_launchers(dtype, n)
        if "liger" in peers:
            candidates["liger"] = lambda f=peers["liger"]: f(x, out)
        for name, fn in candidates.items():
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            result = check_softmax(out, x, dtype)
            assert result.ok, f"{name}: {result.message}"
        names = list(candidates)
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(ROUNDS):
            for name in names[r:] + names[:r]:
                times[name].append(timer.time(candidates[name]).median_us)
        cells = "  ".join(f"{name}: {statistics.median(t):.2f}" for name, t in times.items())
        print(f"{dtype} {m}x{n}: {cells}", flush=True)


if __name__ == "__main__":
    main()
