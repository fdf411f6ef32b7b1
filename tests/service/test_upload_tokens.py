"""Upload tokens: long enough, scoped per GPU model or per named uploader, refused at start otherwise."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from service.config import MIN_TOKEN_CHARS, Settings, SettingsError

LONG = "t" * MIN_TOKEN_CHARS


@pytest.mark.parametrize("variables, message", [
    ({"upload_token": " " * 20}, "AUTOTUNER_UPLOAD_TOKEN: an upload token needs at least 16 characters and no white space"),
    ({"upload_token": "x"}, "AUTOTUNER_UPLOAD_TOKEN: an upload token needs at least 16"),
    ({"upload_token": "t" * (MIN_TOKEN_CHARS - 1)}, "at least 16"),
    ({"upload_tokens": "h100:short"}, "AUTOTUNER_UPLOAD_TOKENS h100: an upload token needs"),
    ({"upload_tokens": f"zz9:{LONG}"}, "unknown GPU model(s) zz9"),
    ({"upload_tokens": f"h100{LONG}"}, "entry 1 is not GPU[+GPU...]:TOKEN"),
    ({"upload_tokens": '{"lab": {"token": "x"}}'}, "is not a JSON object"),
    ({"upload_token": LONG, "upload_tokens": f"h100:{LONG}"}, "two uploaders share one upload token"),
])
def test_a_weak_shared_or_misscoped_token_refuses_to_start(tmp_path, variables, message):
    with pytest.raises(SettingsError) as refused:
        Settings(database_url=f"sqlite:///{tmp_path / 'x.sqlite'}", **variables)
    assert message in str(refused.value)
    assert "short" not in str(refused.value) and "tttt" not in str(refused.value)  # never a token, whole or part


def test_tokens_are_scoped_per_gpu_or_per_named_uploader(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.sqlite'}"
    per_gpu = Settings(database_url=url, upload_tokens=f"h100:{'a' * 20},h200+GH200:{'b' * 20}")
    assert [(g.name, g.gpus) for g in per_gpu.upload_grants] == [("h100", {"h100"}), ("h200+GH200", {"h200", "gh200"})]
    named = Settings(database_url=url, upload_token=LONG,
                     upload_tokens=json.dumps({"lab-a": {"token": "c" * 24, "gpus": ["NVIDIA H100 80GB HBM3"]}}))
    assert [(g.name, g.gpus) for g in named.upload_grants] == [("lab-a", {"h100"}), ("default", None)]
    assert Settings(database_url=url, upload_token="").upload_grants == ()  # empty: unset, uploads refused


def test_serve_with_a_short_token_is_one_line_and_exit_2(tmp_path):
    result = CliRunner().invoke(app, ["serve", "--db", str(tmp_path / "x.sqlite")], env={"AUTOTUNER_UPLOAD_TOKEN": "abc"})
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "AUTOTUNER_UPLOAD_TOKEN: an upload token needs at least 16 characters" in " ".join(result.output.split())
