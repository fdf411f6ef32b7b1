"""The exchange document: export carries every column, import reproduces the rows, a bad document
writes nothing, and a re-import reuses the run instead of duplicating it."""
from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotuner.records.exchange import FORMAT_VERSION, export_runs, import_runs, parse_document
from db import bulk, queries
from db.engine import make_engine, transaction
from db.models import CopyReference, Environment, GpuModel, Measurement, SweepRun

STARTED = datetime(2025, 3, 1, 12, 30, 15, 123456, tzinfo=timezone.utc)


def fill(session: Session, gpu_key: str = "h100", host: str = "gpu-host-7") -> int:
    """One run with every column of every row set to a distinctive value; returns the run id."""
    gpu = queries.get_or_create_gpu(session, gpu_key, f"NVIDIA {gpu_key.upper()} 80GB HBM3", sm_count=132,
                                    l2_bytes=52_428_800, memory_bytes=85_520_809_984, compute_capability="9.0")
    environment = queries.get_or_create_environment(session, "fp-0123abcd", driver="575.51", cuda="12.9",
                                                    torch="2.8.0+cu129", triton="3.4.0", cupy="13.5.1", python="3.12.3")
    run = queries.create_run(session, gpu, environment, "cold", status="running", started_at=STARTED, host=host,
                             command="autotuner sweep --gpu h100", grid={"m": [1, 4096], "n": [1000, 16000]})
    online = queries.get_or_create_candidate(session, "cuda_block_online", "block=256,items=4", {"block": 256, "items": 4}, "aa11")
    warp = queries.get_or_create_candidate(session, "cuda_warp_row", "block=128,lanes=4,elems=4",
                                           {"block": 128, "lanes": 4, "elems": 4}, "bb22")
    queries.record_measurement(
        session, run.id, online.id, 4096, 16000, "bf16", status="ok", median_us=101.5, p20_us=100.25, p80_us=103.75,
        repetitions=120, gbps=2583.1, registers=32, spill_bytes=0, static_smem=1024, dynamic_smem=2048,
        threads_per_block=256, blocks_per_sm=7, occupancy=0.875, max_rel_error=0.0039, compile_seconds=1.25,
    )
    queries.record_measurement(session, run.id, warp.id, 4096, 16000, "bf16", status="unsupported",
                               error="N=16000 is above this config's maximum 1024")
    queries.record_measurement(session, run.id, warp.id, 1, 1000, "fp16", status="wrong", max_rel_error=0.5,
                               error="row sums off")
    queries.record_copy_reference(session, run.id, 4096, 16000, "bf16", median_us=88.5, p20_us=88.0, p80_us=89.0,
                                  repetitions=120, gbps=2962.0)
    queries.record_copy_reference(session, run.id, 1, 1000, "fp16", median_us=3.5)
    queries.finish_run(session, run.id, "finished")
    return run.id


@pytest.fixture
def source_engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'source.sqlite'}")
    with transaction(engine) as session:
        fill(session)
    yield engine
    engine.dispose()


@pytest.fixture
def target_engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'target.sqlite'}")
    yield engine
    engine.dispose()


def exported(engine, **filters) -> dict:
    with Session(engine) as session:
        return export_runs(session, **filters)


def counts(engine) -> dict[str, int]:
    with Session(engine) as session:
        return {model.__name__: session.scalar(select(func.count()).select_from(model))
                for model in (GpuModel, Environment, SweepRun, Measurement, CopyReference)}


def comparable(document: dict) -> dict:
    """The document without what legitimately differs between databases and exports."""
    document = copy.deepcopy(document)
    document.pop("exported_at")
    for run in document["runs"]:
        run.pop("source_id")
        run["environment"].pop("created_at")
    return document


def test_export_carries_every_column_of_measurements_and_copy_references(source_engine):
    document = exported(source_engine)
    assert document["format_version"] == FORMAT_VERSION
    [run] = document["runs"]
    internal = {"id", "run_id", "candidate_id"}
    measurement_columns = {c.name for c in Measurement.__table__.columns} - internal
    copy_columns = {c.name for c in CopyReference.__table__.columns} - internal
    assert all(measurement_columns <= set(row) for row in run["measurements"])
    assert all(copy_columns <= set(row) for row in run["copy_references"])
    assert {c.name for c in GpuModel.__table__.columns} - {"id"} <= set(run["gpu"])
    assert {c.name for c in Environment.__table__.columns} - {"id"} <= set(run["environment"])
    ok = next(row for row in run["measurements"] if row["status"] == "ok")
    assert (ok["registers"], ok["occupancy"], ok["compile_seconds"], ok["dynamic_smem"]) == (32, 0.875, 1.25, 2048)
    assert run["candidates"][ok["candidate"]]["config"] == {"block": 256, "items": 4}
    assert run["started_at"] == "2025-03-01T12:30:15.123456Z"
    assert run["status"] == "finished" and run["grid"] == {"m": [1, 4096], "n": [1000, 16000]}
    json.dumps(document, allow_nan=False)  # plain JSON, as written to a file


def test_import_into_an_empty_database_reproduces_the_export(source_engine, target_engine):
    document = exported(source_engine)
    with transaction(target_engine) as session:
        summary = import_runs(session, json.dumps(document))
    assert (summary.runs_created, summary.runs_reused, summary.measurements, summary.copy_references) == (1, 0, 3, 2)
    assert summary.gpus == ["h100"] and summary.candidates == 2
    assert comparable(exported(target_engine)) == comparable(document)


