"""Fitting on hand-made observations: pruning, and leave-one-out regret that never sees the left-out shape."""
from __future__ import annotations

import random

import pytest

from autotuner.fit.fit import Observation, build_document, leave_one_out_picks, leave_one_out_regret, prune
from autotuner.tune.measure import QUICK_REPS


def observations(table: dict[tuple[int, int], dict[str, float]], quick: set[tuple[str, int, int]] = frozenset()) -> list[Observation]:
    return [Observation(name, "", {}, m, n, time, QUICK_REPS if (name, m, n) in quick else 20)
            for (m, n), row in sorted(table.items()) for name, time in sorted(row.items())]


def no_constraints(name, config):
    return {}


def naive_prune(candidates, shapes, times, margin):
    """The definition, spelled out: try each candidate, fewest wins first, against every shape."""
    kept = list(candidates)

    def best(shape, pool):
        values = [times[(*c, *shape)] for c in pool if (*c, *shape) in times]
        return min(values) if values else None

    baseline = {shape: best(shape, kept) for shape in shapes}
    wins = {c: sum(1 for s in shapes if times.get((*c, *s)) == baseline[s]) for c in kept}
    for candidate in sorted(kept, key=lambda c: (wins[c], c)):
        pool = [c for c in kept if c != candidate]
        if all(best(s, pool) is not None and best(s, pool) <= baseline[s] * (1 + margin)
               for s in shapes if (*candidate, *s) in times):
            kept = pool
    return kept


@pytest.mark.parametrize("seed", range(30))
def test_prune_matches_its_definition(seed):
    rng = random.Random(seed)
    candidates = [(f"v{i % 4}", f"c={i}") for i in range(rng.randint(1, 14))]
    shapes = [(m, n) for m in (1, 4, 32) for n in (1024, 4096, 16384)][:rng.randint(1, 9)]
    times = {(*c, *s): round(rng.uniform(1.0, 1.4), 2) for c in candidates for s in shapes if rng.random() < 0.7}
    margin = rng.choice([0.0, 0.03, 0.1])
    assert prune(candidates, shapes, times, margin) == naive_prune(candidates, shapes, times, margin)


# P is best at A and B; X is 2 % behind there and 20 % ahead of P at S. With every shape, pruning
# within 3 % keeps X (S needs it) and drops P (X is within 3 % of it everywhere).
LEAK = {(1, 1024): {"P": 1.0, "X": 1.02}, (1, 2048): {"P": 1.2, "X": 1.0}, (1, 4096): {"P": 1.0, "X": 1.02}}


def test_the_fitted_table_keeps_what_the_full_data_needs():
    document = build_document(observations(LEAK), no_constraints, gpu="h100", gpu_name="H100", dtype="bf16",
                              timing_method="cold", prune_margin=0.03)
    assert [c["variant"] for c in document["candidates"]] == ["X"]
    assert document["rule"] == "local-regret-clamped"


def test_leave_one_out_refits_the_pruning_without_the_left_out_shape():
    """Left out, S no longer keeps X in the table, so S is answered by P (regret 1.2); pruning once
    with S in view and only then removing S's point would have answered X (regret 1.0)."""
    regret = leave_one_out_regret(observations(LEAK), no_constraints, prune_margin=0.03)
    assert regret["shapes"] == 3 and regret["misses"] == 0
    assert regret["max"] == pytest.approx(1.2)


def test_each_left_out_shape_is_answered_by_a_table_that_lacks_it():
    """The record behind the leave-one-out figures: per shape, the pick, the fastest candidate there
    and the refitted table that answered, which holds no point of that shape."""
    picks = {(p.m, p.n): p for p in leave_one_out_picks(observations(LEAK), no_constraints, prune_margin=0.03)}
    left_out = picks[(1, 2048)]
    assert left_out.chosen == ("P", "") and left_out.best == ("X", "") and left_out.regret == pytest.approx(1.2)
    assert (1, 2048) not in {(p["m"], p["n"]) for p in left_out.table.points}
    assert not left_out.missed and not left_out.quick


