"""Run-time compilation and launch of the CUDA C++ sources beside this file, through CuPy.

Device source lives in ``*.cu`` files here; each kernel is a template whose instance name carries every
compile-time parameter (``softmax_block_row<__nv_bfloat16, 256, 8>``), and that name is the cache key
together with a hash of the source and the toolchain versions.

CuPy and torch are imported lazily: importing ``kernels`` must work on a machine without either.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from kernels.base import Resources, hash_text
from kernels.launch_record import recording, tap, taps  # noqa: F401 - recording re-exported

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
    """(max threads per SM, opt-in shared memory per block, SM count) of the current device."""
    import cupy

    return _device_limits(cupy.cuda.Device().id)


def function_handle(function: Any) -> int:
    """The CUfunction of a CuPy kernel (RawModule.get_function returns a RawKernel, whose handle is
    on ``.kernel``; a cupy.cuda.function.Function has it on ``.ptr``)."""
    inner = getattr(function, "kernel", None)
    return int(inner.ptr if inner is not None else function.ptr)


_smem_raised: dict[int, int] = {}
DEFAULT_SMEM_LIMIT = 48 * 1024  # bytes of shared memory per block (static + dynamic) without the opt-in


def needs_smem_opt_in(static_smem: int, dynamic_smem: int) -> bool:
    """Whether a launch must raise the kernel's dynamic shared-memory limit first: by default a block's
    static and dynamic shared memory together may not exceed 48 KB (so 48 KB of dynamic memory
    beside a kernel's 80 static bytes already needs the opt-in)."""
    return dynamic_smem > 0 and static_smem + dynamic_smem > DEFAULT_SMEM_LIMIT


def set_dynamic_smem(function: Any, dynamic_smem: int) -> None:
    """Raise the kernel's dynamic shared-memory limit where a launch needs more than the default.
    What was set is remembered per kernel, so a launch does not query the driver each time."""
    if not dynamic_smem or _smem_raised.get(id(function), 0) >= dynamic_smem:
        return
    if needs_smem_opt_in(int(function.shared_size_bytes), dynamic_smem) and (
            function.max_dynamic_shared_size_bytes < dynamic_smem):
        function.max_dynamic_shared_size_bytes = dynamic_smem
    _smem_raised[id(function)] = dynamic_smem


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


# --- launch --------------------------------------------------------------------------------------
# A launch is host work on the critical path of small softmaxes (a few microseconds of GPU time), so
# it goes straight to cuLaunchKernel through CuPy's driver binding (``cupy.cuda.driver.launchKernel``):
# the arguments are packed by one precompiled ``struct`` into a per-thread parameter buffer, the
# CUfunction is looked up once per device, and torch's current stream is read as a raw handle.
# CuPy's ``RawKernel.__call__`` does the same launch but converts every argument object and asks
# for the device's kernel on each call. ``AUTOTUNER_CUDA_DIRECT_LAUNCH=0`` launches through CuPy's
# ``RawKernel.__call__`` instead (the fallback should the driver binding be missing).
DIRECT_LAUNCH_ENV = "AUTOTUNER_CUDA_DIRECT_LAUNCH"
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1  # cuda.h: the kernel's static shared memory
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # cuda.h

# Kernel parameter kinds: one character each. Every parameter takes an 8-byte slot of the buffer
# (the kernel reads sizeof(T) bytes from the slot's address, so 4-byte values are padded).
_SLOTS = {
    "P": "Q",  # pointer (unsigned 64-bit)
    "Q": "Q", "q": "q",
    "I": "I4x", "i": "i4x",
    "H": "H6x", "h": "h6x", "B": "B7x", "b": "b7x",
    "f": "f4x", "d": "d",
}
_NUMPY_KINDS: dict[type, str] = {}  # numpy scalar type -> kind, filled on first use


def _numpy_kinds() -> dict[type, str]:
    if not _NUMPY_KINDS:
        import numpy as np

        # numpy.uint64 is how every caller passes a pointer, so it is kind "P": a replay then binds
        # it to the new x / out, or refuses a launch that uses any other pointer (a workspace, the
        # grid-split slots), instead of replaying the recorded address as a constant.
        _NUMPY_KINDS.update({
            np.uint64: "P", np.int64: "q", np.uint32: "I", np.int32: "i", np.uint16: "H", np.int16: "h",
            np.uint8: "B", np.int8: "b", np.float32: "f", np.float64: "d",
        })
    return _NUMPY_KINDS


def _bind_api() -> None:
    """Resolve the per-call helpers (torch's device and stream, CuPy's cuLaunchKernel) once."""
    global _current_device, _raw_stream, _launch_kernel
    import torch

    get_device = getattr(torch._C, "_cuda_getDevice", None)
    _current_device = get_device if get_device is not None else torch.cuda.current_device
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _raw_stream = raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)
    try:
        from cupy.cuda import driver

        _launch_kernel = driver.launchKernel
    except (ImportError, AttributeError):
        _launch_kernel = None


