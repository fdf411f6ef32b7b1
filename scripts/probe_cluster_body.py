"""Diagnostic: why QuACK's cluster softmax reaches copy speed on M = 128 rows of 1 MB (bf16 128x262144:
50.5 µs in peers_h100.csv, copy 50.5) where cuda_cluster_split's best config takes about 56 µs. Times
the probe kernel of scripts/probe_cluster_body.cu (cluster_split's exchange with QuACK's staging of the
share through shared memory, STAGE, and/or QuACK's one exp per element kept in fp32 registers, KEEP,
at several register budgets) beside cuda_cluster_split's own configs, with the sweep's cold-L2
timer in rotating rounds; every kernel is first checked against float64.
``--small`` takes the shapes where QuACK 0.6.5 stayed ahead of the dispatch in the 2026-11-25 bench
(1 and 4 rows of 262144 and 32 rows of 131072, 16-bit; one block per SM or a few), where
exp throughput rather than occupancy may bound the kernel.
Usage (on an sm_90 GPU): python scripts/probe_cluster_body.py [--rounds 3] [--small]"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch

from autotuner.tune.measure import copy_reference
from autotuner.tune.timing import Timer
from kernels import KernelConfig, get_variant
from kernels.cuda import loader
from kernels.cuda.cluster_split import PORTABLE_CLUSTER, allow_non_portable_cluster
from kernels.cuda.loader import CUDA_TYPE
from kernels.reference import check_softmax, random_input

PROBE_SOURCE = Path(__file__).with_name("probe_cluster_body.cu")
# (m, n, dtype): [(cluster, threads, items, stage, keep, min_blocks)], [cluster_split configs]
CASES = [
    (128, 262144, "bf16",
     [(16, 256, 8, 0, 0, 3), (16, 256, 8, 1, 0, 3), (16, 256, 8, 1, 1, 3), (16, 256, 8, 0, 1, 2),
      (16, 256, 8, 1, 1, 2)],
     [(16, 256, 8, 0), (16, 128, 8, 32), (8, 256, 8, 96)]),
    (128, 262144, "fp32",
     [(16, 512, 8, 0, 0, 2), (16, 512, 8, 1, 1, 2), (16, 256, 16, 0, 0, 2), (16, 256, 16, 1, 0, 2),
      (16, 256, 16, 1, 1, 2)],
     [(16, 256, 8, 32), (8, 512, 8, 64)]),
]


SMALL_CASES = [  # 16 blocks of 256 threads, `items` 16-byte vectors of 8 elements each fill the row
    (m, n, dtype,
     [(16, 256, items, 0, 0, 1), (16, 256, items, 0, 1, 1)],
     [(16, 256, items, 0), (16, 512, 4, 0), (16, 128, 8, 32)])
    for m, n, items in ((1, 262144, 8), (4, 262144, 8), (32, 131072, 4)) for dtype in ("bf16", "fp16")
]


def probe_launcher(source: str, dtype: str, shape: tuple[int, ...], m: int, n: int):
    cluster, threads, items, stage, keep, min_blocks = shape
    name = (f"probe_cluster_body<{CUDA_TYPE[dtype]}, {cluster}, {threads}, {items}, "
            f"{'true' if stage else 'false'}, {'true' if keep else 'false'}, {min_blocks}>")
    function, _ = loader.get_function("probe_cluster_body", name, code=source)
    if cluster > PORTABLE_CLUSTER:
        allow_non_portable_cluster(function)
    smem = threads * items * 16 if stage else 0
    resources = loader.resources_of(function, threads, smem)

    def launch(x, out):
        loader.launch(function, (cluster * m, 1, 1), (threads, 1, 1),
                      (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.int64(n)), smem)

    return launch, resources


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="the small-M shapes QuACK leads (see above)")
    args = parser.parse_args(argv)
    variant = get_variant("cuda_cluster_split")
    source = variant.source_code() + "\n" + PROBE_SOURCE.read_text()
    timer = Timer("cold", time_cap_s=0.3)
    for m, n, dtype, probes, configs in SMALL_CASES if args.small else CASES:
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        copy_us = copy_reference(timer, x, out).median_us
        runs = {}
        for shape in probes:
            label = "probe c{} t{} i{} stage{} keep{} minb{}".format(*shape)
            assert shape[0] * shape[1] * shape[2] * (16 // x.element_size()) == n, label
            try:
                launch, r = probe_launcher(source, dtype, shape, m, n)
            except Exception as exc:  # noqa: BLE001 - a diagnostic reports every failure and goes on
                print(f"  {label}: FAILED {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                continue
            runs[label] = (launch, f"r{r.registers} sp{r.spill_bytes} b{r.blocks_per_sm}")
        for c in configs:
            config = KernelConfig.of(cluster=c[0], block=c[1], packs=c[2], smem=c[3])
            build = variant.build(config, dtype, n)
            r = build.resources
            runs["cluster_split c{}/b{}/p{}/s{}".format(*c)] = (build.launch, f"r{r.registers} sp{r.spill_bytes} b{r.blocks_per_sm}")
        for label, (launch, _) in list(runs.items()):
            out.fill_(float("nan"))
            try:
                launch(x, out)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a diagnostic reports every failure and goes on
                print(f"  {label}: FAILED {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                del runs[label]
                continue
            check = check_softmax(out, x, dtype)
            if not check.ok:
                print(f"  {label}: WRONG {check.message}", flush=True)
                del runs[label]
        labels = list(runs)
        times = {label: [] for label in labels}
        for k in range(args.rounds):
            for label in labels[k % len(labels):] + labels[:k % len(labels)]:
                times[label].append(timer.time(lambda f=runs[label][0]: f(x, out)).median_us)
        print(f"{dtype} {m}x{n}: copy {copy_us:.2f} us", flush=True)
        for label in sorted(labels, key=lambda lab: statistics.median(times[lab])):
            t = statistics.median(times[label])
            print(f"  {label:40s} {t:8.2f} us  {copy_us / t:.3f} of copy  {runs[label][1]}", flush=True)


if __name__ == "__main__":
    main()
