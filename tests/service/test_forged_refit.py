"""Issue 45, end to end on the CPU: genuine tables fitted from a shipped H100 recording, forged runs
uploaded through the real service with h100-scoped tokens, then the routine ``autotuner fit --gpu h100
--dtype bf16`` an operator runs: ``/dispatch`` answers byte for byte as before (or the fit is refused
naming why), and the tables' files beside the database (``db/mirror.py``) hold what the database holds.
And the other side: a genuine second run from another uploader that corroborates a better pick does move
the answer, and the fit says on whose evidence; ``autotuner confirm`` (a replaying measurer standing in
for the GPU) confirms a change one uploader alone proposed. A GPU model without a table of its own is
held to the same rules against what answers it today (another model's table)."""
from __future__ import annotations

import copy
import gzip
import hashlib
import json
import math
import random
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.lookup.table import DispatchTable
from autotuner.tune.measure import bytes_moved
from bench.probes.forged_refit import copy_database, forged_rows, forgery, shift
from db import queries
from db.engine import make_engine, transaction
from db.location import tables_folder
from db.models import CandidateRow, Measurement, SweepRun
from service.app import create_app
from service.config import Settings
from tests.conftest import copy_database as copy_template

RECORDING = Path(__file__).resolve().parents[1] / "data" / "h100_sweep.json.gz"
TOKENS = {"lab-h100": "lab-h100-token-0123456789abcdef", "lab-b": "lab-b-token-0123456789abcdef"}
# Two tokens of one uploader name (the GPU:TOKEN form names an uploader by its GPUs): one source.
SAME_NAME = ("h100-token-one-0123456789abcdef", "h100-token-two-0123456789abcdef")
NEW_PICK = "triton_one_row"  # wins 47 of the classic grid's 141 bf16 shapes
BASE_RUN = 21  # the recording's run that measured it beside every other variant at its shapes
DRAWN = 60  # probes drawn beside every measured shape


def runs() -> list[dict]:
    with gzip.open(RECORDING, "rt") as handle:
        return json.load(handle)["runs"]


def fit(database: Path, *extra: str, gpu: str = "h100"):  # noqa: ANN201 - a click Result
    return CliRunner().invoke(app, ["fit", "--gpu", gpu, "--dtype", "bf16", "--db", str(database), *extra])


@pytest.fixture(scope="module")
def genuine(tmp_path_factory, recording_template) -> Path:
    """The recording imported on this database's host and its bf16 table fitted: what answers today
    (``--replace-worse``: it covers less than the shipped table, which was fitted from seven recordings)."""
    database = copy_template(recording_template("h100_sweep"), tmp_path_factory.mktemp("genuine") / "tuning.sqlite")
    result = fit(database, "--replace-worse")
    assert result.exit_code == 0, result.output
    return database


@pytest.fixture(scope="module")
def without_new_pick(tmp_path_factory, recording_template) -> Path:
    """The same, less every row of ``NEW_PICK``: the table before anyone measured it."""
    database = copy_template(recording_template("h100_sweep"), tmp_path_factory.mktemp("before") / "tuning.sqlite")
    engine = make_engine(str(database))
    with transaction(engine) as session:
        session.execute(delete(Measurement).where(
            Measurement.candidate_id.in_(select(CandidateRow.id).where(CandidateRow.variant == NEW_PICK))))
    engine.dispose()
    assert fit(database, "--replace-worse").exit_code == 0
    return database


def server(database: Path, tokens: str | None = None, gpus: tuple[str, ...] = ("h100",)) -> TestClient:
    grants = tokens or json.dumps({name: {"token": token, "gpus": list(gpus)} for name, token in TOKENS.items()})
    return TestClient(create_app(Settings(database_url=f"sqlite:///{database}", upload_tokens=grants, reload_interval_s=0)))


def probes(database: Path, gpu: str = "h100") -> list[tuple[int, int]]:
    """Every shape the GPU's table measured (h100's where it has none) and ``DRAWN`` it never saw, drawn
    log-uniform."""
    with Session(make_engine(str(database))) as session:
        tables = queries.current_tables(session, gpu) or queries.current_tables(session, "h100")
        points = {(p["m"], p["n"]) for p in tables[0].payload["points"]}
    rng = random.Random(45)
    drawn = {(int(math.exp(rng.uniform(0, math.log(70000)))), int(math.exp(rng.uniform(math.log(16), math.log(300000)))))
             for _ in range(DRAWN)}
    return sorted(points | drawn)


