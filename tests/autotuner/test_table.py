"""Table documents: validation and both lookup rules, on small hand-made tables."""
from __future__ import annotations

import pytest

from autotuner.fit.rule import RuleTable, admits
from autotuner.lookup.table import TableFormatError


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


@pytest.mark.parametrize("multiple", [1, 625])  # multiples' lcm 8: sets kept per cell; 5000: worked out each time
def test_allowed_sets_kept_per_cell_of_the_limits_equal_the_constraints_test(multiple):
    import random

    constraints = [{"n_max": 4096}, {"n_multiple_of": 8}, {}, {"n_min": 129, "n_max": 65536, "m_max": 82},
                   {"m_min": 4, "m_max": 4}, {"n_multiple_of": 4, "n_min": 1000}, {"n_multiple_of": multiple}]
    doc = {**document(), "candidates": [{"variant": f"v{i}", "config": {}, "constraints": c}
                                        for i, c in enumerate(constraints)]}
    for point in doc["points"]:
        point["times"] = [1.0] * len(constraints)
    table = RuleTable(doc)
    assert bool(table._modulus) == (multiple == 1)
    rng = random.Random(2)
    edges = [0, 1, 4, 5, 82, 83, 128, 129, 999, 1000, 4096, 4097, 65536, 65537]
    for _ in range(3000):
        m = rng.choice([rng.choice(edges), rng.randint(0, 1 << 20)])
        n = max(1, rng.choice([rng.choice(edges), 8 * rng.randint(1, 20000), rng.randint(1, 1 << 20)]))
        usable = rng.choice([None, frozenset({0, 2, 3, 5}), frozenset(range(len(constraints)))])
        want = tuple(i for i, c in enumerate(constraints) if admits(c, m, n) and (usable is None or i in usable))
        assert table.allowed(m, n, usable) == want, (m, n, usable)


def test_measured_shape_answers_with_its_winner():
    pick = RuleTable(document()).lookup(4096, 1024)
    assert pick.candidate == 1 and pick.exact and pick.predicted_us == 15.0


def test_nearest_rule_never_picks_a_candidate_that_cannot_run_the_exact_shape():
    table = RuleTable(document())
    assert table.lookup(1, 1100).candidate == 0  # nearest is (1, 1024) where "small" wins
    assert table.lookup(1, 1001).candidate == 0  # n odd: "vector" is excluded, "small" still fits
    assert table.lookup(1, 5001).candidate == 2  # over n_max and not a multiple of 8: only "any"


def test_interpolation_predicts_between_grid_lines():
    table = RuleTable(document("interp-log"))
    pick = table.lookup(64, 8192)
    assert not pick.exact and pick.candidate in (1, 2)
    assert 3.0 < pick.predicted_us < 900.0
    # halfway in log space between 8 and 900 for "vector" at m=1: geometric mean
    assert table.lookup(1, 8192).predicted_us == pytest.approx((3.0 * 8.0) ** 0.5, rel=1e-6)


def test_odd_n_is_interpolated_from_its_own_alignment_class_when_present():
    points = document()["points"] + [{"m": 1, "n": 50257, "times": [None, None, 5.0]}]
    table = RuleTable(document("interp-log", points))
    assert table.lookup(1, 50001).candidate == 2


@pytest.mark.parametrize("broken, message", [
    ({"format_version": 7}, "format_version"),
    ({"rule": "magic"}, "rule"),
    ({"points": [{"m": 1, "n": 2, "times": [1.0]}]}, "has 1 times for 3 candidates"),
    ({"candidates": [{"variant": "small", "config": [128]}]}, "'config' must be an object"),
])
def test_malformed_tables_are_refused_with_the_reason(broken, message):
    with pytest.raises(TableFormatError, match=message):
        RuleTable({**document(), **broken})


def test_an_alignment_class_measured_at_one_n_does_not_speak_for_other_n():
    points = document()["points"] + [{"m": 1, "n": 50257, "times": [None, None, 5.0]},
                                     {"m": 4096, "n": 50257, "times": [None, None, 500.0]}]
    table = RuleTable(document("interp-log", points))
    assert table.lookup(1, 1001).candidate == 0  # odd N far from 50257: the N=1024 points decide


# local-regret: the rule `fit` writes (see autotuner/lookup/table.py)

def grid_document(times_by_point, candidates=None, rule="local-regret"):
    """A local-regret table (or ``rule``) over the given {(m, n): [times]} points."""
    candidates = candidates or [{"variant": "a", "config": {}, "constraints": {}},
                                {"variant": "b", "config": {}, "constraints": {}}]
    return {"format_version": 1, "gpu": "h100", "dtype": "bf16", "timing_method": "cold", "rule": rule,
            "candidates": candidates,
            "points": [{"m": m, "n": n, "times": times} for (m, n), times in sorted(times_by_point.items())]}


