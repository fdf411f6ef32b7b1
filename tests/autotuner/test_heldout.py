"""The named held-out sets over the domain: what each holds, that the sweeps never measure them for a fit,
and the commands that take them by name (their flag errors, on a machine without a GPU)."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from autotuner.tune import grid, sampling
from autotuner.cli import app
from autotuner.cli.evaluate import chosen_shapes, described_set
from autotuner.lookup.select import load_shipped_tables
from autotuner.report.heldout import (HELD_OUT_SETS, RANDOM_MAX_TENSOR_BYTES, WORKLOAD_SETS, WORKLOADS_FILE, held_out_shapes,
                                      measured_pairs, random_pairs, tensor_bytes)
from autotuner.tune.measure import WorkItem
from db import queries
from kernels.base import DTYPES
from tests.autotuner.fakes import deterministic_result
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


# --- fresh random sets and the real-workload sets ---------------------------------------------------

def test_a_seed_draws_the_same_log_uniform_set_every_time_and_another_seed_another():
    drawn = random_pairs(2026, 400)
    assert drawn == random_pairs(2026, 400) and len(set(drawn)) == 400
    assert len(set(drawn) & set(random_pairs(2027, 400))) < 20  # a few small shapes come up under any seed
    assert all(1 <= m <= 2**20 and 1 <= n <= 2**24 and m * n * 4 <= RANDOM_MAX_TENSOR_BYTES for m, n in drawn)
    # log-uniform: each decade of M and N is drawn, not only the large ones
    assert {len(str(m)) for m, _ in drawn} >= {1, 2, 3, 4, 5, 6} and {len(str(n)) for _, n in drawn} >= set(range(1, 8))
    assert random_pairs(2026, 100) == drawn[:100]  # a smaller count is a prefix of the same stream


def test_an_excluded_pair_is_replaced_and_the_rest_of_the_stream_kept():
    drawn = random_pairs(5, 50)
    without = random_pairs(5, 50, exclude={drawn[10]})
    assert drawn[10] not in without and without[:10] == drawn[:10] and without[10:49] == drawn[11:]
    assert all(m * n * 4 <= 2**20 for m, n in random_pairs(5, 50, max_tensor_bytes=2**20))


def test_random_draws_are_refused_clearly_where_nothing_fits():
    with pytest.raises(ValueError, match="only 3 of 50 shapes drawn under a 8-byte cap"):
        random_pairs(1, 50, max_tensor_bytes=8)  # fp32 1x1, 1x2 and 2x1 alone fit
    with pytest.raises(ValueError, match="--count 0"):
        random_pairs(1, 0)


def test_seeded_and_workload_sets_never_hold_a_point_a_shipped_table_was_fitted_on():
    tables = load_shipped_tables()
    fitted = measured_pairs(tables)
    assert len(fitted) > 500
    shapes = chosen_shapes("workloads", 11, 300, None, None, list(DTYPES), lambda: tables)
    pairs = {(m, n) for m, n, _ in shapes}
    assert not pairs & fitted
    assert set(random_pairs(11, 300, exclude=fitted)) <= pairs
    assert len(pairs) >= 300 + 120  # real-workload pairs that are fitted points (e.g. 1x32000) are the ones dropped
    assert {d for _, _, d in shapes} == set(DTYPES)


def test_workload_sets_hold_the_sizes_of_real_models_with_their_sources():
    vocab, attention, router = (HELD_OUT_SETS[name] for name in WORKLOAD_SETS)
    assert {n for _, n in vocab} == {32000, 32064, 50257, 50304, 128256, 151936, 152064, 256000, 262144}
    assert {1, 64} <= {m for m, _ in vocab} and max(m for m, _ in vocab) == 16384
    assert min(n for _, n in attention) == 32 and max(n for _, n in attention) == 131072
    assert {n for _, n in router} == {8, 16, 32, 60, 64, 128, 256} and {1, 65536} <= {m for m, _ in router}
    document = json.loads(WORKLOADS_FILE.read_text())
    for name in ("llm_vocab", "moe_router"):
        assert set(document[name]["sources"]) == {str(n) for n in document[name]["n"]}
    assert all(len(what) > 20 for _, _, what in document["attention_rows"]["pairs"])
    shapes = held_out_shapes("workloads")
    assert all(tensor_bytes(*s) <= sampling.SWEEP_MAX_TENSOR_BYTES and sampling.fits(*s) for s in shapes)
    assert HELD_OUT_SETS["domain"] == tuple(dict.fromkeys(
        p for name in ("attention", "vocab", "long", "odd", "small_m", "huge_m") for p in HELD_OUT_SETS[name]))


class _Deterministic:
    def measure(self, item: WorkItem) -> dict:
        return deterministic_result(item)


def test_a_seeded_held_out_run_never_feeds_the_fit(tmp_path):
    """``evaluate --seed`` records its shapes in a run marked held-out: a fit of the same database reads
    only the other runs' shapes."""
    from autotuner.fit.fit import fit_inputs
    from autotuner.report.evaluate import HELD_OUT_PURPOSE
    from autotuner.tune.strategy import every_candidate
    from autotuner.tune.sweep import Sweep
    from db import make_engine
    from kernels import get_variant
    from tests.autotuner.fakes import register_fake_variants
    from tests.autotuner.test_strategy import ENV, GPU

    register_fake_variants()
    candidates = every_candidate([get_variant("fake_split")])
    engine = make_engine(str(tmp_path / "held.sqlite"))
    swept = [(4, 1024, "fp32"), (1024, 2048, "fp32")]
    drawn = [(m, n, "fp32") for m, n in random_pairs(3, 4, exclude={(m, n) for m, n, _ in swept})]
    for shapes, grid in ((swept, {"strategy": "classic"}),
                         (drawn, {"set": described_set(None, 3, 4), "purpose": HELD_OUT_PURPOSE})):
        items = [WorkItem("copy", *s) for s in shapes] + [
            WorkItem("candidate", *s, c.variant, c.config_key) for s in shapes for c in candidates]
        Sweep(engine, GPU, ENV, "cold", candidates, grid=grid).run(_Deterministic(), items)
    with Session(engine) as session:
        fitted = {(o.m, o.n) for o in fit_inputs(session, "h100", "fp32").observations}
        held = {(m.m, m.n) for m, _, run in queries.measurements_for(session, "h100", "fp32", "cold")
                if run.grid.get("purpose") == HELD_OUT_PURPOSE}
    assert fitted == {(4, 1024), (1024, 2048)} and held == {(m, n) for m, n, _ in drawn}


@pytest.mark.parametrize("command", ["bench", "evaluate"])
def test_seed_flag_errors_exit_2_before_looking_for_a_gpu(command, tmp_path):
    extra = ["--gpu", "h100", "--db", str(tmp_path / "e.sqlite")] if command == "evaluate" else []
    result = CliRunner().invoke(app, [command, *extra, "--seed", "3", "--n", "1024"])
    assert result.exit_code == 2 and "--seed" in result.output and "--n" in result.output, result.output
    result = CliRunner().invoke(app, [command, *extra, "--seed", "3", "--count", "0"])
    assert result.exit_code == 2 and "--count" in result.output, result.output
    if command == "bench":
        result = CliRunner().invoke(app, [command, "--seed", "3", "--held-out"])
        assert result.exit_code == 2 and "--held-out" in result.output, result.output
