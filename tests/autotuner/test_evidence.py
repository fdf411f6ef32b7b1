"""The fit's evidence rules (autotuner/fit/evidence.py) on readings made up here: agreement within the
measured repeatability, conflicts set aside by how many sources agree (never the newest), replays and
degenerate rows, failures that ban only when two sources report them, and the price of a changed answer
that no single source sets. The repeatability constants are held to the committed recordings."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from autotuner.fit.evidence import (REPEATABILITY, SPREAD_CAP, Reading, Source, agree, reconcile, source_of)
from autotuner.fit.samples import recording_paths

ROOT = Path(__file__).resolve().parents[2]
LAB_A, LAB_B, HOST = Source("uploader", "lab-a"), Source("uploader", "lab-b"), Source("host", "gpu-7")
CONFIRM = Source("confirmation", "run 9")
_order = iter(range(1, 10**6))


def reading(source: Source, median: float | None, *, variant: str = "v", config: str = "a=1", m: int = 64,
            n: int = 4096, run: int = 1, status: str = "ok", spread: float = 0.02, reps: int | None = 20) -> Reading:
    p20 = median * (1 - spread) if median else None
    p80 = median * (1 + spread) if median else None
    return Reading(variant, config, m, n, status, median, p20, p80, reps, run, (run, next(_order)), source, {"a": 1})


def value(evidence, variant: str = "v", config: str = "a=1", m: int = 64, n: int = 4096) -> float:
    return next(o.median_us for o in evidence.observations if (o.variant, o.config_key, o.m, o.n) == (variant, config, m, n))


def test_one_source_is_read_as_stored_and_its_newest_reading_stands():
    evidence = reconcile([reading(HOST, 10.123456789, run=1), reading(HOST, 31.0, run=2, spread=0.5),
                          reading(HOST, 9.87654321, run=3)])  # a disturbed row, then its retime
    assert value(evidence) == 9.87654321 and not evidence.conflicts and evidence.run_ids == [3]


def test_sources_that_agree_are_combined_and_both_stand_behind_the_value():
    evidence = reconcile([reading(HOST, 10.0, run=1), reading(LAB_A, 10.4, run=2)])
    assert value(evidence) == pytest.approx(math.sqrt(10.0 * 10.4)) and not evidence.conflicts
    assert evidence.sources[("v", "a=1", 64, 4096)] == (HOST, LAB_A)


@pytest.mark.parametrize("claimed", [5.0, 20.0, 7.5, 13.5])
def test_a_second_source_far_off_is_a_conflict_and_the_first_stored_side_is_kept(claimed):
    """Two sources, one each side: neither outweighs the other; this database's host keeps the value,
    whichever is newer (never "newest wins"); between two uploaders neither side is corroborated."""
    for order in ("host first", "uploader first"):
        readings = [reading(HOST, 10.0, run=1), reading(LAB_A, claimed, run=2)]
        if order == "uploader first":
            readings = [reading(LAB_A, claimed, run=1), reading(HOST, 10.0, run=2)]
        evidence = reconcile(readings)
        assert value(evidence) == 10.0, order
        (conflict,) = evidence.conflicts
        assert [r.source for r in conflict.set_aside] == [LAB_A] and "set aside" in str(conflict)
    between_uploaders = reconcile([reading(LAB_B, 10.0, run=1), reading(LAB_A, claimed, run=2)])
    assert not between_uploaders.observations and len(between_uploaders.conflicts) == 1  # no side is corroborated
    assert between_uploaders.lone == {LAB_B: {("v", "a=1", 64, 4096)}}  # the one stored first, alone


def test_the_side_more_sources_agree_with_wins_even_when_it_is_newer():
    evidence = reconcile([reading(LAB_A, 5.0, run=1), reading(HOST, 10.0, run=2), reading(LAB_B, 10.3, run=3)])
    assert value(evidence) == pytest.approx(math.sqrt(10.0 * 10.3))
    assert [r.source for r in evidence.conflicts[0].set_aside] == [LAB_A]


def test_a_confirmation_settles_a_tie():
    evidence = reconcile([reading(HOST, 5.0, run=1), reading(LAB_A, 10.0, run=2), reading(CONFIRM, 10.2, run=9)])
    assert value(evidence) == pytest.approx(math.sqrt(10.0 * 10.2))
    tie = reconcile([reading(LAB_A, 5.0, run=1), reading(CONFIRM, 10.0, run=9)])
    assert value(tie) == 10.0


def test_a_copy_of_another_sources_row_is_a_replay_not_evidence():
    genuine = reading(HOST, 10.0, run=1)
    copied = genuine._replace(source=LAB_A, run_id=2, order=(2, 1))
    evidence = reconcile([genuine, copied, reading(HOST, 12.0, m=1, run=1), reading(HOST, 8.0, variant="w", run=1)])
    assert evidence.replays == {2: 1} and LAB_A not in evidence.runs and value(evidence) == 10.0
    assert not evidence.price_change(64, 4096, ("w", "a=1"), ("v", "a=1")).evidenced


@pytest.mark.parametrize("broken", [dict(m=0), dict(n=0), dict(m=-3), dict(median=None), dict(median=0.0),
                                    dict(median=math.inf), dict(median=math.nan), dict(spread=-0.5)])
def test_degenerate_rows_are_skipped_and_reported(broken):
    median = broken.pop("median", 7.0)
    bad = reading(HOST, median, run=2, **broken)
    if median is None:
        bad = bad._replace(p20_us=None, p80_us=None)
    evidence = reconcile([reading(HOST, 10.0, run=1), bad])
    assert evidence.degenerate == [bad] and [o.median_us for o in evidence.observations] == [10.0]
    assert any("degenerate row(s) skipped" in line for line in evidence.report("h100/bf16/cold"))


def test_a_failure_bans_a_candidate_only_where_two_sources_report_it():
    one = reconcile([reading(HOST, 10.0, run=1), reading(LAB_A, None, status="wrong", m=8, run=2),
                     reading(LAB_A, None, status="wrong", m=16, run=3)])
    assert not one.banned and len(one.unreproduced) == 1 and [o.m for o in one.observations] == [64]
    assert "no ban" in " ".join(one.report("h100/bf16/cold"))
    two = reconcile([reading(HOST, 10.0, run=1), reading(LAB_A, None, status="fault", m=8, run=2),
                     reading(CONFIRM, None, status="wrong", m=8, run=9)])
    assert two.banned == {("v", "a=1")} and not two.observations
    other_statuses = reconcile([reading(HOST, 10.0, run=1), reading(LAB_A, None, status="launch_error", run=2),
                                reading(LAB_B, None, status="unsupported", run=3)])
    assert not other_statuses.banned and not other_statuses.unreproduced


def test_a_changed_answer_is_priced_so_that_no_single_source_sets_the_price():
    old, new = ("old", ""), ("new", "")
    rows = [reading(HOST, 10.0, variant="old", config="", run=1), reading(HOST, 6.0, variant="new", config="", run=1)]
    alone = reconcile(rows)
    assert not alone.price_change(64, 4096, old, new).evidenced  # a gain this host alone claims
    assert alone.price_change(64, 4096, old, new).ratio == pytest.approx(0.6)
    tie = [reading(HOST, 10.0, variant="old", config="", run=1), reading(HOST, 10.4, variant="new", config="", run=1)]
    assert reconcile(tie).price_change(64, 4096, old, new).evidenced  # this host's tie: the rule may settle it
    uploaded_tie = [r._replace(source=LAB_A) for r in tie]
    assert not reconcile(uploaded_tie).price_change(64, 4096, old, new).evidenced  # an uploader's needs a second
    liar = [reading(LAB_A, 10.1, variant="old", config="", run=2), reading(LAB_A, 3.03, variant="new", config="", run=2)]
    two = reconcile(rows + liar).price_change(64, 4096, old, new)
    assert two.evidenced and two.ratio == pytest.approx(0.6) and two.sources == (HOST, LAB_A)  # the worse of the two
    third = [reading(LAB_B, 9.9, variant="old", config="", run=3), reading(LAB_B, 6.435, variant="new", config="", run=3)]
    three = reconcile(rows + liar + third).price_change(64, 4096, old, new)
    assert three.ratio == pytest.approx(math.sqrt(0.6 * 0.65))  # leaving the liar out is the worst case
    confirmed = [reading(CONFIRM, 10.2, variant="old", config="", run=9), reading(CONFIRM, 6.2, variant="new", config="", run=9)]
    assert reconcile(liar + confirmed).price_change(64, 4096, old, new).evidenced


def test_sources_that_timed_both_but_find_the_new_pick_slower_do_not_corroborate_it():
    """A forger's run stored first keeps its value in a one-to-one conflict between uploaders; the genuine
    second uploader then finds the pick the forged times propose slower: disputed, not evidence."""
    old, new = ("old", ""), ("new", "")
    forged = [reading(LAB_A, 10.0, variant="old", config="", run=1), reading(LAB_A, 5.0, variant="new", config="", run=1)]
    genuine = [reading(LAB_B, 10.1, variant="old", config="", run=2), reading(LAB_B, 13.13, variant="new", config="", run=2)]
    evidence = reconcile(forged + genuine)
    assert len(evidence.conflicts) == 1 and evidence.lone == {LAB_A: {("new", "", 64, 4096)}}  # kept, but alone
    assert value(reconcile(forged + genuine, include_lone=True), "new", "") == 5.0  # what confirm plans from
    price = evidence.price_change(64, 4096, old, new)
    assert price.ratio == pytest.approx(1.3) and price.sources == (LAB_A, LAB_B)
    assert not price.evidenced and price.disputed
    refuted = [reading(CONFIRM, 10.2, variant="old", config="", run=9), reading(CONFIRM, 13.1, variant="new", config="", run=9)]
    assert reconcile(forged + refuted).price_change(64, 4096, old, new).disputed  # a confirmation that refutes it
    within = [reading(LAB_B, 10.1, variant="old", config="", run=2), reading(LAB_B, 10.1 * math.exp(0.9 * REPEATABILITY),
                                                                              variant="new", config="", run=2)]
    assert reconcile(forged + within).price_change(64, 4096, old, new).evidenced  # no slower beyond the repeatability


def test_only_corroborated_readings_are_fitted():
    """A reading one uploader alone stands behind (at a shape or of a kernel nobody else timed) is reported
    and not fitted; a second uploader that agrees, this database's host or a confirmation makes it count."""
    lone = reading(LAB_A, 10.0, run=1)
    alone = reconcile([lone, reading(HOST, 20.0, variant="w", run=2)])
    assert [(o.variant, o.median_us) for o in alone.observations] == [("w", 20.0)]
    assert alone.lone == {LAB_A: {("v", "a=1", 64, 4096)}} and alone.summary()["uncorroborated"] == {"uploader lab-a": 1}
    assert any("1 reading(s) of uploader lab-a (runs 1) that no other source corroborates, not fitted" in line
               for line in alone.report("h100/bf16/cold"))
    assert [o.variant for o in reconcile([lone], include_lone=True).observations] == ["v"]
    for second in (reading(LAB_B, 10.3, run=2), reading(HOST, 10.2, run=2), reading(CONFIRM, 9.9, run=9)):
        both = reconcile([lone, second])
        assert not both.lone and len(both.observations) == 1, second.source
    assert not reconcile([reading(HOST, 10.0, run=1)]).lone  # this database's own host is fitted as measured


