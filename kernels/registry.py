"""The registry of softmax variants: ``all_variants()``, ``get_variant(name)``, and run-time additions.

A variant module that cannot be imported here (no Triton, say) is listed as unavailable with the
reason instead of breaking the registry.
"""
from __future__ import annotations

import importlib
import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from kernels.base import Build, KernelConfig, LaunchGeometry, NativeRule, Support, Variant

log = logging.getLogger(__name__)

# (name, backend, module, class) of every registered variant, in the order `autotuner kernels` lists them.
# The name is the variant's identity everywhere (dispatch tables, the database, /dispatch, /kernels), so
# it is written here, where it is known whatever is installed: a variant whose module cannot be imported
# (no Triton on a base install) is still listed under its name. Loading checks that each class's own
# ``name`` and ``backend`` (its module's text is its rows' source hash, so they stay there) agree.
_REGISTRY: tuple[tuple[str, str, str, str], ...] = (
    ("torch_softmax", "torch", "kernels.torch_baseline", "TorchSoftmax"),
    # CUDA C++ through CuPy: row held in registers
    ("cuda_warp_row", "cuda", "kernels.cuda.warp_row", "WarpRowCuda"),
    ("cuda_short_rows", "cuda", "kernels.cuda.short_rows", "ShortRowsCuda"),
    ("cuda_short_rows_keep", "cuda", "kernels.cuda.short_rows_keep", "ShortRowsKeepCuda"),
    ("cuda_block_fused", "cuda", "kernels.cuda.block_fused", "BlockFusedCuda"),
    ("cuda_block_online", "cuda", "kernels.cuda.block_online", "BlockOnlineCuda"),
    ("cuda_packed16", "cuda", "kernels.cuda.packed16", "Packed16Cuda"),
    # CUDA C++: rows larger than one block's registers
    ("cuda_online_two_pass", "cuda", "kernels.cuda.two_pass", "TwoPassCuda"),
    ("cuda_split_row", "cuda", "kernels.cuda.split_row", "SplitRowCuda"),
    ("cuda_smem_cache_medium", "cuda", "kernels.cuda.smem_cache", "SmemCacheMediumCuda"),
    ("cuda_smem_cache_extreme", "cuda", "kernels.cuda.smem_cache", "SmemCacheExtremeCuda"),
    ("cuda_cluster_split", "cuda", "kernels.cuda.cluster_split", "ClusterSplitCuda"),
    ("cuda_cluster_keep", "cuda", "kernels.cuda.cluster_keep", "ClusterKeepCuda"),
    ("cuda_grid_split", "cuda", "kernels.cuda.grid_split", "GridSplitCuda"),
    ("cuda_long_split", "cuda", "kernels.cuda.long_split", "LongSplitCuda"),
    # Triton
    ("triton_fused_row", "triton", "kernels.triton_impl.fused_row", "TritonFusedRow"),
    ("triton_one_row", "triton", "kernels.triton_impl.one_row", "TritonOneRow"),
    ("triton_tiled_three_pass", "triton", "kernels.triton_impl.tiled", "TritonTiledThreePass"),
    ("triton_online_two_pass", "triton", "kernels.triton_impl.online_tiled", "TritonOnlineTwoPass"),
    ("triton_split_row", "triton", "kernels.triton_impl.split_row", "TritonSplitRow"),
    # optional and third-party
    ("cute_online", "cute", "kernels.cute_online", "CuteOnline"),
    ("quack_softmax", "external", "kernels.external", "QuackSoftmax"),
    ("liger_softmax", "external", "kernels.external", "LigerSoftmax"),
)

_extra: list[Variant] = []

# Native rules (kernels.base.NativeRule) of variants whose builds do not carry one: kept here, not in
# their modules, because a variant module's text is its rows' source hash (kernels/source_hash.py), and
# declaring a rule there would retire every GPU's rows for a change that launches nothing differently.
# triton_one_row: one program per row (grid = M), one compiled kernel per N's class, N in slot 2.
# triton_fused_row: a persistent grid of min(M, the programs of N's class that fit on the GPU at once),
# M (do_not_specialize) in slot 2, N in slot 3.
_KEPT_NATIVE_RULES = {
    "triton_one_row": NativeRule(LaunchGeometry(), by_class=True, n_slot=2),
    "triton_fused_row": NativeRule(LaunchGeometry(), by_class=True, m_slot=2, n_slot=3, m_unspecialised=True,
                                   cap_per_class=True),
}
MOST_ROWS = 2**31 - 1

# Configs variants declared before and no longer sweep, whose rows the committed recordings hold
# (tests/data, bench/data): still declared for the rows that measured them (an upload of such a run
# is genuine history, ``autotuner/records/plausibility.py``). Kept here, not in the variants' modules,
# for the reason the native rules above are. A config leaves a variant's ``all_configs`` for this list.
FORMER_CONFIGS: dict[str, tuple[str, ...]] = {
    "cuda_cluster_split": (
        "cluster=16,block=1024,packs=4,smem=0", "cluster=16,block=512,packs=8,smem=0",
        "cluster=2,block=1024,packs=8,smem=0", "cluster=4,block=1024,packs=8,smem=0",
        "cluster=4,block=512,packs=8,smem=0", "cluster=8,block=1024,packs=4,smem=0",
        "cluster=8,block=1024,packs=8,smem=0",
    ),
    "cuda_short_rows": tuple(f"lanes={lanes},elems=8,rows=2,block={block},persistent={persistent}"
                             for lanes in (4, 8, 16, 32) for block, persistent in ((128, 0), (256, 0), (256, 1))),
    "cuda_split_row": ("block=1024,split=16", "block=1024,split=auto", "block=256,split=64", "block=512,split=32",
                       "block=512,split=auto"),
    "triton_online_two_pass": (
        "block=2048,num_warps=4,num_stages=1,per_sm=0", "block=4096,num_warps=16,num_stages=1,per_sm=0",
        "block=4096,num_warps=16,num_stages=3,per_sm=1", "block=4096,num_warps=8,num_stages=1,per_sm=0",
        "block=4096,num_warps=8,num_stages=3,per_sm=2", "block=8192,num_warps=16,num_stages=1,per_sm=0",
        "block=8192,num_warps=16,num_stages=2,per_sm=1", "block=8192,num_warps=16,num_stages=3,per_sm=1",
        "block=8192,num_warps=32,num_stages=3,per_sm=1",
    ),
    "triton_split_row": ("block=8192,num_warps=16,num_stages=2,per_sm=1",),
    "triton_tiled_three_pass": (
        "block=4096,num_warps=16,num_stages=1,per_sm=0", "block=4096,num_warps=8,num_stages=3,per_sm=2",
        "block=8192,num_warps=16,num_stages=1,per_sm=0", "block=8192,num_warps=16,num_stages=3,per_sm=1",
    ),
}  # the most rows of a one-dimensional grid: a persistent grid's cap describes itself there


