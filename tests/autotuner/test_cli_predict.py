"""``autotuner predict`` writes where nothing tracked is overwritten unless asked: by default into
``predicted/`` of the data folder, the shipped ``autotuner/tables`` only with ``--out autotuner/tables``,
which the tables README's regeneration commands give. The prediction itself is replaced by a recorder
(it takes minutes; tests/autotuner/test_predicted_tables.py covers it)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.fit import predict_score

ROOT = Path(__file__).resolve().parents[2]
TABLES_README = ROOT / "autotuner" / "tables" / "README.md"


@pytest.fixture
def folders(monkeypatch, tmp_path) -> list[Path]:
    """The folders ``regenerate`` is asked to write into, run from the repository root with the data
    folder in ``tmp_path``."""
    asked: list[Path] = []
    monkeypatch.setattr(predict_score, "regenerate",
                        lambda root, folder, gpus, dtypes, paths: asked.append(Path(folder)) or ([], {}))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(ROOT)
    return asked


def test_predict_writes_beside_the_default_database_not_into_the_shipped_tables(folders, tmp_path):
    shipped = sorted((ROOT / "autotuner" / "tables").glob("a100_*.json"))
    before = {path: path.stat().st_mtime_ns for path in shipped}
    result = CliRunner().invoke(app, ["predict", "--gpu", "a100"])
    assert result.exit_code == 0, result.output
    assert folders == [tmp_path / "data" / "softmax-autotuner" / "predicted"] and folders[0].is_dir()
    assert "--out autotuner/tables" in " ".join(result.output.split())  # says how to rewrite the shipped ones
    assert {path: path.stat().st_mtime_ns for path in shipped} == before


def test_predict_out_names_the_folder(folders, tmp_path):
    result = CliRunner().invoke(app, ["predict", "--gpu", "l4", "--out", str(tmp_path / "mine")])
    assert result.exit_code == 0, result.output
    assert folders == [tmp_path / "mine"]


def test_the_tables_readme_regenerates_the_shipped_tables_explicitly(folders):
    commands = [shlex.split(line.split("#")[0].replace("&", " ").split(";")[0])
                for line in TABLES_README.read_text().splitlines() if re.match(r"\s+nice autotuner predict ", line)]
    assert len(commands) >= 2, "the tables README lost its regeneration commands"
    for command in commands:
        assert command[:3] == ["nice", "autotuner", "predict"]
        result = CliRunner().invoke(app, command[2:])
        assert result.exit_code == 0, (command, result.output)
    assert folders and all(folder == Path("autotuner/tables") for folder in folders), folders
