"""autotuner/records/plausibility.py and physics.py: each rule refuses what cannot have been measured and
names itself, the recorded figures are those of the committed recordings, and every committed recording
passes every rule."""
from __future__ import annotations

import copy
import gzip
import json
import math
from pathlib import Path

import pytest

from autotuner.lookup.gpu_models import GPU_MODELS
from autotuner.records import physics, plausibility
from autotuner.records.exchange import parse_document
from autotuner.records.plausibility import check_document, validate_document
from autotuner.tune.measure import bytes_moved

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = sorted([*ROOT.glob("tests/data/*_*.json.gz"), *ROOT.glob("bench/data/*.json.gz")])
DEVICES = {
    "h100": {"key": "h100", "name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "l2_bytes": 52428800,
             "memory_bytes": 85017493504, "compute_capability": "9.0"},
    "h200": {"key": "h200", "name": "NVIDIA H200", "sm_count": 132, "l2_bytes": 62914560,
             "memory_bytes": 150109880320, "compute_capability": "9.0"},
    "a100": {"key": "a100", "name": "NVIDIA A100-SXM4-80GB", "sm_count": 108, "l2_bytes": 41943040,
             "memory_bytes": 85097971712, "compute_capability": "8.0"},
}
ONLINE = {"variant": "cuda_block_online", "config_key": "block=256,items=4", "config": {"block": 256, "items": 4},
          "source_hash": "aa11"}


def recordings() -> list[dict]:
    documents = []
    for path in RECORDINGS:
        with gzip.open(path, "rt") as handle:
            document = json.load(handle)
        if isinstance(document, dict) and "runs" in document:
            documents.append(document)
    return documents


def run_of(gpu: str = "h100", timing: str = "cold", rows: list[dict] | None = None, candidates: list[dict] | None = None,
           copies: list[dict] | None = None) -> dict:
    return {"gpu": dict(DEVICES[gpu]), "environment": {"fingerprint": "env"}, "timing_method": timing,
            "started_at": "2026-01-01T00:00:00Z", "candidates": candidates or [ONLINE],
            "measurements": rows if rows is not None else [row()], "copy_references": copies or []}


def row(m: int = 4096, n: int = 4096, dtype: str = "bf16", us: float | None = None, candidate: int = 0, **extra) -> dict:
    """An ok row at 0.6 of the H100's peak (or at ``us``), 3 µs at least."""
    us = us if us is not None else max(6.0, bytes_moved(m, n, dtype) / (0.6 * 3350.0) / 1e3)
    return {"candidate": candidate, "m": m, "n": n, "dtype": dtype, "status": "ok", "median_us": us,
            "p20_us": us * 0.99, "p80_us": us * 1.01, **extra}


def rules(*runs: dict) -> set[str]:
    return {problem.rule for problem in validate_document(parse_document({"format_version": 1, "runs": list(runs)}))}


def test_the_recorded_figures_are_the_committed_recordings():
    """RECORDED_DRAM_FRACTION and RECORDED_LAUNCH_FLOOR_US are read off the recordings (every quantile
    of every ok row and copy reference), rounded outward to the third decimal."""
    fraction, floors = 0.0, {}
    for document in recordings():
        for run in document["runs"]:
            spec = GPU_MODELS[run["gpu"]["key"]]
            for item in [r for r in run["measurements"] if r["status"] == "ok"] + run["copy_references"]:
                for name in ("p20_us", "median_us", "p80_us"):
                    if item.get(name):
                        fraction = max(fraction, bytes_moved(item["m"], item["n"], item["dtype"]) / item[name] / 1e3
                                       / spec.bandwidth_gbps)
                        floors[spec.key] = min(floors.get(spec.key, math.inf), item[name])
    assert physics.RECORDED_DRAM_FRACTION == math.ceil(fraction * 1000) / 1000
    assert physics.RECORDED_LAUNCH_FLOOR_US == {key: math.floor(value * 1000) / 1000 for key, value in floors.items()}
    assert 0.9 < physics.MAX_DRAM_FRACTION < 1.0  # a margin over the recordings, short of the datasheet


@pytest.mark.slow
def test_every_committed_recording_passes_every_rule():
    for document in recordings():
        assert validate_document(parse_document(document)) == [], document["runs"][0]["started_at"]