def test_regret_is_against_the_best_of_every_candidate_before_pruning():
    """The denominator is the fastest dispatchable candidate at the shape, even one the table pruned."""
    table = {(1, 1024): {"P": 1.0, "Q": 1.01}, (1, 2048): {"P": 1.0, "Q": 0.99}, (1, 4096): {"P": 1.0, "Q": 1.01}}
    regret = leave_one_out_regret(observations(table), no_constraints)
    assert regret["max"] == pytest.approx(1.0 / 0.99, rel=1e-3)  # P answers (1, 2048); Q was 1 % faster


def test_choices_that_had_only_a_quick_estimate_are_counted():
    table = {(1, 1024): {"P": 1.0, "X": 1.1}, (1, 2048): {"P": 9.0, "X": 1.0}, (1, 4096): {"P": 1.0, "X": 1.1}}
    regret = leave_one_out_regret(observations(table, quick={("P", 1, 2048)}), no_constraints)
    assert regret["quick_picks"] == 1 and regret["max"] == pytest.approx(9.0)


def test_one_shape_has_no_cross_validated_regret():
    regret = leave_one_out_regret(observations({(1, 1024): {"P": 1.0}}), no_constraints)
    assert regret["shapes"] == 0 and regret["geomean"] is None


def test_a_row_three_times_slower_than_the_same_candidate_on_more_work_is_left_out_of_the_fit():
    """The H100 recording holds cuda_cluster_split at fp16 4x47237: 79.8 us (a 5-repetition quick
    estimate, disturbed), where 3x50257 took 6.2 us; the table priced 4x47240 at 79.6 us from it."""
    from autotuner.fit.fit import without_disturbed

    rows = [Observation("v", "a=1", {"a": 1}, 4, 47237, 79.8), Observation("v", "a=1", {"a": 1}, 4, 65536, 8.0),
            Observation("v", "a=1", {"a": 1}, 1, 32000, 5.0), Observation("w", "b=1", {"b": 1}, 4, 47237, 6.2),
            Observation("w", "b=1", {"b": 1}, 4, 65536, 7.0)]
    kept = without_disturbed(rows)
    assert [(o.variant, o.m, o.n) for o in kept] == [("v", 4, 65536), ("v", 1, 32000), ("w", 4, 47237), ("w", 4, 65536)]
    # slower than a larger shape, but within 3x: kept (odd N and waves move times that much)
    assert len(without_disturbed([Observation("v", "a=1", {"a": 1}, 4, 47237, 23.9), rows[1]])) == 2


def test_observations_keep_rows_under_any_current_hash_only():
    """The fit's rows (``evidence.readings_of_rows`` through ``CurrentCode``) keep a row whose hash is one of
    the variant's current hashes (pinned or full text) and skip a row of older code, of an unregistered
    variant, of a peer (unless asked for) and of a held-out run."""
    from types import SimpleNamespace

    from autotuner.fit.evidence import CurrentCode, readings_of_rows, reconcile

    def row(variant, source_hash, m, run_id, purpose=None):
        measurement = SimpleNamespace(id=m, status="ok", median_us=5.0, p20_us=None, p80_us=None, m=m, n=1024,
                                      repetitions=20)
        candidate = SimpleNamespace(variant=variant, config_key="a=1", config={"a": 1}, source_hash=source_hash)
        return measurement, candidate, SimpleNamespace(id=run_id, uploader=None, host="h", grid={"purpose": purpose})

    rows = [row("v", "pinned", 1, 3), row("v", "fulltext", 2, 2), row("v", "older", 4, 1), row("gone", "x", 8, 1),
            row("peer", "p", 16, 1), row("v", "pinned", 32, 4, purpose="held-out")]
    registry = {"v": ("cuda", frozenset({"pinned", "fulltext"})), "peer": ("external", frozenset({"p"}))}
    evidence = reconcile(readings_of_rows(rows, CurrentCode(registered=registry.get)))
    assert sorted(o.m for o in evidence.observations) == [1, 2] and evidence.run_ids == [2, 3] and not evidence.banned
    with_peers = reconcile(readings_of_rows(rows, CurrentCode(include_peers=True, registered=registry.get)))
    assert sorted(o.m for o in with_peers.observations) == [1, 2, 16]
    any_source = reconcile(readings_of_rows(rows, CurrentCode(any_source=True, registered=registry.get)))
    assert sorted(o.m for o in any_source.observations) == [1, 2, 4]
