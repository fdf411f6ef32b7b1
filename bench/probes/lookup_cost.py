"""Diagnostic (CPU): what a lookup costs over the whole domain, in a fresh process: a first lookup (a
shape not yet cached: exact-point probe and bisects into the table's decision index), a warm one
(the answer cache), and how much 200,000 new shapes grow the process.

Two samples of first lookups: 2000 bf16 shapes, M = 3 + i, N = 1000 + 7 i (the sample of the
former ``scripts/bench_runtime.py``), and 20,000 shapes drawn log-uniformly over M 1..2^20, N 1..2^24 and the three dtypes
(seeded), both through ``select_kernel`` on the shipped tables of ``--gpu``, tables loaded (and each
index partition decoded) before the clock starts.

    python -m bench.probes.lookup_cost [--gpu h100]
"""
from __future__ import annotations

import argparse
import subprocess
import sys

SAMPLE = """
import json, random, resource, statistics, sys, time, warnings
warnings.simplefilter("ignore")
from autotuner import select_kernel
gpu = sys.argv[1]
rng = random.Random(1)
for dtype in ("fp16", "bf16", "fp32"):  # loads the tables and decodes their partitions: start-up
    for n in (8, 9):
        select_kernel(3, n, dtype, gpu)
def timed(shapes):
    times = []
    for m, n, dtype in shapes:
        started = time.perf_counter_ns()
        select_kernel(m, n, dtype, gpu)
        times.append((time.perf_counter_ns() - started) / 1e3)
    times.sort()
    return {"median_us": round(statistics.median(times), 2), "mean_us": round(statistics.mean(times), 2),
            "p99_us": round(times[int(0.99 * len(times))], 1)}
domain = [(int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24)), rng.choice(("fp16", "bf16", "fp32")))
          for _ in range(20000)]
first = timed(domain)
warm = timed(domain)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(200000):
    select_kernel(int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24)), rng.choice(("fp16", "bf16", "fp32")), gpu)
grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"bench_runtime_sample": timed([(3 + i, 1000 + 7 * i, "bf16") for i in range(2000)]),
                  "log_uniform_domain_first": first, "log_uniform_domain_warm": warm,
                  "grown_by_200000_new_shapes_mb": round(grown_mb, 1)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    args = parser.parse_args()
    done = subprocess.run([sys.executable, "-c", SAMPLE, args.gpu], capture_output=True, text=True, check=True)
    print(done.stdout.strip())


if __name__ == "__main__":
    main()
