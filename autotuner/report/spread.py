"""How far two identical sweeps disagree: the figure the sweep's timings are trusted to.

Sweep the same shapes twice into two database files (same GPU, same day; a second sweep into the
same file would skip everything), then::

    python -m autotuner.report.spread first.sqlite second.sqlite [--gpu h100] [--method cold]

Spread of a (candidate, shape) = |a - b| / min(a, b) of its two medians; the median spread over every
pair timed in full in both sweeps is the noise floor. Per shape, the winners of the two sweeps must
agree wherever the top two candidates differ by more than that floor; shapes where they do not are
listed. Candidates the quick drop left at their quick estimate are not compared (few repetitions).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any, Mapping, NoReturn

from rich.console import Console
from sqlalchemy.orm import Session

from autotuner.domain import TIMING_METHODS
from autotuner.tune.measure import QUICK_REPS
from db import queries
from db.engine import DatabaseError, reader_engine

Key = tuple[str, str, int, int, str]  # variant, config_key, m, n, dtype


def full_times(session: Session, gpu_key: str, method: str) -> dict[Key, float]:
    """Newest median of every candidate on every shape that was timed in full (not quick-dropped)."""
    times: dict[Key, float] = {}
    for measurement, candidate, _run in queries.measurements_for(session, gpu_key, timing_method=method):
        key = (candidate.variant, candidate.config_key, measurement.m, measurement.n, measurement.dtype)
        if key in times or measurement.status != "ok" or not measurement.median_us:
            continue
        if (measurement.repetitions or 0) > QUICK_REPS:
            times[key] = float(measurement.median_us)
    return times


def compare(first: Mapping[Key, float], second: Mapping[Key, float]) -> dict[str, Any]:
    """Spread figures and per-shape winner agreement of two sweeps' full timings."""
    common = sorted(set(first) & set(second))
    spreads = sorted(abs(first[k] - second[k]) / min(first[k], second[k]) for k in common)
    if not spreads:
        return {"pairs": 0, "median_spread": None, "p90_spread": None, "shapes": 0, "decidable": 0, "disagreements": []}
    floor = statistics.median(spreads)
    shapes: dict[tuple[int, int, str], list[Key]] = {}
    for key in common:
        shapes.setdefault(key[2:], []).append(key)
    decidable, disagreements = 0, []
    for shape, keys in sorted(shapes.items()):
        if len(keys) < 2:
            continue
        ranked = sorted(keys, key=lambda k: first[k])
        gap = first[ranked[1]] / first[ranked[0]] - 1
        if gap <= floor:
            continue  # within the noise: either winner is as good
        decidable += 1
        winner_b = min(keys, key=lambda k: second[k])
        if winner_b != ranked[0]:
            disagreements.append({"shape": shape, "first": f"{ranked[0][0]}[{ranked[0][1]}]",
                                  "second": f"{winner_b[0]}[{winner_b[1]}]", "gap": round(gap, 4)})
    return {"pairs": len(spreads), "median_spread": round(floor, 5),
            "p90_spread": round(spreads[min(len(spreads) - 1, int(0.9 * len(spreads)))], 5),
            "shapes": len(shapes), "decidable": decidable, "disagreements": disagreements}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotuner.report.spread", description=__doc__.splitlines()[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--gpu", default=None, help="GPU model key (default: the only one in the first database)")
    parser.add_argument("--method", default="cold", choices=TIMING_METHODS)
    args = parser.parse_args(argv)
    timings = []
    gpu = args.gpu
    for path in (args.first, args.second):
        try:
            engine = reader_engine(path)
        except DatabaseError as exc:
            _fail(str(exc))
        if engine is None:
            _fail(f"{path} is an empty database")
        try:
            with Session(engine) as session:
                if gpu is None:
                    keys = [g.key for g in queries.list_gpus(session)]
                    if len(keys) != 1:
                        _fail(f"{path} holds GPUs {keys}; name one with --gpu")
                    gpu = keys[0]
                timings.append(full_times(session, gpu, args.method))
        except DatabaseError as exc:
            _fail(str(exc))
    result = compare(*timings)
    out = Console(highlight=False, emoji=False, markup=False)
    out.print(f"{gpu} {args.method}: {result['pairs']} pairs, median spread {result['median_spread']}, "
              f"p90 {result['p90_spread']}; {result['shapes']} shapes, {result['decidable']} with a top-two gap "
              f"above the median spread, winners disagree on {len(result['disagreements'])}")
    for row in result["disagreements"]:
        out.print(f"  {row['shape']}: {row['first']} vs {row['second']} (gap {row['gap']})")
    return 0


def _fail(message: str) -> NoReturn:
    """A one-line error on stderr (no traceback) and exit status 2, as argparse gives a bad argument."""
    sys.stderr.write(f"python -m autotuner.report.spread: error: {message}\n")
    raise SystemExit(2)


if __name__ == "__main__":
    sys.exit(main())
