"""Diagnostic: time cuda_grid_split configs on a few shapes with the sweep's cold-L2 timer, to see
whether the ~300 us rows recorded on the H100 (e.g. split=64,block=512,packs=2 at bf16 4x16384)
reproduce. Usage (on a GPU): python -m bench.probes.grid_split"""
from __future__ import annotations

import torch

from autotuner.tune.timing import Timer
from kernels.base import KernelConfig
from kernels.cuda.grid_split import GridSplitCuda
from kernels.reference import check_softmax, random_input

SHAPES = [(4, 16384, "bf16"), (1, 131072, "bf16"), (4, 262144, "fp16"), (32, 65536, "bf16")]


def main() -> None:
    variant = GridSplitCuda()
    timer = Timer("cold", time_cap_s=0.3)
    for m, n, dtype in SHAPES:
        for config in variant.all_configs():
            if not variant.supports(m, n, dtype, config):
                continue
            build = variant.build(config, dtype, n)
            x = random_input(m, n, dtype)
            out = torch.empty_like(x)
            build.launch(x, out)
            torch.cuda.synchronize()
            ok = check_softmax(out, x, dtype).ok
            t = timer.time(lambda: build.launch(x, out))
            print(f"{dtype} {m}x{n} {config.key:32s} blocks/SM {build.resources.blocks_per_sm} regs "
                  f"{build.resources.registers} ok={ok} median {t.median_us:8.2f} p20 {t.p20_us:8.2f} "
                  f"p80 {t.p80_us:8.2f} n={t.repetitions}", flush=True)


if __name__ == "__main__":
    main()
