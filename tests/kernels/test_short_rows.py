"""cuda_short_rows (and cuda_short_rows_keep, its 16-bit twin) without a GPU: its configs cover every N
from 1 to 1024 for every dtype it declares, each config's constraints are what its template can hold,
every template parameter is in the instance name, the grid covers every row (capped where persistent),
and it compiles without spills for the architectures beyond sm_80 / sm_90 that it claims (sm_89,
sm_100) where nvcc has them."""
from __future__ import annotations

import subprocess

import pytest

from kernels.base import DTYPES
from kernels.cuda import loader
from kernels.cuda.short_rows import SHAPES, ShortRowsCuda
from kernels.cuda.short_rows_keep import ShortRowsKeepCuda
from kernels.cuda.warp_row import vec_items
from tests.kernels.test_cuda_compile import NVCC, compile_variant, instances, needs_nvcc, normalized

VARIANT = ShortRowsCuda()
KEEP = ShortRowsKeepCuda()


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_length_up_to_1024_has_a_config_and_none_beyond(dtype: str) -> None:
    for n in range(1, 1025):
        assert VARIANT.configs(16384, n, dtype), f"no config for N={n} {dtype}"
    assert not VARIANT.configs(16384, 1025, dtype)


def test_constraints_match_the_template_capacity() -> None:
    for config in VARIANT.all_configs():
        for dtype in DTYPES:
            vec, items = vec_items(int(config["elems"]), dtype)
            limits = VARIANT.constraints(config, dtype)
            assert limits["n_max"] == int(config["lanes"]) * vec * items
            assert 1 <= limits["n_min"] <= limits["n_max"] // 4 + 1
            assert "m_max" not in limits  # the grid-stride loop takes any M


def test_instance_names_carry_every_parameter() -> None:
    config = next(c for c in VARIANT.all_configs() if int(c["elems"]) == 16 and int(c["block"]) == 256)
    name = VARIANT.name_expression(config, "bf16")
    lanes, block, rows = (int(config[k]) for k in ("lanes", "block", "rows"))
    assert name == f"softmax_short_rows<__nv_bfloat16, {lanes}, {block}, 8, {int(config['elems']) // 8}, {rows}>"
    names = {(VARIANT.name_expression(c, d), c["persistent"]) for c in VARIANT.all_configs() for d in DTYPES}
    assert len(names) == len(VARIANT.all_configs()) * len(DTYPES)


