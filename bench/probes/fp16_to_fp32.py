"""Diagnostic (GPU): ``softmax(x, dim=-1, dtype=torch.float32)`` on fp16 and bf16 attention scores, as
Hugging Face's eager attention calls it. Two ways to an fp32 result: torch's own kernel, which reads
fp16 and writes fp32 in one pass (what ``softmax`` hands an fp16 call to; torch casts bf16 first), and
a cast followed by the tuned fp32 kernel (``softmax(x.float())``, what ``softmax`` did before for
fp16 and does for bf16). Per shape: GPU time (CUDA events around
20 back-to-back calls, median of 5, warm L2) and host time per call (device drained before it,
median of 200), each way against ``torch.softmax(x, -1, dtype=torch.float32)``, after
``autotuner.warmup``.

    python -m bench.probes.fp16_to_fp32
"""
from __future__ import annotations

import json
import statistics
import time

SHAPES = ((8, 32, 1, 4096), (1, 32, 512, 512), (1, 32, 2048, 2048), (4, 32, 1024, 1024))


def main() -> None:
    import torch

    import autotuner
    from autotuner import softmax

    autotuner.warmup(dtypes=("fp16", "fp32"))
    ways = {"cast_then_tuned": lambda x: softmax(x.float()),
            "softmax_dtype": lambda x: softmax(x, dtype=torch.float32),
            "torch": lambda x: torch.softmax(x, -1, dtype=torch.float32)}

    def gpu_us(fn, x):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(5):
            torch.cuda.synchronize()
            start.record()
            for _ in range(20):
                fn(x)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / 20)
        return statistics.median(samples)

    def host_us(fn, x):
        samples = []
        for _ in range(200):
            torch.cuda.synchronize()
            started = time.perf_counter_ns()
            fn(x)
            samples.append((time.perf_counter_ns() - started) / 1e3)
        return statistics.median(samples)

    result = {"device": torch.cuda.get_device_name()}
    for dtype, shape in [(dtype, shape) for dtype in (torch.float16, torch.bfloat16) for shape in SHAPES]:
        x = torch.randn(shape, device="cuda", dtype=dtype)
        for fn in ways.values():
            fn(x)  # compiles and teaches where new
        gpu = {name: gpu_us(fn, x) for name, fn in ways.items()}
        host = {name: host_us(fn, x) for name, fn in ways.items()}
        result[f"{str(dtype)[6:]} " + "x".join(map(str, shape))] = {
            "gpu_us": {name: round(value, 2) for name, value in gpu.items()},
            "gpu_ratio_to_torch": {name: round(gpu[name] / gpu["torch"], 3) for name in ways},
            "host_ratio_to_torch": {name: round(host[name] / host["torch"], 3) for name in ways}}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
