"""Issue 45, end to end on the CPU: genuine tables fitted from a shipped H100 recording, a forged run
uploaded through the real service with an h100-scoped token, then the routine ``autotuner fit --gpu h100
--dtype bf16`` an operator runs: ``/dispatch`` answers byte for byte as before (or the fit is refused
naming why). And the other side: a genuine second run from another uploader that corroborates a better
pick does move the answer, and the fit says on whose evidence; ``autotuner confirm`` (a replaying
measurer standing in for the GPU) confirms a change one uploader alone proposed."""
from __future__ import annotations

import copy
import gzip
import hashlib
import json
import math
import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.records.exchange import import_runs
from autotuner.tune.measure import bytes_moved
from bench.probes.forged_refit import copy_database, forgery
from db import queries
from db.engine import make_engine, transaction
from db.models import Measurement, SweepRun
from service.app import create_app
from service.config import Settings

RECORDING = Path(__file__).resolve().parents[1] / "data" / "h100_sweep.json.gz"
TOKENS = {"lab-h100": "lab-h100-token-0123456789abcdef", "lab-b": "lab-b-token-0123456789abcdef"}
NEW_PICK = "triton_one_row"  # wins 47 of the classic grid's 141 bf16 shapes
BASE_RUN = 21  # the recording's run that measured it beside every other variant at its shapes


def runs() -> list[dict]:
    with gzip.open(RECORDING, "rt") as handle:
        return json.load(handle)["runs"]


def fit(database: Path, *extra: str):  # noqa: ANN201 - a click Result
    return CliRunner().invoke(app, ["fit", "--gpu", "h100", "--dtype", "bf16", "--db", str(database), *extra])


def imported(database: Path, document: dict) -> Path:
    engine = make_engine(str(database))
    with transaction(engine) as session:
        import_runs(session, document)
    engine.dispose()
    return database


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> Path:
    """The recording imported on this database's host and its bf16 table fitted: what answers today
    (``--replace-worse``: it covers less than the shipped table, which was fitted from seven recordings)."""
    database = imported(tmp_path_factory.mktemp("genuine") / "tuning.sqlite", {"format_version": 1, "runs": runs()})
    result = fit(database, "--replace-worse")
    assert result.exit_code == 0, result.output
    return database


@pytest.fixture(scope="module")
def without_new_pick(tmp_path_factory) -> Path:
    """The same, less every row of ``NEW_PICK``: the table before anyone measured it."""
    recorded = runs()
    for run in recorded:
        keep = {i for i, c in enumerate(run["candidates"]) if c["variant"] != NEW_PICK}
        run["measurements"] = [row for row in run["measurements"] if row["candidate"] in keep]
    database = imported(tmp_path_factory.mktemp("before") / "tuning.sqlite", {"format_version": 1, "runs": recorded})
    assert fit(database, "--replace-worse").exit_code == 0
    return database


def server(database: Path) -> TestClient:
    grants = json.dumps({name: {"token": token, "gpus": ["h100"]} for name, token in TOKENS.items()})
    return TestClient(create_app(Settings(database_url=f"sqlite:///{database}", upload_tokens=grants, reload_interval_s=0)))


def probes(database: Path) -> list[tuple[int, int]]:
    """Every shape the table measured and 150 it never saw, drawn log-uniform."""
    with Session(make_engine(str(database))) as session:
        points = {(p["m"], p["n"]) for p in queries.current_tables(session, "h100")[0].payload["points"]}
    rng = random.Random(45)
    drawn = {(int(math.exp(rng.uniform(0, math.log(70000)))), int(math.exp(rng.uniform(math.log(16), math.log(300000)))))
             for _ in range(150)}
    return sorted(points | drawn)


def answers(client: TestClient, shapes: list[tuple[int, int]]) -> list[str]:
    return [client.get("/dispatch", params={"m": m, "n": n, "dtype": "bf16", "gpu": "h100"}).text for m, n in shapes]


