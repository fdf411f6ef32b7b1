"""Predicted tables (``autotuner predict``), on the CPU: the models of ``PREDICTED_MODELS`` ship one per
dtype, with its decision index, offering only kernels its architecture runs and never a time below its
own copy floor (and so does the prediction for every other listed model, built here); the lookup
answers from them for their own GPU only; the performance model's parts."""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from autotuner.fit.perfmodel import (blocks_per_sm, copy_floor_us, features, fit_candidate, nonnegative_least_squares,
                                     PerfModel, CandidateModel)
from autotuner.fit.samples import Resources, Sample
from autotuner.fit.predict_table import PREDICTED_MODELS
from autotuner.lookup.gpu_models import GPU_MODELS, runs_on
from autotuner.lookup.select import TableStore, is_predicted, load_shipped_tables, shipped_table_files
from kernels import KernelConfig, get_variant

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = load_shipped_tables()
PREDICTED = [t for t in SHIPPED if is_predicted(t)]
MEASURED_GPUS = {t.gpu for t in SHIPPED if not is_predicted(t)}


def test_the_predicted_models_ship_one_table_per_dtype_and_no_other_model_does():
    have = {(t.gpu, t.dtype) for t in PREDICTED}
    assert have == {(key, dt) for key in PREDICTED_MODELS for dt in ("fp32", "fp16", "bf16")}
    assert not set(PREDICTED_MODELS) & MEASURED_GPUS  # a measured GPU never ships a prediction


@pytest.mark.parametrize("table", PREDICTED, ids=lambda t: f"{t.gpu}-{t.dtype}")
def test_a_predicted_table_carries_a_decision_index_of_its_own_gpus_view_alone(table):
    index = table.document["index"]
    assert table.document["format_version"] == 2 and index["views"] == [{"excluded": []}]
    assert len(index["exact"]) == 1 and len(index["partitions"]) == 1
    store = TableStore([table])
    for point in table.points[::7]:  # the exact probe answers a point of the table with one of its times
        choice = store.select(point["m"], point["n"], table.dtype, table.gpu)
        assert choice.source == "predicted" and choice.exact, (point["m"], point["n"], choice)
        assert any(t is not None and choice.predicted_us == pytest.approx(t, rel=1e-5) for t in point["times"]), \
            (point["m"], point["n"], choice)


@pytest.fixture(scope="module")
def every_recording():
    from autotuner.fit.perfmodel import fit_model
    from autotuner.fit.samples import load_samples, recording_paths

    samples = load_samples(recording_paths(ROOT))
    return samples, fit_model(samples, {g: GPU_MODELS[g] for g in {s.gpu for s in samples}})


@pytest.mark.parametrize("gpu, dtype", [(g, ("fp32", "fp16", "bf16")[i % 3])
                                        for i, g in enumerate(g for g in GPU_MODELS if g not in ("h100", "h200"))])
def test_the_prediction_for_every_listed_model_offers_only_kernels_it_runs_above_its_copy_floor(gpu, dtype, every_recording):
    """Every model, shipped or not (``autotuner predict --gpu MODEL`` writes any of them): the
    predicted times before the fit, in one dtype a model (each dtype over the models: 8-12 s a dtype)."""
    from autotuner.fit.predict_table import kernel_limits, predicted_observations

    samples, model = every_recording
    spec = GPU_MODELS[gpu]
    _, requirements = kernel_limits(dtype)
    observations = predicted_observations(samples, model, spec, dtype, requirements)
    assert observations, (gpu, dtype)
    for variant, config in {(o.variant, o.config_key): o.config for o in observations}.items():
        assert runs_on(requirements(variant[0], config), spec), (gpu, dtype, variant)
    assert all(o.median_us >= copy_floor_us(o.m, o.n, dtype, spec) * (1 - 1e-12) for o in observations)


def test_every_model_lists_the_specs_the_performance_model_reads():
    for spec in GPU_MODELS.values():
        assert spec.sm_count > 0 and spec.bandwidth_gbps > 0 and spec.l2_bytes > 0 and spec.boost_clock_mhz > 0
        assert spec.registers_per_sm == 65536 and spec.max_threads_per_sm in (1536, 2048)
        assert spec.max_blocks_per_sm in (16, 24, 32) and spec.smem_per_block < spec.smem_per_sm
        assert spec.memory_bytes >= 16 * 10**9 and spec.source
        assert (spec.max_cluster > 0) == (spec.compute_capability >= 90)


