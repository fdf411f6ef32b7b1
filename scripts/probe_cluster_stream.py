"""Diagnostic: cuda_cluster_stream against cuda_cluster_split and the copy reference on the large-row
shapes it was written for (M = 128, rows of 0.25-1 MB), with the sweep's cold-L2 timer; for each
stream config also the clusters the driver says fit (G) and the time with fewer clusters (G/2) and
with one more than fit, to see whether G or the pipeline depth limits it.
Usage (on a GPU): python scripts/probe_cluster_stream.py [--out FILE]"""
from __future__ import annotations

import argparse
import json

import torch

from autotuner.measure import copy_reference
from autotuner.timing import Timer
from kernels.cuda import cluster_stream
from kernels.cuda.cluster_split import ClusterSplitCuda
from kernels.cuda.cluster_stream import ClusterStreamCuda
from kernels.reference import check_softmax, random_input

SHAPES = [(128, 262144, "bf16"), (128, 262144, "fp32"), (128, 151936, "fp32"), (128, 151936, "bf16"),
          (128, 131072, "bf16"), (4096, 65536, "bf16"), (32, 262144, "bf16")]


def timed(timer: Timer, build, x, out, dtype: str) -> tuple[bool, float]:
    out.fill_(float("nan"))
    build.launch(x, out)
    torch.cuda.synchronize()
    ok = check_softmax(out, x, dtype).ok
    return ok, timer.time(lambda: build.launch(x, out)).median_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    timer = Timer("cold", time_cap_s=0.3)
    stream, split = ClusterStreamCuda(), ClusterSplitCuda()
    resident_of = cluster_stream.max_active_clusters
    results = []
    for m, n, dtype in SHAPES:
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        copy_us = copy_reference(timer, x, out).median_us
        best_split = None
        for config in split.all_configs():
            if split.supports(m, n, dtype, config):
                ok, us = timed(timer, split.build(config, dtype, n), x, out, dtype)
                if ok and (best_split is None or us < best_split[1]):
                    best_split = (config.key, us)
        print(f"{dtype} {m}x{n}: copy {copy_us:.2f} us; best cluster_split {best_split}", flush=True)
        row = {"m": m, "n": n, "dtype": dtype, "copy_us": copy_us, "best_split": best_split, "stream": []}
        for config in stream.all_configs():
            if not stream.supports(m, n, dtype, config):
                continue
            build = stream.build(config, dtype, n)
            cluster = int(config["cluster"])
            entry = {"config": config.key, "blocks_per_sm": build.resources.blocks_per_sm}
            for label, scale in (("G", None), ("G/2", 0.5), ("G+1", "plus")):
                def forced(handle, c, threads, smem, fallback, scale=scale):
                    g = resident_of(handle, c, threads, smem, fallback)
                    entry.setdefault("resident", g)
                    return g if scale is None else (g + 1 if scale == "plus" else max(1, int(g * scale)))
                cluster_stream.max_active_clusters = forced
                try:
                    fresh = stream.build(config, dtype, n)  # a new launcher: its grid memo is empty
                    ok, us = timed(timer, fresh, x, out, dtype)
                finally:
                    cluster_stream.max_active_clusters = resident_of
                entry[label] = (ok, round(us, 2))
            row["stream"].append(entry)
            print(f"   {config.key:28s} blocks/SM {entry['blocks_per_sm']} G={entry.get('resident')} "
                  f"G:{entry['G']} G/2:{entry['G/2']} G+1:{entry['G+1']}  (copy/G time "
                  f"{copy_us / entry['G'][1]:.3f})", flush=True)
        results.append(row)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"device": torch.cuda.get_device_name(), "results": results}, handle, indent=1)


if __name__ == "__main__":
    main()
