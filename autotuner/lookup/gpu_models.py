"""What the lookup knows about GPU models it may answer for: architecture, on-chip limits and the
figures a performance model scales with (``autotuner/fit/perfmodel.py``).

Pure data, no GPU library. Keys are ``autotuner.lookup.gpu.normalize_gpu_name``'s. A kernel is offered to a
GPU only if the GPU meets every requirement the table's candidate carries (``kernels.base.Variant.
requirements``: ``min_arch``, ``max_arch``, ``smem_per_block``, ``cluster``): :func:`runs_on`.

Sources. Per compute capability (``ARCH_LIMITS``), the CUDA C++ Programming Guide, "Features and
Technical Specifications", table "Technical Specifications per Compute Capability": shared memory
per SM and the opt-in maximum per block (8.0: 164 KB / 163 KB; 8.6 and 8.9: 100 KB / 99 KB; 9.0 and
10.0: 228 KB / 227 KB), 64 K 32-bit registers per SM, resident threads per SM (2048; 1536 on 8.6 and
8.9) and blocks per SM (32; 16 on 8.6, 24 on 8.9); thread-block clusters from 9.0, 8 blocks
portable, 16 where the non-portable size is allowed (CUDA Programming Guide, "Thread Block
Clusters"; H100/H200 allow 16 ("NVIDIA Hopper Tuning Guide"); not assumed for other models). Per
model, the document named in its ``source`` (the SXM / flagship part unless the key says
otherwise): SM count, L2, memory size, peak DRAM bandwidth (the datasheets' peaks, not achieved
figures) and boost clock.
"""
from __future__ import annotations

import math
from collections import namedtuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the lookup's import stays light
if TYPE_CHECKING:
    from typing import Any, Mapping, Sequence

KB = 1024
MB = 1024 * 1024
GB = 1000 ** 3  # datasheets' memory sizes are decimal gigabytes


class ArchLimits(namedtuple("ArchLimits", "smem_per_sm smem_per_block max_threads_per_sm max_blocks_per_sm "
                                         "registers_per_sm max_cluster", defaults=(65536, 0))):
    """Per-SM limits of one compute capability (Programming Guide table, see the module docstring):
    shared memory per SM and the opt-in maximum per block (bytes), threads and blocks per SM, registers
    per SM, blocks per thread-block cluster (portable size; 0: no clusters). Named tuples, not
    dataclasses, here and below: the embedded lookup imports this module, and ``dataclasses`` costs
    a fresh process's first lookup about 12 ms of imports."""

    __slots__ = ()


ARCH_LIMITS: Mapping[int, ArchLimits] = {
    80: ArchLimits(164 * KB, 163 * KB, 2048, 32),
    86: ArchLimits(100 * KB, 99 * KB, 1536, 16),
    89: ArchLimits(100 * KB, 99 * KB, 1536, 24),
    90: ArchLimits(228 * KB, 227 * KB, 2048, 32, max_cluster=8),
    100: ArchLimits(228 * KB, 227 * KB, 2048, 32, max_cluster=8),
}


class GpuSpec(namedtuple("GpuSpec", "key compute_capability sm_count smem_per_sm smem_per_block l2_bytes bandwidth_gbps "
                                   "max_cluster registers_per_sm max_threads_per_sm max_blocks_per_sm boost_clock_mhz "
                                   "memory_bytes source", defaults=(0, 65536, 2048, 32, 0, 0, ""))):
    """One GPU model's figures: ``compute_capability`` x 10 (90 for sm_90), SMs, shared memory per SM
    and the opt-in maximum per block (bytes), L2 (bytes), peak DRAM bandwidth (GB/s), blocks per
    cluster (0: no clusters), per-SM registers, threads and blocks, boost clock (MHz), memory (bytes),
    and the datasheets the figures come from."""

    __slots__ = ()

    @property
    def architecture(self) -> int:
        """The major compute capability: 8 Ampere/Ada, 9 Hopper, 10 Blackwell."""
        return self.compute_capability // 10


