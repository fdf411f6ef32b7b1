"""The two-sweep spread figure and winner agreement (autotuner/report/spread.py)."""
from __future__ import annotations

import pytest

from autotuner.report.spread import compare


def test_identical_sweeps_have_no_spread_and_agree():
    times = {("a", "", 1, 1024, "bf16"): 2.0, ("b", "", 1, 1024, "bf16"): 3.0}
    result = compare(times, dict(times))
    assert result["median_spread"] == 0 and result["decidable"] == 1 and result["disagreements"] == []


def test_a_swap_within_the_noise_is_not_a_disagreement_but_one_beyond_it_is():
    first = {("a", "", 1, 1, "fp32"): 10.0, ("b", "", 1, 1, "fp32"): 10.1,  # 1 % apart: within the noise
             ("a", "", 2, 1, "fp32"): 10.0, ("b", "", 2, 1, "fp32"): 13.0,  # 30 % apart
             ("a", "", 3, 1, "fp32"): 10.0, ("b", "", 3, 1, "fp32"): 20.0}
    second = {("a", "", 1, 1, "fp32"): 10.2, ("b", "", 1, 1, "fp32"): 10.0,
              ("a", "", 2, 1, "fp32"): 13.2, ("b", "", 2, 1, "fp32"): 13.0,  # winner flips: reported
              ("a", "", 3, 1, "fp32"): 10.1, ("b", "", 3, 1, "fp32"): 20.4}
    result = compare(first, second)
    assert result["median_spread"] == pytest.approx(0.015)  # spreads 0, .01, .01, .02, .02, .32
    assert result["decidable"] == 2
    assert [d["shape"] for d in result["disagreements"]] == [(2, 1, "fp32")]
