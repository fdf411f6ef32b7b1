"""The device the Triton kernels run on, as the host sees it: whether Triton interprets them on the
CPU (``TRITON_INTERPRET=1``), the SM count and per-SM limits of a CUDA device, and the resource
report of a compiled kernel (registers, spills, shared memory, occupancy through CuPy).

Under the interpreter nothing is compiled: the device facts are a small stand-in and resources
are reported as ``None``. Host plumbing, like ``launch.py``: not part of a variant's source hash
(``common.TritonVariant.source_files``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from kernels.base import Resources

log = logging.getLogger(__name__)

# The SM count reported under the interpreter: small, so that persistent loops do iterate.
_INTERPRETER_SMS = 2


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (decided when ``triton`` was imported)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):  # older Triton: the environment variable is the switch
        from kernels.settings import settings

        return settings.triton_interpret


@dataclass(frozen=True)
class DeviceFacts:
    sms: int
    max_threads_per_sm: int
    regs_per_sm: int
    smem_per_sm: int


@lru_cache(maxsize=None)
def device_facts(device_index: int | None = None) -> DeviceFacts:
    """SM count and per-SM limits of a CUDA device; a small stand-in under the interpreter."""
    if interpreting():
        return DeviceFacts(_INTERPRETER_SMS, 2048, 65536, 228 * 1024)
    import torch

    index = torch.cuda.current_device() if device_index is None else device_index
    props = torch.cuda.get_device_properties(index)
    return DeviceFacts(
        sms=int(props.multi_processor_count),
        max_threads_per_sm=int(getattr(props, "max_threads_per_multi_processor", 2048)),
        regs_per_sm=int(getattr(props, "regs_per_multiprocessor", 65536)),
        smem_per_sm=int(getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)),
    )


_sm_counts: dict[int, int] = {}  # x.get_device() -> SMs (-1: a CPU tensor, under the interpreter)


def sm_count(x: Any) -> int:
    """SMs of the device holding tensor ``x`` (cached per device: this is on every launch)."""
    return device_sms(x.get_device())


def device_sms(index: int) -> int:
    """SMs of CUDA device ``index`` (-1: a CPU tensor, under the interpreter), cached per device."""
    sms = _sm_counts.get(index)
    if sms is None:
        sms = _sm_counts[index] = device_facts(None if interpreting() else index).sms
    return sms


def _blocks_per_sm(function: int, threads: int, shared: int, n_regs: int, facts: DeviceFacts) -> int:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor through CuPy when it imports, else the same from
    the per-SM limits (registers are allocated per warp in units of 256)."""
    try:
        import cupy

        return int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(function, threads, shared))
    except Exception as exc:  # CuPy missing or refusing the handle: compute it
        log.debug("occupancy through CuPy unavailable (%s); computing it from limits", exc)
    warps = max(1, threads // 32)
    regs_per_warp = -(-max(1, n_regs) * 32 // 256) * 256
    by_regs = (facts.regs_per_sm // regs_per_warp) // warps
    by_smem = facts.smem_per_sm // (shared + 1024) if shared else 32
    by_threads = facts.max_threads_per_sm // threads
    return max(0, min(by_regs, by_smem, by_threads, 32))


def resources_of(kernels: Sequence[tuple[Any, float]], num_warps: int) -> Resources:
    """Resources of one build from its compiled kernels (split-row has two): the largest register,
    spill and shared-memory figures, the smallest occupancy, the summed compile time."""
    threads = num_warps * 32
    if not kernels:  # interpreter: nothing was compiled
        return Resources(threads_per_block=threads)
    facts = device_facts()
    regs = max(int(k.n_regs) for k, _ in kernels)
    spills = max(int(k.n_spills) for k, _ in kernels)
    shared = max(int(k.metadata.shared) for k, _ in kernels)
    blocks = min(
        _blocks_per_sm(k.function, threads, int(k.metadata.shared), int(k.n_regs), facts) for k, _ in kernels
    )
    return Resources(
        registers=regs,
        spill_bytes=spills * 4,  # Triton reports CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4
        static_smem=0,
        dynamic_smem=shared,  # Triton passes all of its shared memory as dynamic
        threads_per_block=threads,
        blocks_per_sm=blocks,
        occupancy=min(1.0, blocks * threads / facts.max_threads_per_sm),
        compile_seconds=sum(seconds for _, seconds in kernels),
    )


def probe_tensor(dtype: str) -> Any:
    """A small, 16-byte aligned CUDA tensor to compile against (contents never read)."""
    import torch

    from kernels.reference import torch_dtype

    return torch.empty(64, dtype=torch_dtype(dtype), device="cuda")
