"""Diagnostic: where a one-row split softmax spends its time over a copy at M = 1 (fp32, H100).
Times, with the sweep's cold-L2 timer, the kernels of ``probe_split_latency.cu`` (a copy with the
same grid, then local stats, then the slot store, then the full exchange, also with the slot lines
prefetched into L2), the registered
``cuda_grid_split`` and the copy reference, for one row of 65536 and of 262144 floats split over 64
blocks. The full exchange's output is checked against float64.
Usage (on a GPU): python scripts/probe_split_latency.py
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from autotuner.tune.measure import copy_reference
from autotuner.tune.timing import Timer
from kernels import KernelConfig, get_variant
from kernels.cuda import loader
from kernels.reference import check_softmax, random_input

SOURCE = Path(__file__).with_suffix(".cu")
SPLIT = 64


def kernel(expression: str):
    function, _ = loader.get_function("probe_split_latency.cu", expression, code=SOURCE.read_text())
    return function


def timeline(per_thread: int, x, out, slots, epoch, timer) -> dict:
    """Per-block %globaltimer stamps of the full exchange after a cold-L2 flush, as spreads (ns):
    block starts (last - first), row loaded, pair published, exchange done (each relative to the
    first block's start), median over 50 launches."""
    import statistics

    stamp_kernel = kernel(f"split_p<{per_thread}, 2>")  # the full exchange, stamps recorded
    stamps = torch.zeros(5 * SPLIT, dtype=torch.int64, device="cuda")
    samples: dict[str, list[float]] = {}
    for _ in range(50):
        timer._flush()
        epoch[0] += 1
        loader.launch(stamp_kernel, (SPLIT, 1, 1), (256, 1, 1), (
            np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.uint64(slots.data_ptr()),
            np.int32(SPLIT), np.uint32(epoch[0]), np.uint64(stamps.data_ptr())))
        torch.cuda.synchronize()
        t = stamps.view(SPLIT, 5).cpu().numpy().astype(np.float64)
        first = t[:, 0].min()
        figures = {
            "start_spread_ns": t[:, 0].max() - first,
            "last_loaded_ns": t[:, 1].max() - first, "first_loaded_ns": t[:, 1].min() - first,
            "last_published_ns": t[:, 2].max() - first,
            "first_exchange_done_ns": t[:, 3].min() - first, "last_exchange_done_ns": t[:, 3].max() - first,
            "last_stored_ns": t[:, 4].max() - first,
        }
        for key, value in figures.items():
            samples.setdefault(key, []).append(value)
    return {key: statistics.median(values) for key, values in samples.items()}


def main() -> None:
    timer = Timer("cold", time_cap_s=0.3)
    slots = torch.zeros(2 * SPLIT, dtype=torch.int64, device="cuda")
    epoch = [0]
    for per_thread in (1, 4):
        n = SPLIT * 256 * per_thread * 4
        x = random_input(1, n, "fp32")
        out = torch.empty_like(x)
        row = {"n": n, "copy_reference_us": copy_reference(timer, x, out).median_us}
        copy = kernel(f"copy_p<{per_thread}>")
        row["same_grid_copy_us"] = timer.time(lambda: loader.launch(
            copy, (SPLIT, 1, 1), (256, 1, 1), (np.uint64(x.data_ptr()), np.uint64(out.data_ptr())))).median_us
        for mode, label in ((0, "local_stats_us"), (1, "plus_slot_store_us"), (2, "full_exchange_us"),
                            (3, "full_exchange_prefetched_us")):
            split = kernel(f"split_p<{per_thread}, {mode}>")

            def launch() -> None:
                epoch[0] += 1
                loader.launch(split, (SPLIT, 1, 1), (256, 1, 1), (
                    np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.uint64(slots.data_ptr()),
                    np.int32(SPLIT), np.uint32(epoch[0]), np.uint64(0)))

            row[label] = timer.time(launch).median_us
            if mode >= 2:
                launch()
                torch.cuda.synchronize()
                row[f"mode{mode}_ok"] = check_softmax(out, x, "fp32").ok
        row.update(timeline(per_thread, x, out, slots, epoch, timer))
        for key in ("split=64,block=256,packs=4", "split=16,block=256,packs=8", "split=32,block=256,packs=4"):
            config = KernelConfig.from_key(key)
            variant = get_variant("cuda_grid_split")
            if variant.supports(1, n, "fp32", config):
                build = variant.build(config, "fp32", n)
                row[f"grid_split[{key}]_us"] = timer.time(lambda: build.launch(x, out)).median_us
        print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
