"""What the lookup knows about GPU models it may answer for: architecture and on-chip limits.

Pure data, no GPU library. Keys are ``autotuner.lookup.gpu.normalize_gpu_name``'s. A kernel is offered to a
GPU only if the GPU meets every requirement the table's candidate carries (``kernels.base.Variant.
requirements``: ``min_arch``, ``smem_per_block``, ``cluster``): :func:`runs_on`.

Sources (per model, the SXM / flagship part unless the key says otherwise):
- compute capability, shared memory per SM and the opt-in maximum per block: CUDA C++ Programming
  Guide, "Features and Technical Specifications", table "Technical Specifications per Compute
  Capability" (8.0: 164 KB / 163 KB; 8.6 and 8.9: 100 KB / 99 KB; 9.0 and 10.0: 228 KB / 227 KB);
  thread-block clusters from 9.0, 8 blocks portable, 16 where the non-portable size is allowed
  (CUDA Programming Guide, "Thread Block Clusters"; H100/H200 allow 16 ("NVIDIA Hopper Tuning
  Guide"); not assumed for other models).
- SM count, L2 and memory bandwidth: NVIDIA's whitepapers and datasheets: "NVIDIA A100 Tensor Core
  GPU Architecture" (108 SMs, 40 MB L2) and the A100 80GB datasheet (2039 GB/s SXM, 1935 GB/s
  PCIe); "NVIDIA Ampere GA102 GPU Architecture" and the A10 datasheet (72 SMs, 6 MB, 600 GB/s);
  "NVIDIA Ada GPU Architecture" with the L4 (58 SMs, 48 MB, 300 GB/s), L40S (142 SMs, 96 MB,
  864 GB/s), L40 (142 SMs, 96 MB, 864 GB/s) and RTX 4090 (128 SMs, 72 MB, 1008 GB/s) datasheets;
  "NVIDIA H100 Tensor Core GPU Architecture" and the H100 datasheet (SXM5 132 SMs, PCIe 114 SMs,
  50 MB L2, 3350 / 2000 GB/s); the H200 datasheet (132 SMs as H100 SXM, 4800 GB/s); GH200 datasheet
  (H100-class GPU, 132 SMs, 4000 GB/s HBM3); H100 NVL (132 SMs, 3900 GB/s), H800 and A800 (the
H100 SXM5 and A100 80GB SXM with other interconnects) from their datasheets; B200: 148 SMs and 126 MB L2 as measured by Chips and
  Cheese ("Nvidia's B200: Keeping the CUDA Juggernaut Rolling"), 8000 GB/s from the DGX B200
  datasheet. Bandwidths are the datasheets' peaks, not achieved figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

KB = 1024
MB = 1024 * 1024


@dataclass(frozen=True)
class GpuSpec:
    key: str
    compute_capability: int  # x 10: 90 for sm_90
    sm_count: int
    smem_per_sm: int  # bytes
    smem_per_block: int  # bytes: the opt-in maximum one block may use
    l2_bytes: int
    bandwidth_gbps: float  # peak DRAM bandwidth, GB/s
    max_cluster: int = 0  # blocks per thread-block cluster; 0: no clusters

    @property
    def architecture(self) -> int:
        """The major compute capability: 8 Ampere/Ada, 9 Hopper, 10 Blackwell."""
        return self.compute_capability // 10


def _ampere(key: str, sms: int, l2_mb: int, bandwidth: float) -> GpuSpec:
    return GpuSpec(key, 80, sms, 164 * KB, 163 * KB, l2_mb * MB, bandwidth)


def _small_smem(key: str, cc: int, sms: int, l2_mb: int, bandwidth: float) -> GpuSpec:
    """sm_86 / sm_89: 100 KB of shared memory per SM, 99 KB per block."""
    return GpuSpec(key, cc, sms, 100 * KB, 99 * KB, l2_mb * MB, bandwidth)


def _hopper(key: str, sms: int, bandwidth: float, max_cluster: int = 16) -> GpuSpec:
    return GpuSpec(key, 90, sms, 228 * KB, 227 * KB, 50 * MB, bandwidth, max_cluster)


GPU_MODELS: Mapping[str, GpuSpec] = {spec.key: spec for spec in (
    _ampere("a100", 108, 40, 2039.0),
    _ampere("a100-pcie", 108, 40, 1935.0),
    _small_smem("a10", 86, 72, 6, 600.0),
    _small_smem("l4", 89, 58, 48, 300.0),
    _small_smem("l40", 89, 142, 96, 864.0),
    _small_smem("l40s", 89, 142, 96, 864.0),
    _small_smem("rtx4090", 89, 128, 72, 1008.0),
    _hopper("h100", 132, 3350.0),
    _hopper("h100-pcie", 114, 2000.0),
    _hopper("h200", 132, 4800.0),
    _hopper("gh200", 132, 4000.0),
    _hopper("h100-nvl", 132, 3900.0),
    _hopper("h800", 132, 3350.0),
    _ampere("a800", 108, 40, 2039.0),
    GpuSpec("b200", 100, 148, 228 * KB, 227 * KB, 126 * MB, 8000.0, max_cluster=8),
)}


def gpu_spec(key: str) -> GpuSpec | None:
    return GPU_MODELS.get(key)


def runs_on(requirements: Mapping[str, int], spec: GpuSpec) -> bool:
    """Whether a GPU of ``spec`` meets a candidate's requirements (see the module docstring)."""
    if spec.compute_capability < requirements.get("min_arch", 0):
        return False
    if requirements.get("smem_per_block", 0) > spec.smem_per_block:
        return False
    cluster = requirements.get("cluster", 0)
    return cluster <= 1 or cluster <= spec.max_cluster


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
    (tables fitted before 2026-11-25) is known to run only on the table's own GPU, so it is taken to
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
