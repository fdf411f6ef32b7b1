"""Table documents: validation and both lookup rules, on small hand-made tables."""
from __future__ import annotations

import pytest

from autotuner.table import DispatchTable, TableFormatError, admits


def document(rule="nearest-log", points=None):
    return {
        "format_version": 1, "gpu": "h100", "dtype": "bf16", "timing_method": "cold", "rule": rule,
        "candidates": [
            {"variant": "small", "config": {"block": 128}, "constraints": {"n_max": 4096}},
            {"variant": "vector", "config": {"vec": 8}, "constraints": {"n_multiple_of": 8}},
            {"variant": "any", "config": {}, "constraints": {}},
        ],
        "points": points if points is not None else [
            {"m": 1, "n": 1024, "times": [2.0, 3.0, 4.0]},
            {"m": 1, "n": 65536, "times": [None, 8.0, 9.0]},
            {"m": 4096, "n": 1024, "times": [20.0, 15.0, 30.0]},
            {"m": 4096, "n": 65536, "times": [None, 900.0, 700.0]},
        ],
    }


def test_constraints_are_applied_exactly():
    assert admits({"n_max": 4096}, 1, 4096) and not admits({"n_max": 4096}, 1, 4097)
    assert admits({"n_multiple_of": 8}, 3, 32000) and not admits({"n_multiple_of": 8}, 3, 50257)
    assert not admits({"m_max": 8}, 9, 10)


def test_measured_shape_answers_with_its_winner():
    pick = DispatchTable(document()).lookup(4096, 1024)
    assert pick.candidate == 1 and pick.exact and pick.predicted_us == 15.0


def test_nearest_rule_never_picks_a_candidate_that_cannot_run_the_exact_shape():
    table = DispatchTable(document())
    assert table.lookup(1, 1100).candidate == 0  # nearest is (1, 1024) where "small" wins
    assert table.lookup(1, 1001).candidate == 0  # n odd: "vector" is excluded, "small" still fits
    assert table.lookup(1, 5001).candidate == 2  # over n_max and not a multiple of 8: only "any"


def test_interpolation_predicts_between_grid_lines():
    table = DispatchTable(document("interp-log"))
    pick = table.lookup(64, 8192)
    assert not pick.exact and pick.candidate in (1, 2)
    assert 3.0 < pick.predicted_us < 900.0
    # halfway in log space between 8 and 900 for "vector" at m=1: geometric mean
    assert table.lookup(1, 8192).predicted_us == pytest.approx((3.0 * 8.0) ** 0.5, rel=1e-6)


def test_odd_n_is_interpolated_from_its_own_alignment_class_when_present():
    points = document()["points"] + [{"m": 1, "n": 50257, "times": [None, None, 5.0]}]
    table = DispatchTable(document("interp-log", points))
    assert table.lookup(1, 50001).candidate == 2


@pytest.mark.parametrize("broken, message", [
    ({"format_version": 7}, "format_version"),
    ({"rule": "magic"}, "rule"),
    ({"points": [{"m": 1, "n": 2, "times": [1.0]}]}, "has 1 times for 3 candidates"),
])
def test_malformed_tables_are_refused_with_the_reason(broken, message):
    with pytest.raises(TableFormatError, match=message):
        DispatchTable({**document(), **broken})


def test_an_alignment_class_measured_at_one_n_does_not_speak_for_other_n():
    points = document()["points"] + [{"m": 1, "n": 50257, "times": [None, None, 5.0]},
                                     {"m": 4096, "n": 50257, "times": [None, None, 500.0]}]
    table = DispatchTable(document("interp-log", points))
    assert table.lookup(1, 1001).candidate == 0  # odd N far from 50257: the N=1024 points decide