@pytest.mark.parametrize("table", PREDICTED, ids=lambda t: f"{t.gpu}-{t.dtype}")
def test_a_predicted_table_offers_only_kernels_its_gpu_runs_and_no_time_below_its_copy_floor(table):
    spec = GPU_MODELS[table.gpu]
    assert table.document["regret"]["method"].startswith("leave-one-gpu-out")
    for candidate in table.candidates:
        assert runs_on(candidate["requires"], spec), candidate
        variant = get_variant(candidate["variant"])  # the requirement is the variant's own, not copied blindly
        assert candidate["requires"] == variant.requirements(KernelConfig.from_dict(candidate["config"]), table.dtype)
    for point in table.points:
        floor = copy_floor_us(point["m"], point["n"], table.dtype, spec)
        assert point["copy_us"] == pytest.approx(floor)
        assert all(t is None or t >= floor * (1 - 1e-12) for t in point["times"]), point


def test_an_architecture_without_clusters_or_hopper_kernels_gets_none():
    a100 = [t for t in PREDICTED if t.gpu == "a100"]
    assert a100
    for table in a100:
        assert all(c["requires"]["min_arch"] <= 80 and c["requires"].get("cluster", 0) <= 1 for c in table.candidates)
    blackwell = [t for t in PREDICTED if t.gpu == "b200"]
    assert any(c["requires"]["min_arch"] == 90 for t in blackwell for c in t.candidates)  # it does run them


