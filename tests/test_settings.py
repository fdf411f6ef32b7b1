"""One settings object for the environment (kernels/settings.py): the product reads no variable
anywhere else, the table in docs/SERVICE.md lists exactly what it reads, renamed variables still work
with a warning, and a bad value stops the service naming the variable."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.settings import RENAMED, SERVICE_FIELDS, VARIABLES, Settings, _warned, service_environment

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("autotuner", "kernels", "db", "service")
SETTINGS_MODULE = ROOT / "kernels" / "settings.py"
ENVIRONMENT_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_readers(path: Path) -> list[str]:
    """Where ``path`` touches the process environment: ``os.environ``/``os.getenv``/... as attributes
    of anything, or imported by name (``from os import environ``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT_NAMES:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: from os import {a.name}"
                      for a in node.names if a.name in ENVIRONMENT_NAMES]
    return found


def test_the_product_reads_its_environment_only_through_its_settings():
    readers = [hit for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
               if path != SETTINGS_MODULE for hit in environment_readers(path)]
    assert readers == [], "read the environment through kernels.settings, not here:\n" + "\n".join(readers)


def test_the_check_finds_every_spelling_of_an_environment_read(tmp_path):
    probe = ROOT / "kernels" / "_probe_environment_reads.py"  # under ROOT: the check names paths relative to it
    probe.write_text("import os\nfrom os import getenv\nos.environ.get('X')\nos.getenv('Y')\nimport os as o\no.environ['Z']\n")
    try:
        assert len(environment_readers(probe)) == 4
    finally:
        probe.unlink()


def test_the_configuration_table_lists_exactly_the_variables_read():
    """docs/SERVICE.md's table is VARIABLES, row for row; a variable added to one and not the other fails."""
    expected = ["| variable | meaning | default |", "| --- | --- | --- |",
                *(f"| `{name}` | {meaning} | {default} |" for name, default, meaning in VARIABLES)]
    text = (ROOT / "docs" / "SERVICE.md").read_text()
    assert "\n".join(expected) in text, "docs/SERVICE.md, Configuration, should hold this table:\n" + "\n".join(expected)
    assert all(name.startswith("AUTOTUNER_") for name, _, _ in VARIABLES)
    for old, new in RENAMED.items():
        assert f"`{old}` (now `{new}`" in text


def test_every_variable_named_in_the_product_is_in_the_table():
    """A string "AUTOTUNER_..." in the product's code names a variable of the table (or an old name)."""
    known = {name for name, _, _ in VARIABLES} | set(RENAMED)
    named = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    named.update(re.findall(r"\bAUTOTUNER_[A-Z0-9_]*[A-Z0-9]", node.value))
    assert named - known == set()


def test_the_service_validates_exactly_its_variables():
    from service.config import Settings as ServiceSettings, variable_of

    assert set(ServiceSettings.model_fields) == set(SERVICE_FIELDS)
    assert {variable_of(field) for field in SERVICE_FIELDS} <= {name for name, _, _ in VARIABLES}


def test_attributes_read_the_environment_when_read():
    environ: dict[str, str] = {}
    settings = Settings(environ)
    assert settings.native == "1" and settings.database is None and settings.cuda_direct_launch
    environ.update(AUTOTUNER_NATIVE="0", AUTOTUNER_DB="/x.sqlite", AUTOTUNER_CUDA_DIRECT_LAUNCH="0",
                   AUTOTUNER_CACHE_DIR="/cache", XDG_DATA_HOME="/data")
    assert settings.native == "0" and settings.database == "/x.sqlite" and not settings.cuda_direct_launch
    assert settings.cache_dir == Path("/cache") and settings.data_home == Path("/data")
    environ["AUTOTUNER_DB"] = ""  # empty is unset
    assert settings.database is None


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_a_renamed_variable_still_works_with_a_warning(old):
    _warned.discard(old)
    settings = Settings({old: "build" if "NATIVE" in old else "/somewhere"})
    with pytest.warns(FutureWarning, match=re.escape(f"${old} is renamed ${RENAMED[old]}")):
        assert settings.get(RENAMED[old]) in ("build", "/somewhere")
    assert Settings({old: "/old", RENAMED[old]: "/new"}).get(RENAMED[old]) == "/new"  # the new name wins


def test_the_service_settings_round_trip_through_the_environment(monkeypatch, tmp_path):
    """What ``service.main`` exports to its worker processes is read back as the same settings."""
    from service.config import Settings as ServiceSettings
    from service.main import settings_environment

    given = ServiceSettings(database_url=str(tmp_path / "x.sqlite"), default_gpu="H100", max_m=4096,
                            upload_token="a-token-of-twenty-chars", shipped_tables=False, reload_interval_s=2.5)
    for name, value in settings_environment(given).items():
        monkeypatch.setenv(name, value)
    assert ServiceSettings() == given
    assert service_environment({"database_url": "sqlite:///x", "max_m": 5, "default_gpu": None}) == \
        {"AUTOTUNER_DB": "sqlite:///x", "AUTOTUNER_MAX_M": "5"}


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("AUTOTUNER_MAX_M", "abc", "AUTOTUNER_MAX_M='abc': Input should be a valid integer"),
    ("AUTOTUNER_MAX_N", "0", "AUTOTUNER_MAX_N='0': Input should be greater than or equal to 1"),
    ("AUTOTUNER_RELOAD_INTERVAL_S", "soon", "AUTOTUNER_RELOAD_INTERVAL_S='soon'"),
    ("AUTOTUNER_SHIPPED_TABLES", "perhaps", "AUTOTUNER_SHIPPED_TABLES='perhaps'"),
    ("AUTOTUNER_UPLOAD_TOKEN", "short secret", "AUTOTUNER_UPLOAD_TOKEN"),
])
def test_a_bad_service_variable_is_named_and_a_token_never_shown(monkeypatch, tmp_path, variable, value, said):
    from service.config import Settings as ServiceSettings, SettingsError

    monkeypatch.setenv("AUTOTUNER_DB", str(tmp_path / "x.sqlite"))
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        ServiceSettings()
    assert said in str(raised.value)
    if "TOKEN" in variable:
        assert value not in str(raised.value)


def test_reading_the_settings_imports_nothing_heavy(tmp_path):
    """The embedded lookup reads the settings on its first call: they cost no import but their own."""
    probe = ("import sys, json; before = set(sys.modules); import kernels.settings as s; s.settings.database; "
             "s.settings.data_home; print(json.dumps(sorted(set(sys.modules) - before)))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert set(json.loads(done.stdout)) <= {"kernels", "kernels.settings"}
