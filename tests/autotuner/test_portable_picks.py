"""Portable picks, on the CPU: every shipped table x every registered variant x every GPU model of
``autotuner/lookup/gpu_models.py``: no lookup returns a kernel the GPU cannot run, and a GPU with a table is
never answered from another GPU's table."""
from __future__ import annotations

import warnings

import pytest

from autotuner.lookup.gpu_models import GPU_MODELS, donor_order, runs_on
from autotuner.lookup.select import FALLBACK_VARIANT, TableStore, load_shipped_tables
from kernels import KernelConfig, all_variants, get_variant

SHIPPED = load_shipped_tables()
# over the domain: N 1 .. 2^24 and M 0 .. 2^20, log-spaced, odd sizes among them, grid points too
DOMAIN_N = (1, 7, 64, 333, 1024, 4095, 30522, 50257, 131072, 262144, 262147, 1 << 20, 3_000_001, 1 << 24)
DOMAIN_M = (0, 1, 3, 77, 1024, 16384, 16385, 200_000, 1 << 20)
REQUIRED_MODELS = ("a100", "a10", "l4", "l40s", "rtx4090", "h100", "h200", "b200")


def test_the_common_models_are_described():
    for key in REQUIRED_MODELS:
        spec = GPU_MODELS[key]
        assert spec.compute_capability >= 80 and spec.sm_count > 0 and spec.smem_per_block <= spec.smem_per_sm
        assert spec.l2_bytes > 0 and spec.bandwidth_gbps > 0


def test_every_variant_declares_the_architecture_it_needs():
    for variant in all_variants():
        if variant.backend == "unknown":  # an unimportable stand-in: never in a table
            continue
        assert isinstance(variant.min_arch, int) and 50 <= variant.min_arch <= 100, variant.name
        for config in variant.all_configs():
            for dtype in variant.dtypes:
                assert variant.requirements(config, dtype)["min_arch"] == variant.min_arch
    assert get_variant("cuda_cluster_split").min_arch == 90


def test_requirements_decide_which_models_run_a_kernel():
    assert runs_on({"min_arch": 90, "cluster": 16}, GPU_MODELS["h100"])
    assert not runs_on({"min_arch": 90, "cluster": 16}, GPU_MODELS["b200"])  # 16 is not portable
    assert not runs_on({"min_arch": 90}, GPU_MODELS["a100"])
    assert not runs_on({"min_arch": 80, "smem_per_block": 232448}, GPU_MODELS["a100"])  # 163 KB a block
    assert runs_on({"min_arch": 80, "smem_per_block": 49152}, GPU_MODELS["l4"])


def test_only_models_of_the_same_or_an_older_architecture_may_answer_for_a_gpu():
    assert donor_order(GPU_MODELS["a100"], ["h100", "h200"]) == []
    assert donor_order(GPU_MODELS["b200"], ["a100", "h100", "h200"]) == ["h200", "h100", "a100"]
    assert donor_order(GPU_MODELS["l40s"], ["a100", "l4", "h100"]) == ["l4", "a100"]


def _runnable_here(choice, dtype: str) -> bool:
    variant = get_variant(choice.variant)
    config = KernelConfig.from_dict(choice.config)
    return runs_on(variant.requirements(config, dtype), GPU_MODELS[choice.gpu])


@pytest.mark.parametrize("gpu", sorted(GPU_MODELS))
def test_no_lookup_of_a_shipped_table_returns_a_kernel_the_gpu_cannot_run(gpu):
    store = TableStore(SHIPPED)
    own = {t.key for t in SHIPPED if t.gpu == gpu}
    for table in SHIPPED:
        for m in DOMAIN_M:
            for n in DOMAIN_N:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    choice = store.select(m, n, table.dtype, gpu, table.timing_method)
                if (gpu, table.dtype, table.timing_method) in own:
                    assert not choice.source.startswith("nearest-gpu"), (choice, m, n)
                if choice.source == "fallback":  # torch_softmax may also be a measured pick of a table
                    assert choice.variant == FALLBACK_VARIANT and choice.reason, (choice, m, n)
                    continue
                assert _runnable_here(choice, table.dtype), (choice, m, n)
                assert get_variant(choice.variant).supports(m, n, table.dtype, KernelConfig.from_dict(choice.config))


def _single_kernel_table(gpu: str, variant, config: KernelConfig, dtype: str) -> dict:
    """A table where ``variant[config]`` is twice as fast as torch_softmax wherever it runs."""
    torch = get_variant(FALLBACK_VARIANT)
    limits = variant.constraints(config, dtype)
    n_lo, n_hi = limits.get("n_min", 1), min(limits.get("n_max", 1 << 20), 1 << 20)
    points = [{"m": m, "n": n, "times": [10.0 * m * n / n_hi, 20.0 * m * n / n_hi]}
              for m in (1, 1024) for n in sorted({n_lo, n_hi})]
    return {"format_version": 1, "gpu": gpu, "dtype": dtype, "timing_method": "cold", "rule": "local-regret-clamped",
            "candidates": [
                {"variant": variant.name, "config": config.as_dict(), "constraints": limits,
                 "requires": variant.requirements(config, dtype)},
                {"variant": torch.name, "config": {}, "constraints": {},
                 "requires": torch.requirements(KernelConfig(), dtype)}],
            "points": points}


@pytest.mark.parametrize("table_gpu", ["h100", "b200"])
def test_every_variant_is_offered_only_to_models_that_run_it(table_gpu):
    from autotuner.fit.index import index_document
    from autotuner.fit.rule import admits
    from autotuner.lookup.table import DispatchTable

    for variant in all_variants():
        if variant.backend == "unknown" or variant.name == FALLBACK_VARIANT:
            continue
        dtype = variant.dtypes[0]
        # one config per distinct requirement set: whom a config is offered to depends on nothing else,
        # and each table's decision index takes about 2 s to build
        by_needs = {tuple(sorted(variant.requirements(c, dtype).items())): c for c in variant.all_configs()}
        for config in by_needs.values():
            table = DispatchTable(index_document(_single_kernel_table(table_gpu, variant, config, dtype)))
            store = TableStore([table])
            shapes = [(p["m"], p["n"]) for p in table.points if admits(table.candidates[0]["constraints"], p["m"], p["n"])]
            assert shapes, (variant.name, config)
            shape = shapes[-1]  # a measured point that admits the kernel
            for gpu, spec in GPU_MODELS.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    choice = store.select(*shape, dtype, gpu)
                runs = runs_on(variant.requirements(config, dtype), spec)
                donor = gpu == table_gpu or spec.compute_capability >= GPU_MODELS[table_gpu].compute_capability
                assert (choice.variant == variant.name) == (runs and donor), (variant.name, config, gpu, choice)