def test_local_regret_neighbours_are_the_bilinear_corners_inside_a_cell():
    points = {(m, n): [1.0, 1.0] for m in (1, 16) for n in (1024, 4096)}
    table = RuleTable(grid_document(points))
    weights = dict(table.neighbours(4, 2048))  # log2: M a half of the way, N a half of the way
    assert weights == pytest.approx({(1, 1024): 0.25, (1, 4096): 0.25, (16, 1024): 0.25, (16, 4096): 0.25})
    weights = dict(table.neighbours(2, 2048))  # M a quarter of the way up
    assert weights == pytest.approx({(1, 1024): 0.375, (1, 4096): 0.375, (16, 1024): 0.125, (16, 4096): 0.125})


def test_local_regret_reads_a_missing_grid_point_from_its_axis_neighbours():
    points = {(m, n): [1.0, 1.0] for m in (1, 4, 16) for n in (1024, 2048, 4096)}
    del points[(4, 2048)]
    table = RuleTable(grid_document(points))
    assert dict(table.neighbours(4, 2048)) == pytest.approx(
        {(4, 1024): 0.25, (4, 4096): 0.25, (1, 2048): 0.25, (16, 2048): 0.25})
    # at the edge of the grid only the axis that surrounds the point speaks
    del points[(16, 2048)]
    table = RuleTable(grid_document(points))
    assert dict(table.neighbours(16, 2048)) == pytest.approx({(16, 1024): 0.5, (16, 4096): 0.5})


def test_local_regret_clamped_reads_an_edge_point_from_both_axes():
    """At the grid's edge the clamped rule also reads the line that does not reach the query (here
    the column N = 2048, measured from M = 4 up) at its nearest point; the old rule, which tables
    fitted before it still carry, reads the edge row alone. Inside a fully measured grid both agree."""
    points = {(m, n): [1.0, 1.0] for m in (1, 4, 16) for n in (1024, 2048, 4096)}
    del points[(1, 2048)]
    clamped = RuleTable(grid_document(points, rule="local-regret-clamped"))
    assert dict(clamped.neighbours(1, 2048)) == pytest.approx({(1, 1024): 0.25, (1, 4096): 0.25, (4, 2048): 0.5})
    old = RuleTable(grid_document(points))
    assert dict(old.neighbours(1, 2048)) == pytest.approx({(1, 1024): 0.5, (1, 4096): 0.5})
    points[(1, 2048)] = [1.0, 1.0]  # every line spans every query inside the grid: the same neighbours
    clamped, old = (RuleTable(grid_document(points, rule=rule)) for rule in ("local-regret-clamped", "local-regret"))
    for m, n in ((2, 1500), (8, 3000), (3, 2048)):
        assert dict(clamped.neighbours(m, n)) == pytest.approx(dict(old.neighbours(m, n)))


def test_local_regret_clamped_lets_the_nearer_line_overrule_a_lone_edge_row():
    """'a' wins both edge-row neighbours of (1, 2048) by 2 %, and loses by 30 % on the column next
    to the point (M = 4), where 'b' wins: the clamped rule weighs that column as much as the row."""
    points = {(1, 1024): [1.0, 1.02], (1, 4096): [1.0, 1.02], (4, 2048): [1.3, 1.0],
              (4, 1024): [1.0, 1.0], (4, 4096): [1.0, 1.0], (16, 2048): [1.3, 1.0]}
    assert RuleTable(grid_document(points)).lookup(1, 2048).candidate == 0
    assert RuleTable(grid_document(points, rule="local-regret-clamped")).lookup(1, 2048).candidate == 1


def test_local_regret_compares_regrets_not_times():
    """'b' (n_max 2048) is 10 % slower than 'a' wherever it can run, which is only at N = 1024 where
    times are small. interp-log compares interpolated times and takes 'b' (1.1 µs against 'a''s
    31.6 µs, read half from N = 4096); local-regret compares regrets at the same neighbours: 'a'."""
    points = {(1, 1024): [1.0, 1.1], (1, 4096): [1000.0, None], (16, 1024): [1.0, 1.1], (16, 4096): [1000.0, None]}
    candidates = [{"variant": "a", "config": {}, "constraints": {}},
                  {"variant": "b", "config": {}, "constraints": {"n_max": 2048}}]
    table = RuleTable(grid_document(points, candidates))
    pick = table.lookup(4, 2048)
    assert pick.candidate == 0 and not pick.exact
    assert pick.predicted_us == pytest.approx((1.0 * 1000.0) ** 0.5)  # its time, interpolated in log space
    interp = RuleTable({**grid_document(points, candidates), "rule": "interp-log"})
    assert interp.lookup(4, 2048).candidate == 1


