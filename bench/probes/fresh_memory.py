"""Diagnostic: is a copy slower right after its tensors are allocated? The H100 sweep's and bench's
copy references (timed first on each shape's newly allocated tensors) were about 1.15x the anchors'
copy on half of the large shapes, while the same copy on long-lived tensors was not. This allocates
fresh tensors (after ``torch.cuda.empty_cache()``) and times a copy at once, again, and after a pause.
Usage (on a GPU): python -m bench.probes.fresh_memory
"""
from __future__ import annotations

import json
import time

import torch

from autotuner.tune.timing import Timer
from kernels.reference import random_input

SHAPES = [(16384, 2048, "fp32"), (4096, 32000, "fp16"), (1024, 65536, "bf16"), (4096, 16384, "fp32")]


def main() -> None:
    timer = Timer("cold", time_cap_s=0.2)
    for m, n, dtype in SHAPES:
        for trial in range(3):
            torch.cuda.empty_cache()
            started = time.perf_counter()
            x = random_input(m, n, dtype)
            out = torch.empty_like(x)
            first = timer.time(lambda: out.copy_(x)).median_us
            second = timer.time(lambda: out.copy_(x)).median_us
            time.sleep(1.0)
            after_pause = timer.time(lambda: out.copy_(x)).median_us
            clone = timer.time(lambda: x.clone()).median_us
            print(json.dumps({"dtype": dtype, "m": m, "n": n, "trial": trial, "first_us": round(first, 2),
                              "second_us": round(second, 2), "after_1s_us": round(after_pause, 2),
                              "clone_us": round(clone, 2), "seconds": round(time.perf_counter() - started, 2)}), flush=True)
            del x, out


if __name__ == "__main__":
    main()
