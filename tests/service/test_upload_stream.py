"""service/upload_stream.py: the incremental check and write of an uploaded document agree with the
whole-document parser (parse_document / import_runs), in any key order, in bounded memory."""
from __future__ import annotations

import io
import json
import re

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from autotuner.records.exchange import export_runs, import_runs, parse_document
from autotuner.records.plausibility import RefusedUpload, check_document
from db.engine import make_engine, transaction
from db.models import Measurement
from service.json_scan import JsonScanner
from service import upload_stream
from service.upload_stream import BATCH_ROWS, DocumentErrors, check_file, write_file


@pytest.fixture
def document(database_url) -> dict:
    """Two runs: the fixture's H100 run, and its A100 run (H100 timings: implausible on an A100) as a
    second H100 run from another host."""
    engine = make_engine(database_url)
    with Session(engine) as session:
        exported = export_runs(session)
    engine.dispose()
    first, second = exported["runs"]
    second.update(gpu=dict(first["gpu"]), host="gpu-host-2")
    return exported


def stream_import(url: str, body: bytes):
    runs = check_file(io.BytesIO(body))
    with transaction(make_engine(url)) as session:
        return write_file(session, io.BytesIO(body), runs)


def rows(url: str) -> list[tuple]:
    with Session(make_engine(url)) as session:
        return sorted(tuple(getattr(row, c.name) for c in Measurement.__table__.columns if c.name not in ("id", "run_id", "candidate_id"))
                      for row in session.scalars(select(Measurement)))


def test_the_stream_stores_what_import_runs_stores_in_any_key_order(document, tmp_path):
    whole, streamed = f"sqlite:///{tmp_path / 'whole.sqlite'}", f"sqlite:///{tmp_path / 'streamed.sqlite'}"
    with transaction(make_engine(whole)) as session:
        expected = import_runs(session, document)
    reordered = {"runs": [dict(reversed(list(run.items()))) for run in document["runs"]],
                 "exported_at": document["exported_at"], "format_version": 1}  # rows before their candidates
    summary = stream_import(streamed, json.dumps(reordered, indent=1).encode())
    assert summary == expected and rows(streamed) == rows(whole)


@pytest.mark.parametrize("breakage, loc", [
    (lambda d: d["runs"][0]["measurements"][5].update(candidate=99), ("body", "runs", 0, "measurements", 5, "candidate")),
    (lambda d: d["runs"][0]["measurements"][3].update(m=-1), ("body", "runs", 0, "measurements", 3, "m")),
    (lambda d: d["runs"][0]["measurements"].append(dict(d["runs"][0]["measurements"][2])),
     ("body", "runs", 0, "measurements", "last")),
    (lambda d: d["runs"][1]["gpu"].pop("key"), ("body", "runs", 1, "gpu", "key")),
    (lambda d: d.update(format_version=2), ("body", "format_version")),
    (lambda d: d.update(extra=1), ("body", "extra")),
])
def test_problems_are_located_as_the_schema_locates_them(document, breakage, loc):
    breakage(document)
    with pytest.raises(DocumentErrors) as refused:
        check_file(io.BytesIO(json.dumps(document).encode()))
    expected = tuple(len(document["runs"][0]["measurements"]) - 1 if part == "last" else part for part in loc)
    assert expected in [tuple(error["loc"]) for error in refused.value.errors]


def test_a_key_given_twice_is_refused():
    body = b'{"format_version": 1, "runs": [], "runs": []}'
    with pytest.raises(DocumentErrors) as refused:
        check_file(io.BytesIO(body))
    assert refused.value.errors[0]["msg"] == "Invalid JSON: key 'runs' appears twice"


def test_rows_are_checked_across_batches(document):
    run = document["runs"][0]
    run["measurements"] = (run["measurements"] * (BATCH_ROWS // len(run["measurements"]) + 2))
    with pytest.raises(DocumentErrors) as refused:  # the first repeat lies in the first batch, found at the end
        check_file(io.BytesIO(json.dumps(document).encode()))
    assert [e["msg"] for e in refused.value.errors] == ["repeats an earlier row's candidate, m, n and dtype"]


def test_the_scanner_reads_values_cut_by_its_window():
    text = json.dumps({"a": [12345678901234567890, "x" * 50, {"k": "}{"}], "b": 1.5e-300, "c": True}).encode()
    scanner = JsonScanner(io.BytesIO(text), block_bytes=7)  # every value straddles a block boundary
    found = {key: scanner.value(("body", key))[0] for key in scanner.members(("body",))}
    assert found == json.loads(text)
    scanner.end(("body",))


def per_rule(refused: RefusedUpload) -> dict[str, str]:
    """Each rule's count as the message gives it (the rows named first may differ in order)."""
    return dict(re.findall(r"rule (\S+), (\d+) place", str(refused)))


@pytest.mark.parametrize("gpu_last", [False, True], ids=["gpu-before-rows", "gpu-after-rows"])
def test_implausible_rows_are_refused_as_import_runs_refuses_them(document, monkeypatch, gpu_last):
    monkeypatch.setattr(upload_stream, "BATCH_ROWS", 7)  # many batches, per-rule counts kept across them
    run = document["runs"][1]
    for row in run["measurements"][3:40]:
        if row["status"] == "ok":
            row.update(gbps=1e12)
    run["measurements"][50].update(p20_us=1e-300)
    run["copy_references"][2].update(median_us=1e-3, p20_us=1e-3, p80_us=1e-3)
    run["gpu"]["sm_count"] = 200
    if gpu_last:  # the rows are read before the run's GPU and timing: read once more for them
        document["runs"] = [dict(reversed(list(r.items()))) for r in document["runs"]]
    with pytest.raises(RefusedUpload) as whole:
        check_document(parse_document(json.dumps(document)))
    with pytest.raises(RefusedUpload) as streamed:
        check_file(io.BytesIO(json.dumps(document).encode()))
    assert per_rule(streamed.value) == per_rule(whole.value) == {"gbps": "23", "launch-floor": "2", "copy-floor": "2", "gpu-properties": "1"}
    assert {p.where for p in streamed.value.problems} <= {p.where for p in whole.value.problems}
    assert "rule gbps" in str(streamed.value) and "runs[1].measurements[50]" in str(streamed.value)


def test_a_run_outside_the_token_scope_is_refused_with_403(document):
    with pytest.raises(RefusedUpload) as refused:
        check_file(io.BytesIO(json.dumps(document).encode()), allowed_gpus=frozenset({"h200"}))
    assert refused.value.status == 403 and "rule gpu-scope, 2 place(s)" in str(refused.value)
