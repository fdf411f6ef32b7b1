"""The named held-out sets over the domain: what each holds, that the sweeps never measure them for a fit,
and the commands that take them by name (their flag errors, on a machine without a GPU)."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.tune import grid, sampling
from autotuner.cli import app
from autotuner.report.heldout import HELD_OUT_SETS, held_out_shapes, tensor_bytes
from kernels.base import DTYPES
from tests.autotuner.test_cli_sweep import FAKE, finish

REPO = Path(__file__).resolve().parents[2]
EXTRA_M = (2, 8, 16, 64, 256)  # the extra rows the shipped tables are fitted on (docs/SWEEP.md)


def test_domain_set_holds_at_least_150_shapes_over_three_dtypes():
    shapes = held_out_shapes("domain")
    assert len(shapes) == len(set(shapes)) >= 150
    assert {d for _, _, d in shapes} == set(DTYPES)


def test_each_set_covers_the_part_of_the_domain_it_names():
    attention, vocab, long_rows = HELD_OUT_SETS["attention"], HELD_OUT_SETS["vocab"], HELD_OUT_SETS["long"]
    assert all(32 <= n <= 1000 and m >= 10000 for m, n in attention) and {32, 1000} <= {n for _, n in attention}
    assert all(30000 <= n <= 262144 for _, n in vocab) and {50257, 151936} <= {n for _, n in vocab}
    assert 1 in {m for m, _ in vocab} and any(n % 2 for _, n in vocab)
    assert all(2**19 <= n <= 2**24 for _, n in long_rows) and {2**19, 2**24} <= {n for _, n in long_rows}
    assert all(m % 2 and n % 2 for m, n in HELD_OUT_SETS["odd"])
    assert all(1 <= m <= 8 for m, _ in HELD_OUT_SETS["small_m"])
    assert all(m >= 100000 for m, _ in HELD_OUT_SETS["huge_m"]) and 2**20 in {m for m, _ in HELD_OUT_SETS["huge_m"]}


def test_held_out_shapes_are_never_swept_for_the_fit_and_fit_the_sweep_cap():
    shapes = set(held_out_shapes("domain"))
    assert not shapes & set(grid.shapes())
    assert not shapes & set(grid.shapes(EXTRA_M))
    assert not shapes & set(sampling.coarse_shapes())
    assert all(tensor_bytes(*s) <= sampling.SWEEP_MAX_TENSOR_BYTES and sampling.fits(*s) for s in shapes)


def test_unknown_set_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown held-out set 'nope'; known: attention, vocab"):
        held_out_shapes("nope")


@pytest.mark.parametrize("command", ["bench", "evaluate"])
def test_set_flag_errors_exit_2_before_looking_for_a_gpu(command, tmp_path):
    extra = ["--gpu", "h100", "--db", str(tmp_path / "e.sqlite")] if command == "evaluate" else []
    result = CliRunner().invoke(app, [command, *extra, "--set", "nope"])
    assert result.exit_code == 2 and "Invalid value for '--set'" in result.output, result.output
    assert "'nope' is not one of 'attention', 'vocab'" in result.output, result.output
    result = CliRunner().invoke(app, [command, *extra, "--set", "odd", "--m", "3"])
    assert result.exit_code == 2 and "--set" in result.output and "--m" in result.output, result.output


@pytest.mark.parametrize("args, message", [(["--grid", "dense"], "Invalid value for '--grid': Value error, 'dense' is not one of 'domain', 'classic'"),
                                           (["--grid", "domain", "--n", "1024"], "--m/--n set the classic grid")])
def test_bad_grid_flags_exit_2(args, message):
    result = CliRunner().invoke(app, ["sweep", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def run_domain_sweep(db: Path) -> str:
    env = {**os.environ, "AUTOTUNER_FAKE_GPU": "h100", "COLUMNS": "300", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "autotuner", "sweep", "--gpu", "h100", "--db", str(db),
                                "--dtype", "fp32", "--budget", "120s", *FAKE], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    return finish(process)


def test_domain_sweep_command_covers_the_corners_and_resumes(tmp_path):
    """The real command with the fake measurer (whose winners agree between neighbours, so no refinement
    follows: tests/autotuner/test_strategy.py replays real winners): the coarse lattice is announced with
    its estimate, its corners are measured, and a rerun measures nothing again."""
    db = tmp_path / "domain.sqlite"
    output = run_domain_sweep(db)
    coarse = len(sampling.coarse_shapes(("fp32",)))
    assert "domain grid" in output and f"coarse lattice: {coarse} shapes" in output, output[-2000:]
    assert "an estimate" in output and "run 1: measured" in output, output[-2000:]
    with sqlite3.connect(db) as connection:
        shapes = set(connection.execute("SELECT DISTINCT m, n FROM measurements"))
        grid_row, status = connection.execute("SELECT grid, status FROM sweep_runs").fetchone()
    assert {(1, 1), (1, sampling.DOMAIN_N_MAX), (sampling.DOMAIN_M_MAX, 1)} <= shapes
    assert '"strategy": "domain"' in grid_row and status == "finished"
    again = run_domain_sweep(db)
    assert "run 2: measured 0 " in again, again[-2000:]