def _model(key: str, cc: int, sms: int, l2_mb: int, bandwidth: float, clock_mhz: int, memory_gb: int,
           source: str, max_cluster: int | None = None) -> GpuSpec:
    limits = ARCH_LIMITS[cc]
    return GpuSpec(key, cc, sms, limits.smem_per_sm, limits.smem_per_block, l2_mb * MB, bandwidth,
                   limits.max_cluster if max_cluster is None else max_cluster, limits.registers_per_sm,
                   limits.max_threads_per_sm, limits.max_blocks_per_sm, clock_mhz, memory_gb * GB, source)


_A100 = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 40 MB L2, 1410 MHz) and A100 datasheet"
_GA102 = "NVIDIA Ampere GA102 GPU Architecture whitepaper and A10 datasheet"
_ADA = "NVIDIA Ada GPU Architecture whitepaper and"
_HOPPER = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (50 MB L2) and"

GPU_MODELS: Mapping[str, GpuSpec] = {spec.key: spec for spec in (
    _model("a100", 80, 108, 40, 2039.0, 1410, 80, f"{_A100} (80GB SXM: 2039 GB/s)"),
    _model("a100-pcie", 80, 108, 40, 1935.0, 1410, 80, f"{_A100} (80GB PCIe: 1935 GB/s)"),
    _model("a800", 80, 108, 40, 2039.0, 1410, 80, f"A800 80GB datasheet (the A100 80GB SXM with another interconnect); {_A100}"),
    _model("a10", 86, 72, 6, 600.0, 1695, 24, f"{_GA102} (72 SMs, 6 MB L2, 600 GB/s, 1695 MHz, 24 GB)"),
    _model("l4", 89, 58, 48, 300.0, 2040, 24, f"{_ADA} L4 datasheet (58 SMs, 48 MB L2, 300 GB/s, 2040 MHz, 24 GB)"),
    _model("l40", 89, 142, 96, 864.0, 2490, 48, f"{_ADA} L40 datasheet (142 SMs, 96 MB L2, 864 GB/s, 2490 MHz, 48 GB)"),
    _model("l40s", 89, 142, 96, 864.0, 2520, 48, f"{_ADA} L40S datasheet (142 SMs, 96 MB L2, 864 GB/s, 2520 MHz, 48 GB)"),
    _model("rtx4090", 89, 128, 72, 1008.0, 2520, 24,
           f"{_ADA} GeForce RTX 4090 specifications (128 SMs, 72 MB L2, 1008 GB/s, 2520 MHz, 24 GB)"),
    _model("h100", 90, 132, 50, 3350.0, 1980, 80, f"{_HOPPER} H100 datasheet (SXM5: 132 SMs, 3350 GB/s, 1980 MHz, 80 GB)", 16),
    _model("h100-pcie", 90, 114, 50, 2000.0, 1755, 80, f"{_HOPPER} H100 datasheet (PCIe: 114 SMs, 2000 GB/s, 1755 MHz, 80 GB)", 16),
    _model("h100-nvl", 90, 132, 50, 3900.0, 1785, 94, f"{_HOPPER} H100 NVL datasheet (132 SMs, 3900 GB/s, 1785 MHz, 94 GB)", 16),
    _model("h800", 90, 132, 50, 3350.0, 1980, 80, f"{_HOPPER} H800 datasheet (the H100 SXM5 with another interconnect)", 16),
    _model("h200", 90, 132, 60, 4800.0, 1980, 141,
           f"{_HOPPER} H200 datasheet (132 SMs as H100 SXM, 4800 GB/s, 141 GB; 60 MB L2 as the device reports it)", 16),
    _model("gh200", 90, 132, 50, 4000.0, 1980, 96, f"{_HOPPER} GH200 datasheet (H100-class GPU, 132 SMs, 4000 GB/s HBM3, 96 GB)", 16),
    _model("b200", 100, 148, 126, 8000.0, 1965, 180,
           "Chips and Cheese, \"Nvidia's B200: Keeping the CUDA Juggernaut Rolling\" (148 SMs, 126 MB L2, 1965 MHz); "
           "DGX B200 datasheet (8000 GB/s and 1440 GB over 8 GPUs)"),
)}


