"""Run-time compilation of the CUDA C++ sources beside this file, through CuPy, and the device
facts a build reads (limits, resources, the shared-memory opt-in).

Device source lives in ``*.cu`` files here; each kernel is a template whose instance name carries every
compile-time parameter (``softmax_block_row<__nv_bfloat16, 256, 8>``), and that name is the cache key
together with a hash of the source and the toolchain versions.

CuPy is imported lazily: importing ``kernels`` must work on a machine without it.
"""
from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernels.base import Resources, hash_text

log = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).resolve().parent

CUDA_TYPE: dict[str, str] = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16"}

_lock = threading.Lock()
_modules: dict[tuple[str, str, str], Any] = {}
_functions: dict[tuple[str, str, str], tuple[Any, float]] = {}


def cupy_available() -> tuple[bool, str]:
    try:
        import cupy  # noqa: F401
        import cupy.cuda.runtime as rt

        if rt.getDeviceCount() < 1:
            return False, "CuPy found no CUDA device"
    except Exception as exc:  # ImportError, CUDARuntimeError, missing libcuda
        return False, f"CuPy is not usable here: {type(exc).__name__}: {exc}"
    return True, ""


def source_text(file_name: str) -> str:
    return (SOURCE_DIR / file_name).read_text()


@functools.lru_cache(maxsize=None)
def toolchain_fingerprint() -> str:
    """CuPy, CUDA runtime and device arch: part of every compile-cache key."""
    import cupy

    device = cupy.cuda.Device()
    cc = device.compute_capability
    return f"cupy={cupy.__version__};cuda={cupy.cuda.runtime.runtimeGetVersion()};sm={cc}"


def _compile_options() -> tuple[str, ...]:
    return ("--std=c++17", "-default-device")


def get_function(file_name: str, name_expression: str, code: str | None = None) -> tuple[Any, float]:
    """The compiled kernel for one template instance, and the seconds its compile took.

    Cached by (file, instance name, hash of the code and toolchain); ``code`` defaults to the file's
    text (callers pass it when they inline a shared header).
    """
    code = source_text(file_name) if code is None else code
    key = (file_name, name_expression, hash_text(code, toolchain_fingerprint()))
    with _lock:
        cached = _functions.get(key)
        if cached is not None:
            return cached
        import cupy

        started = time.perf_counter()
        try:
            module = cupy.RawModule(code=code, options=_compile_options(), name_expressions=(name_expression,))
            function = module.get_function(name_expression)
        except Exception as nvrtc_error:  # NVRTC lacks a header, or a toolkit mismatch: try nvcc
            log.info("NVRTC failed on %s (%s); retrying with nvcc", name_expression, nvrtc_error)
            module = cupy.RawModule(
                code=code, options=("--std=c++17",), name_expressions=(name_expression,), backend="nvcc"
            )
            function = module.get_function(name_expression)
        seconds = time.perf_counter() - started
        _modules[key] = module  # the function is only valid while its module lives
        _functions[key] = (function, seconds)
        return _functions[key]


@functools.lru_cache(maxsize=None)
def _device_limits(device_id: int) -> tuple[int, int, int]:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    return (
        int(props["maxThreadsPerMultiProcessor"]),
        int(props["sharedMemPerBlockOptin"]),
        int(props["multiProcessorCount"]),
    )


def device_limits() -> tuple[int, int, int]:
    """(max threads per SM, opt-in shared memory per block, SM count) of the current device (asked of
    torch where it is loaded: a launch's grid may read this on every call, and CuPy's Device object
    costs microseconds; both follow the CUDA runtime's current device)."""
    torch = sys.modules.get("torch")
    get_device = getattr(getattr(torch, "_C", None), "_cuda_getDevice", None)
    if get_device is not None:
        return _device_limits(get_device())
    import cupy

    return _device_limits(cupy.cuda.Device().id)


