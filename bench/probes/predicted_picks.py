"""Done-when bench (GPU) of predicted tables: on random shapes over the domain, the picks of the GPU's
measured table, of its table predicted from the other GPUs' recordings alone, of the other GPU's
table copied as is (the kernels this GPU runs) and of ``torch_softmax``, timed side by side.

Shapes: ``--shapes`` (M, N) drawn log-uniform over M 1..2^20 and N 1..2^24 (seeded), each in the
three dtypes, an fp32 tensor at most 256 MB. The predicted tables are made here from the committed
recordings (``autotuner/fit/predict_table.py``, the recordings of ``--gpu`` left out) and written to
``--out``'s folder. Each (dtype, shape): every distinct pick built and checked against the float64
reference, then ``--rounds`` rounds on fresh inputs, cold L2, in a rotated order, with the copy
(``bench/probes/pick_pairs.py``'s machinery); a pick's time is its median over the rounds. The CSV is
rewritten after each shape; the summary prints geomean ratios to the measured table's picks.

``--quick`` first runs ``autotuner sweep --quick --gpu G --db DB`` (its wall time printed and written
beside the CSV) and adds the quick-sweep table's picks as column ``quick``. ``--part k/K`` times every
K-th shape from the k-th, so a bench longer than one call splits over several; ``--summarize`` merges
their CSVs.

    python -m bench.probes.predicted_picks --gpu h100 --seed 7 --shapes 200 --out $OUT/predicted_picks_h100.csv --part 1/3
    python -m bench.probes.predicted_picks --gpu h100 --seed 7 --shapes 200 --out $OUT/quick_h100.csv \
        --quick --db $OUT/quick.sqlite --labels measured,quick --part 1/3
    python -m bench.probes.predicted_picks --summarize $OUT/predicted_picks_h100*.csv
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LABELS = ("measured", "predicted", "copied", "torch")
MAX_TENSOR_BYTES = 256 * 2**20
DTYPES = ("fp32", "fp16", "bf16")


def random_shapes(count: int, seed: int) -> list[tuple[int, int]]:
    """(M, N) log-uniform over M 1..2^20, N 1..2^24, an fp32 tensor of at most 256 MB; seeded."""
    rng = random.Random(seed)
    shapes: list[tuple[int, int]] = []
    while len(shapes) < count:
        m, n = int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24))
        if m * n * 4 <= MAX_TENSOR_BYTES:
            shapes.append((m, n))
    return shapes


def tables(gpu: str, labels: list[str], out: Path, db: str | None) -> dict[str, Any]:
    """Per label, a TableStore answering for ``gpu`` as that label means (None for torch)."""
    from autotuner.fit.perfmodel import fit_model
    from autotuner.fit.predict_table import predict_document
    from autotuner.fit.samples import RECORDINGS, load_samples, recording_paths
    from autotuner.lookup.gpu_models import GPU_MODELS
    from autotuner.lookup.select import TableStore, is_predicted, load_shipped_tables
    from autotuner.lookup.table import DispatchTable

    shipped = load_shipped_tables()
    stores: dict[str, Any] = {"torch": None}
    if "measured" in labels:
        stores["measured"] = TableStore([t for t in shipped if t.gpu == gpu and not is_predicted(t)])
    if "copied" in labels:
        others = [t for t in shipped if t.gpu != gpu and t.gpu in RECORDINGS and not is_predicted(t)]
        stores["copied"] = TableStore(others)  # answers as nearest-gpu, with the kernels this GPU runs
    if "predicted" in labels:
        donors = [g for g in RECORDINGS if g != gpu]
        samples = load_samples(recording_paths(ROOT, donors))
        model = fit_model(samples, {g: GPU_MODELS[g] for g in donors})
        documents = [predict_document(samples, GPU_MODELS[gpu], dtype, model=model) for dtype in DTYPES]
        for document in documents:
            (out.parent / f"predicted_{gpu}_{document['dtype']}_cold.json").write_text(json.dumps(document) + "\n")
        stores["predicted"] = TableStore([DispatchTable(d) for d in documents])
    if "quick" in labels:
        from sqlalchemy.orm import Session

        from db import make_engine, queries

        with Session(make_engine(db, create=False)) as session:
            found = [DispatchTable(row.payload) for row in queries.current_tables(session, gpu)
                     if row.payload.get("source") == "quick-sweep"]
        if not found:
            raise SystemExit(f"no quick-sweep table of {gpu} in {db}: run with --quick first")
        stores["quick"] = TableStore(found)
    return stores


def run_quick_sweep(gpu: str, db: str, out: Path, budget: str) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "autotuner", "sweep", "--quick", "--gpu", gpu, "--db", db, "--budget", budget],
                   check=True, cwd=ROOT)
    wall = time.monotonic() - started
    (out.parent / f"{out.stem}_quick_wall.txt").write_text(f"autotuner sweep --quick --gpu {gpu}: {wall:.1f} s wall\n")
    print(f"quick sweep: {wall:.1f} s wall", flush=True)
    return wall


def pick(store: Any, m: int, n: int, dtype: str, gpu: str) -> tuple[str, dict[str, Any]]:
    import warnings

    if store is None:
        return "torch_softmax", {}
    with warnings.catch_warnings():  # the copied table answers another GPU on purpose
        warnings.simplefilter("ignore", RuntimeWarning)
        choice = store.select(m, n, dtype, gpu)
    return choice.variant, choice.config


def time_shape(timer: Any, m: int, n: int, dtype: str, choices: dict[str, tuple[str, dict]], rounds: int) -> dict[str, Any]:
    """Median over rounds of each distinct choice's time (or WRONG / ERR:...), and the fastest copy."""
    import torch

    from autotuner.tune.measure import copy_reference
    from bench.probes.pick_pairs import _launch, _timed
    from kernels.reference import random_input

    distinct = {json.dumps(c, sort_keys=True): c for c in choices.values()}
    launches: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for key, (variant, config) in distinct.items():
        try:
            launches[key] = _launch({"variant": variant, "config": config}, dtype, n)
        except Exception as exc:  # a build that fails is a result, not the end of the run
            failed[key] = f"ERR:{type(exc).__name__}"
    samples: dict[str, list[Any]] = {key: [] for key in [*distinct, "copy"]}
    for index in range(rounds):
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        order = list(samples)[index % len(samples):] + list(samples)[:index % len(samples)]
        for key in order:
            try:
                if key == "copy":
                    samples[key].append(copy_reference(timer, x, out).median_us)
                elif key in failed:
                    samples[key].append(failed[key])
                else:
                    samples[key].append(_timed(timer, x, dtype, launches[key]))
            except Exception as exc:
                samples[key].append(f"ERR:{type(exc).__name__}")
        del x, out
    result = {"copy_us": min(v for v in samples["copy"] if isinstance(v, float))}
    for label, choice in choices.items():
        values = samples[json.dumps(choice, sort_keys=True)]
        bad = [v for v in values if not isinstance(v, float)]
        result[f"{label}_pick"] = f"{choice[0]}[{','.join(f'{k}={v}' for k, v in choice[1].items())}]"
        result[f"{label}_us"] = bad[0] if bad else statistics.median(values)
    return result


