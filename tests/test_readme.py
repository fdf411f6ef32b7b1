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


def test_main_sh_reads_the_host_and_port_the_readme_documents():
    script = (ROOT / "scripts" / "main.sh").read_text()
    assert '"${HOST:-127.0.0.1}"' in script and '"${PORT:-8000}"' in script
    assert "`HOST` (default `127.0.0.1`)" in README and "`PORT` (default `8000`)" in README


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
