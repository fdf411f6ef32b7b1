"""Eager calls on launch-bound shapes run torch's softmax: the threshold and its environment
override, the table's predicted time of a named variant, and the plans ``_plan`` stores (torch's
with the pick's under CUDA-graph capture, or the pick's), without a GPU."""
from __future__ import annotations

import types
import warnings

import pytest
import torch

from autotuner import runtime
from autotuner.lookup import predict
from autotuner.lookup.select import TableStore, load_shipped_tables, predicted_us


@pytest.fixture(scope="module")
def store():
    return TableStore(load_shipped_tables())


def _candidate(store, gpu, dtype, variant):
    table = store.get(gpu, dtype)
    return table, next(i for i, c in enumerate(table.candidates) if c["variant"] == variant)


# --- predicted_us -----------------------------------------------------------------------------------
def test_predicted_us_is_the_measured_time_at_a_measured_point(store):
    table, index = _candidate(store, "h100", "fp16", "torch_softmax")
    point = next(p for p in table.points if (p["m"], p["n"]) == (1, 4096))
    assert store.predicted_us(1, 4096, "fp16", "torch_softmax", "h100") == point["times"][index]


def test_predicted_us_between_measured_points_is_the_scaling_models(store):
    table, index = _candidate(store, "h100", "bf16", "torch_softmax")
    assert (3, 1000) not in {(p["m"], p["n"]) for p in table.points}
    expected = predict.candidate_time(table, index, 3, 1000)
    assert expected is not None
    assert store.predicted_us(3, 1000, "bfloat16", "torch_softmax", "NVIDIA H100 80GB HBM3") == expected


def test_predicted_us_of_a_variant_with_several_configs_is_its_fastest(store):
    table = store.get("h100", "fp32")
    indexes = [i for i in table.admissible(4, 4096) if table.candidates[i]["variant"] == "triton_one_row"]
    assert len(indexes) > 1
    times = [predict.candidate_time(table, i, 4, 4096) for i in indexes]
    assert store.predicted_us(4, 4096, "fp32", "triton_one_row", "h100") == min(t for t in times if t)


def test_predicted_us_is_none_where_the_table_cannot_say(store):
    assert store.predicted_us(1, 4096, "fp16", "torch_softmax", "h200") is None  # no torch candidate there
    assert store.predicted_us(1, 4096, "fp16", "no_such_variant", "h100") is None
    assert store.predicted_us(1, 4096, "fp16", "torch_softmax", "rtx9999") is None  # no table, no donor


def test_predicted_us_follows_the_donor_table_the_pick_comes_from(store):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        choice = store.select(1, 4096, "fp16", "h800")
    assert choice.source == "nearest-gpu:h100"
    assert store.predicted_us(1, 4096, "fp16", "torch_softmax", "h800") == \
        store.predicted_us(1, 4096, "fp16", "torch_softmax", "h100")


def test_predicted_us_is_cached_and_validates_like_select(store):
    store.predicted_us(2, 4096, "fp16", "torch_softmax", "h100")
    assert (2, 4096, "fp16", "h100", "cold", "torch_softmax") in store._predicted
    with pytest.raises(ValueError, match="out of range"):
        store.predicted_us(1, 0, "fp16", "torch_softmax", "h100")
    with pytest.raises(TypeError, match="integers"):
        store.predicted_us(2.5, 4096, "fp16", "torch_softmax", "h100")


def test_module_level_predicted_us_answers_from_the_default_store():
    assert predicted_us(1, 4096, "fp16", "torch_softmax", "h100") == pytest.approx(5.968, abs=1e-3)


# --- the rule -------------------------------------------------------------------------------------
def test_threshold_defaults_to_6_us_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv(runtime.EAGER_TORCH_ENV, raising=False)
    assert runtime.eager_torch_us() == 6.0
    monkeypatch.setenv(runtime.EAGER_TORCH_ENV, " 9.5 ")
    assert runtime.eager_torch_us() == 9.5


@pytest.mark.parametrize("value", ["fast", "6us", "-1", "nan", "1e"])
def test_a_bad_threshold_is_refused_naming_the_variable_and_the_form(monkeypatch, value):
    monkeypatch.setenv(runtime.EAGER_TORCH_ENV, value)
    with pytest.raises(ValueError, match=rf"AUTOTUNER_EAGER_TORCH_US=.*number of microseconds >= 0"):
        runtime.eager_torch_us()
    with pytest.raises(ValueError, match="AUTOTUNER_EAGER_TORCH_US"):
        runtime.eager_path(1, 4096, "fp16", "h100")


