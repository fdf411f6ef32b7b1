"""Diagnostic (GPU): two dispatch choices per shape, timed side by side.

A lookup change moves picks; this times, per listed shape, the pick before (``a``) and after (``b``)
beside a copy of the same bytes, in one process: cold L2, rounds on fresh inputs in a rotated order,
each kernel checked against the float64 reference first (poisoned output). Input: a JSON list of
``{"dtype", "m", "n", "a": {"variant", "config"}, "b": {...}}``; output: a CSV (rewritten after each
shape) with ``a_us``, ``b_us`` (median of the rounds, or WRONG / ERR:...) and ``copy_us`` (fastest).

    python -m bench.probes.pick_pairs bench/data/pick_pairs_colreach.json --out $OUT/pick_pairs.csv [--budget-s 400]
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable


def _timed(timer: Any, x: Any, dtype: str, launch: Callable[[Any, Any], None]) -> float | str:
    import torch

    from kernels.reference import check_softmax

    out = torch.full_like(x, float("nan"))
    launch(x, out)
    if not check_softmax(out, x, dtype).ok:
        return "WRONG"
    return timer.time(lambda: launch(x, out)).median_us


def _launch(choice: dict[str, Any], dtype: str, n: int) -> Callable[[Any, Any], None]:
    from kernels import KernelConfig, get_variant

    return get_variant(choice["variant"]).build(KernelConfig.from_dict(choice["config"]), dtype, n).launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=400.0)
    args = parser.parse_args()
    import torch

    from autotuner.tune.measure import copy_reference
    from autotuner.tune.timing import Timer
    from kernels.reference import random_input

    timer = Timer("cold", time_cap_s=0.3)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for pair in json.loads(Path(args.pairs).read_text()):
        if time.monotonic() - started > args.budget_s:
            print(f"budget spent after {len(rows)} shapes")
            break
        dtype, m, n = pair["dtype"], pair["m"], pair["n"]
        row: dict[str, Any] = {"dtype": dtype, "m": m, "n": n, "set": pair.get("set", ""),
                               "in_bench": pair.get("in_bench", False),
                               "a": f"{pair['a']['variant']}{pair['a']['config']}",
                               "b": f"{pair['b']['variant']}{pair['b']['config']}"}
        samples: dict[str, list[Any]] = {"copy": [], "a": [], "b": []}
        try:
            launches = {label: _launch(pair[label], dtype, n) for label in ("a", "b")}
        except Exception as exc:  # a build that fails is a row, not the end of the run
            row.update(a_us=f"ERR:{type(exc).__name__}", b_us="", copy_us="")
            rows.append(row)
            continue
        for index in range(args.rounds):
            x = random_input(m, n, dtype)
            out = torch.empty_like(x)
            runners = {"copy": lambda: copy_reference(timer, x, out).median_us,
                       "a": lambda: _timed(timer, x, dtype, launches["a"]),
                       "b": lambda: _timed(timer, x, dtype, launches["b"])}
            order = list(runners)[index % 3:] + list(runners)[:index % 3]
            for label in order:
                try:
                    samples[label].append(runners[label]())
                except Exception as exc:
                    samples[label].append(f"ERR:{type(exc).__name__}")
            del x, out
        row["copy_us"] = min(v for v in samples["copy"] if isinstance(v, float))
        for label in ("a", "b"):
            bad = [v for v in samples[label] if not isinstance(v, float)]
            row[f"{label}_us"] = bad[0] if bad else statistics.median(samples[label])
        rows.append(row)
        with open(args.out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"{dtype} {m}x{n}: a {row['a_us']} b {row['b_us']} copy {row['copy_us']:.2f}", flush=True)
    print(f"{len(rows)} shapes in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