def gpu_spec(key: str) -> GpuSpec | None:
    return GPU_MODELS.get(key)


def runs_on(requirements: Mapping[str, int], spec: GpuSpec) -> bool:
    """Whether a GPU of ``spec`` meets a candidate's requirements (see the module docstring)."""
    arch = spec.compute_capability
    if not requirements.get("min_arch", 0) <= arch <= requirements.get("max_arch", arch):
        return False
    if requirements.get("smem_per_block", 0) > spec.smem_per_block:
        return False
    cluster = requirements.get("cluster", 0)
    return cluster <= 1 or cluster <= spec.max_cluster


def same_specs(target: GpuSpec, available: Sequence[str]) -> list[str]:
    """The models of ``available`` whose every figure equals ``target``'s (its key and source aside:
    the A800 is the A100 80GB SXM with another interconnect), so a table predicted for one is the
    other's prediction too."""
    return [k for k in available if k != target.key and k in GPU_MODELS
            and GPU_MODELS[k]._replace(key=target.key, source=target.source) == target]


def donor_order(target: GpuSpec, available: list[str]) -> list[str]:
    """The GPU models whose tables may answer for ``target`` (which has none), best first: only
    models of the same or an older compute capability (their kernels ran there and the target's
    architecture runs what theirs does), the same architecture first, then the newest capability,
    then the nearest in SM count and bandwidth (log ratio)."""
    donors = [GPU_MODELS[k] for k in available if k in GPU_MODELS and GPU_MODELS[k].compute_capability <= target.compute_capability]

    def distance(spec: GpuSpec) -> tuple[int, int, float, str]:
        nearness = abs(math.log(spec.sm_count / target.sm_count)) + abs(math.log(spec.bandwidth_gbps / target.bandwidth_gbps))
        return (spec.architecture != target.architecture, -spec.compute_capability, nearness, spec.key)

    return [spec.key for spec in sorted(donors, key=distance)]


def runnable_candidates(candidates: Sequence[Mapping[str, Any]], table_gpu: str, spec: GpuSpec) -> frozenset[int]:
    """Indexes of a table's candidates that a GPU of ``spec`` runs. A candidate without ``requires``
    (tables fitted before 0.2.0) is known to run only on the table's own GPU, so it is taken to
    need that GPU's compute capability, and is offered to no other GPU where that model is unknown."""
    own = GPU_MODELS.get(table_gpu)
    assumed = {"min_arch": own.compute_capability} if own is not None else None
    runnable = set()
    for index, candidate in enumerate(candidates):
        requirements = candidate.get("requires", assumed)
        if requirements is None:  # an old table of a model not listed here: its own GPU runs it all
            if table_gpu == spec.key:
                runnable.add(index)
        elif runs_on(requirements, spec):
            runnable.add(index)
    return frozenset(runnable)


# Memory sizes each model is sold with, in GiB as the datasheets count them (a device reports a little
# less: an H100 80GB 79.2 GiB, an H200 139.8 of its 141): what an upload's ``memory_bytes`` is checked
# against (``autotuner.records.plausibility``). Sources as above; H100 SXM5 also 64 and 94 GB parts, GH200
# 96 and 144 GB, B200 180 and 192 GB (HGX and DGX B200 datasheets).
MEMORY_GIB: Mapping[str, tuple[int, ...]] = {
    "a100": (40, 80), "a100-pcie": (40, 80), "a10": (24,), "l4": (24,), "l40": (48,), "l40s": (48,),
    "rtx4090": (24,), "h100": (64, 80, 94), "h100-pcie": (80,), "h200": (141,), "gh200": (96, 144),
    "h100-nvl": (94,), "h800": (80,), "a800": (40, 80), "b200": (180, 192),
}