def native_rule(build: Build) -> NativeRule | None:
    """How the native plans derive ``build``'s launches (``Build.native_rule``, or the one kept above)."""
    if build.native is None:
        return None
    return build.native_rule or _KEPT_NATIVE_RULES.get(build.variant)


def plan_rule(rule: NativeRule, build: Build, device: int, stream: int, n: int) -> tuple[int, ...] | None:
    """``rule`` (``build``'s) as ``plan_learn`` takes it for N's class on ``device``: where its cap is
    per class, the grid of the build's own launch of ``MOST_ROWS`` rows of N; None where the build
    does not describe that launch."""
    if not rule.cap_per_class:
        return rule.for_plan()
    widest = build.native(device, stream, MOST_ROWS, n)
    return None if widest is None else rule.for_plan(widest[1])


DECLARED_PATH = Path(__file__).with_name("declared.json")  # written by ``python -m kernels.declared``
Declaration = dict[str, Any]  # {"dtypes": [...], "configs": {config key: {dtype: requirements}}}


@lru_cache(maxsize=1)
def recorded_declarations() -> dict[str, Declaration]:
    """Every variant's declarations as ``kernels/declared.json`` holds them (empty where it is missing)."""
    try:
        return json.loads(DECLARED_PATH.read_text())
    except FileNotFoundError:
        return {}


class UnimportableVariant(Variant):
    """Stands in for a registered variant whose module failed to import, under its registered name
    and backend, so listings can say why. What the variant declares (dtypes, configs, requirements)
    comes from ``kernels/declared.json`` (written by ``python -m kernels.declared``), so that its rows can still be checked
    here; it builds nothing."""

    def __init__(self, name: str, backend: str, reason: str):
        self._name = name
        self.backend = backend
        self._reason = reason
        self._declared = recorded_declarations().get(name, {"dtypes": [], "configs": {}})
        self.dtypes = tuple(self._declared["dtypes"])

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._name

    def available(self) -> Support:
        return Support(False, self._reason)

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.from_key(key) for key in self._declared["configs"]]

    def requirements(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        try:
            return dict(self._declared["configs"][config.key][dtype])
        except KeyError:
            raise KeyError(f"{self._name} declares no config {config.key!r} at {dtype}") from None

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        raise RuntimeError(self._reason)


def registered_names() -> tuple[str, ...]:
    """Every registered variant's name, whatever is installed (nothing is imported)."""
    return tuple(entry[0] for entry in _REGISTRY)


@lru_cache(maxsize=1)
def _registered() -> tuple[Variant, ...]:
    variants: list[Variant] = []
    for name, backend, module_name, class_name in _REGISTRY:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except Exception as exc:  # an optional backend missing must not hide the others
            log.warning("variant %s (%s.%s) not importable: %s", name, module_name, class_name, exc)
            variants.append(UnimportableVariant(name, backend, f"import failed: {type(exc).__name__}: {exc}"))
            continue
        if (cls.name, cls.backend) != (name, backend):  # the registry and the class must name one variant
            raise RuntimeError(f"{module_name}.{class_name} is {cls.name!r} ({cls.backend}) but registered as "
                               f"{name!r} ({backend}): make kernels/registry.py agree with it")
        variants.append(cls())
    return tuple(variants)


def all_variants() -> list[Variant]:
    """Every registered variant, plus any registered at run time (tests register faulting ones)."""
    return [*_registered(), *_extra]


def declared_config_keys(variant: Variant) -> frozenset[str]:
    """The keys of every config ``variant`` declares: its ``all_configs`` and its ``FORMER_CONFIGS``.
    Raises RuntimeError where the variant's module could not be imported here and ``kernels/declared.json``
    does not list it either (its configs are unknown)."""
    if isinstance(variant, UnimportableVariant) and not variant.dtypes:
        raise RuntimeError(variant.available().reason)
    return frozenset(config.key for config in variant.all_configs()) | frozenset(FORMER_CONFIGS.get(variant.name, ()))


def get_variant(name: str) -> Variant:
    for variant in all_variants():
        if variant.name == name:
            return variant
    known = ", ".join(v.name for v in all_variants())
    raise KeyError(f"unknown variant {name!r}; registered: {known}")


def register_variant(variant: Variant) -> None:
    """Add a variant at run time (used by tests for deliberately faulting kernels)."""
    if any(v.name == variant.name for v in all_variants()):
        raise ValueError(f"variant {variant.name!r} is already registered")
    _extra.append(variant)


def unregister_variant(name: str) -> None:
    _extra[:] = [v for v in _extra if v.name != name]

