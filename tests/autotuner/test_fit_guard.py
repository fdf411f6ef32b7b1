"""A fit never silently makes answers worse (autotuner/fit/guard.py): a worse or narrower table is not
stored without --replace-worse, and measurements that contradict another source's are reported."""
from __future__ import annotations

import contextlib
import copy
import json
import re
from pathlib import Path

import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.fit import guard
from autotuner.fit.index import index_document
from autotuner.lookup.select import load_table_file, shipped_table_files
from db.engine import make_engine
from db.location import tables_folder
from db.queries import current_tables

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "tests" / "data" / "h100_sweep.json.gz"


def shipped(key: str) -> dict:
    path = next(p for p in shipped_table_files() if Path(p).stem == key)
    return copy.deepcopy(load_table_file(path).document)


def test_a_table_compared_with_itself_is_neither_worse_nor_narrower():
    document = shipped("h100_bf16_cold")
    result = guard.compare(document, document)
    assert result.reasons == [] and result.geomean == 1.0 and result.priced == len(document["points"])


def test_a_table_with_fewer_shapes_or_a_shorter_n_range_is_narrower():
    today = shipped("h100_fp32_cold")
    shorter = copy.deepcopy(today)
    shorter["points"] = [p for p in today["points"] if p["n"] <= 262144]
    reasons = guard.compare(shorter, today).reasons
    assert any("narrower range" in reason and "N 1..262144 against" in reason for reason in reasons), reasons
    sparser = copy.deepcopy(today)
    extremes = {min(p["n"] for p in today["points"]), max(p["n"] for p in today["points"])}
    sparser["points"] = [p for i, p in enumerate(today["points"]) if i % 2 or p["n"] in extremes or p["m"] == 1048576]
    reasons = guard.compare(sparser, today).reasons
    assert any(reason.startswith(f"narrower: {len(sparser['points'])} measured shapes against {len(today['points'])}") for reason in reasons), reasons
    assert not any("narrower range" in reason for reason in reasons), reasons


def test_a_table_that_picks_slower_kernels_is_worse_and_names_the_shapes():
    today = shipped("h100_bf16_cold")
    worse = copy.deepcopy(today)
    slowest = {}
    for point in worse["points"]:  # make each shape's slowest measured candidate look fastest
        measured = [i for i, t in enumerate(point["times"]) if t is not None]
        chosen = max(measured, key=lambda i: point["times"][i])
        slowest[(point["m"], point["n"])] = chosen
        point["times"][chosen] = min(point["times"][i] for i in measured) / 2
    worse = index_document(worse)  # its decision index, as a fit would have written it
    result = guard.compare(worse, today)
    assert result.geomean > 1.5 and any("answers slower" in reason for reason in result.reasons)
    assert result.slower and " -> " in result.slower[0][1]
    with pytest.raises(guard.WorseTableError, match="--replace-worse"):
        guard.check_replacement(worse, guard.Incumbent(today, "the shipped table"))
    assert guard.check_replacement(worse, guard.Incumbent(today, "x"), replace_worse=True).reasons


def test_importing_the_classic_sweep_then_fitting_keeps_the_shipped_h100_answers(tmp_path, recording_template):
    """The README step of issue 31 (`autotuner import tests/data/h100_sweep.json.gz`, here the test run's
    one import of it, copied): without the guard it replaced the shipped H100 tables with 137-141-shape
    ones (bf16 1x1048576 cuda_long_split 9.3 us -> cuda_online_two_pass 88.8 us)."""
    from tests.conftest import copy_database

    database = str(copy_database(recording_template("h100_sweep"), tmp_path / "t.sqlite"))
    runner = CliRunner()
    refused = runner.invoke(app, ["fit", "--gpu", "h100", "--dtype", "bf16", "--db", database])
    assert refused.exit_code == 1, refused.output
    text = " ".join(refused.output.split())
    assert "h100/bf16/cold: not stored, the shipped table h100_bf16_cold.json keeps answering" in text
    assert "narrower: 141 measured shapes against 507 today" in text and "--replace-worse" in text
    quoted = re.search(r"its bf16\s+reason begins `([^`]+)`", (ROOT / "docs" / "SERVICE.md").read_text())
    assert quoted and quoted.group(1) in text, "docs/SERVICE.md quotes another reason than fit prints"
    engine = make_engine(database, create=False)
    with Session(engine) as session:
        assert current_tables(session, "h100") == []
    engine.dispose()
    folder = tables_folder(Path(database))
    assert not (folder / "h100_bf16_cold.json").exists()  # a refused table's file is not written (db/mirror.py)
    answer = json.loads(runner.invoke(app, ["select", "1", "1048576", "bf16", "--gpu", "h100", "--db", database]).output)
    assert answer["variant"] == "cuda_long_split" and answer["table"]["origin"] == "shipped:h100_bf16_cold.json"

    forced = runner.invoke(app, ["fit", "--gpu", "h100", "--dtype", "bf16", "--db", database, "--replace-worse"])
    assert forced.exit_code == 0, forced.output
    engine = make_engine(database, create=False)
    with Session(engine) as session:
        assert json.loads((folder / "h100_bf16_cold.json").read_text()) == current_tables(session, "h100")[0].payload
    engine.dispose()
    answer = json.loads(runner.invoke(app, ["select", "1", "1048576", "bf16", "--gpu", "h100", "--db", database]).output)
    assert answer["table"]["origin"] == "database" and answer["table"]["source_runs"]
    listing = json.loads(runner.invoke(app, ["tables", "--json", "--db", database]).output)
    answering = {row["origin"] for row in listing if row["gpu"] == "h100" and row["dtype"] == "bf16" and row["answers"]}
    assert answering == {"database"}
    # the database's table now answers, and a refit from the same runs is not worse than it
    again = runner.invoke(app, ["fit", "--gpu", "h100", "--dtype", "bf16", "--db", database])
    assert again.exit_code == 0 and "refused" not in again.output, again.output