def answers(client: TestClient, shapes: list[tuple[int, int]], gpu: str = "h100") -> list[str]:
    return [client.get("/dispatch", params={"m": m, "n": n, "dtype": "bf16", "gpu": gpu}).text for m, n in shapes]


def upload(client: TestClient, document: dict, uploader: str | None = None, token: str | None = None):  # noqa: ANN201
    return client.post("/runs", json=document, headers={"Authorization": f"Bearer {token or TOKENS[uploader]}"})


def flat(text: str) -> str:
    return " ".join(text.split())


def mirrored(database: Path, gpu: str = "h100") -> dict | None:
    """The bf16 table file beside the database (``db/mirror.py``), None where there is none."""
    path = tables_folder(database) / f"{gpu}_bf16_cold.json"
    return json.loads(path.read_text()) if path.is_file() else None


def current_payload(database: Path, gpu: str = "h100") -> dict | None:
    engine = make_engine(str(database))
    with Session(engine) as session:
        tables = [t.payload for t in queries.current_tables(session, gpu) if t.dtype == "bf16"]
    engine.dispose()
    return tables[0] if tables else None


def fault_claims(database: Path) -> dict:
    """A run claiming that each of today's picks faulted at every shape it answers (issue 45: one
    ``wrong`` row banned a candidate from every later fit)."""
    table = DispatchTable(current_payload(database))
    recorded = runs()[BASE_RUN]
    picks = {(p["m"], p["n"]): table.candidates[table.answer(p["m"], p["n"])[0]] for p in table.document["points"]}
    candidates = [c for c in recorded["candidates"]
                  if any((c["variant"], c["config_key"]) == (p["variant"], p["config_key"]) for p in picks.values())]
    index = {(c["variant"], c["config_key"]): i for i, c in enumerate(candidates)}
    rows = [{"candidate": index[(pick["variant"], pick["config_key"])], "m": m, "n": n, "dtype": "bf16", "status": "fault"}
            for (m, n), pick in sorted(picks.items()) if (pick["variant"], pick["config_key"]) in index]
    assert len(rows) > 50
    run = shift(copy.deepcopy(recorded), 60)
    run.update(candidates=candidates, measurements=rows, copy_references=[])
    return {"format_version": 1, "runs": [run]}


def test_every_forgery_at_once_leaves_every_answer_and_the_tables_file_as_they_were(genuine, tmp_path):
    """The issue's attack and more, each sent with one of two tokens of the same uploader name ("h100"):
    a recorded run re-labelled (its host this database's own, ``vm``, and claiming to be an ``autotuner
    confirm`` run), every recorded run under a new environment, ``cuda_split_row`` block 256 claimed twice
    as fast wherever that stays within 0.90 of the DRAM peak; the same claim under a source hash the
    kernel no longer has; a fault of today's pick at every shape; today's picks claimed a hair ahead of
    every other candidate at new shapes between the measured ones (no answer moves there, so the guard
    had nothing to refuse; fitted, they moved answers around them: bench/README.md, ``forged_refit``);
    and stored rows of M or N 0 (written before
    uploads refused them: the guard crashed on them). Before this change the first two moved 76
    of 341 answers (``new-env``: 227), 1.63x (1.50x) slower by the recording."""
    database = tmp_path / "tuning.sqlite"
    copy_database(genuine, database)
    shapes = probes(database)
    relabelled, edited = forgery([RECORDING], "relabel")
    assert edited >= 50
    relabelled["runs"][0]["grid"] = {"purpose": "confirm", "items": edited}
    assert relabelled["runs"][0]["host"] == "vm"
    every_run, _ = forgery([RECORDING], "new-env")
    stale, _ = forgery([RECORDING], "relabel")
    shift(stale["runs"][0], 1)
    for candidate in stale["runs"][0]["candidates"]:
        candidate["source_hash"] = "0123456789abcdef"  # the split-row kernel's code as it never was here
    tokens = ",".join(f"h100:{token}" for token in SAME_NAME)
    with server(database, tokens) as client:
        before = answers(client, shapes)
        ties, _ = forgery([RECORDING], "near-ties", current_payload(database))
        sent = (relabelled, every_run, fault_claims(database), ties, stale)
        for token, document in zip((0, 1, 1, 0, 0), sent):
            response = upload(client, document, token=SAME_NAME[token])
            assert response.status_code == 201, response.text
        stale_run = response.json()["run_ids"][0]
        engine = make_engine(str(database))
        with transaction(engine) as session:
            stored = session.scalars(select(Measurement).where(Measurement.dtype == "bf16", Measurement.status == "ok")
                                     .order_by(Measurement.id).limit(3)).all()
            run = session.get(SweepRun, stored[0].run_id)
            extra = queries.create_run(session, run.gpu_model, run.environment, "cold", host=run.host)
            for row, (m, n) in zip(stored, [(0, 1024), (0, 4096), (64, 0)]):
                queries.record_measurement(session, extra.id, row.candidate_id, m, n, "bf16", status="ok",
                                           median_us=4.0, p20_us=3.9, p80_us=4.1, repetitions=20)
        engine.dispose()
        result = fit(database)
        assert answers(client, shapes) == before
    text = flat(result.output)
    assert result.exit_code == 0, result.output
    assert "no answer changed at the 141 measured shapes" in text and "Traceback" not in result.output
    assert "conflict(s) between sources beyond the measured repeatability" in text
    assert "cuda_split_row[block=256," in text and "set aside" in text and "(uploader h100, run " in text
    assert "failure(s) reported by one source only, so no ban" in text and "fault at" in text
    assert "3 degenerate row(s) skipped (M or N below 1, or no usable time)" in text
    assert "reading(s) of uploader h100 (runs" in text and "that no other source corroborates, not fitted" in text
    stored_table = current_payload(database)
    assert mirrored(database) == stored_table  # the stored table's file, written at the commit
    sources = stored_table["evidence"]["sources"]
    assert set(sources) == {"host vm", "uploader h100"}  # no confirmation, the hosts it named its own claims
    assert str(stale_run) not in sources["uploader h100"]  # code the kernel no longer has is no evidence


