"""What a new user meets on the command line, run through CliRunner as a pipe would (not a terminal)
at a narrow width: --version, one-line errors, JSON that parses, a fresh database explained, whole
kernel names, flags shown without a type."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from kernels import all_variants
from tests.autotuner.test_exchange import exported, source_engine  # noqa: F401 - fixture

NARROW = {"COLUMNS": "60", "TERM": "dumb"}
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, home: Path | None = None):
    """The CLI as a pipe runs it; ``home``: a fresh install whose default database lives there."""
    env = {**NARROW, **({"XDG_DATA_HOME": str(home), "AUTOTUNER_DB": None} if home else {})}
    return CliRunner().invoke(app, list(args), env=env)


def test_version_prints_the_package_version():
    import autotuner

    result = run("--version")
    assert result.exit_code == 0 and result.output.strip() == f"softmax-autotuner {autotuner.__version__}"


def test_an_unusable_db_path_is_one_line_and_exit_2():
    for command in (["status"], ["fit", "--gpu", "h100"], ["report", "--gpu", "h100"]):
        result = run(*command, "--db", "/proc/nonexistent/x.sqlite")
        assert result.exit_code == 2, (command, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "/proc/nonexistent" in lines[0], lines
        assert "Traceback" not in result.output


def test_import_says_what_it_wrote_in_a_line_and_json_on_request(source_engine, tmp_path):  # noqa: F811
    document = tmp_path / "runs.json"
    document.write_text(json.dumps(exported(source_engine)))
    result = run("import", str(document), "--db", str(tmp_path / "target.sqlite"))
    assert result.exit_code == 0, result.output
    line = " ".join(result.output.split())
    assert re.fullmatch(r"imported \d+ new run\(s\), 0 already here, of [\w, -]+: \d+ measurements, \d+ copy "
                        r"references, \d+ candidates \(run ids [\d, -]+\)", line), line
    again = run("import", str(document), "--db", str(tmp_path / "target.sqlite"), "--json")
    summary = json.loads(again.output)  # parses at a narrow width: never wrapped
    assert again.exit_code == 0 and summary["runs_created"] == 0 and summary["runs_reused"] >= 1, summary
    assert all(isinstance(value, (int, list, dict)) for value in summary.values()), summary


@pytest.mark.parametrize("args", [["select", "4096", "32000", "bf16", "--gpu", "h100"], ["kernels", "--json"],
                                  ["tables", "--json"]])
def test_json_output_is_never_wrapped(args, tmp_path):
    result = run(*args, home=tmp_path)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)


def test_status_of_a_fresh_install_is_exit_0_and_says_what_to_do(tmp_path):
    result = run("status", home=tmp_path)
    assert result.exit_code == 0, result.output
    assert "no sweep runs" in result.output and "autotuner import" in " ".join(result.output.split())
    assert json.loads(run("status", "--json", home=tmp_path).output)["gpus"] == []
    assert list(tmp_path.iterdir()) == []  # the default database is read, never made, by a reader


def test_report_on_a_fresh_install_says_how_to_import_the_shipped_recordings(tmp_path):
    result = run("report", "--gpu", "h100", home=tmp_path)
    text = " ".join(result.output.split())
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"autotuner import {ROOT / 'tests' / 'data' / 'h100_sweep.json.gz'}" in text


def test_kernels_table_keeps_every_name_whole_at_a_narrow_width():
    result = run("kernels")
    assert result.exit_code == 0
    cells = {cell.strip() for line in result.output.splitlines() for cell in line.split("│")}
    missing = [v.name for v in all_variants() if v.name not in cells]
    assert not missing, result.output


def test_kernels_show_min_arch_needs_and_gpu_models():
    wide = CliRunner().invoke(app, ["kernels"], env={"COLUMNS": "400", "TERM": "dumb"}).output
    row = next(line for line in wide.splitlines() if "cuda_cluster_split" in line)
    assert "sm_90" in row and "cluster 2/4/8/16" in row and "h100" in row and "a100" not in row
    assert "smem 227 KB/block" in next(line for line in wide.splitlines() if "cuda_smem_cache_extreme" in line)
    listed = {entry["name"]: entry for entry in json.loads(run("kernels", "--json").output)}
    assert listed["cuda_warp_row"]["needs"]["min_arch"] == 80 and "a100" in listed["cuda_warp_row"]["runs_on"]


@pytest.mark.parametrize("command", [["kernels"], ["status"], ["sweep"]])
def test_flags_show_no_value_type_in_help(command):
    result = run(*command, "--help")
    assert result.exit_code == 0 and "--help" in result.output
    assert "<bool>" not in result.output, result.output
    wide = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert re.search(r"--port\s+<int", wide), wide  # an option that takes a value still shows its type


@pytest.mark.parametrize("command", [["status"], ["report", "--gpu", "h100"], ["export", "out.json"], ["tables"],
                                     ["select", "8", "1024", "bf16", "--gpu", "h100"]])
def test_a_read_only_command_on_a_missing_database_exits_2_and_creates_nothing(command, tmp_path):
    missing = tmp_path / "missing" / "path.sqlite"
    result = run(*command, "--db", str(missing), home=tmp_path / "home")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: no database at {missing}; check --db or $AUTOTUNER_DB (a command that " \
                                    "only reads creates none)"
    assert list(tmp_path.iterdir()) == []


def test_an_empty_default_database_reads_as_empty(tmp_path):
    database = tmp_path / "softmax-autotuner" / "tuning.sqlite"
    database.parent.mkdir()
    database.touch()
    listing = json.loads(run("tables", "--json", home=tmp_path).output)
    assert listing and all(row["origin"].startswith("shipped:") and row["answers"] for row in listing)
    assert run("status", home=tmp_path).exit_code == 0
    assert database.stat().st_size == 0


def test_spread_on_a_missing_database_exits_2_and_creates_nothing(tmp_path, capsys):
    from autotuner.report.spread import main

    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path / "a" / "x.sqlite"), str(tmp_path / "b.sqlite")])
    assert exited.value.code == 2 and "no database at" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_db_upgrade_of_a_newer_database_is_one_line_and_leaves_no_backup(tmp_path):
    import sqlite3

    from db.engine import make_engine

    path = tmp_path / "newer.sqlite"
    make_engine(str(path)).dispose()
    with sqlite3.connect(path) as connection:  # as a later program would have left it
        connection.execute("UPDATE alembic_version SET version_num = '0009'")
        connection.execute("UPDATE schema_info SET value = '9' WHERE key = 'schema_version'")
    for _attempt in range(2):
        result = run("db", "upgrade", "--db", str(path))
        assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
        assert "schema revision 0009, which this program does not know" in " ".join(result.output.split())
    assert sorted(p.name for p in tmp_path.iterdir() if ".bak" in p.name) == []


def test_import_of_an_implausible_document_is_one_line_and_stores_nothing(source_engine, tmp_path):  # noqa: F811
    document = exported(source_engine)
    document["runs"][0]["measurements"][0]["median_us"] = 1e-300
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(document))
    result = run("import", str(path), "--db", str(tmp_path / "target.sqlite"))
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    text = " ".join(result.output.split())
    assert "refused, nothing stored: rule launch-floor, 1 place(s): runs[0].measurements[0]: 4096x16000 bf16" in text
    assert "rule quantile-order" in text  # 1e-300 is also below its own p20
    assert json.loads(run("status", "--db", str(tmp_path / "target.sqlite"), "--json").output)["gpus"] == []


def test_an_empty_default_database_makes_no_lookup_warn(tmp_path, monkeypatch, caplog):
    import logging

    from autotuner.lookup.select import reset_default_store, select_kernel

    database = tmp_path / "softmax-autotuner" / "tuning.sqlite"
    database.parent.mkdir()
    database.touch()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("AUTOTUNER_DB", raising=False)
    reset_default_store()
    try:
        with caplog.at_level(logging.WARNING):
            choice = select_kernel(4096, 32000, "bf16", gpu="h100")
        assert choice.source == "table" and not caplog.records, [r.getMessage() for r in caplog.records]
    finally:
        reset_default_store()
    assert database.stat().st_size == 0
