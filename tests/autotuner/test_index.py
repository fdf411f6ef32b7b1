"""The decision index (autotuner/fit/index.py) answers as the fit's rule does, and the lookup reads
only it: an older table is refused naming the command that converts it, which converts it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.fit.index import index_document
from autotuner.fit.index_check import index_mismatches
from autotuner.lookup.table import CONVERT_COMMAND, DispatchTable, TableFormatError
from tests.autotuner.test_table import grid_document

CLASSIC = Path(__file__).resolve().parents[1] / "data" / "classic_tables"
SHIPPED = Path(__file__).resolve().parents[2] / "autotuner" / "tables"


@pytest.mark.parametrize("path", sorted(CLASSIC.glob("*.json")) + sorted(SHIPPED.glob("h100_fp16_*.json"))
                         + sorted(SHIPPED.glob("l4_fp32_*.json")),  # a predicted table: one view
                         ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_index_reproduces_the_rule_at_every_cell_centre_and_measured_point(path):
    document = json.loads(path.read_text())
    assert document["format_version"] == 2 and len(document["index"]["views"]) >= 1
    assert index_mismatches(document) == []


def test_a_hand_made_index_reproduces_the_rule_in_every_view():
    points = {(1, 1024): [1.0, 1.2], (1, 4096): [1.5, 1.0], (16, 1024): [1.0, 1.2], (16, 4096): [1.3, 1.0]}
    document = index_document({**grid_document(points), "gpu": "h100"})
    assert index_mismatches(document) == []
    table = DispatchTable(document)
    assert table.answer(1, 1024)[:3] == (0, 1.0, True)  # a measured point: its winner, exactly
    assert table.answer(1, 4096)[:3] == (1, 1.0, True)


def test_an_older_table_is_refused_naming_the_command_that_converts_it(tmp_path):
    points = {(1, 1024): [1.0, 1.2], (16, 4096): [1.3, 1.0]}
    old = {**grid_document(points), "gpu": "h100"}
    with pytest.raises(TableFormatError, match="autotuner convert-tables"):
        DispatchTable(old)
    assert "convert-tables" in CONVERT_COMMAND
    path = tmp_path / "h100_bf16_cold.json"
    path.write_text(json.dumps(old))
    from autotuner.cli import app

    result = CliRunner().invoke(app, ["convert-tables", str(path)])
    assert result.exit_code == 0, result.output
    converted = json.loads(path.read_text())
    assert converted["format_version"] == 2 and converted["points"] == old["points"]
    assert DispatchTable(converted).answer(16, 4096)[:3] == (1, 1.0, True)


def test_converting_something_that_is_not_a_table_is_a_clear_error(tmp_path):
    from autotuner.cli import app

    path = tmp_path / "x.json"
    path.write_text(json.dumps({"runs": []}))
    result = CliRunner().invoke(app, ["convert-tables", str(path)])
    assert result.exit_code == 1 and "is not a dispatch table" in result.output


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("h100_*.json")) + sorted(SHIPPED.glob("h200_bf16_*.json")),
                         ids=lambda path: path.stem)
def test_pick_answers_the_candidate_answer_does_in_every_view(path):
    """``DispatchTable.pick`` (the runtime's read of a pick) is ``answer``'s candidate, at the measured
    points and at 20,000 log-uniform shapes, in every view of the index."""
    import math
    import random

    table = DispatchTable(json.loads(path.read_text()))
    rng = random.Random(31)
    shapes = [(max(1, int(math.exp(rng.uniform(0, math.log(1 << 20))))),
               max(1, int(math.exp(rng.uniform(0, math.log(1 << 24)))))) for _ in range(20_000)]
    for view in range(len(table.document["index"]["views"])):
        points = [(m, n) for m, n, *_ in table.document["index"]["exact"][view]]
        assert points
        for m, n in points + shapes:
            assert table.pick(m, n, view) == table.answer(m, n, view)[0], (view, m, n)
