"""Diagnostic (CPU): where a recorded sweep's leave-one-out regret comes from.

For each dtype of a recording (an ``autotuner export`` file, gzipped or not), every shape is answered
by the table refitted without it (``autotuner.fit.fit.leave_one_out_picks``: the figures ``autotuner fit``
prints), and the worst shapes are listed with the pick, the fastest candidate there and the pick's
coverage: its share of the shape's neighbour weight (``RuleTable.neighbours``), 1 when it was
measured at every neighbour; for each neighbour it lacks, the constraint that keeps it out there.
Then the largest regret among picks measured at every neighbour and among the others.

Usage, from the repository root (``--any-source`` for a recording older than the kernel sources):

    python -m bench.probes.loo_worst tests/data/h100_sweep.json.gz [--worst 6] [--any-source]
"""
from __future__ import annotations

import argparse
import gzip
import tempfile
from pathlib import Path
from typing import Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotuner.records.exchange import import_runs
from autotuner.fit.fit import LeftOut, fit_inputs, leave_one_out_picks
from db import GpuModel, Measurement, make_engine
from kernels.base import check_constraints

def excluded_by(constraints: Mapping[str, int], m: int, n: int) -> str:
    """Why a candidate has no time at (m, n): the limit that rules it out there
    (``kernels.base.check_constraints``' reason), or 'not measured' if none does."""
    support = check_constraints(dict(constraints), m, n)
    return "not measured" if support else support.reason


def coverage(left_out: LeftOut) -> tuple[float, list[str]]:
    """The pick's share of the neighbour weight, and each neighbour it lacks with the reason."""
    table = left_out.table
    index = next(i for i, c in enumerate(table.candidates) if (c["variant"], c["config_key"]) == left_out.chosen)
    times = {(p["m"], p["n"]): p["times"][index] for p in table.points}
    constraints = table.candidates[index].get("constraints", {})
    share, lacking = 0.0, []
    for (m, n), weight in table.neighbours(left_out.m, left_out.n):
        if times[(m, n)] is None:
            lacking.append(f"{m}x{n} ({excluded_by(constraints, m, n)})")
        else:
            share += weight
    return share, lacking


def report(dtype: str, picks: list[LeftOut], worst: int) -> None:
    print(f"== {dtype}: {len(picks)} shapes left out in turn")
    largest = {"measured at every neighbour": 1.0, "partly measured": 1.0}
    for rank, left_out in enumerate(sorted(picks, key=lambda p: -p.regret)):
        if left_out.chosen is None:
            print(f"  {left_out.m}x{left_out.n}: no answer (regret {left_out.regret:.3f})")
            continue
        share, lacking = coverage(left_out)
        kind = "measured at every neighbour" if not lacking else "partly measured"
        largest[kind] = max(largest[kind], left_out.regret)
        if rank < worst:
            print(f"  {left_out.m}x{left_out.n}: regret {left_out.regret:.3f}, pick {'/'.join(left_out.chosen)}"
                  f" (coverage {share:.2f}{'; lacks ' + ', '.join(lacking) if lacking else ''}),"
                  f" best {'/'.join(left_out.best)}")
    print("  largest regret, picks " + "; ".join(f"{kind}: {value:.3f}" for kind, value in largest.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recording", type=Path, help="an `autotuner export` file (.json or .json.gz)")
    parser.add_argument("--worst", type=int, default=6, help="how many of the worst shapes to list per dtype")
    parser.add_argument("--any-source", action="store_true", help="also use rows of older kernel sources")
    args = parser.parse_args()
    opener = gzip.open if args.recording.suffix == ".gz" else open
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(str(Path(folder) / "recording.sqlite"))
        with opener(args.recording, "rt") as handle, Session(engine) as session, session.begin():
            import_runs(session, handle.read())
        with Session(engine) as session:
            gpu = session.scalars(select(GpuModel.key)).first()
            for dtype in sorted(set(session.scalars(select(Measurement.dtype)))):
                inputs = fit_inputs(session, gpu, dtype, any_source=args.any_source)
                report(dtype, leave_one_out_picks(inputs.observations, inputs.constraints), args.worst)
        engine.dispose()


if __name__ == "__main__":
    main()
