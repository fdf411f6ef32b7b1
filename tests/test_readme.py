"""The README's paths, commands and settings are real: files it names exist, the import it tells a fresh
install to run fills `report`, the variables it documents are read where it says, and the set-up
scripts and packaging behave as it describes."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PATH_PATTERN = re.compile(r"(?<![\w/.])((?:scripts|docs|bench|tests/data|autotuner/tables)/[\w./-]*\w|CHANGELOG\.md)")


def test_every_repository_path_in_the_readme_exists():
    cited = set(PATH_PATTERN.findall(README))
    assert {"CHANGELOG.md", "docs/RESULTS_H100.md", "docs/RESULTS_H200.md"} <= cited
    missing = sorted(p for p in cited if not (ROOT / p).exists())
    assert not missing, f"README.md names paths that do not exist: {missing}"


def test_readme_import_command_names_the_shipped_recordings():
    commands = re.findall(r"^\s+autotuner import (\S+)", README, flags=re.MULTILINE)
    assert commands, "README.md should give the import command for a fresh install"
    for path in commands:
        assert (ROOT / path).is_file(), path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "autotuner", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_importing_a_shipped_recording_gives_report_its_measurements(tmp_path):
    """The README's fresh-install step, on the smallest shipped recording (the H200 held-out set) to keep
    the suite fast: before the import `report` finds nothing, after it lists measured shapes."""
    db = str(tmp_path / "fresh.sqlite")
    before = run_cli("report", "--gpu", "h200", "--db", db)
    assert "bf16" not in before.stdout  # no measured shape to list
    imported = run_cli("import", "tests/data/h200_heldout.json.gz", "--db", db)
    assert imported.returncode == 0, imported.stderr
    after = run_cli("report", "--gpu", "h200", "--db", db)
    assert after.returncode == 0, after.stderr
    assert "bf16" in after.stdout and "3" in after.stdout  # rows of measured shapes (held-out M = 3, 77, 2000)


def test_main_sh_installs_the_serving_set_and_passes_its_arguments_to_serve():
    script = (ROOT / "scripts" / "main.sh").read_text()
    assert "source scripts/setup_env.sh serve\n" in script and 'exec autotuner serve "$@"' in script
    assert "source scripts/setup_env.sh test\n" in (ROOT / "scripts" / "test.sh").read_text()
    assert "`scripts/main.sh --host 0.0.0.0 --port 9000`" in README


STUB_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$SETUP_LOG"
[ "$1 $2" = "-c import torch" ] && exit 1   # no torch here yet
if [ "$1" = -m ]; then echo "Requirement already satisfied: noise"; echo "Collecting ${@: -1}"; [ -n "$SETUP_FAIL" ] && exit 1; fi
exit 0
"""


def _setup(folder: Path, chosen: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """scripts/setup_env.sh sourced in ``folder``, its .venv's python a stub that logs what it is asked."""
    log = folder / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(["bash", "-c", f"source scripts/setup_env.sh {chosen}"], cwd=folder, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "SETUP_LOG": str(log), **env})
    calls = [line for line in log.read_text().splitlines() if line.startswith("-m pip")] if log.exists() else []
    return done, calls


def test_setup_env_installs_one_set_or_the_other_and_switches_between_them(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "setup_env.sh").write_text((ROOT / "scripts" / "setup_env.sh").read_text())
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(STUB_PYTHON)
    (bin_dir / "python").chmod(0o755)
    (bin_dir / "activate").write_text(f'PATH="{bin_dir}:$PATH"\n')

    done, calls = _setup(tmp_path, "serve", SETUP_FAIL="1")  # pip fails: said, no stamp, not 0
    assert done.returncode != 0 and "could not install softmax-autotuner" in done.stderr
    assert not list((tmp_path / ".venv").glob(".installed-*"))
    done, calls = _setup(tmp_path, "serve")
    assert done.returncode == 0, done.stderr
    assert calls == ["-m pip install --disable-pip-version-check --no-compile -e ."]  # no torch, no extras
    assert "installing softmax-autotuner into .venv" in done.stderr and "  Collecting ." in done.stderr
    assert "Requirement already satisfied" not in done.stdout + done.stderr
    assert _setup(tmp_path, "serve")[1] == []  # once
    done, calls = _setup(tmp_path, "test")
    assert [call.split()[-1] for call in calls] == ["torch==2.13.0", ".[dev,kernels]"], calls
    assert _setup(tmp_path, "serve")[1] == [] and _setup(tmp_path, "test")[1] == []  # the test set holds the serving one
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'y'\n")  # a change installs again
    assert _setup(tmp_path, "serve")[1] == ["-m pip install --disable-pip-version-check --no-compile -e ."]
    assert _setup(tmp_path, "other")[0].returncode == 2


def test_default_gpu_variable_is_documented_and_read_by_the_service(monkeypatch):
    from service.config import Settings

    assert "AUTOTUNER_DEFAULT_GPU" in README
    monkeypatch.setenv("AUTOTUNER_DEFAULT_GPU", "h100")
    assert Settings().default_gpu == "h100"


def test_project_license_is_an_spdx_string_with_a_setuptools_that_reads_it():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    requirement = next(r for r in project["build-system"]["requires"] if r.startswith("setuptools"))
    assert tuple(int(x) for x in requirement.split(">=")[1].split(".")) >= (77,), requirement


def test_test_sh_removes_its_postgres_folder_on_exit(tmp_path):
    """scripts/test.sh's exit handler, run on its own with `runuser` stubbed: the server is asked to stop
    and the whole folder (data, logs) is gone afterwards."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    handler = re.search(r"^cleanup\(\) \{\n.*?^\}\n", script, flags=re.MULTILINE | re.DOTALL)
    assert handler, "scripts/test.sh has no cleanup() handler"
    assert "trap cleanup EXIT" in script
    pg_dir = tmp_path / "autotuner-pg"
    (pg_dir / "data" / "base").mkdir(parents=True)
    (pg_dir / "server.log").write_text("log")
    calls = tmp_path / "runuser.calls"
    harness = f'runuser() {{ echo "$*" >> {calls}; }}\n{handler.group(0)}pg_dir={pg_dir}\ncleanup\n'
    subprocess.run(["bash", "-euo", "pipefail", "-c", harness], check=True, timeout=30)
    assert not pg_dir.exists()
    assert "pg_ctl" in calls.read_text() and "stop" in calls.read_text()
    subprocess.run(["bash", "-euo", "pipefail", "-c", f'{handler.group(0)}pg_dir=""\ncleanup\n'], check=True, timeout=30)
