"""The GPU-machine runners are one documented tool (bench/device/): one entry point, every job and every
knob it reads in the tool's README with its call, and scripts that parse (and pass shellcheck where it is
installed). The jobs themselves need a GPU; what a CPU can check of them is here."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "bench" / "device"
README = (DEVICE / "README.md").read_text()
JOBS = sorted(p for p in (DEVICE / "jobs").iterdir() if p.suffix in (".sh", ".py"))  # not __pycache__/
SHELL = [DEVICE / "run.sh", DEVICE / "lib.sh", DEVICE / "cute_setup.sh", *(p for p in JOBS if p.suffix == ".sh"),
         ROOT / "scripts" / "build_wheelhouse.sh"]
# read by every job through lib.sh, or set by bash / the device call rather than by a user
NOT_KNOBS = {"OUT", "PYTHONPATH", "BASH_SOURCE", "PIPESTATUS", "PWD", "HOME"}


def knobs(path: Path) -> set[str]:
    """The environment variables a job reads: upper-case names expanded with a default or a test."""
    text = path.read_text()
    names = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-+?=]|\})", text))
    return names - NOT_KNOBS - set(re.findall(r"^\s*([A-Z][A-Z0-9_]*)=", text, flags=re.M))


def readme_row(table_first_cell: str) -> str:
    row = re.search(rf"^\| `{re.escape(table_first_cell)}` \|(.*)$", README.split("## Knobs")[1], flags=re.M)
    return row.group(1) if row else ""


def test_scripts_hold_the_set_up_commands_not_the_device_runners():
    assert not [p.name for p in (ROOT / "scripts").iterdir() if p.name.startswith("device_")]


def test_every_job_has_its_call_in_the_readme_and_in_the_listing():
    listed = subprocess.run(["bash", str(DEVICE / "run.sh"), "list"], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [p.stem for p in JOBS]
    assert all(len(line.split()) > 3 for line in listed.stdout.splitlines()), listed.stdout  # each with its summary
    calls = README.split("## Calls")[1].split("## Knobs")[0]
    for job in [p.stem for p in JOBS] + ["exec", "cute_setup"]:
        assert f"| `{job}` |" in calls and f"bash bench/device/run.sh {job}" in calls, job


@pytest.mark.parametrize("job", [p for p in JOBS if p.suffix == ".sh"], ids=lambda p: p.stem)
def test_every_knob_a_job_reads_is_in_the_readme(job):
    row = readme_row(job.stem)
    assert row, f"bench/device/README.md has no knob row for {job.stem}"
    missing = sorted(name for name in knobs(job) if f"`{name}`" not in row)
    assert not missing, f"{job.stem} reads {missing}, which its README row does not name"


def test_an_unknown_job_is_refused_with_the_list():
    refused = subprocess.run(["bash", str(DEVICE / "run.sh"), "no_such_job"], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "no job 'no_such_job'" in refused.stderr
    assert all(p.stem in refused.stderr for p in JOBS)


@pytest.mark.parametrize("path", SHELL, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_shell_files_parse(path):
    checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (apt-get install shellcheck)")
def test_shell_files_pass_shellcheck():
    checked = subprocess.run(["shellcheck", "-S", "warning", "-x", *(str(p.relative_to(ROOT)) for p in SHELL)],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout[-4000:]