def test_local_regret_judges_a_candidate_only_where_it_can_run():
    """A tile-sized kernel ('small', n_max 2048) that wins wherever it runs is chosen inside its
    range, even though half of the neighbours cannot run it."""
    points = {(1, 1024): [1.0, 1.05], (1, 4096): [None, 1.0], (16, 1024): [1.0, 1.08], (16, 4096): [None, 1.0]}
    candidates = [{"variant": "small", "config": {}, "constraints": {"n_max": 2048}},
                  {"variant": "any", "config": {}, "constraints": {}}]
    table = RuleTable(grid_document(points, candidates))
    assert table.lookup(4, 2000).candidate == 0
    assert table.lookup(4, 3000).candidate == 1  # out of its range: never chosen


def test_local_regret_caps_what_one_noisy_estimate_can_weigh(monkeypatch):
    """Past REGRET_CAP a neighbour's regret counts as REGRET_CAP: one wild quick estimate (30x) does
    not outweigh three neighbours where the candidate is clearly best; uncapped, it would."""
    from autotuner.fit import rule as table_module

    points = {(1, 1024): [1.0, 1.2], (1, 4096): [30.0, 1.0], (16, 1024): [1.0, 1.2], (16, 4096): [1.0, 1.2]}
    assert RuleTable(grid_document(points)).lookup(4, 2048).candidate == 0
    monkeypatch.setattr(table_module, "REGRET_CAP", 1000.0)
    assert RuleTable(grid_document(points)).lookup(4, 2048).candidate == 1


def test_local_regret_answers_measured_shapes_with_their_winner_and_beyond_the_grid():
    points = {(m, n): [1.0 + (m == 16), 1.5] for m in (1, 16) for n in (1024, 4096)}
    table = RuleTable(grid_document(points))
    pick = table.lookup(16, 4096)
    assert pick.exact and pick.candidate == 1 and pick.predicted_us == 1.5
    assert table.lookup(1 << 20, 1 << 20).candidate == 1  # clamped to the corner (16, 4096)
    assert table.lookup(0, 100).candidate == 0  # M = 0, N below the grid: the corner (1, 1024)


def _gap_document(points):
    doc = document("local-regret-clamped", points)
    doc["candidates"] = [
        {"variant": "old", "config": {}, "constraints": {}},
        {"variant": "new", "config": {}, "constraints": {}},  # swept later, on part of the domain
    ]
    return doc


def test_local_regret_skips_a_candidate_unmeasured_where_its_constraints_admit():
    # "new" wins where it was measured but was never swept at (1, 1024) although it runs there:
    # nothing vouches for it between the two, so the measured "old" answers
    points = [{"m": 1, "n": 1024, "times": [5.0, None]}, {"m": 1, "n": 4096, "times": [9.0, 3.0]},
              {"m": 64, "n": 1024, "times": [6.0, None]}, {"m": 64, "n": 4096, "times": [12.0, 4.0]}]
    table = RuleTable(_gap_document(points))
    assert table.lookup(8, 2048).candidate == 0
    # measured at every neighbour, it wins
    points[0]["times"][1] = points[2]["times"][1] = 1.0
    assert RuleTable(_gap_document(points)).lookup(8, 2048).candidate == 1


