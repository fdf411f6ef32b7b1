"""Diagnostic: cuda_cluster_split's exchange of partial (max, sum) pairs, old against new.

Old (scripts/probe_cluster_barrier.cu, the kernel of commit a0bf3de): block reduction, a cluster
barrier, remote loads of every block's pair, and a second cluster barrier before exit. New
(kernels/cuda/cluster_split.cu): every warp pushes its pair into each block of the cluster by
st.async, counted on that block's mbarrier; a block waits only for the bytes addressed to it.

Both are built for every declared config that admits each shape, checked against float64 on a
poisoned output, then timed with the sweep's cold-L2 timer in rotating rounds (median of rounds).
Prints per shape the copy, each config old / new, and the best of each; writes the same as JSON.
Usage (on an sm_90 GPU): python scripts/probe_cluster_exchange.py [--rounds 2] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from autotuner.tune.measure import copy_reference
from autotuner.tune.timing import Timer
from kernels import get_variant
from kernels.base import check_constraints
from kernels.cuda import loader
from kernels.cuda.cluster_split import PORTABLE_CLUSTER, allow_non_portable_cluster
from kernels.cuda.loader import CUDA_TYPE
from kernels.reference import check_softmax, random_input

OLD_SOURCE = Path(__file__).with_name("probe_cluster_barrier.cu")
# The shapes of the H100 recording where cuda_cluster_split is the best of our kernels and below
# 0.90 of copy on tensors of 64 MB or more, and small-M rows where the exchange is most of the time.
CASES = [
    (256, 151936, "bf16"), (256, 151936, "fp16"), (64, 262144, "fp32"), (128, 262144, "bf16"),
    (256, 131072, "bf16"), (128, 262144, "fp16"), (128, 151936, "fp32"), (128, 262144, "fp32"),
    (128, 131072, "fp32"), (1024, 262144, "bf16"),
    (1, 32000, "bf16"), (1, 32768, "bf16"), (4, 50257, "bf16"), (16, 32000, "bf16"), (16, 65536, "bf16"),
    (32, 50257, "fp16"), (16, 151936, "fp32"), (4, 65536, "fp32"), (32, 262144, "bf16"),
]


def old_launcher(variant, config, dtype: str, m: int, n: int):
    """The a0bf3de kernel for one config, launched as cuda_cluster_split launches its own."""
    cluster, block, packs = int(config["cluster"]), int(config["block"]), int(config["packs"])
    name = f"probe_cluster_barrier<{CUDA_TYPE[dtype]}, {cluster}, {block}, {packs}>"
    function, _ = loader.get_function("probe_cluster_barrier", name,
                                      code=variant.source_code() + "\n" + OLD_SOURCE.read_text())
    if cluster > PORTABLE_CLUSTER:
        allow_non_portable_cluster(function)
    smem = variant.dynamic_smem(config, dtype, n)
    resources = loader.resources_of(function, block, smem)

    def launch(x, out):
        loader.launch(function, (cluster * m, 1, 1), (block, 1, 1),
                      (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.int64(m), np.int64(n)), smem)

    return launch, resources


def checked(label: str, launch, x, out, dtype: str) -> bool:
    out.fill_(float("nan"))
    try:
        launch(x, out)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a diagnostic reports every failure and goes on
        print(f"  {label}: FAILED {type(exc).__name__}: {str(exc)[:160]}", flush=True)
        return False
    check = check_softmax(out, x, dtype)
    if not check.ok:
        print(f"  {label}: WRONG {check.message}", flush=True)
    return check.ok


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    variant = get_variant("cuda_cluster_split")
    timer = Timer("cold", time_cap_s=0.2)
    results = []
    for m, n, dtype in CASES:
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        copy_us = copy_reference(timer, x, out).median_us
        runs = {}
        for config in variant.all_configs():
            if not check_constraints(variant.constraints(config, dtype), m, n):
                continue
            key = "c{cluster}/b{block}/p{packs}/s{smem}".format(**config.as_dict())
            build = variant.build(config, dtype, n)
            r = build.resources
            if checked(f"new {key}", build.launch, x, out, dtype):
                runs[("new", key)] = (build.launch, f"r{r.registers} sp{r.spill_bytes} b{r.blocks_per_sm}")
            launch, r = old_launcher(variant, config, dtype, m, n)
            if checked(f"old {key}", launch, x, out, dtype):
                runs[("old", key)] = (launch, f"r{r.registers} sp{r.spill_bytes} b{r.blocks_per_sm}")
        labels = list(runs)
        times = {label: [] for label in labels}
        for k in range(args.rounds):
            shift = k * max(1, len(labels) // args.rounds)
            for label in labels[shift:] + labels[:shift]:
                times[label].append(timer.time(lambda f=runs[label][0]: f(x, out)).median_us)
        median = {label: statistics.median(times[label]) for label in labels}
        best = {kind: min((t for (k, _), t in median.items() if k == kind), default=None) for kind in ("old", "new")}
        print(f"{dtype} {m}x{n}: copy {copy_us:.2f} us; best old {best['old']}, new {best['new']}", flush=True)
        for key in dict.fromkeys(key for _, key in labels):
            old, new = median.get(("old", key)), median.get(("new", key))
            ratio = f"{new / old:.3f}" if old and new else "-"
            print(f"  {key:22s} old {old or float('nan'):8.2f}  new {new or float('nan'):8.2f}  new/old {ratio}"
                  f"  {runs.get(('new', key), (None, ''))[1]}", flush=True)
        results.append({"m": m, "n": n, "dtype": dtype, "copy_us": copy_us,
                        "configs": {f"{kind} {key}": t for (kind, key), t in median.items()},
                        "best_old_us": best["old"], "best_new_us": best["new"]})
    pairs = [(r["best_old_us"], r["best_new_us"]) for r in results if r["best_old_us"] and r["best_new_us"]]
    if pairs:
        geo = float(np.exp(np.mean([np.log(new / old) for old, new in pairs])))
        print(f"best new / best old, geomean over {len(pairs)} shapes: {geo:.3f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "cases": results}, indent=1))


if __name__ == "__main__":
    main()
