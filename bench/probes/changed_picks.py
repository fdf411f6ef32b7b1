"""Diagnostic (CPU): the shapes whose pick a refit changed, as ``bench.probes.pick_pairs``' input.

Reads one GPU's tables from two folders (``--before``, ``--after``: ``<gpu>_<dtype>_cold.json``),
looks up the held-out domain set and ``--random`` (M, N) pairs drawn by ``heldout.random_pairs``
(x each dtype), and with ``--box M0:M1:N0:N1`` as many pairs log-uniform inside that region (a
workload's corner of the domain, say batches of vocabulary rows), and writes every domain-set shape
whose pick differs and ``--sample`` of each random set's (seeded) as ``{"dtype", "m", "n", "set", "a":
before, "b": after}``. Prints per dtype and set how many picks changed and the geomean of after/before
predicted time.

    python -m bench.probes.changed_picks --gpu h200 --before autotuner/tables --after $OUT/tables \\
        --out $OUT/pairs.json [--dtypes fp16,bf16] [--random 3000] [--seed 4242] [--sample 100] \\
        [--box 33:300:16000:400000]
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
    parser.add_argument("--sample", type=int, default=100, help="changed random shapes kept, per random set")
    parser.add_argument("--box", type=_box, help="M0:M1:N0:N1: also --random pairs log-uniform in this region")
    args = parser.parse_args(argv)

    from autotuner.lookup.table import DispatchTable
    from autotuner.report.heldout import held_out_shapes, random_pairs

    dtypes = args.dtypes.split(",")
    sets = {"domain": [(m, n, d) for m, n, d in held_out_shapes("domain") if d in dtypes],
            "random": [(m, n, d) for m, n in random_pairs(args.seed, args.random) for d in dtypes]}
    if args.box:
        sets["box"] = [(m, n, d) for m, n in box_pairs(args.seed, args.random, *args.box) for d in dtypes]
    changed: dict[str, list[dict]] = {label: [] for label in sets}
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
                if a.predicted_us and b.predicted_us:  # a pick may come without a time (a fallback)
                    ratios.append(b.predicted_us / a.predicted_us)
                changed[label].append({"dtype": dtype, "m": m, "n": n, "set": label,
                                       "a": {"variant": ca["variant"], "config": ca["config"]},
                                       "b": {"variant": cb["variant"], "config": cb["config"]}})
            geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0
            moved = sum(1 for pair in changed[label] if pair["dtype"] == dtype)
            print(f"{dtype} {label}: {moved} of {sum(s[2] == dtype for s in shapes)} picks changed, "
                  f"predicted after/before {geomean:.3f}", flush=True)
    pairs = changed["domain"]
    for label in [label for label in sets if label != "domain"]:
        pairs += random.Random(args.seed).sample(changed[label], min(args.sample, len(changed[label])))
    Path(args.out).write_text(json.dumps(pairs, indent=0))
    print(f"wrote {len(pairs)} pairs to {args.out}")


def _box(text: str) -> tuple[int, int, int, int]:
    """``M0:M1:N0:N1`` as four ints with 1 <= M0 <= M1 and 1 <= N0 <= N1, or an argparse error."""
    try:
        m0, m1, n0, n1 = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give M0:M1:N0:N1, four integers") from None
    if not (1 <= m0 <= m1 and 1 <= n0 <= n1):
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= M0 <= M1 and 1 <= N0 <= N1")
    return m0, m1, n0, n1


def box_pairs(seed: int, count: int, m0: int, m1: int, n0: int, n1: int) -> list[tuple[int, int]]:
    """``count`` (M, N) drawn log-uniform in [m0, m1] x [n0, n1] by ``random.Random(seed)`` (repeats
    kept: a region may hold fewer distinct shapes than asked)."""
    rng = random.Random(seed)

    def draw(lo: int, hi: int) -> int:
        return min(hi, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))

    return [(draw(m0, m1), draw(n0, n1)) for _ in range(count)]


if __name__ == "__main__":
    main()
