"""Diagnostic: which `cuda_cluster_split` configs could lift the M = 128 shapes with rows of 0.5-1 MB
(issue 3's >= 0.90-of-copy target on tensors of 64 MB or more) above the recorded best. Builds the
variant's kernel for configs that are declared and configs that are not (the kernel source is the
same; only the template arguments and the launch-time shared memory differ), checks each against
float64, and times them with the sweep's cold-L2 timer in rotating rounds beside the copy reference.
Prints per shape: copy, then each config's median µs, fraction of copy, registers, spills and blocks
per SM. A config that fails to build or launch (a cluster the GPU cannot co-schedule) is reported,
not raised.
Usage (on a GPU): python -m bench.probes.cluster_configs [--rounds 3] [--shapes 1x32000:fp16,4x65536:bf16]
[--configs 16/128/2/0,8/128/4/0] (cluster/block/packs/smem KB; the defaults are the lists below)."""
from __future__ import annotations

import argparse
import statistics

import torch

from autotuner.tune.measure import copy_reference
from autotuner.tune.timing import Timer
from kernels import KernelConfig, get_variant
from kernels.reference import check_softmax, random_input

SHAPES = [(128, 131072, "fp32"), (128, 151936, "fp32"), (128, 262144, "fp32"), (128, 262144, "bf16"),
          (128, 262144, "fp16"), (128, 151936, "bf16"), (128, 131072, "bf16"), (32, 262144, "bf16"),
          (1024, 262144, "bf16")]
# (cluster, block, packs, smem KB): the declared configs that are best on these shapes, then new ones
CONFIGS = [(8, 256, 8, 96), (8, 512, 8, 64), (2, 512, 8, 64), (16, 512, 8, 0),
           (16, 256, 8, 0), (16, 256, 8, 32), (16, 128, 8, 32), (16, 128, 8, 64), (16, 256, 4, 32),
           (8, 256, 16, 0), (8, 128, 8, 112), (8, 256, 4, 96), (8, 128, 8, 64)]


def parse_shape(text: str) -> tuple[int, int, str]:
    """"1x32000:fp16" -> (1, 32000, "fp16")."""
    dims, _, dtype = text.partition(":")
    m, _, n = dims.partition("x")
    return int(m), int(n), dtype or "bf16"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", help="comma list of MxN:dtype (default: the M = 128 shapes above)")
    parser.add_argument("--configs", help="comma list of cluster/block/packs/smem (default: CONFIGS above)")
    args = parser.parse_args(argv)
    shapes = [parse_shape(item) for item in args.shapes.split(",")] if args.shapes else SHAPES
    configs = [tuple(int(v) for v in item.split("/")) for item in args.configs.split(",")] if args.configs else CONFIGS
    variant = get_variant("cuda_cluster_split")
    timer = Timer("cold", time_cap_s=0.3)
    for m, n, dtype in shapes:
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        copy_us = copy_reference(timer, x, out).median_us
        runs: dict[str, tuple] = {}
        for shape in configs:
            config = KernelConfig.of(cluster=shape[0], block=shape[1], packs=shape[2], smem=shape[3])
            limits = variant.constraints(config, dtype)
            if not limits["n_min"] <= n <= limits["n_max"]:
                continue
            label = "c{}/b{}/p{}/s{}".format(*shape)
            try:
                build = variant.build(config, dtype, n)
                out.fill_(float("nan"))
                build.launch(x, out)
                torch.cuda.synchronize()
                check = check_softmax(out, x, dtype)
                if not check.ok:
                    print(f"  {label}: WRONG {check.message}", flush=True)
                    continue
            except Exception as exc:  # noqa: BLE001 - a diagnostic reports every failure and goes on
                print(f"  {dtype} {m}x{n} {label}: FAILED {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                continue
            r = build.resources
            runs[label] = (build, f"r{r.registers} sp{r.spill_bytes} smem{r.dynamic_smem // 1024}K b{r.blocks_per_sm}")
        times: dict[str, list[float]] = {label: [] for label in runs}
        labels = list(runs)
        for k in range(args.rounds):
            for label in labels[k % max(1, len(labels)):] + labels[:k % max(1, len(labels))]:
                build = runs[label][0]
                times[label].append(timer.time(lambda b=build: b.launch(x, out)).median_us)
        print(f"{dtype} {m}x{n}: copy {copy_us:.2f} us", flush=True)
        for label in sorted(labels, key=lambda lab: statistics.median(times[lab])):
            t = statistics.median(times[label])
            print(f"  {label:18s} {t:8.2f} us  {copy_us / t:.3f} of copy  {runs[label][1]}", flush=True)
        del x, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
