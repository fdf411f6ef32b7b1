"""``sweep --quick`` on the CPU, replaying the H100's recorded measurements: the H100's bf16 table
predicted from the H200's recordings alone, the quick strategy's shapes and candidates measured by
replay through the real sweep loop, then the refit; its picks scored on every H100 measurement."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from autotuner.fit.fit import summarize_regret
from autotuner.fit.predict_score import measured_by_shape, pick_regrets
from autotuner.fit.predict_table import predict_document
from autotuner.fit.quick import QUICK_SOURCE, label, predictions_of, refit_after_quick
from autotuner.fit.samples import load_samples, recording_paths
from autotuner.lookup.gpu import GpuInfo
from autotuner.lookup.gpu_models import GPU_MODELS, runs_on
from autotuner.tune.measure import WorkItem
from autotuner.tune.strategy import QuickStrategy, prediction_margin, run_strategy
from autotuner.tune.sweep import Candidate, Sweep
from db import make_engine, queries
from kernels import get_variant
from tests.autotuner.fakes import ReplayMeasurer

ROOT = Path(__file__).resolve().parents[2]
GPU = GpuInfo("h100", "NVIDIA H100 80GB HBM3", 132, 50 * 2**20, 80 * 2**30, "9.0")
ENV = {"fingerprint": "env-replay", "torch": "2.11", "triton": "3.6", "cupy": "14.2", "cuda": "13.0", "driver": "580",
       "python": "3.12"}


@pytest.fixture(scope="module")
def h100_samples():
    return [s for s in load_samples(recording_paths(ROOT, ["h100"])) if s.dtype == "bf16"]


@pytest.fixture(scope="module")
def predicted():
    h200 = [s for s in load_samples(recording_paths(ROOT, ["h200"])) if s.dtype == "bf16"]
    return predict_document(h200, GPU_MODELS["h100"], "bf16", with_index=False)  # scored by the rule (pick_regrets)


def test_quick_strategy_asks_the_least_sure_points_spread_out_with_their_runners_up():
    predictions = {(1, 1000, "bf16"): {"a": 10.0, "b": 10.1, "c": 30.0, "d": 40.0, "e": 50.0},
                   (2, 1000, "bf16"): {"a": 10.0, "b": 10.05},  # closer still, but next to the first
                   (4096, 8192, "bf16"): {"a": 10.0, "b": 12.0, "c": 10.2},
                   (64, 64, "bf16"): {"a": 10.0, "b": 20.0}}
    strategy = QuickStrategy(predictions, shapes=2, width=2)
    first = strategy.next_shapes({})
    assert first == [(2, 1000, "bf16"), (4096, 8192, "bf16")]  # (1, 1000) is within the spacing of (2, 1000)
    assert strategy.candidates_at((4096, 8192, "bf16")) == {"a", "c"}
    assert prediction_margin(predictions[(64, 64, "bf16")]) == pytest.approx(1.0)
    # round 2: near the shape whose measured winner was not the predicted one
    second = strategy.next_shapes({(2, 1000, "bf16"): {"b": 9.0, "a": 10.0}, (4096, 8192, "bf16"): {"a": 10.0}})
    assert second == [(1, 1000, "bf16")]  # (64, 64) is too far from the surprise to be worth a shape
    assert strategy.next_shapes({}) == []


def test_a_replayed_quick_sweep_measures_few_items_and_its_refit_picks_no_worse(tmp_path, h100_samples, predicted):
    recorded = {("candidate", s.m, s.n, "bf16", s.variant, s.config_key):
                {"status": "ok", "median_us": s.median_us, "p20_us": s.median_us, "p80_us": s.median_us, "repetitions": 20}
                for s in h100_samples}
    for s in h100_samples:
        recorded[("copy", s.m, s.n, "bf16", "", "")] = {"status": "ok", "median_us": 1.0, "p20_us": 1.0, "p80_us": 1.0}
    strategy = QuickStrategy(predictions_of(predicted))
    candidates = [Candidate(c["variant"], c["config_key"], c["config"], get_variant(c["variant"]).source_hash())
                  for c in predicted["candidates"]]

    def plan_items(shapes):  # the CLI's filter: a shape's copy and the candidates the strategy names there
        return [item for shape in shapes for item in
                [WorkItem("copy", *shape)] + [WorkItem("candidate", *shape, c.variant, c.config_key) for c in candidates
                                              if label(c.variant, c.config_key) in strategy.candidates_at(shape)]]

    engine = make_engine(str(tmp_path / "quick.sqlite"))
    sweep = Sweep(engine, GPU, ENV, "cold", candidates, grid={"strategy": "quick"})
    measurer = ReplayMeasurer(recorded)
    run_strategy(sweep, measurer, strategy, plan_items)
    asked = [item for item in measurer.calls if item.kind == "candidate"]
    assert strategy.rounds == 3 and 40 <= len({item.shape_key for item in asked}) <= 60
    assert all(label(i.variant, i.config_key) in strategy.candidates_at(i.shape_key) for i in asked)
    assert len(asked) <= 6 * 60  # a few candidates per shape, not the ~40 a full sweep times
    with Session(engine) as session, session.begin():
        quick = refit_after_quick(session, "h100", predicted)
    with Session(engine) as session:
        stored = [row for row in queries.current_tables(session, "h100") if row.dtype == "bf16"]
        assert len(stored) == 1 and stored[0].payload["source"] == QUICK_SOURCE
    measured = measured_by_shape(h100_samples, "h100", "bf16")
    swept = {shape[:2] for shape in strategy.chosen}
    at_swept = {shape: times for shape, times in measured.items() if shape in swept}
    before, _ = pick_regrets(predicted, measured, "h100")
    after, _ = pick_regrets(quick, measured, "h100")
    assert summarize_regret(after, "")["geomean"] <= summarize_regret(before, "")["geomean"]
    before_here, _ = pick_regrets(predicted, at_swept, "h100")
    after_here, _ = pick_regrets(quick, at_swept, "h100")
    assert summarize_regret(after_here, "")["geomean"] < summarize_regret(before_here, "")["geomean"]


def test_the_quick_sweep_command_measures_the_strategys_items_and_stores_the_refit(tmp_path):
    """``autotuner sweep --quick`` end to end on a fake A100 (its shipped predicted table): every real
    variant made available and timed by a fake measurer; the quick-sweep table stored as current."""
    import os
    import subprocess
    import sys

    db = tmp_path / "quick.sqlite"
    env = {**os.environ, "AUTOTUNER_FAKE_GPU": "a100", "COLUMNS": "300", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "autotuner", "sweep", "--quick", "--gpu", "a100", "--db", str(db),
                           "--dtype", "bf16", "--budget", "120s", "--measurer", "tests.autotuner.fakes:AnyCandidateMeasurer",
                           "--setup", "tests.autotuner.fakes:every_variant_available"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "quick round 1:" in done.stderr and "a100/bf16: quick-sweep table stored" in done.stderr
    with sqlite3.connect(db) as connection:  # a few candidates per shape, not every one that applies
        shapes, timed = connection.execute("SELECT COUNT(DISTINCT m || 'x' || n), COUNT(*) FROM measurements").fetchone()
    assert 20 <= shapes <= 60 and timed <= 7 * shapes
    with Session(make_engine(str(db), create=False)) as session:
        tables = queries.current_tables(session, "a100")
        assert [t.payload["source"] for t in tables] == [QUICK_SOURCE]
        assert tables[0].payload["measured_shapes"] == shapes
        assert all(runs_on(c["requires"], GPU_MODELS["a100"]) for c in tables[0].payload["candidates"])


def test_leave_one_gpu_out_scores_the_prediction_against_copying_and_torch(h100_samples):
    from autotuner.fit.predict_score import expected_regret, leave_one_gpu_out

    h200 = [s for s in load_samples(recording_paths(ROOT, ["h200"])) if s.dtype == "bf16"]
    scores = leave_one_gpu_out([*h100_samples, *h200], ["bf16"])
    for held_out, donor in (("h100", "h200"), ("h200", "h100")):
        score = scores[held_out]
        assert score["from"] == [donor] and score["bf16"]["copied"]["method"] == f"copied from {donor}"
        predicted, torch = score["bf16"]["predicted"]["geomean"], score["bf16"]["torch"]["geomean"]
        assert 1.0 <= predicted < 1.04 and torch > 1.5  # CPU figures of docs/PREDICTION.md: 1.017-1.022, 2.1-2.2
        assert 0.8 < score["transfer_error"]["geomean"] < 1.2 and score["transfer_error"]["p90"] < 1.2
    assert expected_regret(scores, "bf16")["geomean"] == max(scores[g]["bf16"]["predicted"]["geomean"] for g in scores)