def test_a_forged_run_at_shapes_nobody_else_measured_is_not_fitted(genuine, tmp_path):
    """Claims no other source can contradict (shapes the genuine runs never held) move no answer either,
    at those shapes or between them: nobody corroborates them, so the fit leaves them out and names the
    uploader; the stored table answers as before and its file beside the database is the database's."""
    document, _ = forgery([RECORDING], "relabel")
    for row in document["runs"][0]["measurements"]:
        row.update(n=row["n"] + 8, gbps=None)
    for reference in document["runs"][0]["copy_references"]:
        reference.update(n=reference["n"] + 8, gbps=None)
    database = tmp_path / "tuning.sqlite"
    copy_database(genuine, database)
    shapes = probes(database)
    with server(database) as client:
        before = answers(client, shapes)
        assert upload(client, document, "lab-h100").status_code == 201
        result = fit(database)
        assert answers(client, shapes) == before
    text = flat(result.output)
    assert result.exit_code == 0, result.output
    assert "reading(s) of uploader lab-h100 (runs 24) that no other source corroborates, not fitted" in text
    assert "no answer changed at the 141 measured shapes" in text
    assert mirrored(database) == current_payload(database)


def remeasured(run: dict, host: str, seed: int, days: int) -> dict:
    """The run as another host measuring the same kernels would record it: a new start, every time a
    little (up to 3 %) slower, never the same to the bit (nor as another seed's)."""
    run = shift(copy.deepcopy(run), days)
    run["host"] = host
    for index, row in enumerate(run["measurements"]):
        if row["median_us"]:
            digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
            factor = 1.0 + 0.004 * seed + digest[0] / 256 * 0.02
            row.update(median_us=row["median_us"] * factor, p20_us=row["p20_us"] * factor,
                       p80_us=row["p80_us"] * factor,
                       gbps=bytes_moved(row["m"], row["n"], row["dtype"]) / (row["median_us"] * factor) / 1e3)
    return {"format_version": 1, "runs": [run]}


def moved_to_new_pick(before: list[str], after: list[str]) -> int:
    return sum(json.loads(a)["variant"] != NEW_PICK and json.loads(b)["variant"] == NEW_PICK for a, b in zip(before, after))


def test_a_better_pick_moves_once_a_second_uploader_corroborates_it(without_new_pick, tmp_path):
    database = tmp_path / "tuning.sqlite"
    copy_database(without_new_pick, database)
    shapes = probes(database)
    recorded = runs()[BASE_RUN]
    with server(database) as client:
        before = answers(client, shapes)
        assert upload(client, remeasured(recorded, "lab-a-gpu", 1, 40), "lab-h100").status_code == 201
        alone = fit(database)  # its rows of the new pick: nobody else's
        assert alone.exit_code == 0, alone.output
        assert "reading(s) of uploader lab-h100 (runs 24) that no other source corroborates" in flat(alone.output)
        assert moved_to_new_pick(before, answers(client, shapes)) == 0  # (its other rows agree with this host's)
        assert upload(client, remeasured(recorded, "lab-b-gpu", 2, 41), "lab-b").status_code == 201
        corroborated = fit(database)
        after = answers(client, shapes)
    text = flat(corroborated.output)
    assert corroborated.exit_code == 0, corroborated.output
    assert moved_to_new_pick(before, after) >= 5
    assert "answer(s) changed at measured shapes" in text
    assert "on the evidence of" in text and "uploader lab-b (runs 25)" in text and "uploader lab-h100 (runs 24)" in text
    assert mirrored(database) == current_payload(database)


