"""The fit's tie-break between candidates whose GPU times lie within the timing noise: the least host
and launch cost wins (issue 30's launch-bound shapes)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotuner.fit.fit import prune
from autotuner.fit.launch_cost import (ONE_KERNEL_HOST_US, TIE_NOISE, TWO_KERNEL_HOST_US, launch_cost_us, preferred,
                                       preferred_candidates, preferred_indexes)
from kernels import all_variants

RUNTIME = Path(__file__).resolve().parents[2] / "bench" / "data" / "runtime_h100.json"


def test_within_the_noise_the_cheaper_launch_wins_and_outside_it_the_faster():
    assert preferred([5.0, 5.04, 4.9], [20.0, 7.0, 20.0]) == 1  # 4.9 and 5.04 tie within 3 %: one kernel
    assert preferred([5.0, 5.3, 4.9], [20.0, 7.0, 20.0]) == 2  # 5.3 is 8 % behind: the fastest wins
    assert preferred([5.0, 5.04, 4.9], [7.0, 7.0, 7.0]) == 2  # equal costs: the fastest
    assert preferred([5.0, 5.0], [7.0, 7.0]) == 0  # a full tie: the first
    assert preferred_indexes([5.0, 4.9, 4.9, 4.95], [7.0, 7.0, 7.0, 20.0]) == [1, 2]  # equal costs: every fastest
    assert preferred_indexes([5.0, 4.9, 4.9, 4.95], [7.0, 20.0, 20.0, 20.0]) == [0]
    assert preferred([None, 0.0, 3.0], [1.0, 1.0, 9.0]) == 2  # unmeasured and zero times never win
    assert preferred([None, None], [1.0, 1.0]) is None
    assert preferred([5.0, 5.2], [20.0, 7.0], noise=0.05) == 1 and preferred([5.0, 5.2], [20.0, 7.0]) == 0


def test_every_variant_has_a_launch_cost_and_split_k_pays_for_its_second_kernel():
    costs = {v.name: launch_cost_us(v.name) for v in all_variants()}
    assert costs["cuda_split_row"] == costs["triton_split_row"] == TWO_KERNEL_HOST_US
    assert costs["torch_softmax"] == costs["triton_one_row"] == costs["cuda_warp_row"] == ONE_KERNEL_HOST_US
    assert all(cost in (ONE_KERNEL_HOST_US, TWO_KERNEL_HOST_US) for cost in costs.values())


def test_the_launch_costs_are_the_recorded_host_figures():
    """runtime_h100.json: host wall time per call of back-to-back enqueues, by kernels a call issues."""
    cases = json.loads(RUNTIME.read_text())["host_overhead"].values()
    one = [c["softmax_us"] for c in cases if len(c["launches"]) == 1]
    two = [c["softmax_us"] for c in cases if len(c["launches"]) == 2]
    torch = [c["torch_softmax_us"] for c in cases if c["torch_softmax_us"] < 10]  # host-bound cases
    assert one and two and torch
    assert max(abs(t - ONE_KERNEL_HOST_US) for t in one + torch) < 0.6
    assert max(abs(t - TWO_KERNEL_HOST_US) for t in two) < 0.5


def test_a_shape_keyed_by_candidate_prefers_the_one_kernel_variant_in_a_tie():
    row = {("cuda_split_row", "block=512,split=8"): 1611.0, ("cuda_long_split", "block=1024"): 1614.4}
    assert preferred_candidates(row) == {("cuda_long_split", "block=1024")}  # H200 fp16 64x2^24, recorded
    assert preferred_candidates({**row, ("cuda_long_split", "block=1024"): 1700.0}) == {("cuda_split_row", "block=512,split=8")}
    assert preferred_candidates({}) == set() and TIE_NOISE == pytest.approx(0.03)


def test_pruning_keeps_the_cheaper_launch_that_ties_the_two_kernel_winner():
    """Split-k is 1-2 % faster than a one-kernel variant at every shape: within the noise, so the
    one-kernel variant holds the wins and split-k, the one with none, is pruned (without the tie-break
    split-k held every win and the one-kernel variant went)."""
    split, one = ("cuda_split_row", "s"), ("cuda_long_split", "l")
    shapes = [(1, 1), (1, 2), (1, 3)]
    times = {(*split, 1, 1): 100.0, (*one, 1, 1): 101.0, (*split, 1, 2): 100.0, (*one, 1, 2): 102.0,
             (*split, 1, 3): 100.0, (*one, 1, 3): 101.5}
    assert prune([split, one], shapes, times, 0.03) == [one]
    times[(*one, 1, 3)] = 104.0  # 4 % behind at one shape: split-k is needed there and covers the rest
    assert prune([split, one], shapes, times, 0.03) == [split]
