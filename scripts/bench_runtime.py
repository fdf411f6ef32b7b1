"""Lookup latency of select_kernel and host overhead of softmax() over a raw launch of the same build.

Lookup (any machine): first lookup = a shape not yet cached (tables already loaded); warm = repeat.
Host overhead (GPU only): wall time per call of softmax(x) vs build.launch(x, out) with the output
preallocated, both enqueue-only (no synchronisation inside the loop), on a shape where the GPU time is
tiny so the host side is what is measured. Prints one JSON object.
"""
from __future__ import annotations

import json
import statistics
import sys
import time


def lookup_figures(gpu: str) -> dict:
    from autotuner.select import default_store, select_kernel

    default_store()  # table loading is start-up, not a lookup
    firsts, warms = [], []
    for i in range(2000):
        m, n = 3 + i, 1000 + 7 * i
        t0 = time.perf_counter_ns()
        select_kernel(m, n, "bf16", gpu=gpu)
        t1 = time.perf_counter_ns()
        select_kernel(m, n, "bf16", gpu=gpu)
        t2 = time.perf_counter_ns()
        firsts.append((t1 - t0) / 1e3)
        warms.append((t2 - t1) / 1e3)
    return {"first_lookup_us_median": statistics.median(firsts), "first_lookup_us_p99": sorted(firsts)[int(0.99 * len(firsts))],
            "warm_lookup_us_median": statistics.median(warms), "warm_lookup_us_p99": sorted(warms)[int(0.99 * len(warms))]}


def overhead_figures() -> dict:
    import torch

    from autotuner import select_kernel, softmax
    from autotuner.runtime import build_for
    from kernels.reference import random_input

    figures = {}
    for m, n, dtype in [(1, 1024, "bf16"), (4, 4096, "fp32")]:
        x = random_input(m, n, dtype)
        softmax(x)
        choice = select_kernel(m, n, dtype)
        build = build_for(choice.variant, choice.config, dtype, n)
        out = torch.empty_like(x)
        torch.cuda.synchronize()

        def per_call(fn, count=2000):
            samples = []
            for _ in range(5):
                t0 = time.perf_counter_ns()
                for _ in range(count):
                    fn()
                samples.append((time.perf_counter_ns() - t0) / count / 1e3)
                torch.cuda.synchronize()
            return statistics.median(samples)

        raw = per_call(lambda: build.launch(x, out))
        dispatched = per_call(lambda: softmax(x))
        figures[f"{dtype} {m}x{n}"] = {"variant": choice.variant, "raw_launch_us": raw, "softmax_us": dispatched,
                                       "overhead_us": dispatched - raw}
    return figures


if __name__ == "__main__":
    gpu = sys.argv[1] if len(sys.argv) > 1 else "h100"
    result = {"lookup": lookup_figures(gpu)}
    try:
        import torch

        if torch.cuda.is_available():
            result["host_overhead"] = overhead_figures()
    except ImportError:
        pass
    print(json.dumps(result, indent=1))
