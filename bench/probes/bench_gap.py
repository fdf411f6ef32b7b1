"""Diagnostic: why `autotuner bench` found the dispatched softmax 0.3-0.6 us behind Liger on small shapes
and both ours and the copy ~15 % behind torch / Liger at M = 16384 (bench/README.md), when the sweep
measured them level. On each shape it times, with the sweep's cold-L2 timer, in three rounds whose
order rotates: the copy reference, `softmax(x)` (the dispatched plan), the same build's `launch(x,
out)` into a preallocated output, `torch.softmax`, and Liger when importable. A gap that follows the
position in the round is an order effect; one that stays with a candidate is real.
Usage (on a GPU): python -m bench.probes.bench_gap [--out FILE]"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from autotuner import runtime, select_kernel, softmax
from autotuner.report.benchrun import peer_launchers
from autotuner.tune.measure import copy_reference
from autotuner.tune.timing import Timer
from kernels.reference import random_input

SHAPES = [(1, 1024, "bf16"), (1, 2048, "bf16"), (4, 1024, "fp16"), (128, 1024, "fp32"), (32, 8192, "fp16"),
          (1, 8192, "bf16"), (16384, 4096, "bf16"), (16384, 2048, "fp32")]
ROUNDS = 3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    timer = Timer("cold", time_cap_s=0.3)
    results = []
    for m, n, dtype in SHAPES:
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        choice = select_kernel(m, n, dtype)
        build = runtime.build_for(choice.variant, choice.config, dtype, n)
        softmax(x)  # makes the plan
        candidates = {
            "copy": lambda: copy_reference(timer, x, out).median_us,
            "softmax(x)": lambda: timer.time(lambda: softmax(x)).median_us,
            "launch(x,out)": lambda: timer.time(lambda: build.launch(x, out)).median_us,
        }
        for name, launch in peer_launchers(dtype, n).items():
            peer_out = torch.empty_like(x)
            candidates[name] = lambda f=launch, o=peer_out: timer.time(lambda: f(x, o)).median_us
        names = list(candidates)
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_index in range(ROUNDS):
            order = names[round_index:] + names[:round_index]  # rotate: each candidate in each position
            for name in order:
                times[name].append(candidates[name]())
        row = {"m": m, "n": n, "dtype": dtype, "dispatched": f"{choice.variant}[{choice.config_key}]",
               "times_us": times}
        results.append(row)
        cells = "  ".join(f"{name} {statistics.median(t):.2f} ({'/'.join(f'{v:.2f}' for v in t)})" for name, t in times.items())
        print(f"{dtype} {m}x{n} [{row['dispatched']}]: {cells}", flush=True)
        del x, out
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"device": torch.cuda.get_device_name(), "rounds": ROUNDS, "results": results}, handle, indent=1)


if __name__ == "__main__":
    main()
