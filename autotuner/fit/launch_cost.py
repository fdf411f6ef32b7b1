"""Which candidate a point's winner is where GPU times tie: the one with the least host and launch cost.

A recorded time is a GPU time (CUDA events around the kernels, ``autotuner/tune/timing.py``); what a
call costs the host to submit is not in it. Where two candidates' GPU times lie within the timing noise
of each other (``TIE_NOISE``: the fit's 3 % prune margin, the spread the sweeps see between repeated
timings of one kernel), their order is noise, and the one that costs less to launch is the better answer:
in a loop of small calls the host is the bound (issue 30's launch-bound shapes).

The per-variant figure is ``launch_cost_us``: host microseconds of one ``softmax`` call on the H100 host,
by the number of kernels a call issues (``bench/data/runtime_h100.json``, ``host_overhead``: wall time per
call of back-to-back enqueues; a call that issues one kernel took 6.8-7.2 µs through a Triton or a CUDA
launch alike, ``torch.softmax`` 6.5-7.2 µs on the same shapes; one that issues two, split-k's statistics
and normalise kernels, 20.0-20.1 µs). Only the kernel count separates
variants so far: every recorded sweep row is event-timed (no ``graph`` timing method in any recording),
so no per-variant GPU launch latency has been measured; ``preferred`` takes other figures as given.
"""
from __future__ import annotations

from typing import Mapping, Sequence

TIE_NOISE = 0.03
ONE_KERNEL_HOST_US = 7.0  # 6.8-7.2 µs a call (runtime_h100.json)
TWO_KERNEL_HOST_US = 20.0  # 20.0-20.1 µs a call (runtime_h100.json: cuda_split_row, triton_split_row)
KERNELS_PER_CALL: Mapping[str, int] = {"cuda_split_row": 2, "triton_split_row": 2}  # every other variant: 1


def launch_cost_us(variant: str) -> float:
    """Host microseconds one call of ``variant`` costs (see the module docstring)."""
    return TWO_KERNEL_HOST_US if KERNELS_PER_CALL.get(variant, 1) == 2 else ONE_KERNEL_HOST_US


def preferred_indexes(times: Sequence[float | None], costs: Sequence[float], noise: float = TIE_NOISE) -> list[int]:
    """The candidates a point prefers: among those measured within ``noise`` of the fastest GPU time,
    those of least launch cost, and of them the fastest (several where times are equal). Where every
    cost is equal these are the fastest candidates, ties included. [] when no candidate has a time."""
    measured = [i for i, t in enumerate(times) if t is not None and t > 0]
    if not measured:
        return []
    fastest = min(times[i] for i in measured)
    tied = [i for i in measured if times[i] <= fastest * (1 + noise)]
    cheapest = min(costs[i] for i in tied)
    cheap = [i for i in tied if costs[i] == cheapest]
    quickest = min(times[i] for i in cheap)
    return [i for i in cheap if times[i] == quickest]


def preferred(times: Sequence[float | None], costs: Sequence[float], noise: float = TIE_NOISE) -> int | None:
    """Index of the candidate to run at a point: the first of ``preferred_indexes``; None when no
    candidate has a time."""
    indexes = preferred_indexes(times, costs, noise)
    return indexes[0] if indexes else None


def preferred_candidates(row: Mapping[tuple[str, str], float], noise: float = TIE_NOISE) -> set[tuple[str, str]]:
    """``preferred_indexes`` over one shape's times keyed by (variant, config_key), with ``launch_cost_us``."""
    keys = list(row)
    return {keys[i] for i in preferred_indexes([row[k] for k in keys], [launch_cost_us(v) for v, _ in keys], noise)}