def upload(client: TestClient, document: dict, uploader: str):  # noqa: ANN201 - a Response
    return client.post("/runs", json=document, headers={"Authorization": f"Bearer {TOKENS[uploader]}"})


def flat(text: str) -> str:
    return " ".join(text.split())


def forged_then_fitted(genuine: Path, tmp_path: Path, document: dict):  # noqa: ANN201 - the fit's Result
    """Upload ``document`` as lab-h100 to a copy of the genuine database, run the routine fit, and hold
    ``/dispatch`` on every probe to its answers before, byte for byte."""
    database = tmp_path / "tuning.sqlite"
    copy_database(genuine, database)
    shapes = probes(database)
    with server(database) as client:
        before = answers(client, shapes)
        assert upload(client, document, "lab-h100").status_code == 201
        result = fit(database)
        assert answers(client, shapes) == before
    return result


@pytest.mark.parametrize("attack", ["relabel", "new-env"])
def test_a_forged_run_and_a_routine_fit_leave_every_answer_as_it_was(genuine, tmp_path, attack):
    """The issue's attack: a recorded run sent again as a new run (``new-env``: every recorded run, under a
    new environment fingerprint), ``cuda_split_row`` block 256 claimed twice as fast on every bf16 shape
    where that stays within 0.90 of the DRAM peak. Before this change the refit moved 76 of 341 answers
    (``new-env``: 227), 1.63x (1.50x) slower by the recording."""
    document, edited = forgery([RECORDING], attack)
    assert edited >= 50
    result = forged_then_fitted(genuine, tmp_path, document)
    text = flat(result.output)
    assert result.exit_code == 0, result.output
    assert "conflict(s) between sources beyond the measured repeatability" in text
    assert "cuda_split_row[block=256," in text and "set aside" in text and "(uploader lab-h100, run " in text
    assert "no answer changed at the 141 measured shapes" in text


def test_a_forged_run_at_shapes_nobody_else_measured_is_refused_naming_its_one_source(genuine, tmp_path):
    """Claims no other source can contradict (shapes the genuine runs never held) move no answer either:
    the fit is refused, naming the uploader whose run alone would move them, and nothing changes."""
    document, _ = forgery([RECORDING], "relabel")
    for row in document["runs"][0]["measurements"]:
        row.update(n=row["n"] + 8, gbps=None)
    for reference in document["runs"][0]["copy_references"]:
        reference.update(n=reference["n"] + 8, gbps=None)
    result = forged_then_fitted(genuine, tmp_path, document)
    text = flat(result.output)
    assert result.exit_code == 1, result.output
    assert "answer(s) would move on one source's evidence" in text
    assert "cuda_split_row[block=256,split=auto] (proposed by uploader lab-h100 (runs 24), never timed beside" in text
    assert "autotuner confirm" in text


def remeasured(run: dict, host: str, seed: int, days: int) -> dict:
    """The run as another host measuring the same kernels would record it: a new start, every time a
    little (up to 3 %) slower, never the same to the bit (nor as another seed's)."""
    run = copy.deepcopy(run)
    started = datetime.fromisoformat(run["started_at"].replace("Z", "+00:00")) + timedelta(days=days)
    run.update(started_at=started.isoformat(), finished_at=None, host=host)
    for index, row in enumerate(run["measurements"]):
        if row["median_us"]:
            digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
            factor = 1.0 + 0.004 * seed + digest[0] / 256 * 0.02
            row.update(median_us=row["median_us"] * factor, p20_us=row["p20_us"] * factor,
                       p80_us=row["p80_us"] * factor,
                       gbps=bytes_moved(row["m"], row["n"], row["dtype"]) / (row["median_us"] * factor) / 1e3)
    return {"format_version": 1, "runs": [run]}


def moved_to_new_pick(before: list[str], after: list[str]) -> int:
    return sum(json.loads(b)["variant"] == NEW_PICK and a != b for a, b in zip(before, after))