# id of a compiled kernel (kept for the process by get_function's cache) -> {CU_FUNC_ATTRIBUTE_*: value}
# that each device's CUfunction of it needs (``require_attribute``)
_required_attributes: dict[int, dict[int, int]] = {}
_attributes_set: set[tuple[int, int]] = set()  # (CUfunction, attribute) pairs set so far


def function_handle(function: Any) -> int:
    """The CUfunction of a CuPy kernel on the current device (RawModule.get_function returns a
    RawKernel, whose handle is on ``.kernel``; a cupy.cuda.function.Function has it on ``.ptr``).
    CuPy loads a kernel's module once per device, so each device has its own CUfunction: the
    attributes ``require_attribute`` asked for are set on each, the first time it is seen here."""
    inner = getattr(function, "kernel", None)
    handle = int(inner.ptr if inner is not None else function.ptr)
    required = _required_attributes.get(id(function))
    if required:
        for attribute, value in required.items():
            if (handle, attribute) not in _attributes_set:
                from cupy.cuda import driver

                driver.funcSetAttribute(handle, attribute, value)
                _attributes_set.add((handle, attribute))
    return handle


def require_attribute(function: Any, attribute: int, value: int) -> None:
    """Set a function attribute (cuFuncSetAttribute) on ``function``'s CUfunction of every device it
    is launched on: now on the current device's, on another device's when ``function_handle`` first
    meets it. Set on one device's CUfunction alone, a 16-block cluster's launch on a second GPU
    failed with CUDA_ERROR_INVALID_CLUSTER_SIZE (two H200s, 2026-11-27)."""
    _required_attributes.setdefault(id(function), {})[attribute] = value
    function_handle(function)


_smem_raised: dict[int, int] = {}  # CUfunction -> dynamic shared memory its limit was raised to
DEFAULT_SMEM_LIMIT = 48 * 1024  # bytes of shared memory per block (static + dynamic) without the opt-in


def needs_smem_opt_in(static_smem: int, dynamic_smem: int) -> bool:
    """Whether a launch must raise the kernel's dynamic shared-memory limit first: by default a block's
    static and dynamic shared memory together may not exceed 48 KB (so 48 KB of dynamic memory
    beside a kernel's 80 static bytes already needs the opt-in)."""
    return dynamic_smem > 0 and static_smem + dynamic_smem > DEFAULT_SMEM_LIMIT


def set_dynamic_smem(function: Any, dynamic_smem: int) -> None:
    """Raise the kernel's dynamic shared-memory limit where a launch needs more than the default, on
    the current device (the limit is per CUfunction, and each device has its own). What was set is
    remembered per CUfunction, so a launch does not query the driver each time."""
    if not dynamic_smem:
        return
    handle = function_handle(function)
    if _smem_raised.get(handle, 0) >= dynamic_smem:
        return
    if needs_smem_opt_in(int(function.shared_size_bytes), dynamic_smem) and (
            function.max_dynamic_shared_size_bytes < dynamic_smem):
        function.max_dynamic_shared_size_bytes = dynamic_smem
    _smem_raised[handle] = dynamic_smem


def resources_of(function: Any, threads: int, dynamic_smem: int = 0, compile_seconds: float | None = None) -> Resources:
    """Registers, spills, shared memory and occupancy of a compiled CuPy function at one launch size."""
    import cupy

    set_dynamic_smem(function, dynamic_smem)
    blocks = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(function_handle(function), threads, dynamic_smem)
    max_threads, _, _ = device_limits()
    return Resources(
        registers=int(function.num_regs),
        spill_bytes=int(function.local_size_bytes),
        static_smem=int(function.shared_size_bytes),
        dynamic_smem=int(dynamic_smem),
        threads_per_block=int(threads),
        blocks_per_sm=int(blocks),
        occupancy=min(1.0, blocks * threads / max_threads),
        compile_seconds=compile_seconds,
    )