def test_importing_the_same_runs_twice_reuses_them(source_engine, target_engine):
    document = exported(source_engine)
    for _ in range(2):
        with transaction(target_engine) as session:
            summary = import_runs(session, document)
    assert (summary.runs_created, summary.runs_reused) == (0, 1)
    assert counts(target_engine) == counts(source_engine)


def test_import_shares_gpu_environment_and_candidates_already_present(source_engine, target_engine):
    with transaction(target_engine) as session:
        fill(session, host="another-host")  # same GPU, environment and candidates, another run
    with transaction(target_engine) as session:
        summary = import_runs(session, exported(source_engine))
    assert summary.runs_created == 1
    totals = counts(target_engine)
    assert (totals["GpuModel"], totals["Environment"], totals["SweepRun"], totals["Measurement"]) == (1, 1, 2, 6)


def test_a_document_with_one_bad_run_writes_nothing(source_engine, target_engine):
    document = exported(source_engine)
    bad = copy.deepcopy(document["runs"][0])
    bad["host"] = "other"
    bad["measurements"][0]["candidate"] = 7  # the run lists two candidates
    document["runs"].append(bad)
    with pytest.raises(ValidationError, match="measurements\\[0\\].candidate = 7"):
        with transaction(target_engine) as session:
            import_runs(session, document)
    assert set(counts(target_engine).values()) == {0}


def _import_failing_midway(source_engine, target_engine, monkeypatch) -> dict[str, int]:
    def broken(*_args, **_kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(bulk, "insert_copy_references", broken)  # the last write of a run
    with pytest.raises(RuntimeError, match="disk full"):
        with transaction(target_engine) as session:  # the caller's transaction rolls back
            import_runs(session, exported(source_engine))
    return counts(target_engine)


def test_a_failure_while_writing_leaves_no_run_or_rows_behind(source_engine, target_engine, monkeypatch):
    totals = _import_failing_midway(source_engine, target_engine, monkeypatch)
    assert (totals["SweepRun"], totals["Measurement"], totals["CopyReference"]) == (0, 0, 0)


def test_a_failure_while_writing_leaves_nothing_behind(source_engine, target_engine, monkeypatch):
    assert set(_import_failing_midway(source_engine, target_engine, monkeypatch).values()) == {0}


def test_export_filters_by_run_and_gpu(source_engine):
    with transaction(source_engine) as session:
        other = fill(session, gpu_key="a100")
    assert [r["gpu"]["key"] for r in exported(source_engine)["runs"]] == ["h100", "a100"]
    assert [r["source_id"] for r in exported(source_engine, run_ids=[other])["runs"]] == [other]
    assert [r["gpu"]["key"] for r in exported(source_engine, gpu_key="a100")["runs"]] == ["a100"]
    with pytest.raises(LookupError, match="no sweep runs with ids \\[999\\]"):
        exported(source_engine, run_ids=[999])


@pytest.mark.parametrize("path, value, message", [
    (("runs", 0, "measurements", 0, "m"), "4096", "valid integer"),
    (("runs", 0, "started_at"), 0, "valid datetime"),
    (("runs", 0, "started_at"), "0001-01-01T00:00:00+01:00", "outside the years 1-9999"),
    (("runs", 0, "finished_at"), "9999-12-31T23:00:00-05:00", "outside the years 1-9999"),
    (("exported_at",), "0001-01-01T00:30:00+01:00", "outside the years 1-9999"),
    (("runs", 0, "measurements", 0, "status"), "great", "Input should be 'ok'"),
    (("runs", 0, "measurements", 0, "dtype"), "float16", "Input should be 'fp32'"),
    (("runs", 0, "measurements", 0, "median_us"), -1.0, "greater than 0"),
    (("runs", 0, "candidates", 0, "config_key"), "block=128,vec=4", "does not match config"),
    (("runs", 0, "gpu", "key"), "H100 SXM", "should match pattern"),
    (("runs", 0, "timing_method"), "hot", "Input should be 'cold'"),
    (("format_version",), 2, "Input should be 1"),
])
def test_parse_document_refuses_what_the_schema_does_not_allow(source_engine, path, value, message):
    document = exported(source_engine)
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError, match=message):
        parse_document(json.dumps(document))


def test_parse_document_refuses_unknown_fields_and_non_finite_numbers(source_engine):
    document = exported(source_engine)
    document["runs"][0]["measurements"][0]["colour"] = "blue"
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        parse_document(document)
    document = exported(source_engine)
    with pytest.raises(ValidationError, match="finite number"):
        parse_document(json.dumps(document).replace('"median_us": 101.5', '"median_us": NaN'))
    document["runs"][0]["grid"] = {"m": [1, float("nan")]}
    with pytest.raises(ValidationError, match="Out of range float values are not JSON compliant|NaN"):
        parse_document(document)


def test_parse_document_names_the_place_of_each_problem(source_engine):
    document = exported(source_engine)
    document["runs"][0]["measurements"][1]["n"] = 0
    document["runs"][0]["copy_references"][0]["median_us"] = None
    with pytest.raises(ValidationError) as caught:
        parse_document(document)
    places = {tuple(error["loc"]) for error in caught.value.errors()}
    assert ("runs", 0, "measurements", 1, "n") in places
    assert ("runs", 0, "copy_references", 0, "median_us") in places