def summarize(paths: list[Path]) -> dict[str, Any]:
    rows = [row for path in paths for row in csv.DictReader(path.open())]
    labels = [c[:-3] for c in rows[0] if c.endswith("_us") and c != "copy_us"] if rows else []
    summary: dict[str, Any] = {"shapes": len(rows)}
    for label in labels:
        ratios, of_copy = [], []
        for row in rows:
            try:
                ours, base, copy = float(row[f"{label}_us"]), float(row["measured_us"]), float(row["copy_us"])
            except (KeyError, ValueError):
                continue
            ratios.append(ours / base)
            of_copy.append(copy / ours)
        if ratios:
            summary[label] = {"vs_measured_geomean": round(math.exp(statistics.fmean(map(math.log, ratios))), 4),
                              "of_copy_geomean": round(math.exp(statistics.fmean(map(math.log, of_copy))), 4),
                              "worst_vs_measured": round(max(ratios), 3), "shapes": len(ratios)}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--shapes", type=int, default=200)
    parser.add_argument("--out")
    parser.add_argument("--labels", default=",".join(LABELS))
    parser.add_argument("--part", default="1/1", help="k/K: every K-th shape from the k-th")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--time-cap", type=float, default=0.1)
    parser.add_argument("--budget-s", type=float, default=540.0, help="stop timing after this (the CSV keeps what was done)")
    parser.add_argument("--quick", action="store_true", help="run `autotuner sweep --quick` first and add its picks")
    parser.add_argument("--quick-budget", default="5m")
    parser.add_argument("--db", help="database of the quick sweep (with --quick or the label quick)")
    parser.add_argument("--summarize", nargs="*", help="CSV files to merge and summarise (no timing)")
    args = parser.parse_args()
    if args.summarize is not None:
        print(json.dumps(summarize([Path(p) for p in args.summarize]), indent=1))
        return
    if not args.out:
        parser.error("--out is required when timing")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    labels = [label.strip() for label in args.labels.split(",") if label.strip()]
    if args.quick:
        if not args.db:
            parser.error("--quick needs --db (the database the quick sweep writes)")
        run_quick_sweep(args.gpu, args.db, out, args.quick_budget)
        labels = [*labels, "quick"] if "quick" not in labels else labels
    if "measured" not in labels:
        labels.insert(0, "measured")
    part, parts = (int(x) for x in args.part.split("/"))
    from autotuner.tune.timing import Timer

    stores = tables(args.gpu, labels, out, args.db)
    timer = Timer("cold", time_cap_s=args.time_cap)
    work = [(dtype, m, n) for m, n in random_shapes(args.shapes, args.seed) for dtype in DTYPES][part - 1::parts]
    started, rows = time.monotonic(), []
    for dtype, m, n in work:
        if time.monotonic() - started > args.budget_s:
            print(f"budget spent after {len(rows)} of {len(work)} shapes", flush=True)
            break
        choices = {label: pick(stores[label], m, n, dtype, args.gpu) for label in labels}
        rows.append({"dtype": dtype, "m": m, "n": n, **time_shape(timer, m, n, dtype, choices, args.rounds)})
        with open(out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    print(json.dumps(summarize([out]), indent=1))


if __name__ == "__main__":
    main()
