"""Launching a compiled CUDA kernel on torch's current stream: argument packing, streams, the
per-thread parameter buffers and cuLaunchKernel.

CuPy and torch are imported lazily: importing ``kernels`` must work on a machine without either.
"""
from __future__ import annotations

from typing import Any, Sequence

from kernels.cuda.compiler import function_handle, needs_smem_opt_in, set_dynamic_smem
from kernels.cuda.packing import NUMPY_KINDS, ParamBuffer, numpy_kinds, slot_format

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
    from kernels.settings import settings

    return settings.cuda_direct_launch


def _ensure_context() -> None:
    """Make the current device's primary context current on this thread. cuLaunchKernel launches in
    the thread's current context, and a thread that has made no CUDA runtime call that sets one
    (torch allocating from its cache does not) has none; cudaSetDevice sets it."""
    try:
        from cupy.cuda import runtime
    except ImportError:
        return
    runtime.setDevice(_current_device())


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

        self.function = function
        self.block = tuple((*block, 1, 1)[:3])
        self.kinds = kinds
        self._struct = struct.Struct(slot_format(kinds))
        self._pack = self._struct.pack_into
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

    def buffer(self) -> ParamBuffer:
        """This thread's parameter buffer (made on the thread's first launch of this kernel, which
        also makes sure the thread has a current CUDA context: see ``_ensure_context``)."""
        try:
            return self._local.buffer
        except AttributeError:
            _ensure_context()
            buffer = self._local.buffer = ParamBuffer(len(self.kinds))
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

    def native(self, device: int, grid: Sequence[int], shared_mem: int, args: Sequence[Any],
               x_slot: int = 0, out_slot: int = 1) -> tuple | None:
        """This launch as the native module takes it (``kernels.native``): the CUfunction of
        ``device`` (which must be current), grid x, block x, shared memory (opted into here where it
        needs the opt-in), ``args`` packed into 8-byte slots, x and out given as 0 and patched per
        call at ``x_slot`` and ``out_slot``. None where the direct launch is off
        (``DIRECT_LAUNCH_ENV``) or the grid or block is not one-dimensional."""
        if not self.direct or len(grid) > 1 and (grid[1] != 1 or grid[-1] != 1) or self.block[1:] != (1, 1):
            return None
        handle = self._handles.get(device) or self.handle(device)
        if shared_mem and self._smem.get(device, 0) < shared_mem:
            self._raise_smem(device, shared_mem)
        return handle, grid[0], self.block[0], shared_mem, self._struct.pack(*args), x_slot, out_slot

    def row_native(self, geometry: Any, n_max: int | None = None) -> Any:
        """``native(device, stream, m, n)`` (``Build.native``) of a kernel of the default signature
        ``(x, out, int64 M, int64 N)``, whose grid and dynamic shared memory ``geometry(m, n)`` gives:
        what ``native`` returns, with the per-launch checks done here once, and None for rows longer
        than ``n_max``. Runs on every call that meets a new shape, so it reads nothing per call but
        the device's handle and opt-in. None where the direct launch is off or the block is not
        one-dimensional."""
        if not self.direct or self.block[1:] != (1, 1):
            return None
        handles, opted, pack, block_x, handle_of = self._handles, self._smem, self._struct.pack, self.block[0], self.handle
        longest = (1 << 63) if n_max is None else n_max

        def native(device: int, stream: int, m: int, n: int) -> tuple | None:
            if not m or n > longest:
                return None
            grid_x, shared_mem = geometry(m, n)
            handle = handles.get(device) or handle_of(device)
            if shared_mem and opted.get(device, 0) < shared_mem:
                self._raise_smem(device, shared_mem)
            return handle, grid_x, block_x, shared_mem, pack(0, 0, m, n), 0, 1

        return native

    def _call_cupy(self, grid: Sequence[int], shared_mem: int, args: Sequence[Any]) -> None:
        """The launch through CuPy's ``RawKernel.__call__`` (numpy scalars give the exact types)."""
        import numpy as np

        types = {"P": np.uint64, "Q": np.uint64, "q": np.int64, "I": np.uint32, "i": np.int32,
                 "H": np.uint16, "h": np.int16, "B": np.uint8, "b": np.int8, "f": np.float32, "d": np.float64}
        typed = tuple(types[k](a) for k, a in zip(self.kinds, args))
        set_dynamic_smem(self.function, shared_mem)
        grid = tuple((*grid, 1, 1)[:3])
        self.function(grid, self.block, typed, shared_mem=shared_mem, stream=current_stream())


_generic: dict[tuple[Any, tuple[int, ...], str], KernelLauncher] = {}


def launch(function: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple, dynamic_smem: int = 0) -> None:
    """Enqueue ``function`` on torch's current stream. Pointers go as ``numpy.uint64``, sizes as
    ``numpy.int32`` / ``numpy.int64`` (the kernel's exact parameter types). Launched through a
    ``KernelLauncher`` kept per (function, block, parameter types); arguments of other types go
    through CuPy's own ``RawKernel.__call__``."""
    kinds_of = NUMPY_KINDS or numpy_kinds()
    try:
        kinds = "".join([kinds_of[type(a)] for a in args])
    except KeyError:
        function(tuple((*grid, 1, 1)[:3]), tuple((*block, 1, 1)[:3]), args, shared_mem=dynamic_smem,
                 stream=current_stream())
        return
    key = (function, tuple(block), kinds)
    launcher = _generic.get(key)
    if launcher is None:
        launcher = _generic[key] = KernelLauncher(function, block, kinds)
    launcher(grid, dynamic_smem, *args)
