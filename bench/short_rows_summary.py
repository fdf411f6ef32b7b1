"""Per-shape summary of an ``autotuner export`` document for the short-row variants (issue 17):
the best config of each variant, its fraction of copy speed (copy time / kernel time, newest copy
reference of the shape) and its ratio to torch.softmax (torch time / kernel time, > 1 is faster),
then the geometric means and the worst shapes of one variant against torch.

    python bench/short_rows_summary.py short.json.gz [--variant cuda_short_rows] > summary.txt
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

TORCH = "torch_softmax"


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def best_times(document: dict) -> tuple[dict, dict]:
    """({(dtype, m, n): {variant: (median_us, config_key)}}, {(dtype, m, n): copy median_us})."""
    best: dict = defaultdict(dict)
    copies: dict = {}
    for run in document["runs"]:
        candidates = run["candidates"]
        for row in run["measurements"]:
            if row["status"] != "ok" or row.get("median_us") is None:
                continue
            candidate = candidates[row["candidate"]]
            shape = (row["dtype"], row["m"], row["n"])
            held = best[shape].get(candidate["variant"])
            if held is None or row["median_us"] < held[0]:
                best[shape][candidate["variant"]] = (row["median_us"], candidate["config_key"])
        for copy in run["copy_references"]:
            copies[(copy["dtype"], copy["m"], copy["n"])] = copy["median_us"]
    return best, copies


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summarize(document: dict, focus: str) -> str:
    best, copies = best_times(document)
    header = "dtype      M     N  variant                 best config"
    lines = [f"{header:101}us  copy-frac  vs-torch"]
    fractions: list[float] = []
    versus_torch: list[tuple[float, tuple]] = []
    for shape in sorted(best):
        dtype, m, n = shape
        copy = copies.get(shape)
        torch_us = best[shape].get(TORCH, (None,))[0]
        for variant, (us, config) in sorted(best[shape].items()):
            fraction = copy / us if copy else float("nan")
            ratio = torch_us / us if torch_us else float("nan")
            lines.append(f"{dtype:5} {m:>7} {n:>5}  {variant:22}  {config:50} {us:9.2f}  {fraction:9.3f}  {ratio:8.3f}")
            if variant == focus:
                if copy:
                    fractions.append(fraction)
                if torch_us:
                    versus_torch.append((ratio, shape))
    lines.append("")
    lines.append(f"{focus}: {len(fractions)} shapes, copy-speed fraction geomean {geomean(fractions):.3f}, "
                 f"vs torch.softmax geomean {geomean([r for r, _ in versus_torch]):.3f}")
    slow = sorted(versus_torch)[:8]
    lines.append("slowest against torch.softmax (torch us / ours us): "
                 + ", ".join(f"{d} {m}x{n} {r:.3f}" for r, (d, m, n) in slow))
    behind = sum(1 for r, _ in versus_torch if r < 0.97)
    lines.append(f"shapes more than 3 % slower than torch.softmax: {behind} of {len(versus_torch)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path, help="an autotuner export document (.json or .json.gz)")
    parser.add_argument("--variant", default="cuda_short_rows", help="the variant the totals are for")
    args = parser.parse_args()
    print(summarize(load(args.export), args.variant))


if __name__ == "__main__":
    main()