def test_a_better_pick_moves_once_a_second_uploader_corroborates_it(without_new_pick, tmp_path):
    database = tmp_path / "tuning.sqlite"
    copy_database(without_new_pick, database)
    shapes = probes(database)
    recorded = runs()[BASE_RUN]
    with server(database) as client:
        before = answers(client, shapes)
        assert upload(client, remeasured(recorded, "lab-a-gpu", 1, 40), "lab-h100").status_code == 201
        alone = fit(database)
        assert alone.exit_code == 1 and "by uploader lab-h100 (runs 24) alone" in flat(alone.output), alone.output
        assert answers(client, shapes) == before
        assert upload(client, remeasured(recorded, "lab-b-gpu", 2, 41), "lab-b").status_code == 201
        corroborated = fit(database)
        after = answers(client, shapes)
    text = flat(corroborated.output)
    assert corroborated.exit_code == 0, corroborated.output
    assert moved_to_new_pick(before, after) >= 5
    assert "answer(s) changed at measured shapes" in text
    assert "on the evidence of" in text and "uploader lab-b (runs 25)" in text and "uploader lab-h100 (runs 24)" in text


def test_confirm_lets_a_change_one_uploader_proposed_move(without_new_pick, tmp_path, monkeypatch):
    """``autotuner confirm`` re-times the changed answers here (the recording replayed by a fake GPU
    worker) and stores them as a run of its own; the next fit moves the answers on that evidence."""
    database = tmp_path / "tuning.sqlite"
    copy_database(without_new_pick, database)
    with server(database) as client:
        assert upload(client, remeasured(runs()[BASE_RUN], "lab-a-gpu", 1, 40), "lab-h100").status_code == 201
    assert fit(database).exit_code == 1
    monkeypatch.setenv("AUTOTUNER_FAKE_GPU", "h100")
    confirmed = CliRunner().invoke(app, ["confirm", "--gpu", "h100", "--dtype", "bf16", "--db", str(database),
                                         "--measurer", "tests.autotuner.fakes:RecordingMeasurer"])
    text = flat(confirmed.output)
    assert confirmed.exit_code == 0, confirmed.output
    assert "confirmation run 25" in text and "confirmed" in text
    engine = make_engine(str(database))
    with Session(engine) as session:
        run = session.get(SweepRun, 25)
        rows = session.scalars(select(Measurement).where(Measurement.run_id == 25)).all()
    engine.dispose()
    assert run.grid["purpose"] == "confirm" and run.uploader is None and run.status == "finished"
    assert rows and all(row.status == "ok" for row in rows)
    refit = fit(database)
    assert refit.exit_code == 0, refit.output
    assert "confirmation run 25" in flat(refit.output)


def test_stored_rows_of_no_rows_are_skipped_and_reported_never_a_crash(genuine, tmp_path):
    """Issue 45: ``m = 0`` rows made the next fit fail with a TypeError in the guard until someone deleted
    them by hand. Rows of M or N 0 (a database written before uploads refused them) are skipped, named."""
    database = tmp_path / "tuning.sqlite"
    copy_database(genuine, database)
    engine = make_engine(str(database))
    with transaction(engine) as session:
        stored = session.scalars(select(Measurement).where(Measurement.dtype == "bf16", Measurement.status == "ok")
                                 .order_by(Measurement.id).limit(3)).all()
        run = session.get(SweepRun, stored[0].run_id)
        extra = queries.create_run(session, run.gpu_model, run.environment, "cold", host=run.host)
        for row, (m, n) in zip(stored, [(0, 1024), (0, 4096), (64, 0)]):
            queries.record_measurement(session, extra.id, row.candidate_id, m, n, "bf16", status="ok", median_us=4.0,
                                       p20_us=3.9, p80_us=4.1, repetitions=20)
    engine.dispose()
    result = fit(database)
    text = flat(result.output)
    assert result.exit_code == 0, result.output
    assert "3 degenerate row(s) skipped (M or N below 1, or no usable time) in runs 24" in text
    assert "Traceback" not in result.output and "no answer changed" in text
