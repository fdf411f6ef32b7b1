"""Option choices checked by Typer (exit 2, the accepted values named), negative shapes read as values,
a directory as --db, report --json, and the spread report's one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.cli.sweep import chosen_devices, device_indices

ROOT = Path(__file__).resolve().parents[2]
PLAIN = {"COLUMNS": "200", "TERM": "dumb"}


def run(*args: str):
    return CliRunner().invoke(app, list(args), env=PLAIN)


@pytest.mark.parametrize("args, option, accepted", [
    (["fit", "--gpu", "h100", "--method", "tepid"], "--method", "'cold', 'warm', 'graph'"),
    (["select", "1", "64", "bf16", "--method", "tepid"], "--method", "'cold', 'warm', 'graph'"),
    (["sweep", "--l2", "hot"], "--l2", "'cold', 'warm'"),
    (["sweep", "--timing", "clock"], "--timing", "'events', 'graph'"),
    (["sweep", "--grid", "lattice"], "--grid", "'domain', 'classic'"),
    (["sweep", "--devices", "0,x"], "--devices", "comma list of device indices or 'all'"),
    (["sweep", "--devices", "1,1"], "--devices", "distinct non-negative indices"),
    (["evaluate", "--gpu", "h100", "--set", "everything"], "--set", "'attention', 'vocab'"),
])
def test_a_bad_choice_is_refused_by_typer_naming_what_is_accepted(args, option, accepted):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output and accepted in result.output, result.output
    assert "Traceback" not in result.output


def test_choices_are_listed_in_help():
    text = run("sweep", "--help").output
    assert "<domain|classic|measured>" in text and "<cold|warm>" in text and "<cold|warm|graph>" in text
    assert "<bool>" not in text  # a flag takes no value (plain help, no private Typer method patched)


def test_devices_are_parsed_once_and_all_means_every_visible_one():
    assert device_indices("0, 2") == [0, 2] and device_indices("ALL") == "all"
    assert chosen_devices(None, 3, lambda: 8) == [3]
    assert chosen_devices([0, 2], 3, lambda: 8) == [0, 2] and chosen_devices("all", 0, lambda: 2) == [0, 1]


def test_select_with_a_negative_m_says_m_must_be_at_least_0():
    result = run("select", "-5", "100", "bf16", "--gpu", "h100")
    assert result.exit_code == 2 and "Invalid value for 'M'" in result.output, result.output
    assert "greater than or equal to 0" in result.output and "No such option" not in result.output
    assert "Invalid value for 'N'" in run("select", "5", "-1", "bf16", "--gpu", "h100").output
    # the default database (none here, so empty): a missing $AUTOTUNER_DB would be refused as a typo
    answer = CliRunner().invoke(app, ["select", "0", "100", "bf16", "--gpu", "h100"], env={**PLAIN, "AUTOTUNER_DB": None})
    assert json.loads(answer.output)["variant"], answer.output


def test_a_directory_as_db_is_a_bad_argument(tmp_path):
    for command in (["status"], ["report", "--gpu", "h100"], ["tables"]):
        result = run(*command, "--db", str(tmp_path))
        assert result.exit_code == 2, (command, result.output)
        assert result.output.strip().splitlines() == [f"error: database path {tmp_path} is a directory, expected an SQLite file"]


def test_report_json_has_every_shape_and_the_per_dtype_figures(tmp_path):
    db = str(tmp_path / "r.sqlite")
    assert run("import", str(ROOT / "tests" / "data" / "h200_heldout.json.gz"), "--db", db).exit_code == 0
    text_run, json_run = run("report", "--gpu", "h200", "--db", db), run("report", "--gpu", "h200", "--db", db, "--json")
    assert json_run.exit_code == 0, json_run.output
    document = json.loads(json_run.output)
    assert document["gpu"] == "h200" and document["timing_method"] == "cold"
    shapes = document["shapes"]
    assert shapes and {"dtype", "m", "n", "copy_us", "best_own_us", "best_own", "fraction"} <= set(shapes[0])
    assert len(shapes) == sum(1 for line in text_run.output.splitlines() if line.startswith("│"))
    for dtype, figures in document["summary"].items():
        assert f"{dtype}: {figures['shapes']} shapes, geomean {figures['geomean']:.3f}" in text_run.output


@pytest.mark.parametrize("paths, message", [
    (["/nonexistent/a.sqlite", "/nonexistent/b.sqlite"],
     "no database at /nonexistent/a.sqlite; check --db or $AUTOTUNER_DB (a command that only reads creates none)"),
    (["{dir}", "{dir}"], "database path {dir} is a directory, expected an SQLite file"),
])
def test_spread_with_a_bad_path_is_one_line(tmp_path, paths, message):
    args = [p.format(dir=tmp_path) for p in paths]
    result = subprocess.run([sys.executable, "-m", "autotuner.report.spread", *args], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"python -m autotuner.report.spread: error: {message.format(dir=tmp_path)}"]
    assert not Path("/nonexistent/a.sqlite").exists()
