"""Diagnostic (CPU): how closely each shipped table's decision index answers its fit's rule.

Over ``--shapes`` shapes drawn log-uniformly over M 1..2^20, N 1..2^24 (seeded), per table: the share
where the index picks the rule's candidate (the same fallback counts as the same), and where they
differ, the geomean and worst of the rule's time model's ratio (the index pick's time / the rule
pick's, both by the rule's model: ``autotuner/fit/model.py``); also the index's predicted_us against
the rule's where they agree (median and p99 of |ratio - 1|).

    python -m bench.probes.index_agreement [--shapes 100000]
"""
from __future__ import annotations

import argparse
import json
import math
import random

from autotuner.fit import model as scaling
from autotuner.fit.index import IndexBuilder
from autotuner.fit.rule import RuleTable
from autotuner.lookup.select import load_shipped_tables


def agreement(table, shapes: int, seed: int = 1) -> dict:  # noqa: ANN001
    rule = RuleTable(table.document)
    builder = IndexBuilder(rule)
    rng = random.Random(seed)
    same, ratios, unpriced, errors = 0, [], 0, []
    for _ in range(shapes):
        m, n = int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24))
        got = table.answer(m, n)
        want = scaling.answer_fields(rule, m, n)
        if got[0] == want[0]:
            same += 1
            if got[1] and want[1]:
                errors.append(abs(got[1] / want[1] - 1))
            continue
        time = builder._time(got[0], m, n) if got[0] is not None else None
        if time is None or not want[1]:
            unpriced += 1
        else:
            ratios.append(time / want[1])
    errors.sort()
    return {"table": "_".join(table.key), "shapes": shapes, "same_pick": round(same / shapes, 5),
            "differ": shapes - same,
            "ratio_geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4) if ratios else None,
            "ratio_max": round(max(ratios), 4) if ratios else None, "differ_unpriced": unpriced,
            "predicted_error_median": round(errors[len(errors) // 2], 5) if errors else None,
            "predicted_error_p99": round(errors[int(0.99 * len(errors))], 5) if errors else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=100000)
    args = parser.parse_args()
    for table in load_shipped_tables():
        print(json.dumps(agreement(table, args.shapes)), flush=True)


if __name__ == "__main__":
    main()