def test_confirm_lets_a_change_one_uploader_proposed_move(without_new_pick, tmp_path, monkeypatch):
    """``autotuner confirm`` re-times the answers one uploader's run alone would change (the recording
    replayed by a fake GPU worker) and stores them as a run of its own; the next fit moves the answers on
    that evidence (the one uploader's run alone moves none: the test above)."""
    database = tmp_path / "tuning.sqlite"
    copy_database(without_new_pick, database)
    with server(database) as client:
        assert upload(client, remeasured(runs()[BASE_RUN], "lab-a-gpu", 1, 40), "lab-h100").status_code == 201
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


PCIE = {"key": "h100-pcie", "name": "NVIDIA H100 PCIe", "sm_count": 114, "l2_bytes": 52428800,
        "memory_bytes": 85017493504, "compute_capability": "9.0"}


def pcie_run(forged: bool, host: str, seed: int) -> dict:
    """The recording's widest bf16 run as an H100 PCIe would time it (every time 3350/2000 slower: its
    DRAM peak), a little apart per ``seed``; ``forged``: ``cuda_split_row`` block 256 claimed twice as
    fast wherever that stays within 0.90 of the PCIe's peak."""
    run = copy.deepcopy(runs()[BASE_RUN])
    run["measurements"] = [row for row in run["measurements"] if row["dtype"] == "bf16"]
    run["copy_references"] = [row for row in run["copy_references"] if row["dtype"] == "bf16"]
    for rows in (run["measurements"], run["copy_references"]):
        for row in rows:
            if row.get("median_us"):
                factor = 3350 / 2000 * (1 + 0.004 * seed)
                row.update({k: row[k] * factor for k in ("median_us", "p20_us", "p80_us") if row.get(k)}, gbps=None)
    run.update(gpu=PCIE, environment={**run["environment"], "fingerprint": f"pcie-{seed}"})
    document = remeasured(run, host, seed, 50 + seed)
    if forged:
        for row in forged_rows(document["runs"][0]):
            row.update(median_us=row["median_us"] / 2, p20_us=row["p20_us"] / 2, p80_us=row["p80_us"] / 2, gbps=None)
    return document


def test_a_gpu_model_without_a_table_gets_none_from_one_uploader(tmp_path):
    """The H100 PCIe has no table of its own: ``/dispatch`` answers none, the embedded lookup the H100's.
    One uploader's forged runs do not give it one through a routine fit (nobody corroborates them), and
    once a second uploader's genuine run disagrees, the forged claims are still not fitted (one uploader
    each side) and the genuine rest moves no answer that nobody timed beside the H100 table's."""
    database = tmp_path / "tuning.sqlite"
    shapes = [(m, n) for m in (2, 8) for n in (1024, 4096, 32000, 131072, 262144)] + [(3, 5000), (7, 100000)]
    with server(database, gpus=("h100-pcie",)) as client:
        before = answers(client, shapes, "h100-pcie")
        assert all("no dispatch table for GPU 'h100-pcie'" in a for a in before)
        assert upload(client, pcie_run(True, "lab-a-gpu", 1), "lab-h100").status_code == 201
        alone = fit(database, gpu="h100-pcie")
        assert upload(client, pcie_run(False, "lab-b-gpu", 2), "lab-b").status_code == 201
        disputed = fit(database, gpu="h100-pcie")
        assert answers(client, shapes, "h100-pcie") == before
    assert mirrored(database, "h100-pcie") is None and current_payload(database, "h100-pcie") is None
    text = flat(alone.output)
    assert alone.exit_code == 1, alone.output
    assert "that a second source corroborates: 1236 reading(s) of uploader lab-h100 (runs 1) that no other" in text
    text = flat(disputed.output)
    assert disputed.exit_code == 1, disputed.output
    assert "36 conflict(s) between sources" in text and "36 reading(s) of uploader lab-h100 (runs 1) that no other" in text
    assert ("not stored, what the lookup answers today (no bf16/cold dispatch table for GPU 'h100-pcie'; answered "
            "from the h100 table") in text and "would move to a pick nobody timed beside today's answer" in text
    assert "-> cuda_split_row" not in text