def test_launch_bound_shapes_take_torch_on_the_h100(monkeypatch):
    monkeypatch.delenv(runtime.EAGER_TORCH_ENV, raising=False)
    # torch_softmax's table time: fp16 1x4096 5.97 us, bf16 8x1024 8.53 us, fp16 4096x32000 ~130 us
    assert runtime.eager_path(1, 4096, "fp16", "h100") == "torch"
    assert runtime.eager_path(1, 4096, torch.float16, "h100") == "torch"
    assert runtime.eager_path(8, 1024, "bf16", "h100") == "table"
    assert runtime.eager_path(4096, 32000, "fp16", "h100") == "table"
    monkeypatch.setenv(runtime.EAGER_TORCH_ENV, "9")
    assert runtime.eager_path(8, 1024, "bf16", "h100") == "torch"
    monkeypatch.setenv(runtime.EAGER_TORCH_ENV, "0")
    assert runtime.eager_path(1, 4096, "fp16", "h100") == "table"


def test_no_torch_candidate_or_no_table_means_no_shortcut(monkeypatch):
    monkeypatch.setenv(runtime.EAGER_TORCH_ENV, "1000")
    assert runtime.eager_path(1, 4096, "fp16", "h200") == "table"
    assert runtime.eager_path(1, 4096, "fp16", "rtx9999") == "table"


# --- the plans ------------------------------------------------------------------------------------
@pytest.fixture
def fake_plans(monkeypatch):
    """``_plan`` on "device -1" (a CPU tensor's get_device()) for an H100: the pick's build and its
    plan are fakes that record their calls; ``capture[0]`` says whether the stream captures."""
    monkeypatch.delenv(runtime.EAGER_TORCH_ENV, raising=False)
    monkeypatch.setattr(runtime, "_plans", {})
    monkeypatch.setattr(runtime, "_gpu_key", lambda device: "h100")
    capture, made, ran = [False], [], []

    def pick_build(device, m, n, dtype):
        return types.SimpleNamespace(shape=(m, n), dtype=dtype)

    def plan_for_build(device, rows, build):
        made.append((device, tuple(rows.shape), build.shape))

        def plan(rows):
            ran.append(tuple(rows.shape))
            return torch.full_like(rows, 7.0)

        return plan

    monkeypatch.setattr(runtime, "_pick_build", pick_build)
    monkeypatch.setattr(runtime, "plan_for_build", plan_for_build)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: capture[0], raising=False)
    return types.SimpleNamespace(capture=capture, made=made, ran=ran)


def test_a_launch_bound_shape_gets_torchs_plan_and_the_pick_under_capture(fake_plans):
    x = torch.randn(1, 4096)  # fp32 1x4096 on the H100: torch_softmax 5.82 us in the table
    plan = runtime._plan(-1, x, "fp32")
    assert runtime._plans[(-1, (1, 4096), torch.float32)] is plan and plan.table_plan is None
    assert torch.equal(runtime.softmax(x), torch.softmax(x, -1))  # the fast path, eager: torch's
    assert fake_plans.made == [] and fake_plans.ran == []
    fake_plans.capture[0] = True
    assert torch.equal(runtime.softmax(x), torch.full_like(x, 7.0))
    assert torch.equal(runtime.softmax(x), torch.full_like(x, 7.0))
    assert fake_plans.made == [(-1, (1, 4096), (1, 4096))]  # made once, at the first capture
    assert fake_plans.ran == [(1, 4096)] * 2 and plan.table_plan is not None
    fake_plans.capture[0] = False
    assert torch.equal(runtime.softmax(x), torch.softmax(x, -1))


def test_other_shapes_get_the_picks_plan(fake_plans, monkeypatch):
    x = torch.randn(8, 1024)  # fp32 8x1024 on the H100: torch_softmax 6.91 us, over the threshold
    runtime._plan(-1, x, "fp32")
    assert fake_plans.made == [(-1, (8, 1024), (8, 1024))]
    assert torch.equal(runtime.softmax(x), torch.full_like(x, 7.0))
    monkeypatch.setenv(runtime.EAGER_TORCH_ENV, "0")  # the shortcut off: the pick everywhere
    y = torch.randn(1, 4096)
    runtime._plan(-1, y, "fp32")
    assert fake_plans.made[-1] == (-1, (1, 4096), (1, 4096))
    assert torch.equal(runtime.softmax(y), torch.full_like(y, 7.0))


def test_a_bad_threshold_fails_the_first_call_of_a_shape(fake_plans, monkeypatch):
    monkeypatch.setenv(runtime.EAGER_TORCH_ENV, "six")
    with pytest.raises(ValueError, match="AUTOTUNER_EAGER_TORCH_US='six'"):
        runtime._plan(-1, torch.randn(1, 4096), "fp32")
    assert runtime._plans == {}
