"""The answers README.md and docs/*.md quote are the code's answers today (the shipped tables, no
database). Three kinds of example are found and run, wherever they are:

- ``GET /dispatch?QUERY`` followed by ``200 {JSON}``: the service's answer;
- ``$ autotuner select ARGS`` followed by ``{JSON}``: the command's output;
- ``>>>`` lines with their expected output (doctest), e.g. ``select_kernel`` calls.

A quoted float matches to the digits quoted (179.94 matches 179.936); every quoted key must be in the
answer with that value. A refit that changes an answer fails here until the docs are updated: the
assertion message carries the answer to quote.
"""
from __future__ import annotations

import doctest
import json
import re
import shlex
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.lookup.select import reset_default_store
from service.app import create_app
from service.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DISPATCH = re.compile(r"^\s*GET (/dispatch\?\S+)\n\s*200 (\{.*?\})\s*$", re.M | re.S)
SELECT = re.compile(r"^\s*\$ autotuner select ([^\n]+)\n\s*(\{.*?\})\s*$", re.M | re.S)


def _examples(pattern: re.Pattern[str]) -> list[tuple[str, str, str]]:
    """(document name, command or query, quoted JSON) of every example of one kind."""
    found = []
    for path in DOCUMENTS:
        for match in pattern.finditer(path.read_text()):
            found.append((path.name, match.group(1), match.group(2)))
    return found


def _matches(quoted: Any, actual: Any) -> bool:
    """Every quoted key present with the quoted value; a quoted decimal rounds the actual float to its digits."""
    if isinstance(quoted, Decimal):
        return isinstance(actual, (int, float)) and Decimal(repr(float(actual))).quantize(quoted) == quoted
    if isinstance(quoted, dict):
        return isinstance(actual, dict) and all(k in actual and _matches(v, actual[k]) for k, v in quoted.items())
    if isinstance(quoted, list):
        return isinstance(actual, list) and len(quoted) == len(actual) and all(map(_matches, quoted, actual))
    return type(quoted) is type(actual) and quoted == actual


def _quoted(text: str) -> Any:
    return json.loads(text, parse_float=Decimal)


@pytest.fixture
def shipped_tables_only(tmp_path, monkeypatch) -> Iterator[None]:
    """The process's lookup reads the shipped tables alone (the default database, absent here, reads as
    empty; a missing $AUTOTUNER_DB would be refused as a typo)."""
    monkeypatch.delenv("AUTOTUNER_DB")
    reset_default_store()
    yield
    reset_default_store()


def test_every_kind_of_example_is_found():
    assert _examples(DISPATCH) and _examples(SELECT)
    assert any(">>> " in path.read_text() for path in DOCUMENTS)


@pytest.mark.parametrize("document, query, quoted", _examples(DISPATCH))
def test_dispatch_examples_answer_what_they_quote(document, query, quoted, tmp_path):
    with TestClient(create_app(Settings(database_url=f"sqlite:///{tmp_path / 'docs.sqlite'}"))) as client:
        response = client.get(query)
    assert response.status_code == 200, response.text
    assert _matches(_quoted(quoted), response.json()), f"{document}: GET {query} now answers {response.text}"


@pytest.mark.parametrize("document, arguments, quoted", _examples(SELECT))
def test_select_examples_print_what_they_quote(document, arguments, quoted, shipped_tables_only):
    result = CliRunner().invoke(app, ["select", *shlex.split(arguments)])
    assert result.exit_code == 0, result.output
    actual = json.loads(result.output)
    assert _matches(_quoted(quoted), actual), f"{document}: autotuner select {arguments} now prints {json.dumps(actual)}"


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if ">>> " in p.read_text()], ids=lambda p: p.name)
def test_doctest_examples_in_the_docs(path, shipped_tables_only):
    parser = doctest.DocTestParser()
    test = parser.get_doctest(path.read_text(), {}, path.name, str(path), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