def test_local_regret_clamped_does_not_read_a_row_that_ends_far_before_the_query():
    # the M = 2 row ends at N = 4096; at N = 2^20 only the rows reaching near the query count, where
    # "new" was measured; reading (2, 4096) would leave "new" out for lack of a time there
    points = [{"m": 1, "n": 4096, "times": [4.0, None]}, {"m": 2, "n": 4096, "times": [4.5, None]},
              {"m": 1, "n": 1 << 20, "times": [900.0, 10.0]}, {"m": 4, "n": 1 << 20, "times": [950.0, 12.0]}]
    table = RuleTable(_gap_document(points))
    assert all(n >= (1 << 20) // 4 for (_, n), _ in table.neighbours(2, 1 << 20))
    assert table.lookup(2, 1 << 20).candidate == 1


def test_an_alignment_class_measured_only_far_from_the_query_does_not_choose_its_neighbours():
    # odd N measured at 500 and 50257 only: N = 2501 is read from the nearby even-N points, not from
    # those two, where "new" happens to win
    points = [{"m": 1, "n": 2048, "times": [2.0, 4.0]}, {"m": 1, "n": 4096, "times": [3.0, 6.0]},
              {"m": 4, "n": 2048, "times": [2.5, 5.0]}, {"m": 4, "n": 4096, "times": [3.5, 7.0]},
              {"m": 1, "n": 500, "times": [9.0, 1.0]}, {"m": 4, "n": 50257, "times": [90.0, 10.0]}]
    table = RuleTable(_gap_document(points))
    assert {corner for corner, _ in table.neighbours(2, 2501)} <= {(1, 2048), (1, 4096), (4, 2048), (4, 4096)}
    assert table.lookup(2, 2501).candidate == 0
    assert table.lookup(4, 50257).candidate == 1  # a measured odd N still answers from its own point


def test_local_regret_clamped_does_not_read_a_column_measured_only_far_below_the_query():
    # the N = 24576 column was measured at M = 2 alone, where "old" wins; at M = 1500 only the rows
    # around M (1024 and 4096, where "new" wins) count: a column is read within COLUMN_REACH of its M
    points = [{"m": 2, "n": 24576, "times": [4.0, 9.0]},
              {"m": 1024, "n": 16384, "times": [60.0, 40.0]}, {"m": 1024, "n": 65536, "times": [240.0, 160.0]},
              {"m": 4096, "n": 16384, "times": [240.0, 160.0]}, {"m": 4096, "n": 65536, "times": [960.0, 640.0]}]
    table = RuleTable(_gap_document(points))
    assert (2, 24576) not in {corner for corner, _ in table.neighbours(1500, 24576)}
    assert table.lookup(1500, 24576).candidate == 1
    # within the reach the column still speaks: at M = 16 it is read beside the rows
    assert (2, 24576) in {corner for corner, _ in table.neighbours(16, 24576)}


def test_local_regret_clamped_reads_a_line_between_two_far_points_at_the_near_one_only():
    # the M = 1024 row was measured at N = 1431 and 50257 only; "short" (capacity 32768) wins at 1431
    # and cannot run at 50257, so at N = 30522 the row would speak for it from a point 21x away.
    # Between two measured points a value more than CLAMP_REACH away is not read, as a line's end
    # that far is not; the M = 2048 row measured around the query says "long"
    doc = document("local-regret-clamped", [
        {"m": 1024, "n": 1431, "times": [9.0, 3.0]}, {"m": 1024, "n": 50257, "times": [80.0, None]},
        {"m": 2048, "n": 24000, "times": [70.0, 75.0]}, {"m": 2048, "n": 40000, "times": [110.0, None]}])
    doc["candidates"] = [{"variant": "long", "config": {}, "constraints": {}},
                         {"variant": "short", "config": {}, "constraints": {"n_max": 32768}}]
    table = RuleTable(doc)
    corners = {corner for corner, _ in table.neighbours(1500, 30522)}
    assert (1024, 50257) in corners and (1024, 1431) not in corners
    assert table.lookup(1500, 30522).candidate == 0
    # near the other end the row is read at that end: at N = 5000, 3.5x from 1431 and 10x from 50257
    corners = {corner for corner, _ in table.neighbours(1024, 5000)}
    assert (1024, 1431) in corners and (1024, 50257) not in corners
    # the unclamped rule reads the row between both points, however far
    assert (1024, 1431) in {c for c, _ in RuleTable({**doc, "rule": "local-regret"}).neighbours(1500, 30522)}


def test_local_regret_clamped_looks_past_lines_it_cannot_read_at_the_query():
    # rows 160 and 200 were measured at N = 65536 alone and columns 3000 and 5000 at M = 65536 and 2
    # alone: the lines nearest (180, 4000) on both axes say nothing there. The lines measured around
    # the query (rows 128 and 256 at N 2048 and 8192) are read past them, not dropped for them (the
    # H200 bf16 table of 2026-11-28 had answered (170, 5542) from its nearest point, 9x away in N)
    around = [{"m": m, "n": n, "times": [1.0, 2.0]} for m in (128, 256) for n in (2048, 8192)]
    far = [{"m": 160, "n": 65536, "times": [10.0, 5.0]}, {"m": 200, "n": 65536, "times": [10.0, 5.0]},
           {"m": 65536, "n": 3000, "times": [900.0, 500.0]}, {"m": 2, "n": 5000, "times": [4.0, 3.0]}]
    table = RuleTable(_gap_document(around + far))
    assert {corner for corner, _ in table.neighbours(180, 4000)} == {(p["m"], p["n"]) for p in around}
    assert table.lookup(180, 4000).candidate == 0
    # only within the lines' reach: rows 16x or more from M, columns 4x or more from N stay unread
    moved = [{**p, "m": p["m"] * 32} for p in around]
    assert RuleTable(_gap_document(moved + far)).neighbours(180, 4000) == []
