"""Diagnostic: does a copy (and a softmax) run slower for some placements of the output relative to the
input? On the H100 the sweep's copy reference (``out.copy_(x)``, ``out = torch.empty_like(x)``) was
about 1.15x the anchors' ``x.clone()`` on half of the large shapes, and the dispatched softmax was
1.15x the same kernel in the sweep on a few. This times, with the sweep's cold-L2 timer, a copy and the
shipped table's kernel from x at a fixed place in one pool to outputs at several offsets, plus
``x.clone()`` and the two placements the sweep and the bench use.
Usage (on a GPU): python -m bench.probes.layout [--quick]   (prints one line per measurement)
"""
from __future__ import annotations

import json
import sys

import torch

from autotuner import select_kernel
from autotuner.tune.timing import Timer
from kernels import KernelConfig, get_variant
from kernels.base import DTYPE_BYTES
from kernels.reference import torch_dtype

MB = 1 << 20
SHAPES = [(16384, 2048, "fp32"), (4096, 32000, "fp16"), (128, 262144, "fp32"), (1024, 65536, "fp16"),
          (4096, 2048, "fp32"), (128, 262144, "fp16")]
# output start minus input end, in bytes: 0 is "right after x", as two back-to-back allocations give
GAPS = [0, 4096, 64 * 1024, 256 * 1024, MB, 2 * MB, 3 * MB, 4 * MB, 8 * MB, 16 * MB, 32 * MB, 64 * MB, 96 * MB, 128 * MB]


def kernel_launch(m: int, n: int, dtype: str):
    choice = select_kernel(m, n, dtype)
    build = get_variant(choice.variant).build(KernelConfig(tuple(choice.config_items)), dtype, n)
    return f"{choice.variant}[{choice.config_key}]", build.launch


def main() -> None:
    quick = "--quick" in sys.argv
    timer = Timer("cold", time_cap_s=0.2)
    results = []
    for m, n, dtype in SHAPES[:2] if quick else SHAPES:
        size = m * n * DTYPE_BYTES[dtype]
        aligned = -(-size // (2 * MB)) * 2 * MB
        pool = torch.empty(aligned + max(GAPS) + aligned + 2 * MB, dtype=torch.uint8, device="cuda")
        x = pool[:size].view(torch_dtype(dtype)).view(m, n)
        x.copy_(torch.randn(m, n, device="cuda").to(torch_dtype(dtype)))
        name, launch = kernel_launch(m, n, dtype)
        base = aligned
        for gap in GAPS:
            out = pool[base + gap: base + gap + size].view(torch_dtype(dtype)).view(m, n)
            copy = timer.time(lambda: out.copy_(x)).median_us
            soft = timer.time(lambda: launch(x, out)).median_us
            row = {"dtype": dtype, "m": m, "n": n, "gap_bytes": gap, "delta_mod_64MB": (out.data_ptr() - x.data_ptr()) % (64 * MB),
                   "copy_us": round(copy, 2), "kernel": name, "kernel_us": round(soft, 2)}
            results.append(row)
            print(json.dumps(row), flush=True)
        del pool, x, out
        xs = torch.randn(m, n, device="cuda").to(torch_dtype(dtype))
        clone = timer.time(lambda: xs.clone()).median_us
        adjacent = torch.empty_like(xs)
        copy_adjacent = timer.time(lambda: adjacent.copy_(xs)).median_us
        row = {"dtype": dtype, "m": m, "n": n, "clone_us": round(clone, 2), "copy_into_empty_like_us": round(copy_adjacent, 2),
               "x_ptr_mod_64MB": xs.data_ptr() % (64 * MB), "out_minus_x": adjacent.data_ptr() - xs.data_ptr()}
        results.append(row)
        print(json.dumps(row), flush=True)
        del xs, adjacent
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
