"""``autotuner status``: runs and measurements per GPU, and which current tables are stale."""
from __future__ import annotations

import json

from sqlalchemy.orm import Session
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.report.status import database_status
from db import make_engine, queries, worklist

HASHES = {"v_a": "h1", "v_b": "h2"}


def populate(url: str) -> dict[str, int]:
    """One finished cold run under env-1 with a table fitted from it; an interrupted warm run."""
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        gpu = queries.get_or_create_gpu(session, "h100", "NVIDIA H100 80GB HBM3")
        env = queries.get_or_create_environment(session, "env-1", torch="2.11", driver="580")
        run = queries.create_run(session, gpu, env, "cold", host="gpu-host")
        queries.finish_run(session, run.id, "finished")
        for variant, source in HASHES.items():
            candidate = queries.get_or_create_candidate(session, variant, "block=256", {"block": 256}, source)
            queries.record_measurement(session, run.id, candidate.id, 4, 1024, "bf16", status="ok", median_us=3.0)
        wrong = queries.get_or_create_candidate(session, "v_a", "block=1024", {"block": 1024}, "h1")
        queries.record_measurement(session, run.id, wrong.id, 4, 1024, "bf16", status="wrong", error="bad")
        payload = {"candidates": [{"variant": v, "config_key": "block=256"} for v in HASHES], "points": []}
        queries.save_table(session, gpu, "bf16", "cold", payload, source_runs=[run.id], candidate_count=2,
                           environment_id=env.id)
        warm = queries.create_run(session, gpu, env, "warm")
        queries.finish_run(session, warm.id, "interrupted")
        ids = {"gpu": gpu.id, "env": env.id, "run": run.id}
    engine.dispose()
    return ids


def status_of(url: str, hashes: dict[str, str] = HASHES) -> dict:
    engine = make_engine(url)
    with Session(engine) as session:
        report = database_status(session, current_hash=hashes.get)
    engine.dispose()
    return report


def test_status_counts_runs_and_measurements_per_gpu(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    populate(url)
    (entry,) = status_of(url)["gpus"]
    assert entry["gpu"] == "h100"
    assert entry["runs"]["count"] == 2 and entry["runs"]["by_status"] == {"finished": 1, "interrupted": 1}
    assert entry["runs"]["last"][0]["timing_method"] == "warm"
    assert entry["measurements"] == {"ok": 2, "wrong": 1}


def test_a_table_fitted_from_the_newest_environment_and_current_sources_is_not_stale(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    populate(url)
    (table,) = status_of(url)["gpus"][0]["tables"]
    assert table["stale"] is False and table["reasons"] == []


def test_a_changed_kernel_source_or_a_removed_variant_makes_the_table_stale(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    populate(url)
    (table,) = status_of(url, {"v_b": "h3"})["gpus"][0]["tables"]
    assert table["stale"]
    assert "kernel source changed since the fit: v_b" in table["reasons"]
    assert "variants no longer registered: v_a" in table["reasons"]


def test_newer_runs_under_another_environment_make_the_table_stale(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    populate(url)
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        gpu = queries.gpu_by_key(session, "h100")
        newer = queries.get_or_create_environment(session, "env-2", torch="2.12", driver="580")
        queries.create_run(session, gpu, newer, "cold")
    engine.dispose()
    (table,) = status_of(url)["gpus"][0]["tables"]
    assert table["reasons"] == ["newest runs are under another environment (torch 2.11→2.12)"]


def test_status_command_prints_each_gpu_and_the_work_list(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    ids = populate(url)
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        worklist.add_entries(session, "k", [(4, 1024, "bf16"), (8, 1024, "bf16")])
    with worklist.claiming(engine) as session:
        worklist.claim_next(session, "k", worklist.Claimer("gpu-host", 1234, ids["run"]), lease_s=60)
    engine.dispose()
    result = CliRunner().invoke(app, ["status", "--db", url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "h100 (NVIDIA H100 80GB HBM3): 2 runs (finished 1, interrupted 1)" in text
    assert "measurements: ok 2, wrong 1" in text
    assert "variants no longer registered" in text  # v_a and v_b are not registered kernels
    assert "work list: claimed 1, pending 1" in text and "4x1024 bf16 held by gpu-host:1234" in text
    as_json = CliRunner().invoke(app, ["status", "--db", url, "--json"])
    assert json.loads(as_json.output)["gpus"][0]["tables"][0]["stale"] is True


def test_status_of_an_empty_or_missing_database_is_one_line(tmp_path):
    # an empty database is a state, not an error (issue 19): exit 0 and what to run to fill it
    (tmp_path / "empty.sqlite").touch()
    result = CliRunner().invoke(app, ["status", "--db", str(tmp_path / "empty.sqlite")])
    assert result.exit_code == 0 and len(result.output.strip().splitlines()) == 1
    assert "no sweep runs in this database yet" in result.output
    # one named that does not exist is a typo, not an empty database (issue 31): exit 2, nothing created
    result = CliRunner().invoke(app, ["status", "--db", str(tmp_path / "none.sqlite")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "no database at" in result.output and sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]