def _current_device_first(*args: Any) -> int:
    _bind_api()
    return _current_device(*args)


def _raw_stream_first(index: int) -> int:
    _bind_api()
    return _raw_stream(index)


# Rebound by _bind_api on first use, so that importing this module imports neither torch nor CuPy.
_current_device: Any = _current_device_first
_raw_stream: Any = _raw_stream_first
_launch_kernel: Any = None


def current_raw_stream(device: int | None = None) -> int:
    """The raw handle (cudaStream_t as int) of torch's current stream on ``device`` (default: the
    current device), read without building a torch Stream object."""
    return _raw_stream(_current_device() if device is None else device)


_streams: dict[int, Any] = {}


def current_stream() -> Any:
    """CuPy's view of torch's current stream (an ``ExternalStream``), cached by raw handle."""
    handle = current_raw_stream()
    stream = _streams.get(handle)
    if stream is None:
        import cupy

        stream = _streams[handle] = cupy.cuda.ExternalStream(handle)
    return stream


def _direct_launch_enabled() -> bool:
    import os

    return os.environ.get(DIRECT_LAUNCH_ENV, "1") != "0"


def _ensure_context() -> None:
    """Make the current device's primary context current on this thread. cuLaunchKernel launches in
    the thread's current context, and a thread that has made no CUDA runtime call that sets one
    (torch allocating from its cache does not) has none; cudaSetDevice sets it."""
    try:
        from cupy.cuda import runtime
    except ImportError:
        return
    runtime.setDevice(_current_device())


class _ParamBuffer:
    """One thread's argument storage for one kernel: ``n`` 8-byte value slots, then ``n`` pointers
    to them (the ``void **kernelParams`` of cuLaunchKernel)."""

    __slots__ = ("storage", "values", "params")

    def __init__(self, n: int) -> None:
        import ctypes

        self.storage = (ctypes.c_uint64 * (2 * n))()
        base = ctypes.addressof(self.storage)
        for i in range(n):
            self.storage[n + i] = base + 8 * i
        self.values = memoryview(self.storage).cast("B")[: 8 * n]
        self.params = base + 8 * n if n else 0