def test_a_plausible_run_passes():
    assert rules(run_of(rows=[row(), row(1, 1000, us=3.0), row(65536, 32000, "fp32")])) == set()


@pytest.mark.parametrize("fraction, refused", [(0.93, False), (0.96, True), (0.99, True), (1.0, True), (3.0, True)])
def test_a_cold_time_at_a_fraction_of_dram_peak(fraction, refused):
    m, n = 65536, 16384  # 4 GiB of bf16 in and out: far from the launch floor
    us = bytes_moved(m, n, "bf16") / (fraction * 3350.0) / 1e3
    assert ("copy-floor" in rules(run_of(rows=[row(m, n, us=us)]))) is refused


@pytest.mark.parametrize("gpu, timing, us, refused", [
    ("h100", "cold", 0.5, True), ("h100", "cold", 2.6, True), ("h100", "cold", 2.8, False),
    ("h200", "cold", 2.6, False), ("h200", "cold", 2.4, True),
    ("a100", "cold", 2.6, False), ("a100", "cold", 2.4, True),  # no A100 recording: the lowest recorded floor
    ("h100", "warm", 0.6, True), ("h100", "warm", 2.8, False),
    ("h100", "graph", 1.0, True), ("h100", "graph", 1.5, False),
])
def test_no_time_below_the_launch_floor(gpu, timing, us, refused):
    found = rules(run_of(gpu, timing, rows=[row(1, 64, us=us)]))
    assert ("launch-floor" in found) is refused and found <= {"launch-floor"}


def test_warm_and_graph_times_are_held_to_what_l2_holds_and_delivers():
    big = (16384, 65536)  # 4 GiB of bf16: 80 times the H100's L2
    at_twice_peak = bytes_moved(*big, "bf16") / (2 * 3350.0) / 1e3
    for timing in ("warm", "graph"):
        assert "copy-floor" in rules(run_of(timing=timing, rows=[row(*big, us=at_twice_peak)]))
    assert rules(run_of(timing="warm", rows=[row(*big, us=at_twice_peak * 2.2)])) == set()  # 0.9 of peak
    # 48 MB fits the H200's 60 MB L2: no DRAM floor, but its SMs take at most 16.7 TB/s from L2
    fits = (1024, 12288)
    assert physics.l2_gbps(GPU_MODELS["h200"]) == pytest.approx(16727.0, rel=1e-3)
    assert "l2-limit" in rules(run_of("h200", "warm", rows=[row(*fits, us=2.6)]))
    assert rules(run_of("h200", "warm", rows=[row(*fits, us=3.2)])) == set()  # above 2.9 µs: L2 delivers that


@pytest.mark.parametrize("m, n, dtype", [(0, 4096, "bf16"), (2**20, 2**20, "fp32"), (40, 2**31 - 1, "fp32")])
def test_a_shape_with_no_element_or_larger_than_the_gpu_is_refused(m, n, dtype):
    assert "shape" in rules(run_of(rows=[row(m, n, dtype, us=1e6)]))


@pytest.mark.parametrize("resources", [
    {"registers": 0}, {"registers": 256}, {"registers": 2**62}, {"threads_per_block": 2048},
    {"threads_per_block": 2**62}, {"occupancy": 0.0}, {"static_smem": 64 * 1024}, {"dynamic_smem": 300 * 1024},
    {"static_smem": 40 * 1024, "dynamic_smem": 200 * 1024}, {"spill_bytes": 2**20}, {"blocks_per_sm": 0},
    {"blocks_per_sm": 64}, {"threads_per_block": 1024, "blocks_per_sm": 4},  # 4,096 threads on one SM
    {"registers": 128, "threads_per_block": 256, "blocks_per_sm": 4},  # 131,072 registers
    {"threads_per_block": 256, "blocks_per_sm": 4, "occupancy": 1.0},  # 32 of 64 warps: 0.5
])
def test_resources_a_build_cannot_report_are_refused(resources):
    assert rules(run_of(rows=[row(**resources)])) == {"resources"}


def test_resources_as_builds_report_them_pass():
    assert rules(run_of(rows=[row(registers=255, threads_per_block=128, blocks_per_sm=2, occupancy=0.125,
                                  static_smem=48 * 1024, dynamic_smem=100 * 1024, spill_bytes=16)])) == set()


