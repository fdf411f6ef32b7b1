"""What ``autotuner kernels`` and ``GET /kernels`` list: every registered variant, its configs, what a
GPU needs to run it and which GPU models of the lookup's list (``autotuner/lookup/gpu_models.py``) do.

A variant's needs are its configs' ``requirements`` (``kernels.base.Variant.requirements``), the data a
dispatch table carries per candidate and the lookup decides by (``gpu_models.runs_on``): the oldest
compute capability, the shared memory one block asks for, the thread-block cluster size.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from autotuner.lookup.gpu_models import GPU_MODELS, runs_on
from kernels import all_variants
from kernels.registry import UnimportableVariant


def describe_variants(check_available: bool = True) -> list[dict[str, Any]]:
    """One plain dict per registered variant: name, seed, backend, dtypes, configs, availability, and
    its needs (``needs``) with the GPU models that run some config (``runs_on``) and every config
    (``runs_every_config_on``)."""
    described = []
    for variant in all_variants():
        unimportable = isinstance(variant, UnimportableVariant)  # registry stand-in: keep its reason
        support = variant.available() if (check_available or unimportable) else None
        try:
            declared = variant.all_configs()
            configs = [config.as_dict() for config in declared]
            requirements = [variant.requirements(config, dtype) for config in declared for dtype in variant.dtypes]
        except Exception as exc:  # a broken variant is listed with its reason, never hides the rest
            configs, requirements = [], []
            support = type(support or variant.available())(False, f"configs failed: {exc}")
        described.append({
            "name": variant.name,
            "seed": getattr(variant, "seed", ""),
            "backend": getattr(variant, "backend", ""),
            "description": getattr(variant, "description", ""),
            "dtypes": list(getattr(variant, "dtypes", ())),
            "configs": configs,
            "available": bool(support) if support is not None else None,
            "reason": (support.reason if support is not None and not support else ""),
            **gpu_fit(requirements),
        })
    return described


def gpu_fit(requirements: Iterable[Mapping[str, int]]) -> dict[str, Any]:
    """What the configs' requirements ask of a GPU, summed up, and the listed models that meet them.
    No requirements (a variant that could not be imported): nothing known, no model listed."""
    needs = [dict(r) for r in requirements]
    if not needs:
        return {"needs": None, "runs_on": [], "runs_every_config_on": []}
    smem = [r.get("smem_per_block", 0) for r in needs]
    clusters = sorted({r["cluster"] for r in needs if r.get("cluster", 0) > 1})
    summary = {
        "min_arch": min(r.get("min_arch", 0) for r in needs),
        "smem_per_block_max": max(smem) or None,  # bytes; None: only static shared memory
        "smem_per_block_min": min(smem) or None,
        "cluster_sizes": clusters,
    }
    models = sorted(GPU_MODELS.values(), key=lambda spec: (spec.compute_capability, spec.key))
    return {
        "needs": summary,
        "runs_on": [spec.key for spec in models if any(runs_on(r, spec) for r in needs)],
        "runs_every_config_on": [spec.key for spec in models if all(runs_on(r, spec) for r in needs)],
    }


def needs_text(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    """The table's cells for one described variant: minimum compute capability, needs, GPU models."""
    needs = entry.get("needs")
    if not needs:
        return "-", "unknown (not importable)", "-"
    parts = []
    if needs["smem_per_block_max"]:
        low, high = needs["smem_per_block_min"], needs["smem_per_block_max"]
        span = f"≤ {_kb(high)}" if not low else _kb(high) if low == high else f"{_kb(low)}-{_kb(high)}"
        parts.append(f"smem {span}/block")
    if needs["cluster_sizes"]:
        parts.append("cluster " + "/".join(map(str, needs["cluster_sizes"])))
    some, every = entry["runs_on"], entry["runs_every_config_on"]
    models = f"all {len(GPU_MODELS)}" if len(some) == len(GPU_MODELS) else (", ".join(some) or "none listed")
    if every != some:
        models += f" (every config: {', '.join(every) or 'none'})"
    return f"sm_{needs['min_arch']}", ", ".join(parts) or "-", models


def _kb(size: int) -> str:
    return f"{size / 1024:g} KB"
