"""Errors that are errors, in one line, and commands that fail leave nothing behind: every command
with a bad path or value, a read-only command on a missing database, a failing command that would
have made one, an unreachable server database, no GPU, an unknown GPU's warning."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.lookup.gpu import current_gpu_key
from tests.conftest import copy_database

NARROW = {"COLUMNS": "60", "TERM": "dumb"}


def run(*args: str, home: Path, **env: str):
    """The CLI as a pipe runs it, on a fresh install whose default database would live under ``home``."""
    return CliRunner().invoke(app, list(args), env={**NARROW, "XDG_DATA_HOME": str(home), "AUTOTUNER_DB": None, **env})


def one_error_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "Traceback" not in result.output and "╭" not in result.output
    return lines[0]


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("where", ["missing.sqlite", "no/such/folder/missing.sqlite"])
def test_db_current_on_a_missing_database_exits_2_and_creates_nothing(tmp_path, where):
    result = run("db", "current", "--db", str(tmp_path / where), home=tmp_path / "home")
    assert result.exit_code == 2
    assert f"no database at {tmp_path / where}" in one_error_line(result)
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("command", [
    ["fit", "--gpu", "h100"],                       # nothing measured: nothing to fit
    ["fit", "--gpu", "h100", "--dtype", "fp99"],    # a bad value, named before any database
    ["fit", "--gpu", "h100", "--rule", "no-such-rule"],
    ["sweep", "--gpu", "h100"],                     # no GPU on this host
    ["evaluate", "--gpu", "h100"],                  # no GPU for its sweep
    ["evaluate", "--gpu", "h100", "--no-sweep"],    # nothing fitted to score
    ["import", str(Path(__file__))],               # not an exchange document
    ["status"], ["tables"], ["report", "--gpu", "h100"], ["export", "x.json"],
    ["select", "8", "1024", "bf16", "--gpu", "h100"],
])
def test_a_command_that_fails_or_only_reads_makes_no_default_database(tmp_path, command):
    if command[0] in ("sweep", "evaluate") and "--no-sweep" not in command and current_gpu_key() is not None:
        pytest.skip("this host has a GPU: the sweep would run")
    home = tmp_path / "home"
    run(*command, home=home)
    assert files_under(home) == [], command


def test_fit_on_a_missing_database_says_what_to_do_and_creates_nothing(tmp_path):
    missing = tmp_path / "missing.sqlite"
    result = run("fit", "--gpu", "h100", "--db", str(missing), home=tmp_path / "home")
    assert result.exit_code == 2  # as a command that only reads: the database named is not there
    line = one_error_line(result)
    assert f"no database at {missing}: nothing to fit" in line and "autotuner import" in line
    assert files_under(tmp_path) == []


@pytest.fixture
def filled(recording_template, tmp_path) -> Path:
    """A database holding the recorded H100 runs (for commands that get as far as writing a file)."""
    return copy_database(recording_template("h100_sweep"), tmp_path / "filled" / "tuning.sqlite")


@pytest.mark.parametrize(("command", "said"), [
    (["export", "{tmp}/no/such/dir/x.json"], "OUTPUT {tmp}/no/such/dir/x.json: the folder {tmp}/no/such/dir does not exist"),
    (["export", "{tmp}"], "OUTPUT {tmp} is a folder; give a file name"),
    (["report", "--gpu", "h100", "--markdown", "{tmp}/no/such/r.md"], "--markdown {tmp}/no/such/r.md: the folder"),
    (["fit", "--gpu", "h100", "--export", "{tmp}/a-file/tables"], "--export {tmp}/a-file/tables: {tmp}/a-file is a file"),
    (["bench", "--output", "{tmp}/a-file"], "--output {tmp}/a-file: {tmp}/a-file is a file"),
])
def test_a_bad_output_path_is_a_bad_argument_named_before_the_work(filled, tmp_path, command, said):
    (tmp_path / "a-file").write_text("")
    args = [part.format(tmp=tmp_path) for part in command]
    if args[0] != "bench":
        args += ["--db", str(filled)]
    result = run(*args, home=tmp_path / "home")
    assert result.exit_code == 2, result.output
    assert said.format(tmp=tmp_path) in " ".join(one_error_line(result).split())


def test_a_file_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    """The root of the class: any OSError a command meets is its file and the reason, never a traceback."""
    (tmp_path / "a-file").write_text("")
    result = run("predict", "--gpu", "a100", "--out", str(tmp_path / "a-file" / "tables"), home=tmp_path / "home")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert str(tmp_path / "a-file") in line and ("Not a directory" in line or "File exists" in line)


def test_an_unreachable_server_database_is_one_line(tmp_path):
    pytest.importorskip("psycopg")
    for command in (["db", "current"], ["status"], ["tables"]):
        result = run(*command, "--db", "postgresql+psycopg://nobody@127.0.0.1:1/none", home=tmp_path)
        assert result.exit_code == 1, (command, result.output)
        assert "127.0.0.1" in " ".join(one_error_line(result).split()), command


def test_select_without_a_gpu_here_or_named_says_to_pass_gpu(tmp_path):
    if current_gpu_key() is not None:
        pytest.skip("this host has a GPU: select answers for it")
    result = run("select", "1", "50257", "fp16", home=tmp_path)
    assert result.exit_code == 2
    line = " ".join(one_error_line(result).split())
    assert "no GPU found on this host: pass --gpu MODEL" in line and "h100" in line


def test_the_library_says_the_same_in_its_reason(monkeypatch):
    from autotuner.lookup.select import TableStore

    monkeypatch.setattr("autotuner.lookup.select.current_gpu_key", lambda: None)
    choice = TableStore().select(1, 50257, "fp16")
    assert choice.variant == "torch_softmax" and "pass gpu" in choice.reason


@pytest.mark.parametrize("gpu", ["h999", "rtx3090"])
def test_an_unknown_gpu_is_one_clean_warning_line(tmp_path, gpu):
    result = run("select", "1", "50257", "fp16", "--gpu", gpu, home=tmp_path)
    assert result.exit_code == 0
    warnings = [line for line in result.output.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: GPU '{gpu}' is not a model the lookup knows")
    assert "RuntimeWarning" not in result.output and ".py:" not in result.output
    answer = json.loads(result.output[result.output.index("{"):])
    assert answer["variant"] == "torch_softmax" and answer["gpu"] == gpu
