"""Diagnostic (CPU): what a first lookup (a shape not yet cached) costs over the whole domain, with the
compiled rule and with its Python form, each in a fresh process.

Two samples per form: ``scripts/bench_runtime.py``'s (2000 bf16 shapes, M = 3 + i, N = 1000 + 7 i) and
20,000 shapes drawn log-uniformly over M 1..2^20, N 1..2^24 and the three dtypes (seeded), both through
``select_kernel`` on the shipped tables of ``--gpu``, tables loaded before the clock starts.

    python -m bench.probes.lookup_cost [--gpu h100]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

SAMPLE = """
import json, random, statistics, sys, time, warnings
warnings.simplefilter("ignore")
from autotuner import select_kernel
from autotuner.lookup import regret
gpu = sys.argv[1]
for dtype in ("fp16", "bf16", "fp32"):
    select_kernel(1, 1, dtype, gpu)  # loads the tables: start-up, not a lookup
def timed(shapes):
    times = []
    for m, n, dtype in shapes:
        started = time.perf_counter_ns()
        select_kernel(m, n, dtype, gpu)
        times.append((time.perf_counter_ns() - started) / 1e3)
    times.sort()
    return {"median_us": round(statistics.median(times), 2), "mean_us": round(statistics.mean(times), 2),
            "p99_us": round(times[int(0.99 * len(times))], 1)}
rng = random.Random(1)
domain = [(int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24)), rng.choice(("fp16", "bf16", "fp32")))
          for _ in range(20000)]
print(json.dumps({"compiled": regret.best is not regret.best_python,
                  "bench_runtime_sample": timed([(3 + i, 1000 + 7 * i, "bf16") for i in range(2000)]),
                  "log_uniform_domain": timed(domain)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    args = parser.parse_args()
    for compiled in ("1", "0"):
        env = {**os.environ, "SOFTMAX_AUTOTUNER_COMPILED_LOOKUP": compiled}
        done = subprocess.run([sys.executable, "-c", SAMPLE, args.gpu], env=env, capture_output=True, text=True,
                              check=True)
        print(done.stdout.strip())


if __name__ == "__main__":
    main()