class KernelLauncher:
    """A CuPy kernel bound to its block shape and parameter kinds, launched on torch's current stream.

    ``kinds`` has one character per kernel parameter: ``P`` pointer (pass an int address), ``q``/``Q``
    64-bit, ``i``/``I`` 32-bit, ``h``/``H``/``b``/``B`` 16/8-bit integers, ``f``/``d`` float/double.
    Call as ``launcher(grid, shared_mem, *args)`` with plain Python ints (or numpy scalars).

    Per call: the current device, its CUfunction (looked up once per device: CuPy loads a module per
    device), the raw current stream, one ``struct.pack_into`` and one cuLaunchKernel. Dynamic shared
    memory beyond the default limit (``needs_smem_opt_in``) is opted into once per device and size.
    Thread-safe: each thread packs into its own buffer (cuLaunchKernel copies the parameters before
    it returns)."""

    def __init__(self, function: Any, block: Sequence[int], kinds: str) -> None:
        import struct
        import threading

        unknown = set(kinds) - set(_SLOTS)
        if unknown:
            raise ValueError(f"unknown parameter kinds {sorted(unknown)} in {kinds!r}")
        self.function = function
        self.block = tuple((*block, 1, 1)[:3])
        self.kinds = kinds
        self._pack = struct.Struct("<" + "".join(_SLOTS[k] for k in kinds)).pack_into
        self._local = threading.local()
        self._handles: dict[int, int] = {}  # device index -> CUfunction
        self._smem: dict[int, int] = {}  # device index -> dynamic shared memory opted into
        self.direct = _direct_launch_enabled()

    def handle(self, device: int) -> int:
        """The CUfunction for ``device`` (the current device: CuPy loads the module there)."""
        handle = self._handles.get(device)
        if handle is None:
            handle = self._handles[device] = function_handle(self.function)
        return handle

    def _raise_smem(self, device: int, shared_mem: int) -> None:
        from cupy.cuda import driver

        handle = self.handle(device)
        static = driver.funcGetAttribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, handle)
        if needs_smem_opt_in(static, shared_mem) and (
                driver.funcGetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, handle) < shared_mem):
            driver.funcSetAttribute(handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
        self._smem[device] = shared_mem

    def buffer(self) -> _ParamBuffer:
        """This thread's parameter buffer (made on the thread's first launch of this kernel, which
        also makes sure the thread has a current CUDA context: see ``_ensure_context``)."""
        try:
            return self._local.buffer
        except AttributeError:
            _ensure_context()
            buffer = self._local.buffer = _ParamBuffer(len(self.kinds))
            return buffer

    def __call__(self, grid: Sequence[int], shared_mem: int, *args: Any) -> None:
        device = _current_device()
        handle = self._handles.get(device)
        if handle is None:  # first launch on this device, or the direct launch is off
            if not self.direct or _launch_kernel is None:
                self._call_cupy(grid, shared_mem, args)
                return
            handle = self.handle(device)
        if shared_mem and self._smem.get(device, 0) < shared_mem:
            self._raise_smem(device, shared_mem)
        try:
            buffer = self._local.buffer
        except AttributeError:
            buffer = self.buffer()
        self._pack(buffer.values, 0, *args)
        gx, gy, gz = grid if len(grid) == 3 else (*grid, 1, 1)[:3]
        bx, by, bz = self.block
        stream = _raw_stream(device)
        _launch_kernel(handle, gx, gy, gz, bx, by, bz, shared_mem, stream, buffer.params, 0)
        if taps:
            tap(CudaLaunch(self, device, handle, (gx, gy, gz), shared_mem, stream, args))

    def _call_cupy(self, grid: Sequence[int], shared_mem: int, args: Sequence[Any]) -> None:
        """The launch through CuPy's ``RawKernel.__call__`` (numpy scalars give the exact types)."""
        import numpy as np

        types = {"P": np.uint64, "Q": np.uint64, "q": np.int64, "I": np.uint32, "i": np.int32,
                 "H": np.uint16, "h": np.int16, "B": np.uint8, "b": np.int8, "f": np.float32, "d": np.float64}
        typed = tuple(types[k](a) for k, a in zip(self.kinds, args))
        set_dynamic_smem(self.function, shared_mem)
        grid = tuple((*grid, 1, 1)[:3])
        self.function(grid, self.block, typed, shared_mem=shared_mem, stream=current_stream())
        if taps:
            tap(None)


_generic: dict[tuple[Any, tuple[int, ...], str], KernelLauncher] = {}


def launch(function: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple, dynamic_smem: int = 0) -> None:
    """Enqueue ``function`` on torch's current stream. Pointers go as ``numpy.uint64``, sizes as
    ``numpy.int32`` / ``numpy.int64`` (the kernel's exact parameter types). Launched through a
    ``KernelLauncher`` kept per (function, block, parameter types); arguments of other types go
    through CuPy's own ``RawKernel.__call__``."""
    kinds_of = _NUMPY_KINDS or _numpy_kinds()
    try:
        kinds = "".join([kinds_of[type(a)] for a in args])
    except KeyError:
        function(tuple((*grid, 1, 1)[:3]), tuple((*block, 1, 1)[:3]), args, shared_mem=dynamic_smem,
                 stream=current_stream())
        if taps:
            tap(None)
        return
    key = (function, tuple(block), kinds)
    launcher = _generic.get(key)
    if launcher is None:
        launcher = _generic[key] = KernelLauncher(function, block, kinds)
    launcher(grid, dynamic_smem, *args)


# --- recording and replay -------------------------------------------------------------------------
# kernels.launch_record: ``recording(calls)`` (re-exported here) collects this layer's launch records.

# Buffers a variant keeps for one stream and never frees (cuda_grid_split's slots and ticket
# counter): pointer -> raw stream handle. A replay may pass such a pointer as recorded while the
# current stream is that stream (the launch would pass the same one); any other pointer besides x
# and out makes a launch unsafe to replay.
_stream_buffers: dict[int, int] = {}


def register_stream_buffer(pointer: int, stream: int) -> None:
    """Declare ``pointer`` a buffer owned by ``stream`` for as long as the process runs: launches
    on that stream always pass it, so a replay guarded on the stream may keep it."""
    _stream_buffers[int(pointer)] = int(stream)


class CudaLaunch:
    """One cuLaunchKernel call as a ``KernelLauncher`` issued it: the launcher, the device and its
    CUfunction, grid, dynamic shared memory, stream and the arguments (plain values by kind)."""

    def __init__(self, launcher: KernelLauncher, device: int, handle: int, grid: tuple, shared_mem: int,
                 stream: int, args: tuple) -> None:
        self.launcher, self.device, self.handle = launcher, device, handle
        self.grid, self.shared_mem, self.stream = grid, shared_mem, stream
        self.args = tuple(int(a) if k in "PQqIiHhBb" else float(a) for k, a in zip(launcher.kinds, args))
        self._prepacked: _ParamBuffer | None = None

    def pointers(self) -> list[int]:
        """The pointer arguments, in order."""
        return [a for k, a in zip(self.launcher.kinds, self.args) if k == "P"]

    def same_launch(self, other: Any) -> bool:
        return isinstance(other, CudaLaunch) and (
            self.launcher, self.device, self.handle, self.grid, self.shared_mem, self.args) == (
            other.launcher, other.device, other.handle, other.grid, other.shared_mem, other.args)

    def replay(self) -> None:
        """Issue the recorded driver call again, as is: arguments packed once, the recorded stream.
        The cheapest launch of this kernel there is (the benchmark's raw-launch floor)."""
        if self._prepacked is None:
            self._prepacked = _ParamBuffer(len(self.args))
            self.launcher._pack(self._prepacked.values, 0, *self.args)
        bx, by, bz = self.launcher.block
        _launch_kernel(self.handle, *self.grid, bx, by, bz, self.shared_mem, self.stream, self._prepacked.params, 0)

    def bind_code(self, x_ptr: int, out_ptr: int, tag: str) -> tuple[str | None, list[str], dict[str, Any]] | None:
        """This launch as code for a generated replay: (guard, statements, names). The statements
        pack the arguments, ``xp`` for pointer ``x_ptr`` and ``op`` for ``out_ptr``, into the calling
        thread's buffer and launch on ``stream``. Names carry ``tag`` so several launches share one
        function. A pointer registered as the recorded stream's buffer (``register_stream_buffer``)
        stays as recorded, under the guard that the current stream is that one (no guard
        otherwise). None where the launch uses any other pointer (a workspace: its address may
        change, so replaying it is not safe)."""
        args, names = [], {}
        guard = None
        for index, (kind, value) in enumerate(zip(self.launcher.kinds, self.args)):
            if kind == "P" and value == x_ptr:
                args.append("xp")
            elif kind == "P" and value == out_ptr:
                args.append("op")
            elif kind == "P" and value == 0:  # a null pointer (an optional buffer not used)
                args.append("0")
            elif kind == "P" and _stream_buffers.get(value) == self.stream:
                args.append(f"c{index}{tag}")
                names[f"c{index}{tag}"] = value
                guard = f"raw_stream(DEVICE) == {self.stream}"
            elif kind == "P":
                return None
            else:
                args.append(f"c{index}{tag}")
                names[f"c{index}{tag}"] = value
        bx, by, bz = self.launcher.block
        gx, gy, gz = self.grid
        names.update({f"local{tag}": self.launcher._local, f"launcher{tag}": self.launcher,
                      f"pack{tag}": self.launcher._pack, f"launch_kernel{tag}": _launch_kernel})
        statements = [
            "try:",
            f"    buffer{tag} = local{tag}.buffer",
            "except AttributeError:",
            f"    buffer{tag} = launcher{tag}.buffer()",
            f"pack{tag}(buffer{tag}.values, 0, {', '.join(args)})",
            f"launch_kernel{tag}({self.handle}, {gx}, {gy}, {gz}, {bx}, {by}, {bz}, {self.shared_mem}, stream, "
            f"buffer{tag}.params, 0)",
        ]
        return guard, statements, names

    def bind(self, x_ptr: int, out_ptr: int) -> Any:
        """``fn(xp, op, stream)``: this launch with new pointers on ``stream``; None as for
        ``bind_code``, and for a launch that keeps a stream's buffer (it is only valid on that
        stream, which ``fn`` could not check)."""
        code = self.bind_code(x_ptr, out_ptr, "")
        if code is None or code[0] is not None:
            return None
        _, statements, names = code
        source = "\n".join(["def bound(xp, op, stream):", *(f"    {line}" for line in statements)])
        exec(compile(source, f"<cuda replay {self.handle:#x}>", "exec"), names)  # noqa: S102
        return names["bound"]
