"""Diagnostic (GPU): where the host time of a new shape whose pick is ``cuda_long_split`` goes, against
a pick without a split workspace on shapes of the same bytes. Per pick kind, 300 new fp16 shapes
(each met once), after ``autotuner.warmup``; per call, the device drained before it, median of:
``softmax(x)``; the native ``dispatch(x, -1)`` alone (no Python frame); the plan's ``plan_run``
alone (no route checks); ``torch.softmax(x, -1)``. The call's own allocation is in all four.

    python -m bench.probes.split_host_cost
"""
from __future__ import annotations

import json
import math
import random
import statistics
import time


def main() -> None:
    import torch

    import autotuner
    from autotuner import runtime, select_kernel

    autotuner.warmup(dtypes=("fp16",))
    module = runtime.native_module()
    plan = runtime.plan_for(torch.cuda.current_device(), "fp16")
    rng = random.Random(7)
    shapes: dict[str, list[tuple[int, int]]] = {"cuda_long_split": [], "other": []}
    while min(len(found) for found in shapes.values()) < 300:
        m, n = int(math.exp(rng.uniform(0, math.log(4096)))), int(math.exp(rng.uniform(math.log(2**15), math.log(2**22))))
        if m * n > 64 << 20:
            continue
        kind = "cuda_long_split" if select_kernel(m, n, "fp16").variant == "cuda_long_split" else "other"
        if len(shapes[kind]) < 300:
            shapes[kind].append((m, n))
    buffer = torch.randn(64 << 20, device="cuda", dtype=torch.float16)
    stream = torch.cuda.current_stream().cuda_stream
    ways = {"softmax": autotuner.softmax, "dispatch": lambda x: module.dispatch(x, -1),
            "plan_run": lambda x: module.plan_run(plan, x, stream), "torch": lambda x: torch.softmax(x, -1)}
    result = {"device": torch.cuda.get_device_name()}
    for kind, found in shapes.items():
        times = {name: [] for name in ways}
        for i, (m, n) in enumerate(found):
            x = buffer[: m * n].view(m, n)
            names = list(ways) if i % 2 == 0 else list(reversed(ways))  # each way first as often
            for name in names:
                torch.cuda.synchronize()
                started = time.perf_counter_ns()
                ways[name](x)
                times[name].append((time.perf_counter_ns() - started) / 1e3)
        medians = {name: statistics.median(values) for name, values in times.items()}
        result[kind] = {"median_us": {name: round(value, 2) for name, value in medians.items()},
                        "ratio_to_torch": {name: round(value / medians["torch"], 3) for name, value in medians.items()}}
    result["plan_stats"] = module.plan_stats(plan)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
