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


def run(*args: str):
    return CliRunner().invoke(app, list(args), env=NARROW)


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
    result = run(*args, *(["--db", str(tmp_path / "t.sqlite")] if args[0] == "tables" else []))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)


def test_status_of_a_fresh_database_is_exit_0_and_says_what_to_do(tmp_path):
    result = run("status", "--db", str(tmp_path / "fresh.sqlite"))
    assert result.exit_code == 0, result.output
    assert "no sweep runs" in result.output and "autotuner import" in " ".join(result.output.split())
    assert json.loads(run("status", "--db", str(tmp_path / "fresh.sqlite"), "--json").output)["gpus"] == []


def test_report_on_a_fresh_install_says_how_to_import_the_shipped_recordings(tmp_path):
    result = run("report", "--gpu", "h100", "--db", str(tmp_path / "fresh.sqlite"))
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