def test_sources_are_uploaders_hosts_and_confirmations():
    assert source_of("lab-a", "gpu-7", 3, None) == LAB_A  # an uploader's documents name hosts of its own claiming
    assert source_of(None, "gpu-7", 3, {"m": [1]}) == HOST
    assert source_of(None, "gpu-7", 9, {"purpose": "confirm"}) == CONFIRM
    assert source_of("lab-a", "gpu-7", 9, {"purpose": "confirm"}) == LAB_A  # a confirmation is a local re-measurement


def test_a_twice_faster_claim_never_agrees_however_wide_its_spread():
    assert not agree(reading(HOST, 10.0, spread=0.9), reading(LAB_A, 5.0, spread=0.9))
    assert agree(reading(HOST, 10.0, spread=0.0), reading(LAB_A, 10.0 * math.exp(REPEATABILITY * 0.99), spread=0.0))


def repeated_rows() -> tuple[list[float], list[float]]:
    """From the committed H100 recordings (one host): |log ratio| of every repeated (candidate, shape) row
    to its first reading, and every row's log(p80 / p20)."""
    first: dict[tuple, float] = {}
    ratios, spreads = [], []
    for path in recording_paths(ROOT, ["h100"]):
        with gzip.open(path, "rt") as handle:
            runs = json.load(handle)["runs"]
        for run in runs:
            for row in run["measurements"]:
                if row["status"] != "ok":
                    continue
                candidate = run["candidates"][row["candidate"]]
                key = (candidate["variant"], candidate["config_key"], candidate["source_hash"], row["m"], row["n"], row["dtype"])
                if key in first:
                    ratios.append(abs(math.log(row["median_us"] / first[key])))
                else:
                    first[key] = row["median_us"]
                if row.get("p20_us") and row.get("p80_us"):
                    spreads.append(math.log(row["p80_us"] / row["p20_us"]))
    return sorted(ratios), sorted(spreads)


def test_the_repeatability_is_the_recordings_own():
    ratios, spreads = repeated_rows()
    assert len(ratios) > 10_000
    q99 = ratios[int(0.99 * len(ratios))]
    assert REPEATABILITY - 0.02 <= q99 <= REPEATABILITY  # rounded up, not loosened
    assert SPREAD_CAP - 0.02 <= spreads[int(0.99 * len(spreads))] <= SPREAD_CAP
