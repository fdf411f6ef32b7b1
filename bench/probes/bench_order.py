"""Diagnostic: within one shape of ``autotuner bench`` (fresh tensors, then copy, dispatched softmax
and peers, then ``torch.cuda.empty_cache()``), does a timing depend on when it runs? On the H100 the
bench measured copy and the dispatched softmax at ~108 us on three 128 MB shapes where torch and
Liger, timed after them on the same tensors, took ~94 us. This repeats that order and times the copy
and the softmax again at the end of each shape.
Usage (on a GPU): python -m bench.probes.bench_order
"""
from __future__ import annotations

import json

import torch

from autotuner import softmax
from autotuner.tune.measure import copy_reference
from autotuner.tune.timing import Timer
from kernels.reference import random_input

SHAPES = [(16384, 1024, "fp32"), (16384, 2048, "fp32"), (16384, 4096, "fp16"), (16384, 4096, "bf16"),
          (16384, 2048, "fp16")]


def main() -> None:
    timer = Timer("cold", time_cap_s=0.3)
    for empty_cache in (True, False):
        for m, n, dtype in SHAPES:
            x = random_input(m, n, dtype)
            out = torch.empty_like(x)
            row = {"empty_cache": empty_cache, "shape": f"{dtype} {m}x{n}"}
            row["copy_first"] = copy_reference(timer, x, out).median_us
            row["softmax_first"] = timer.time(lambda: softmax(x)).median_us
            peer_out = torch.empty_like(x)
            row["torch_into_out"] = timer.time(lambda: torch.softmax(x, -1, out=peer_out)).median_us
            row["copy_last"] = copy_reference(timer, x, out).median_us
            row["softmax_last"] = timer.time(lambda: softmax(x)).median_us
            y = torch.empty_like(x)
            from autotuner import select_kernel
            from kernels import KernelConfig, get_variant
            choice = select_kernel(m, n, dtype)
            launch = get_variant(choice.variant).build(KernelConfig(tuple(choice.config_items)), dtype, n).launch
            row["kernel_into_preallocated"] = timer.time(lambda: launch(x, y)).median_us
            row["ptrs_mod_2MB"] = [t.data_ptr() % (2 << 20) for t in (x, out, peer_out, y)]
            print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            del x, out, peer_out, y
            if empty_cache:
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
