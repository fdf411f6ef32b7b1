"""Synthetic tuning data for the service tests, written through ``db.queries``.

Until a real recorded sweep is committed under tests/data/, the timings come from a small cost model
(launch overhead + bytes / bandwidth per variant, with shape limits) chosen so that different variants
win in different regions of the M × N map; the tables are fitted by hand in ``autotuner/lookup/table.py``'s
format (per-point times of every candidate, copy reference, regret figures).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from db import queries
from kernels.base import DTYPE_BYTES

UPLOAD_TOKEN = "test-upload-token-5f2c"
MS = (1, 8, 64, 512, 4096, 32768)
NS = (64, 256, 1024, 4096, 16384, 32000, 65536, 131072)


@dataclass(frozen=True)
class SyntheticVariant:
    name: str
    config: dict[str, Any]
    overhead_us: float
    bytes_per_us: float  # achieved bandwidth
    constraints: dict[str, int]
    seed: str = "000"

    @property
    def config_key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.config.items())

    def time_us(self, m: int, n: int, dtype: str) -> float | None:
        limits = self.constraints
        if n > limits.get("n_max", n) or n < limits.get("n_min", 1) or n % limits.get("n_multiple_of", 1):
            return None
        return self.overhead_us + 2 * m * n * DTYPE_BYTES[dtype] / self.bytes_per_us


# Configs the variants declare, times above every floor an upload is held to (a launch floor of about
# 2.7 µs on an H100, at most 0.947 of its DRAM peak: autotuner/records/physics.py), so that an export
# of this database is a plausible upload; the constraints are the tables' own, made up.
VARIANTS = (
    SyntheticVariant("torch_softmax", {}, 6.5, 2.3e6, {}, seed="torch"),
    SyntheticVariant("cuda_warp_row", {"block": 128, "lanes": 4, "elems": 4}, 3.6, 2.0e6, {"n_max": 1024, "n_multiple_of": 4}),
    SyntheticVariant("cuda_block_online", {"block": 256, "items": 4}, 4.2, 2.6e6, {"n_max": 32768, "n_multiple_of": 4}),
    SyntheticVariant("triton_fused_row", {"num_warps": 8, "num_stages": 1}, 5.4, 2.75e6, {"n_max": 16384}, seed="002"),
    SyntheticVariant("cuda_split_row", {"block": 512, "split": 8}, 8.0, 2.9e6, {"n_min": 16384}, seed="003"),
)


def copy_time_us(m: int, n: int, dtype: str) -> float:
    return 3.0 + 2 * m * n * DTYPE_BYTES[dtype] / 3.0e6


def table_payload(gpu: str, gpu_name: str, dtype: str, run_id: int, rule: str = "interp-log",
                  speedup: float = 1.0) -> dict[str, Any]:
    """A fitted table in ``autotuner/lookup/table.py``'s format, with its decision index; ``speedup``
    scales every time (a "refit")."""
    return {**_indexed_payload(gpu, gpu_name, dtype, rule, speedup), "source_runs": [run_id]}


@functools.lru_cache(maxsize=None)
def _indexed_payload(gpu: str, gpu_name: str, dtype: str, rule: str, speedup: float) -> dict[str, Any]:
    """The payload without its run, indexed once per process (the index build evaluates the rule over
    the whole domain)."""
    from autotuner.fit.index import index_document

    points = []
    regrets = []
    for m in MS:
        for n in NS:
            times = [v.time_us(m, n, dtype) for v in VARIANTS]
            times = [t / speedup if t is not None else None for t in times]
            points.append({"m": m, "n": n, "copy_us": copy_time_us(m, n, dtype), "times": times})
            regrets.append(1.0 + 0.01 * ((m * 7 + n) % 5))
    regrets.sort()
    return index_document({
        "format_version": 1, "gpu": gpu, "gpu_name": gpu_name, "dtype": dtype, "timing_method": "cold",
        "rule": rule,
        "candidates": [{"variant": v.name, "config": v.config, "config_key": v.config_key,
                        "constraints": v.constraints} for v in VARIANTS],
        "points": points,
        "regret": {"geomean": 1.012, "p95": regrets[int(0.95 * (len(regrets) - 1))], "max": regrets[-1],
                   "method": "leave-one-out"},
        "created_at": "2025-01-01T00:00:00+00:00",
        "environment": {"torch": "2.8.0", "cuda": "12.8"},
    })


DEVICES = {  # as the devices report themselves
    "h100": {"sm_count": 132, "l2_bytes": 50 * 2**20, "memory_bytes": 85017493504, "compute_capability": "9.0"},
    "a100": {"sm_count": 108, "l2_bytes": 40 * 2**20, "memory_bytes": 85097971712, "compute_capability": "8.0"},
}


def populate(session, gpus=(("h100", "NVIDIA H100 80GB HBM3"), ("a100", "NVIDIA A100-SXM4-80GB")),
             dtypes=("bf16", "fp16")) -> dict[str, Any]:
    """One finished run per GPU with every candidate on every shape of ``dtypes`` (unsupported
    shapes recorded with that status, one 'wrong' row), copy references, and a table per dtype."""
    environment = queries.get_or_create_environment(session, "env-fixture-1", driver="570.1", cuda="12.8",
                                                    torch="2.8.0", triton="3.4.0", cupy="13.4", python="3.12.3")
    candidates = [queries.get_or_create_candidate(session, v.name, v.config_key, v.config, f"hash-{v.name}")
                  for v in VARIANTS]
    runs = {}
    for gpu_key, gpu_name in gpus:
        gpu = queries.get_or_create_gpu(session, gpu_key, gpu_name, **DEVICES[gpu_key])
        run = queries.create_run(session, gpu, environment, "cold", host="gpu-host-1", command="autotuner sweep",
                                 grid={"m": list(MS), "n": list(NS)})
        for dtype in dtypes:
            for m in MS:
                for n in NS:
                    for variant, candidate in zip(VARIANTS, candidates):
                        time_us = variant.time_us(m, n, dtype)
                        if time_us is None:
                            queries.record_measurement(session, run.id, candidate.id, m, n, dtype, status="unsupported",
                                                       error=f"{variant.name}: shape limits {variant.constraints}")
                            continue
                        queries.record_measurement(
                            session, run.id, candidate.id, m, n, dtype, status="ok", median_us=time_us,
                            p20_us=time_us * 0.98, p80_us=time_us * 1.03, repetitions=100,
                            gbps=2 * m * n * DTYPE_BYTES[dtype] / time_us / 1e3, registers=32, spill_bytes=0,
                            threads_per_block=256, blocks_per_sm=8, occupancy=1.0, max_rel_error=1e-3,
                        )
                    queries.record_copy_reference(session, run.id, m, n, dtype, median_us=copy_time_us(m, n, dtype),
                                                  repetitions=100)
            queries.save_table(session, gpu, dtype, "cold", table_payload(gpu_key, gpu_name, dtype, run.id),
                               source_runs=[run.id], candidate_count=len(VARIANTS),
                               regret={"geomean": 1.012, "p95": 1.04, "max": 1.04})
        queries.record_measurement(session, run.id, candidates[1].id, 3, 1000, "fp32", status="wrong",
                                   max_rel_error=0.5, error="row sums off by 0.5")
        queries.finish_run(session, run.id, "finished")
        runs[gpu_key] = run.id
    return {"runs": runs, "candidates": [c.id for c in candidates]}
