"""Scoring tables on held-out shapes, and benchmarking the dispatched ``softmax`` against peers.

Held-out shapes are off the default grid (odd M, real vocabulary and sequence sizes). They are swept
into runs marked ``grid["purpose"] == "held-out"``, which ``fit`` never uses, and the current table is
scored on them: regret = time of the candidate the table picks / best time measured at that shape.
"""
from __future__ import annotations

from typing import Any, Collection, Sequence

from sqlalchemy.orm import Session

from autotuner.fit.fit import summarize_regret
from autotuner.lookup.table import DispatchTable
from db import queries

HELD_OUT_M: tuple[int, ...] = (3, 77, 500, 2000, 6000)
HELD_OUT_N: tuple[int, ...] = (1000, 2500, 5000, 12000, 50257, 100000, 128256, 200000)
HELD_OUT_PURPOSE = "held-out"
# The odd-M held-out set recorded for the H100 (tests/data/h100_heldout.json.gz): batch sizes off the
# grid's powers of two; bench/device/run.sh update_recordings sweeps it and the replay test scores it.
ODD_M_SET_M: tuple[int, ...] = (6, 24, 48, 100, 200, 300, 600)
ODD_M_SET_N: tuple[int, ...] = (16384, 32000, 50257, 151936)


def held_out_scores(session: Session, table: DispatchTable, run_ids: Sequence[int] | None = None,
                    only: Collection[tuple[int, int]] | None = None) -> dict[str, Any]:
    """Regret of ``table`` on every held-out shape measured for its GPU, dtype and method (only the
    (M, N) in ``only`` when given: one named set, ``autotuner.report.heldout``)."""
    rows = queries.measurements_for(session, table.gpu, table.dtype, table.timing_method, run_ids=run_ids)
    times: dict[tuple[int, int], dict[tuple[str, str], float]] = {}
    for measurement, candidate, run in rows:
        if (run.grid or {}).get("purpose") != HELD_OUT_PURPOSE or measurement.status != "ok":
            continue
        if only is not None and (measurement.m, measurement.n) not in only:
            continue
        shape = times.setdefault((measurement.m, measurement.n), {})
        shape.setdefault((candidate.variant, candidate.config_key), measurement.median_us)
    regrets, misses, details = [], 0, []
    for (m, n), measured in sorted(times.items()):
        pick = table.lookup(m, n)
        best = min(measured.values())
        chosen_key = None
        if pick is not None:
            entry = table.candidates[pick.candidate]
            chosen_key = (entry["variant"], entry.get("config_key") or ",".join(f"{k}={v}" for k, v in entry["config"].items()))
        chosen = measured.get(chosen_key) if chosen_key else None
        if chosen is None:
            misses += 1
            chosen = max(measured.values())
        regrets.append(chosen / best)
        details.append({"m": m, "n": n, "chosen": "/".join(chosen_key) if chosen_key else None,
                        "regret": round(chosen / best, 4), "best_us": best})
    result = summarize_regret(regrets, method=HELD_OUT_PURPOSE, misses=misses)
    result["shapes_detail"] = details
    return result