@pytest.mark.parametrize("gpu, method", [("h100-pcie", "cold"), ("a800", "cold"), ("h100", "warm")])
def test_a_model_without_a_table_of_its_own_is_compared_with_what_the_lookup_answers_it(tmp_path, gpu, method):
    """Another model's table (the H100's for the H100 PCIe), a prediction of a model of the same specs
    (the A100's for the A800) or ``torch_softmax`` (no warm table anywhere): what answers today, which a
    first table is held to; another model's coverage is not."""
    from autotuner.lookup.select import select_kernel

    engine = make_engine(str(tmp_path / "t.sqlite"))
    with Session(engine) as session:
        today = guard.incumbent(session, gpu, "bf16", method)
    engine.dispose()
    assert today.answers is not None and gpu in today.origin
    with pytest.warns(RuntimeWarning) if gpu == "h100-pcie" else contextlib.nullcontext():
        for m, n in ((1, 1024), (4096, 32000), (3, 2500), (65536, 262144)):
            choice = select_kernel(m, n, "bf16", gpu=gpu, timing_method=method)
            assert today.answers(m, n) == (choice.variant, choice.config_key)
    lone = shipped("h100_bf16_cold")
    lone["points"] = lone["points"][:3]
    assert not any("narrower" in reason for reason in guard.compare(lone, today.document, today_answers=today.answers).reasons)


def test_a_point_without_rows_is_not_compared():
    """A stored table may hold a point of M = 0 (fitted from such a row before the fit skipped them); neither
    table has an answer there, so the comparison passes over it instead of failing (issue 45: TypeError)."""
    today = shipped("h100_bf16_cold")
    degenerate = copy.deepcopy(today)
    degenerate["points"].insert(0, {**degenerate["points"][0], "m": 0})
    result = guard.compare(degenerate, today)
    assert result.reasons == [] and result.priced == len(today["points"])


def test_fit_sets_aside_a_second_hosts_measurements_that_contradict_the_first(tmp_path):
    import gzip

    with gzip.open(SWEEP, "rt") as handle:
        first = json.load(handle)["runs"][0]
    rerun = copy.deepcopy(first)
    rerun.update(started_at="2030-01-01T00:00:00Z", finished_at=None, host="another-host")
    slowed = [row for row in rerun["measurements"] if row["status"] == "ok" and row["dtype"] == "bf16"][:7]
    for row in slowed:  # three times slower, far beyond either run's p20-p80 spread
        for name in ("median_us", "p20_us", "p80_us"):
            row[name] *= 3
        row["gbps"] /= 3
    document = tmp_path / "runs.json"
    document.write_text(json.dumps({"format_version": 1, "runs": [first, rerun]}))
    database = str(tmp_path / "t.sqlite")
    runner = CliRunner()
    assert runner.invoke(app, ["import", str(document), "--db", database]).exit_code == 0
    result = runner.invoke(app, ["fit", "--gpu", "h100", "--dtype", "bf16", "--db", database, "--replace-worse"])
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "warning: h100/bf16/cold: 7 conflict(s) between sources beyond the measured repeatability" in text
    row = slowed[0]
    assert (f"{row['m']}x{row['n']} " in text and "(host vm, run 1); set aside" in text
            and "(host another-host, run 2)" in text and "(and 2 more)" in text)
    assert "row(s) of runs 2 repeat another source's rows exactly: counted once" in text
