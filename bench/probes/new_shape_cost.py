"""Where a new shape's host time goes in ``softmax()``, piece by piece, by the variant picked (GPU).

Question: a new shape costs ``softmax()`` 1.6-2.1x ``torch.softmax``'s host time (issue 29) while a
repeated one costs 1.0x. Which part of the new-shape path pays: the pick (``instance_for``), the
launch description (``Build.native``), or the native ``run`` itself (allocation or the driver's
launch of a geometry it has not seen)?

Three disjoint lists of new shapes per workload, every piece timed per call with the device drained
before it (``perf_counter_ns``):

- A: ``instance_for``, ``Build.native``, then ``run`` on the new launch, ``run`` again (a repeat),
  ``torch.softmax`` (new to it as well), the full ``softmax()`` on its first call;
- B: ``run`` on a new launch whose dynamic shared memory is the instance's largest (the same value
  every call), where the launch has any: does a shared-memory size the driver has not seen cost?
- C: ``empty_like`` on a new size, again, then ``run`` on the new launch (its output size allocated
  once already): does the allocation of a new size cost?

    bash bench/device/run.sh exec python -m bench.probes.new_shape_cost --out $OUT/new_shape_cost.json
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

BUFFER_BYTES = 256 << 20


def _timed(fn, *args):
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    result = fn(*args)
    return result, (time.perf_counter_ns() - t0) / 1e3


def _largest_smem(build, device, stream) -> int | None:
    """The instance's dynamic shared memory at its longest row (its launch at n_max), or None."""
    from kernels import get_variant

    limits = get_variant(build.variant).constraints(build.config, build.dtype)
    n_max = limits.get("n_max")
    if not n_max:
        return None
    launch = build.native(device, stream, 1, n_max)
    return None if launch is None else launch[3]


def probe(shapes, dtype, buffer, rng) -> dict:
    import torch

    from autotuner import runtime

    device = torch.cuda.current_device()
    stream = torch.cuda.current_stream().cuda_stream
    module = runtime.native_module()
    flat = buffer.view(dtype)
    name = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    rng.shuffle(shapes)
    third = len(shapes) // 3
    lists = shapes[:third], shapes[third:2 * third], shapes[2 * third:]
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for step, part in enumerate(lists):
        for m, n in part:
            x = flat[: m * n].view(m, n)
            build, t_pick = _timed(runtime.instance_for, device, m, n, name)
            launch, t_native = _timed(build.native, device, stream, m, n) if build.native else (None, 0.0)
            row = rows[build.variant if launch is not None else build.variant + " (no native)"]
            if step == 0:
                row["instance_for"].append(t_pick)
                row["native_description"].append(t_native)
                if launch is not None:
                    row["run_new"].append(_timed(module.run, x, stream, *launch)[1])
                    row["run_repeat"].append(_timed(module.run, x, stream, *launch)[1])
                row["torch_new"].append(_timed(torch.softmax, x, -1)[1])
                row["softmax_first_call"].append(_timed(runtime.softmax, x)[1])
                row["torch_repeat"].append(_timed(torch.softmax, x, -1)[1])
                row["softmax_repeat"].append(_timed(runtime.softmax, x)[1])
            elif step == 1 and launch is not None and launch[3]:
                largest = _largest_smem(build, device, stream)
                if largest:
                    fixed = (*launch[:3], largest, *launch[4:])
                    row["run_new_fixed_smem"].append(_timed(module.run, x, stream, *fixed)[1])
                    row["run_new_own_smem"].append(_timed(module.run, x, stream, *launch)[1])
            elif step == 2 and launch is not None:
                row["empty_like_new"].append(_timed(module.empty_like, x)[1])
                row["empty_like_repeat"].append(_timed(module.empty_like, x)[1])
                row["run_new_alloc_seen"].append(_timed(module.run, x, stream, *launch)[1])
    torch.cuda.synchronize()
    warm = {}
    for label, work in (("instance_for", lambda m, n: runtime.instance_for(device, m, n, name)),
                        ("instance_for+native", lambda m, n: (lambda b: b.native and b.native(device, stream, m, n))(
                            runtime.instance_for(device, m, n, name)))):
        t0 = time.perf_counter_ns()
        for m, n in lists[0]:
            work(m, n)
        warm[label] = round((time.perf_counter_ns() - t0) / 1e3 / len(lists[0]), 2)
    rows["_warm_loop_mean_us"] = warm
    return {variant: pieces if variant.startswith("_") else
            {"calls": len(pieces.get("instance_for", pieces.get("empty_like_new", [0]))),
             **{piece: round(statistics.median(values), 2) for piece, values in pieces.items() if values}}
            for variant, pieces in rows.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    import autotuner
    from autotuner.domain import DOMAIN_M_MAX, DOMAIN_N_MAX

    rng = random.Random(2911)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    result["warmup_seconds"] = autotuner.warmup(dtypes=("fp16", "bf16"))["seconds"]
    buffer = torch.randn(BUFFER_BYTES // 4, device="cuda")
    fp16, bf16 = torch.float16, torch.bfloat16

    def domain(count):
        shapes = set()
        while len(shapes) < count:
            m = int(math.exp(rng.uniform(0, math.log(DOMAIN_M_MAX))))
            n = int(math.exp(rng.uniform(0, math.log(DOMAIN_N_MAX))))
            if m * n * 2 <= BUFFER_BYTES:
                shapes.add((m, n))
        return list(shapes)

    workloads = {
        "decode fp16 256 x 2048-3247": ([(256, 2048 + i) for i in range(1200)], fp16),
        "vocab bf16 1-1044 x 128256": ([(m, 128256) for m in range(1, 1045)], bf16),
        "band fp16 M 1-64 x N 9001-17000": (list({(rng.randint(1, 64), rng.randint(9001, 17000)) for _ in range(3000)}), fp16),
        "random fp16 M 1-64 x N 1000-9000": (list({(rng.randint(1, 64), rng.randint(1000, 9000)) for _ in range(3000)}), fp16),
        "domain fp16": (domain(3000), fp16),
    }
    for label, (shapes, dtype) in workloads.items():
        result[label] = probe(shapes, dtype, buffer, rng)
        print(f"== {label}", file=sys.stderr)
        for variant, pieces in sorted(result[label].items(), key=lambda item: -item[1].get("calls", 1e9)):
            print(f"  {variant}: {pieces}", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
