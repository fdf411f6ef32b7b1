"""Diagnostic (CPU): the shapes whose pick a refit changed, as ``bench.probes.pick_pairs``' input.

Reads one GPU's tables from two folders (``--before``, ``--after``: ``<gpu>_<dtype>_cold.json``),
looks up the held-out domain set and ``--random`` (M, N) pairs drawn by ``heldout.random_pairs``
(x each dtype), and writes every domain-set shape whose pick differs and ``--sample`` of the random
ones (seeded) as ``{"dtype", "m", "n", "set", "a": before, "b": after}``. Prints per dtype and set how
many picks changed and the geomean of after/before predicted time.

    python -m bench.probes.changed_picks --gpu h200 --before autotuner/tables --after $OUT/tables \\
        --out $OUT/pairs.json [--dtypes fp16,bf16] [--random 3000] [--seed 4242] [--sample 100]
"""
from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtypes", default="fp32,fp16,bf16")
    parser.add_argument("--random", type=int, default=3000, help="random (M, N) pairs, each in every dtype")
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument("--sample", type=int, default=100, help="changed random shapes kept")
    args = parser.parse_args(argv)

    from autotuner.lookup.table import DispatchTable
    from autotuner.report.heldout import held_out_shapes, random_pairs

    dtypes = args.dtypes.split(",")
    sets = {"domain": [(m, n, d) for m, n, d in held_out_shapes("domain") if d in dtypes],
            "random": [(m, n, d) for m, n in random_pairs(args.seed, args.random) for d in dtypes]}
    changed: dict[str, list[dict]] = {"domain": [], "random": []}
    for dtype in dtypes:
        name = f"{args.gpu}_{dtype}_cold.json"
        before = DispatchTable(json.loads((Path(args.before) / name).read_text()))
        after = DispatchTable(json.loads((Path(args.after) / name).read_text()))
        for label, shapes in sets.items():
            ratios = []
            for m, n, _ in (s for s in shapes if s[2] == dtype):
                a, b = before.lookup(m, n), after.lookup(m, n)
                if a is None or b is None:
                    continue
                ca, cb = before.candidates[a.candidate], after.candidates[b.candidate]
                if (ca["variant"], ca["config_key"]) == (cb["variant"], cb["config_key"]):
                    continue
                ratios.append(b.predicted_us / a.predicted_us)
                changed[label].append({"dtype": dtype, "m": m, "n": n, "set": label,
                                       "a": {"variant": ca["variant"], "config": ca["config"]},
                                       "b": {"variant": cb["variant"], "config": cb["config"]}})
            geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0
            print(f"{dtype} {label}: {len(ratios)} of {sum(s[2] == dtype for s in shapes)} picks changed, "
                  f"predicted after/before {geomean:.3f}", flush=True)
    kept = random.Random(args.seed).sample(changed["random"], min(args.sample, len(changed["random"])))
    pairs = changed["domain"] + kept
    Path(args.out).write_text(json.dumps(pairs, indent=0))
    print(f"wrote {len(pairs)} pairs to {args.out}")


if __name__ == "__main__":
    main()
