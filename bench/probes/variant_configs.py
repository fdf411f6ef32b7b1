"""Diagnostic (GPU): which configs of one variant, declared or not, are fastest on given shapes?

Builds the variant's kernel for each config given (the source is the same; only template arguments
and launch-time choices differ), checks each against float64 (poisoned output), and times them with
the sweep's cold-L2 timer in rotating rounds beside the copy reference. Prints per shape: the copy,
then each config's median µs, fraction of copy, registers, spills and blocks per SM. A config that
fails to build, launch or verify is reported, not raised.

    python -m bench.probes.variant_configs cuda_cluster_split --shapes 128x262144:bf16,1x32000:fp16 \\
        --configs cluster=16/block=256/packs=8/smem=0,cluster=8/block=512/packs=8/smem=64 [--rounds 3]
    python -m bench.probes.variant_configs cuda_long_split --shapes 7x2500000:fp32 \\
        --configs block=512/unroll=8/chunk=8192,block=256/unroll=4/chunk=1024
"""
from __future__ import annotations

import argparse
import statistics


def parse_shape(text: str) -> tuple[int, int, str]:
    """"1x32000:fp16" -> (1, 32000, "fp16")."""
    dims, _, dtype = text.partition(":")
    m, _, n = dims.partition("x")
    return int(m), int(n), dtype or "bf16"


def parse_config(text: str) -> dict[str, int]:
    """"block=256/unroll=4/chunk=1024" -> {"block": 256, "unroll": 4, "chunk": 1024}."""
    return {key: int(value) for key, _, value in (item.partition("=") for item in text.split("/"))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant")
    parser.add_argument("--shapes", required=True, help="comma list of MxN:dtype")
    parser.add_argument("--configs", required=True, help="comma list of key=value/key=value")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    from autotuner.tune.measure import copy_reference
    from autotuner.tune.timing import Timer
    from kernels import KernelConfig, get_variant
    from kernels.reference import check_softmax, random_input

    variant = get_variant(args.variant)
    configs = [parse_config(item) for item in args.configs.split(",")]
    timer = Timer("cold", time_cap_s=0.3)
    for m, n, dtype in (parse_shape(item) for item in args.shapes.split(",")):
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        copy_us = copy_reference(timer, x, out).median_us
        runs: dict[str, tuple] = {}
        for values in configs:
            label = "/".join(f"{k}={v}" for k, v in values.items())
            try:
                build = variant.build(KernelConfig.of(**values), dtype, n)
                out.fill_(float("nan"))
                build.launch(x, out)
                torch.cuda.synchronize()
                check = check_softmax(out, x, dtype)
                if not check.ok:
                    print(f"  {dtype} {m}x{n} {label}: WRONG {check.message}", flush=True)
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
            print(f"  {label:36s} {t:9.2f} us  {copy_us / t:.3f} of copy  {runs[label][1]}", flush=True)
        del x, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
