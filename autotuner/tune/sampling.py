"""The shape domain (its bounds: ``autotuner.domain``), the coarse sample the default sweep measures of it, and
an estimate of what a sweep costs.

The domain: M (rows) from 0 to ``DOMAIN_M_MAX`` = 2^20 and N (row length) from 1 to ``DOMAIN_N_MAX`` =
2^24, fp32, fp16 and bf16, tensors up to the GPU's memory. ``softmax`` must be correct on all of it
(M = 0 is an empty tensor: nothing to time). The sweep measures a sample of it, M >= 1, capped at
``SWEEP_MAX_TENSOR_BYTES`` per input tensor (the sweep may cap size, correctness may not): the coarse
lattice below, then refinement where neighbouring winners disagree (``autotuner/tune/strategy.py``).

The coarse lattice is log-spaced, about a factor 16 apart in M and 8 in N, with odd sizes among the
powers of two (5 and 1000 rows; 7, 500, 32000 and 151936 elements) so that no kernel is tuned on powers of
two alone. Refinement halves the log gap between two neighbours, so the next points are powers of
two (between powers of 16) and then odd sizes (geometric midpoints rounded to an integer).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from autotuner.domain import DOMAIN_M_MAX, DOMAIN_N_MAX
from autotuner.tune.grid import MAX_TENSOR_BYTES, shapes
from kernels.base import DTYPE_BYTES, DTYPES

SWEEP_MAX_TENSOR_BYTES = MAX_TENSOR_BYTES  # 2 GiB: the same cap as the classic grid

COARSE_M: tuple[int, ...] = (1, 5, 64, 1000, 16384, 262144, DOMAIN_M_MAX)
COARSE_N: tuple[int, ...] = (1, 7, 64, 500, 4096, 32000, 151936, 1 << 20, DOMAIN_N_MAX)

# Wall time of one work item on one H100, fitted on the recorded H100 sweep (tests/data/h100_sweep.json.gz,
# the runs of over 1,000 items, 21,592 rows, sweeps at --time-cap 0.3): the gap between consecutive
# commits (it covers building, verifying, timing and recording, the copy reference included) against the
# input tensor's size: 0.0819 s + 0.0974 s per GiB. tests/autotuner/test_strategy.py refits it.
ITEM_SECONDS = 0.0819
ITEM_SECONDS_PER_GIB = 0.0974
# The model gives today's classic grid (12,684 items) 20.0 min, about 18.2 min scaled to the 11,530
# items of issue 18's sweep, which took about 21.5 min (7,195 items in 8.5 min, then an ETA of 13 min):
# estimates are scaled by 21.5 / 18.2, rounded up.
CALIBRATION = 1.2
# The same fit on the default domain sweep recorded from an empty database on fresh H100 machines
# (bench/data/domain_sweep_h100.json.gz: 39,443 rows in 25.1 min of commit gaps over three resumed calls,
# cold compile caches, 163 candidates): 0.0254 s + 0.1487 s per GiB, uncalibrated (it is the default
# sweep's own recording; its first two calls alone gave 0.0294 s + 0.1518 s). The earlier recording
# (tests/data/h100_domain.json.gz, a resumed run on a warm machine) gave 0.0180 s + 0.1666 s, which
# priced the new sweep's first two calls at 13.4 min where they took 17.3.
# tests/autotuner/test_strategy.py refits both.
DOMAIN_ITEM_SECONDS = 0.0254
DOMAIN_ITEM_SECONDS_PER_GIB = 0.1487
DEFAULT_DOMAIN_BUDGET_S = 25 * 60  # the domain sweep's refinement stops here unless --budget says otherwise


def coarse_shapes(dtypes: Sequence[str] = DTYPES, ms: Sequence[int] = COARSE_M, ns: Sequence[int] = COARSE_N,
                  max_tensor_bytes: int = SWEEP_MAX_TENSOR_BYTES) -> list[tuple[int, int, str]]:
    """The coarse lattice (M x N x dtype, over-cap tensors left out), ordered coarse to fine."""
    return shapes(ms, ns, dtypes, max_tensor_bytes)


def fits(m: int, n: int, dtype: str, max_tensor_bytes: int = SWEEP_MAX_TENSOR_BYTES) -> bool:
    return 1 <= m <= DOMAIN_M_MAX and 1 <= n <= DOMAIN_N_MAX and m * n * DTYPE_BYTES[dtype] <= max_tensor_bytes


def item_seconds(m: int, n: int, dtype: str, grid: str = "classic") -> float:
    """Estimated wall time of one work item (one candidate or copy on one shape) on one H100, from the
    recorded sweeps of that kind of grid ("classic" or "domain")."""
    gib = m * n * DTYPE_BYTES[dtype] / 2**30
    if grid == "domain":
        return DOMAIN_ITEM_SECONDS + DOMAIN_ITEM_SECONDS_PER_GIB * gib
    return CALIBRATION * (ITEM_SECONDS + ITEM_SECONDS_PER_GIB * gib)


def estimate_seconds(items: Iterable, grid: str = "classic") -> float:  # noqa: ANN001 - WorkItem-like
    """Estimated wall time of measuring ``items`` (``.m``, ``.n``, ``.dtype``) on one H100 (an estimate,
    not a measurement)."""
    return sum(item_seconds(item.m, item.n, item.dtype, grid) for item in items)


def describe_estimate(seconds: float, items: int, gpus: int = 1) -> str:
    """``seconds`` is the one-H100 estimate; ``gpus`` share the items."""
    where = "one H100" if gpus == 1 else f"{gpus} H100s"
    return (f"estimated {seconds / gpus / 60:.1f} min for {items} items on {where} "
            f"(an estimate from the recorded H100 sweep's per-item times, not a measurement)")
