"""Diagnostic (CPU): why the shipped tables miss on a shape, from what they were fitted on.

For each asked (GPU, dtype, M, N): the shipped table's pick and predicted time; the neighbours its rule
weighs (``RuleTable.neighbours``, ``autotuner/fit/rule.py``) with the pick's time there, the fastest candidate there and the
fraction of copy speed each reaches; then the table's measured points within a factor ``--reach`` on
both axes; then, with ``--anchors DIR``, the peers' times (``peers_<gpu>.csv``) within that reach. A
pick that is slow at its own neighbours is the rule's miss; a shape without near points, or whose near
points lack the candidates that win around it, is the sampling's; one where the best candidate measured
near it is far from copy speed is a kernel the family lacks. Issue 30's examples by default.

    python -m bench.probes.miss_classes [--shape h100:fp16:1259:9496 ...] [--reach 2] [--anchors DIR]
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from autotuner.fit.rule import RuleTable
from autotuner.lookup.select import TableStore, load_shipped_tables

ISSUE_30 = ("h100:fp16:1259:9496", "h200:fp16:1259:9496", "h100:fp32:1048:289393", "h100:fp32:2545:209294",
            "h200:fp32:90577:3054", "h200:bf16:32768:256", "h200:bf16:849:77957", "h100:bf16:6900:23",
            "h200:bf16:6900:23", "h100:fp32:1:1048576", "h200:bf16:2:4194304")


def _label(table, index: int) -> str:  # noqa: ANN001 - DispatchTable
    candidate = table.candidates[index]
    return f"{candidate['variant']}[{candidate['config_key']}]"


def _point_line(table, point: dict, pick: int | None) -> str:  # noqa: ANN001
    times = point["times"]
    best = min(range(len(times)), key=lambda i: times[i] if times[i] else math.inf)
    copy = point.get("copy_us")
    of_copy = f" ({copy / times[best]:.2f} of copy)" if copy else ""
    picked = times[pick] if pick is not None else None
    mine = f"pick {picked:.1f} us ({picked / times[best]:.2f}x best)" if picked else "pick not measured"
    return (f"{point['m']}x{point['n']}: copy {copy or 0:.1f} us, best {_label(table, best)} {times[best]:.1f} us"
            f"{of_copy}; {mine}; {sum(1 for t in times if t)}/{len(times)} candidates measured")


def diagnose(store: TableStore, gpu: str, dtype: str, m: int, n: int, reach: float,
             anchors: dict[tuple, dict] | None) -> list[str]:
    table = store.get(gpu, dtype)
    choice = store.select(m, n, dtype, gpu)
    pick = next((i for i, c in enumerate(table.candidates)
                 if c["variant"] == choice.variant and dict(c["config"]) == dict(choice.config)), None)
    predicted = f"{choice.predicted_us:.1f} us" if choice.predicted_us else "no time"
    lines = [f"{gpu} {dtype} {m}x{n}: {choice.variant}[{choice.config_key}] predicted {predicted} ({choice.source})"]
    exact = {(p["m"], p["n"]): p for p in table.points}
    for (pm, pn), weight in RuleTable(table.document).neighbours(m, n):  # the fit's rule, as the index was built
        lines.append(f"  neighbour w={weight:.2f} " + _point_line(table, exact[(pm, pn)], pick))
    near = [p for p in table.points if abs(math.log2(p["m"] / m)) <= math.log2(reach)
            and abs(math.log2(p["n"] / n)) <= math.log2(reach)]
    near.sort(key=lambda p: abs(math.log2(p["m"] / m)) + abs(math.log2(p["n"] / n)))
    lines += [f"  near " + _point_line(table, p, pick) for p in near[:8]] or [f"  no measured point within {reach}x"]
    for (g, d, am, an), row in sorted((anchors or {}).items()):
        if g == gpu and d == dtype and abs(math.log2(am / m)) <= math.log2(reach) and abs(math.log2(an / n)) <= math.log2(reach):
            lines.append(f"  anchor {am}x{an}: copy {row['copy_us']} torch {row['torch_us']} liger {row['liger_us']} "
                         f"quack {row['quack_us']}")
    return lines


def read_anchors(folder: Path) -> dict[tuple, dict]:
    rows = {}
    for gpu in ("h100", "h200"):
        path = folder / f"peers_{gpu}.csv"
        if path.exists():
            for row in csv.DictReader(path.open()):
                rows[(gpu, row["dtype"], int(row["M"]), int(row["N"]))] = row
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="gpu:dtype:M:N (repeatable; default: issue 30's examples)")
    parser.add_argument("--reach", type=float, default=2.0, help="near = within this factor on both axes")
    parser.add_argument("--anchors", type=Path, help="folder of peers_h100.csv / peers_h200.csv")
    args = parser.parse_args()
    store = TableStore(load_shipped_tables())  # the shipped tables alone, never a local database's
    anchors = read_anchors(args.anchors) if args.anchors else None
    for spec in args.shape or ISSUE_30:
        gpu, dtype, m, n = spec.split(":")
        print("\n".join(diagnose(store, gpu, dtype, int(m), int(n), args.reach, anchors)))


if __name__ == "__main__":
    main()
