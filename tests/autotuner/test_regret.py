"""The local-regret arithmetic's shortcuts (autotuner/fit/regret.py) give the rule's own answers:
the closed-form neighbours equal the line-by-line ones bit for bit, and a plan's pick equals the
fit over every allowed candidate, on the shipped and classic tables and on made-up regrets."""
from __future__ import annotations

import json
import math
import operator
import random
from pathlib import Path

import pytest

from autotuner.fit import regret
from autotuner.fit.rule import RuleTable
from tests.autotuner.shipped_picks import tables_to_replay

CLASSIC = Path(__file__).resolve().parents[1] / "data" / "classic_tables"


def _tables() -> list[RuleTable]:
    documents = [table.document for table in tables_to_replay()]
    documents += [json.loads(path.read_text()) for path in sorted(CLASSIC.glob("*.json"))]
    return [RuleTable({**document, "rule": rule}) for document in documents
            for rule in ("local-regret-clamped", "local-regret")]


@pytest.mark.parametrize("table", _tables(), ids=lambda t: f"{t.gpu}-{t.dtype}-{t.rule}-{len(t.points)}")
def test_closed_form_neighbours_equal_the_line_by_line_ones(table):
    """Inside a fully measured cell and on a line between two measured points (queries on measured
    M and N included), the same neighbours in the same order and the same weights to the last bit."""
    rng = random.Random(7)
    ms = sorted({p["m"] for p in table.points})
    ns = sorted({p["n"] for p in table.points})
    closed = 0
    for _ in range(1500):
        m = rng.choice([rng.choice(ms), rng.randint(0, 64), int(2 ** rng.uniform(0, 21))])
        n = rng.choice([rng.choice(ns), rng.randint(1, 300_000), int(2 ** rng.uniform(0, 25))])
        layout_key, points = table._class_points(n)
        table._stencil(m, n)  # builds the layout
        layout = table._layouts[layout_key]
        fast = regret.stencil(layout, m, n, table.rule != "local-regret")
        slow = regret.stencil_by_lines(layout, m, n, table.rule != "local-regret")
        assert fast[0] == slow[0] and list(map(float.hex, fast[1])) == list(map(float.hex, slow[1])), (m, n)
        closed += any(cell is not None for cell in layout.cells.values())
    assert closed, "no query fell where a closed form applies"


def _reference_best(columns, gaps, weights, allowed):
    """The rule as first written (RuleTable._local_regret before plans): every allowed candidate's
    weighted mean, the fit where some are partial, the smallest (ties: the lower index)."""
    theta, complete, partial = {}, [], {}
    for i in allowed:
        values = columns[i]
        if None not in values:
            complete.append(values)
            theta[i] = sum(map(operator.mul, weights, values))
            continue
        if i in gaps:
            continue
        total = covered = 0.0
        for value, weight in zip(values, weights):
            if value is not None:
                total += weight * value
                covered += weight
        if covered:
            partial[i] = values
            theta[i] = total / covered
    if not theta:
        return None
    if partial:
        regret.fit_effects(weights, complete, partial, theta)
    return min(theta, key=lambda i: (theta[i], i))


def test_a_plan_picks_what_the_fit_over_every_allowed_candidate_picks():
    """Made-up log regrets with exact ties, capped values, gaps and partial candidates: dropping the
    dominated candidates never changes the pick, whatever the weights."""
    rng = random.Random(3)
    cap = math.log(1.5)
    pruned = 0
    for trial in range(3000):
        corners, count = rng.randint(1, 6), rng.randint(1, 12)
        pool = [0.0, cap, 0.01, 0.02]

        def value():
            return rng.choice(pool) if rng.random() < 0.5 else rng.uniform(0.0, cap)
        rows = [[value() for _ in range(count)] for _ in range(corners)]
        for row in rows:  # some candidates not measured at some points
            for i in range(count):
                if rng.random() < (0.15 if trial % 2 else 0.0):
                    row[i] = None
        gaps = frozenset(i for i in range(count) if rng.random() < 0.1)
        allowed = tuple(sorted(rng.sample(range(count), rng.randint(1, count))))
        raw = [rng.random() + 1e-3 for _ in range(corners)]
        weights = [w / sum(raw) for w in raw]
        plan = regret.plan(rows, gaps, allowed)
        columns = list(zip(*rows))
        assert regret.best(plan, weights) == _reference_best(columns, gaps, weights, allowed)
        if plan[0] is not None:
            complete = sum(None not in columns[i] for i in allowed)
            pruned += len(plan[0]) < complete
    assert pruned > 100  # the shortcut was taken, not only the full fit