def test_the_lookup_answers_a_gpu_never_measured_from_its_predicted_table():
    store = TableStore(SHIPPED)
    for gpu in ("a100", "l4", "l40s", "rtx4090", "b200"):
        choice = store.select(1000, 4096, "bf16", gpu)
        assert choice.source == "predicted" and choice.variant != "torch_softmax", choice
        assert choice.predicted_us >= copy_floor_us(1000, 4096, "bf16", GPU_MODELS[gpu])
        assert store.select(1 << 20, 3_000_001 // 1000, "fp32", gpu).source in ("predicted", "predicted/model", "fallback")
    assert store.select(1000, 4096, "bf16", "h100").source == "table"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for gpu in ("a100-pcie", "a10", "l40"):  # no predicted table: no measured donor of sm_80-89 either
            assert store.select(1000, 4096, "bf16", gpu).source == "fallback", gpu
        assert store.select(1000, 4096, "bf16", "gh200").source == "nearest-gpu:h100"  # a measured donor
    a800 = store.select(1000, 4096, "bf16", "a800")  # the A100 80GB SXM's figures: its prediction is the A800's
    assert a800.source == "predicted" and "a100" in a800.reason and a800.gpu == "a800"
    assert (a800.variant, a800.config) == (store.select(1000, 4096, "bf16", "a100").variant,
                                           store.select(1000, 4096, "bf16", "a100").config)


def test_a_measured_table_replaces_the_prediction_and_a_prediction_is_never_lent():
    predicted = next(t for t in PREDICTED if (t.gpu, t.dtype) == ("a100", "bf16"))
    measured = dict(predicted.document, source="measured")
    from autotuner.lookup.table import DispatchTable

    store = TableStore([predicted])
    assert store.select(64, 4096, "bf16", "a100").source == "predicted"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lent = store.select(64, 4096, "bf16", "a10")  # sm_86 may borrow sm_80's measured tables, not predictions
    assert lent.source == "fallback" and lent.variant == "torch_softmax"
    store.add(DispatchTable(measured))
    assert store.select(64, 4096, "bf16", "a100").source == "table"


def test_predicted_table_files_are_named_for_their_key():
    for path in shipped_table_files():
        document = json.loads(path.read_text())
        if document.get("source") == "predicted":
            assert path.name == f"{document['gpu']}_{document['dtype']}_{document['timing_method']}.json"
            assert document["predicted_from"] and set(document["predicted_from"]) <= MEASURED_GPUS


# --- the performance model ------------------------------------------------------------------------

def test_occupancy_follows_each_architectures_limits():
    big = Resources(threads=512, registers=64, smem=0)
    assert blocks_per_sm(big, GPU_MODELS["h100"]) == 2  # 64 regs x 512 threads = half the register file
    assert blocks_per_sm(Resources(128, 32, 0), GPU_MODELS["h100"]) == 16  # 2048 threads
    assert blocks_per_sm(Resources(128, 32, 0), GPU_MODELS["l4"]) == 12  # 1536 threads
    assert blocks_per_sm(Resources(32, 16, 0), GPU_MODELS["a10"]) == 16  # 16 blocks on sm_86
    assert blocks_per_sm(Resources(256, 32, 60 * 1024), GPU_MODELS["a100"]) == 2  # 164 KB of shared memory
    assert blocks_per_sm(Resources(256, 32, 60 * 1024), GPU_MODELS["l4"]) == 1


def test_nonnegative_least_squares_finds_the_constrained_optimum():
    rng = np.random.default_rng(3)
    a = rng.uniform(0.1, 1, (40, 4))
    truth = np.array([2.0, 0.0, 1.5, 0.0])
    b = a @ truth - 0.05 * a[:, 1]  # the unconstrained fit would want a negative second coefficient
    solution = nonnegative_least_squares(a, b)
    assert np.all(solution >= 0) and solution[1] == 0
    for _ in range(200):  # no non-negative point does better
        other = np.abs(solution + rng.normal(0, 0.05, 4))
        assert np.sum((a @ other - b) ** 2) >= np.sum((a @ solution - b) ** 2) - 1e-12


def test_a_fitted_candidate_recovers_times_made_from_its_terms():
    spec = GPU_MODELS["h100"]
    resources = Resources(256, 32, 0)
    shapes = [(m, n) for m in (1, 7, 300, 5000, 80000) for n in (64, 1000, 8192, 65536)]
    rows = np.array([features(m, n, "bf16", resources, spec) for m, n in shapes])
    times = rows @ np.array([3.0, 1.1, 0.5, 200.0])
    model = fit_candidate(rows, times)
    assert model.log_rms < 1e-6 and model.coefficients[0] == pytest.approx(3.0)


def test_transfer_scales_dram_bound_time_with_bandwidth_and_never_undercuts_the_floor():
    model = PerfModel({("k", "", "fp32"): CandidateModel((0.0, 1.0, 0.0, 0.0), 1, 0.0)}, ("h100",))
    sample = Sample("h100", "fp32", "k", "", 4096, 65536, 800.0, Resources())  # above both floors
    h200 = model.transfer(sample, GPU_MODELS["h200"], GPU_MODELS["h100"])
    assert h200 == pytest.approx(800.0 * 3350 / 4800)
    fast = Sample("h100", "fp32", "k", "", 4096, 65536, 1.0, Resources())  # a recorded time below any floor
    assert model.transfer(fast, GPU_MODELS["l4"], GPU_MODELS["h100"]) >= copy_floor_us(4096, 65536, "fp32", GPU_MODELS["l4"])
    assert math.isclose(model.transfer(sample, GPU_MODELS["h100"], GPU_MODELS["h100"]), 800.0)


@pytest.mark.parametrize("args, named", [
    ([], "--gpu MODEL"), (["--gpu", "a100", "--all"], "--gpu MODEL"),
    (["--gpu", "tpu9"], "listed models: a100"), (["--all", "--recording", "nowhere.json.gz"], "nowhere.json.gz")])
def test_predict_refuses_bad_flags_naming_what_is_accepted(args, named):
    from typer.testing import CliRunner

    from autotuner.cli import app

    result = CliRunner().invoke(app, ["predict", *args])
    assert result.exit_code == 2 and named in result.output, result.output


def test_predict_all_means_the_shipped_models(monkeypatch, tmp_path):
    """``autotuner predict --all`` (``regenerate`` without GPUs) writes PREDICTED_MODELS' tables only,
    less any of them with recordings of its own; the heavy parts are replaced by recorders."""
    from autotuner.fit import predict_score

    written = {}
    h100 = Sample("h100", "bf16", "k", "", 1, 64, 5.0, Resources())
    l4 = Sample("l4", "bf16", "k", "", 1, 64, 5.0, Resources())
    for samples, expected in (([h100], list(PREDICTED_MODELS)), ([h100, l4], [g for g in PREDICTED_MODELS if g != "l4"])):
        monkeypatch.setattr(predict_score, "load_samples", lambda paths, s=samples: s)
        monkeypatch.setattr(predict_score, "leave_one_gpu_out", lambda samples, dtypes: {})
        monkeypatch.setattr(predict_score, "fit_model", lambda samples, specs: None)
        monkeypatch.setattr(predict_score, "write_predicted_tables",
                            lambda samples, folder, targets, dtypes, regret, model: written.update(targets=targets) or [])
        predict_score.regenerate(tmp_path, tmp_path, None, ("bf16",), [])
        assert written["targets"] == expected