@pytest.mark.parametrize("candidate, dtype, gpu, rule", [
    ({**ONLINE, "variant": "cuda_nonexistent"}, "bf16", "h100", "unknown-variant"),
    ({**ONLINE, "config_key": "block=3,items=999", "config": {"block": 3, "items": 999}}, "bf16", "h100", "unknown-config"),
    ({**ONLINE, "config_key": "block=256,items=4,x=1", "config": {"block": 256, "items": 4, "x": 1}}, "bf16", "h100",
     "unknown-config"),
    ({**ONLINE, "variant": "cuda_packed16"}, "fp32", "h100", "unsupported-dtype"),  # a 16-bit kernel
    ({"variant": "cuda_cluster_split", "config_key": "cluster=2,block=512,packs=8,smem=0",
      "config": {"cluster": 2, "block": 512, "packs": 8, "smem": 0}, "source_hash": "x"}, "bf16", "a100", "unsupported-gpu"),
])
def test_a_candidate_the_project_does_not_have_is_refused(candidate, dtype, gpu, rule):
    assert rule in rules(run_of(gpu, rows=[row(dtype=dtype, us=1e4)], candidates=[candidate]))


def test_a_failed_row_of_a_16_bit_kernel_at_fp32_says_it_did_not_run_and_passes():
    unsupported = {"candidate": 0, "m": 8, "n": 1024, "dtype": "fp32", "status": "unsupported", "error": "16-bit only"}
    assert rules(run_of(rows=[unsupported], candidates=[{**ONLINE, "variant": "cuda_packed16"}])) == set()


def test_a_former_config_of_a_variant_is_still_declared():
    former = {"variant": "cuda_split_row", "config_key": "block=256,split=64", "config": {"block": 256, "split": 64},
              "source_hash": "x"}
    assert rules(run_of(rows=[row(65536, 65536, us=1e4)], candidates=[former])) == set()


@pytest.mark.parametrize("change, rule", [
    (lambda gpu: gpu.update(sm_count=None, memory_bytes=None, compute_capability=None), "gpu-properties"),
    (lambda gpu: gpu.pop("memory_bytes"), "gpu-properties"),
    (lambda gpu: gpu.update(key="h200", name="NVIDIA H200", sm_count=None, memory_bytes=None,
                            compute_capability=None), "gpu-properties"),
    (lambda gpu: gpu.update(key="h200", name="NVIDIA H200"), "gpu-properties"),  # an H100's 79 GiB
    (lambda gpu: gpu.update(key="h100-nvl", name="NVIDIA H100 NVL"), "gpu-properties"),
    (lambda gpu: gpu.update(key="h100-nvl"), "gpu-name"),
    (lambda gpu: gpu.update(compute_capability="8.0"), "gpu-properties"),
])
def test_an_h100_run_cannot_pass_as_another_model(change, rule):
    run = run_of()
    change(run["gpu"])
    assert rule in rules(run)


def test_counts_are_bounded_per_document(monkeypatch):
    monkeypatch.setitem(plausibility.LIMITS, "rows", 3)
    assert rules(run_of(rows=[row(m) for m in (1, 2, 3, 4)])) == {"too-many-rows"}
    monkeypatch.setitem(plausibility.LIMITS, "runs", 1)
    assert "too-many-runs" in rules(run_of(), run_of())
    many = [{**ONLINE, "source_hash": f"hash-{i}"} for i in range(plausibility.MAX_CANDIDATES + 1)]
    assert rules(run_of(candidates=many)) == {"too-many-candidates"}


def test_a_grid_nested_too_deep_is_refused_by_the_schema():
    run = run_of()
    run["grid"] = {"deep": json.loads("[" * 40 + "]" * 40)}
    with pytest.raises(ValueError, match="nested deeper than 32"):
        parse_document({"format_version": 1, "runs": [run]})


def test_the_message_names_each_rule_and_nothing_passes_check_document():
    run = run_of(rows=[row(0, 8, us=4.0), row(1, 64, us=0.5)])
    with pytest.raises(plausibility.RefusedUpload) as refused:
        check_document(parse_document({"format_version": 1, "runs": [copy.deepcopy(run)]}))
    assert "rule shape" in str(refused.value) and "rule launch-floor" in str(refused.value)
    assert refused.value.status == 422
