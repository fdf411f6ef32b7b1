"""Diagnostic (CPU): issue 45's forgery plus a routine refit, end to end, and how many answers it moves.

Imports the H100 recordings (``--recordings classic``: the classic grid only; ``all``: the seven the
shipped tables are fitted from) into a fresh SQLite database, fits the bf16 table (``autotuner fit
--replace-worse``: the genuine table answering today), serves it, probes ``/dispatch`` on every
measured bf16 shape and ``--random`` shapes drawn log-uniform (seeded), then for each ``--attack``:

- ``relabel``: the genuine recorded run with the most ``cuda_split_row`` block-256 bf16 rows, sent again
  as a new run (a new ``started_at``) through ``POST /runs`` with an h100-scoped token, those rows
  claimed 2x faster wherever that stays at most ``PEAK_SHARE`` of the DRAM peak;
- ``new-env``: every recorded run sent again so (new ``started_at``), under a new environment fingerprint,
  with the same edit;
- ``near-ties``: points at new shapes between the table's N (the geometric mean of neighbours more than
  1.2x apart, at every M it measured), each claiming the genuine table's pick there fastest, at the time
  the table predicts, and every other candidate ``NEAR_TIE`` behind it: no answer moves where they are;

then ``autotuner fit --gpu h100 --dtype bf16`` as an operator runs it, and ``/dispatch`` again. Prints per
attack the upload's status, the fit's exit code and last lines, the answers that changed, and the changed
answers' time by the genuine recordings (new pick / old pick where any H100 recording measured both:
geomean, max). The probes: every bf16 shape of the table and of the H100 recordings, and ``--random``
shapes drawn log-uniform (seeded).

    python -m bench.probes.forged_refit [--recordings classic|all] [--attack relabel --attack new-env
        --attack near-ties] [--random 200] [--seed 45] [--out result.json]
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import math
import random
import shutil
import tempfile
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "forged-refit-probe-token-0123456789"
PEAK_SHARE = 0.90
FORGED_VARIANT, FORGED_BLOCK = "cuda_split_row", 256
NEAR_TIE = 1.001
ATTACKS = ("relabel", "new-env", "near-ties")


def recordings(which: str) -> list[Path]:
    from autotuner.fit.samples import recording_paths

    return [ROOT / "tests/data/h100_sweep.json.gz"] if which == "classic" else recording_paths(ROOT, ["h100"])


def forged_rows(run: dict) -> list[dict]:
    """The run's ok bf16 rows of the forged config that a 2x faster claim leaves within the peak share
    (of its GPU model's DRAM peak)."""
    from autotuner.lookup.gpu_models import GPU_MODELS
    from autotuner.tune.measure import bytes_moved

    peak = GPU_MODELS[run["gpu"]["key"]].bandwidth_gbps
    rows = []
    for row in run["measurements"]:
        candidate = run["candidates"][row["candidate"]]
        if (candidate["variant"] == FORGED_VARIANT and candidate["config"].get("block") == FORGED_BLOCK
                and row["dtype"] == "bf16" and row["status"] == "ok"
                and bytes_moved(row["m"], row["n"], "bf16") / (row["median_us"] / 2) / 1e3 <= PEAK_SHARE * peak):
            rows.append(row)
    return rows


def forgery(paths: list[Path], attack: str, table: dict | None = None) -> tuple[dict, int]:
    """The forged document and the number of rows it edits (or, ``near-ties``, makes up from ``table``, the
    genuine table's document): ``relabel``, the recorded run with the most rows to edit, as a new run;
    ``new-env``, every recorded run so, under a new environment fingerprint."""
    runs = [run for path in paths for run in json.load(gzip.open(path, "rt"))["runs"]]
    if attack == "near-ties":
        return near_ties(runs, table)
    if attack == "relabel":
        runs = [copy.deepcopy(max(runs, key=lambda run: len(forged_rows(run))))]
    edited = 0
    for run in runs:
        shift(run, 30)
        if attack == "new-env":
            run["environment"]["fingerprint"] = ("f0" + run["environment"]["fingerprint"])[:64]
        for row in forged_rows(run):
            row.update(median_us=row["median_us"] / 2, p20_us=row["p20_us"] / 2, p80_us=row["p80_us"] / 2,
                       gbps=row["gbps"] * 2 if row.get("gbps") else None)
            edited += 1
    return {"format_version": 1, "runs": runs}, edited


def shift(run: dict, days: int) -> dict:
    """``run`` made a new run in place: its start ``days`` later, no end."""
    started = datetime.fromisoformat(run["started_at"].replace("Z", "+00:00")) + timedelta(days=days)
    run["started_at"] = started.astimezone(timezone.utc).isoformat()
    run["finished_at"] = None
    return run


def near_ties(runs: list[dict], table: dict) -> tuple[dict, int]:
    """The ``near-ties`` document (module docstring) and its number of rows."""
    from autotuner.lookup.table import DispatchTable

    indexed = DispatchTable(table)
    known = {(c["variant"], c["config_key"]): c for run in runs for c in run["candidates"]}
    names = [(c["variant"], c["config_key"]) for c in indexed.candidates]
    grid = sorted({p["n"] for p in table["points"]})
    rows = []
    for m in sorted({p["m"] for p in table["points"]}):
        for n in (int(math.sqrt(a * b)) for a, b in zip(grid, grid[1:]) if b / a > 1.2):
            pick, predicted, *_ = indexed.answer(m, n)
            if pick is not None and predicted:
                for index in range(len(names)):
                    time = predicted * (1 if index == pick else NEAR_TIE)
                    rows.append({"candidate": index, "m": m, "n": n, "dtype": "bf16", "status": "ok", "median_us": time,
                                 "p20_us": time * 0.99, "p80_us": time * 1.01, "repetitions": 20})
    run = shift(copy.deepcopy(max(runs, key=lambda run: len(run["candidates"]))), 90)
    run.update(candidates=[known[name] for name in names], measurements=rows, copy_references=[])
    return {"format_version": 1, "runs": [run]}, len(rows)


def genuine_times(paths: list[Path]) -> dict[tuple, float]:
    """(variant, config_key, m, n) -> the newest recorded bf16 time: what the answers are priced by."""
    times = {}
    for path in paths:
        for run in json.load(gzip.open(path, "rt"))["runs"]:
            for row in run["measurements"]:
                if row["dtype"] == "bf16" and row["status"] == "ok":
                    candidate = run["candidates"][row["candidate"]]
                    times[(candidate["variant"], candidate["config_key"], row["m"], row["n"])] = row["median_us"]
    return times


def probe_shapes(database: Path, times: dict[tuple, float], count: int, seed: int) -> list[tuple[int, int]]:
    from db.location import tables_folder

    table = json.loads((tables_folder(database) / "h100_bf16_cold.json").read_text())
    rng = random.Random(seed)
    drawn = {(max(1, int(math.exp(rng.uniform(0, math.log(65536))))), max(2, int(math.exp(rng.uniform(math.log(32), math.log(262144))))))
             for _ in range(count)}
    return sorted({(p["m"], p["n"]) for p in table["points"]} | {(m, n) for _, _, m, n in times} | drawn)


def answers(client, shapes: list[tuple[int, int]]) -> list[str]:  # noqa: ANN001 - a TestClient
    return [client.get("/dispatch", params={"m": m, "n": n, "dtype": "bf16", "gpu": "h100"}).text for m, n in shapes]


def copy_database(source: Path, target: Path) -> None:
    """A consistent copy of an SQLite file in WAL mode (what its -wal file holds included)."""
    import sqlite3

    with closing(sqlite3.connect(source)) as connection:
        connection.execute("VACUUM INTO ?", (str(target),))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", choices=("classic", "all"), default="classic")
    parser.add_argument("--attack", action="append", choices=ATTACKS)
    parser.add_argument("--random", type=int, default=200)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    from fastapi.testclient import TestClient
    from sqlalchemy.orm import Session
    from typer.testing import CliRunner

    from autotuner.cli import app
    from autotuner.records.exchange import import_runs
    from db.engine import make_engine
    from db.location import tables_folder
    from service.app import create_app
    from service.config import Settings

    paths = recordings(args.recordings)
    work = Path(tempfile.mkdtemp(prefix="forged-refit-"))
    genuine_db = work / "genuine.sqlite"
    engine = make_engine(str(genuine_db))
    for path in paths:
        with Session(engine) as session, session.begin():
            import_runs(session, gzip.open(path, "rb").read())
    engine.dispose()
    fitted = CliRunner().invoke(app, ["fit", "--gpu", "h100", "--dtype", "bf16", "--db", str(genuine_db), "--replace-worse"])
    assert fitted.exit_code == 0, fitted.output
    times = genuine_times(recordings("all"))  # the answers are priced by every H100 recording
    shapes = probe_shapes(genuine_db, times, args.random, args.seed)
    table = json.loads((tables_folder(genuine_db) / "h100_bf16_cold.json").read_text())
    results = {"recordings": [str(p.relative_to(ROOT)) for p in paths], "probed": len(shapes), "attacks": {}}
    for attack in args.attack or ATTACKS:
        database = work / f"{attack}.sqlite"
        copy_database(genuine_db, database)
        settings = Settings(database_url=f"sqlite:///{database}", upload_tokens=f"h100:{TOKEN}", reload_interval_s=0)
        document, edited = forgery(paths, attack, table)
        with TestClient(create_app(settings)) as client:
            before = answers(client, shapes)
            upload = client.post("/runs", json=document, headers={"Authorization": f"Bearer {TOKEN}"})
            refit = CliRunner().invoke(app, ["fit", "--gpu", "h100", "--dtype", "bf16", "--db", str(database)])
            after = answers(client, shapes)
        changed = [(shape, json.loads(a), json.loads(b)) for shape, a, b in zip(shapes, before, after) if a != b]
        ratios = []
        for (m, n), old, new in changed:
            old_us, new_us = (times.get((x["variant"], x["config_key"], m, n)) for x in (old, new))
            if old_us and new_us:
                ratios.append(new_us / old_us)
        result = {"edited_rows": edited, "upload_status": upload.status_code, "fit_exit": refit.exit_code,
                  "fit_output": [line for line in refit.output.splitlines() if line.strip() and line[0] not in "┏┃┡│└"], "changed": len(changed),
                  "priced": len(ratios),
                  "geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4) if ratios else None,
                  "max": round(max(ratios), 4) if ratios else None}
        results["attacks"][attack] = result
        forged_shapes = len({(row["m"], row["n"]) for run in document["runs"] for row in run["measurements"]})
        priced = (f"at the {len(ratios)} of them a recording measured, {result['geomean']}x the old time (max "
                  f"{result['max']})") if ratios else "none of them priced"
        print(f"{attack}: {edited} rows forged ({forged_shapes} shapes), upload {upload.status_code}, fit exit "
              f"{refit.exit_code}; {len(changed)} of {len(shapes)} /dispatch answers changed, {priced}")
        for line in result["fit_output"]:
            print("   ", line)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