def test_grid_covers_every_row_and_persistent_grid_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "device_limits", lambda: (2048, 232448, 132))  # LaunchGeometry reads it there
    for config in VARIANT.all_configs():
        tile = VARIANT.tile_rows(config)
        for m in (1, tile, tile + 1, 2**20 + 3, 2**31 + 7):
            blocks = VARIANT.grid(config, m, 64)[0]
            assert 1 <= blocks <= 2**31 - 1
            if int(config["persistent"]):
                assert blocks == min(-(-m // tile), 2048 // int(config["block"]) * 132)
            else:
                assert blocks == min(-(-m // tile), 2**31 - 1)


def nvcc_has_arch(arch: int) -> bool:
    listed = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True).stdout
    return f"compute_{arch}" in listed


@needs_nvcc
@pytest.mark.parametrize("arch", [89, 100])
@pytest.mark.parametrize("variant", [VARIANT, KEEP], ids=lambda v: v.name)
def test_short_rows_compiles_without_spills_on_more_architectures(variant, arch: int, tmp_path) -> None:
    if not nvcc_has_arch(arch):
        pytest.skip(f"this nvcc has no sm_{arch}")
    assert arch >= variant.min_arch
    result = compile_variant(variant, arch, tmp_path)
    assert result.ok, result.log[-4000:]
    assert len(result.kernels) == len({expr for expr, _, _ in instances(variant)}), "an instance is missing"
    offered = {normalized(expr) for expr, dtype, config in instances(variant)
               if variant.requirements(config, dtype).get("max_arch", arch) >= arch}
    spilled = {name: r for name, r in result.kernels.items()
               if (r.spill_stores or r.spill_loads) and normalized(name).split("(")[0] in offered}
    assert not spilled, f"sm_{arch} spills in instances offered there: {list(spilled)[:5]}"


def test_keep_twin_covers_16_bit_rows_up_to_1024_with_one_tile_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuda_short_rows_keep: 16-bit only, every N 1-1024 and none beyond, the shapes of cuda_short_rows
    with one row a group, instance names carrying every template parameter, a block per tile of
    block / lanes rows up to the grid's limit (m_max), every instance offered wherever it compiles."""
    from autotuner.lookup.gpu_models import gpu_spec, runs_on

    assert KEEP.dtypes == ("fp16", "bf16")
    for dtype in KEEP.dtypes:
        for n in range(1, 1025):
            assert KEEP.configs(65536, n, dtype), f"no config for N={n} {dtype}"
        assert not KEEP.configs(65536, 1025, dtype)
    shapes = {(int(c["lanes"]), int(c["elems"])) for c in KEEP.all_configs()}
    assert shapes == {(lanes, elems) for lanes, elems, rows in SHAPES if rows == 1}
    monkeypatch.setattr(loader, "device_limits", lambda: (2048, 232448, 132))
    for config in KEEP.all_configs():
        lanes, elems, block = (int(config[k]) for k in ("lanes", "elems", "block"))
        vec, items = vec_items(elems, "fp16")
        assert KEEP.name_expression(config, "fp16") == f"softmax_short_keep<__half, {lanes}, {block}, {vec}, {items}>"
        limits = KEEP.constraints(config, "bf16")
        assert limits["n_max"] == lanes * elems and limits["m_max"] == (2**31 - 1) * (block // lanes)
        for m in (1, block // lanes, block // lanes + 1, 2**20 + 3):
            assert KEEP.grid(config, m, 64)[0] == -(-m // (block // lanes))
        assert runs_on(KEEP.requirements(config, "bf16"), gpu_spec("b200"))


def test_configs_that_spill_past_sm90_are_offered_up_to_sm90_only() -> None:
    """The 16-bit (2 | 4 | 8, 32) instances spill on sm_100 (nvcc 13.0): their requirements stop at
    sm_90, so no table offers them to a B200; every other config and the fp32 ones run anywhere."""
    from autotuner.lookup.gpu_models import gpu_spec, runs_on
    from kernels.cuda.short_rows import SPILL_PAST_SM90_16BIT

    h200, b200 = gpu_spec("h200"), gpu_spec("b200")
    limited = 0
    for config in VARIANT.all_configs():
        for dtype in DTYPES:
            needs = VARIANT.requirements(config, dtype)
            assert runs_on(needs, h200)
            if dtype != "fp32" and (int(config["lanes"]), int(config["elems"])) in SPILL_PAST_SM90_16BIT:
                assert needs["max_arch"] == 90 and not runs_on(needs, b200)
                limited += 1
            else:
                assert "max_arch" not in needs and runs_on(needs, b200)
    assert limited == 2 * 3 * len(SPILL_PAST_SM90_16BIT)  # two 16-bit dtypes, three launches a shape


def test_summary_takes_each_variants_best_config_against_copy_and_torch() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "short_rows_summary.py"
    spec = importlib.util.spec_from_file_location("short_rows_summary", path)
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    candidates = [{"variant": "cuda_short_rows", "config_key": "a"}, {"variant": "cuda_short_rows", "config_key": "b"},
                  {"variant": "torch_softmax", "config_key": ""}]
    rows = [(0, 10.0, "ok"), (1, 8.0, "ok"), (1, 1.0, "wrong"), (2, 12.0, "ok")]
    document = {"runs": [{
        "candidates": candidates,
        "measurements": [{"candidate": c, "m": 16384, "n": 33, "dtype": "fp16", "status": s, "median_us": us}
                         for c, us, s in rows],
        "copy_references": [{"m": 16384, "n": 33, "dtype": "fp16", "median_us": 6.0}],
    }]}
    best, copies = summary.best_times(document)
    assert best[("fp16", 16384, 33)] == {"cuda_short_rows": (8.0, "b"), "torch_softmax": (12.0, "")}
    text = summary.summarize(document, "cuda_short_rows")
    assert "copy-speed fraction geomean 0.750, vs torch.softmax geomean 1.500" in text
    assert "more than 3 % slower than torch.softmax: 0 of 1" in text
