"""Host side shared by the Triton variants: availability, a launcher per jit kernel with its compile
cache, device facts and the resource report of a compiled kernel.

Launch cost matters here: small softmaxes take about 5 us on the GPU, and the JIT entry point
(``kernel[grid](...)``) spends microseconds binding and hashing arguments on every call. ``Launcher``
therefore keeps the ``CompiledKernel`` handles that the JIT returns, keyed by everything Triton
specialises a launch on (dtype and 16-byte alignment of every pointer; ``== 1``, ``% 16`` and 32-bit
range of every integer; the constexpr values), and launches through the handle directly when the key
was seen before. A key never seen goes through the JIT once, which compiles if needed and launches.

Under ``TRITON_INTERPRET=1`` (CPU tests) the jit functions are interpreted: launches always go
through ``kernel[grid](...)`` and no resources exist (reported as ``None``).
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Sequence

from kernels.base import SUPPORTED, Build, KernelConfig, Resources, Support, Variant

log = logging.getLogger(__name__)

_INT32 = (-(2**31), 2**31)
# Set to 0 to launch through Triton's JIT entry point every time (slower; a fallback should the
# compiled-kernel launch ever disagree with a Triton version).
DIRECT_LAUNCH_ENV = "AUTOTUNER_TRITON_DIRECT_LAUNCH"
# The SM count reported under the interpreter: small, so that persistent loops do iterate.
_INTERPRETER_SMS = 2


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (decided when ``triton`` was imported)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):  # older Triton: the environment variable is the switch
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class TritonVariant(Variant):
    """Base of the Triton variants: availability and the files that define the generated code."""

    backend = "triton"

    def available(self) -> Support:
        if interpreting():
            return SUPPORTED
        try:
            import torch
        except ImportError as exc:
            return Support(False, f"torch not importable: {exc}")
        if not torch.cuda.is_available():
            return Support(False, "torch sees no CUDA device (TRITON_INTERPRET=1 runs Triton on the CPU)")
        return SUPPORTED

    def source_files(self) -> list[Path]:
        here = Path(__file__).parent
        own = Path(sys.modules[type(self).__module__].__file__)
        return [own, here / "tiles.py", here / "common.py"]


def config_options(config: KernelConfig) -> dict[str, int]:
    """Triton launch options carried by a config (``num_warps``, ``num_stages``)."""
    return {"num_warps": int(config["num_warps"]), "num_stages": int(config.get("num_stages", 1))}


def _is_interpreted(fn: Any) -> bool:
    """Whether ``triton.jit`` made ``fn`` for the interpreter (TRITON_INTERPRET=1 at import)."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return interpreting()
    return isinstance(fn, InterpretedFunction)


@lru_cache(maxsize=1)
def _compiled_launch_takes_every_argument() -> bool:
    """Since Triton 3.2 a ``CompiledKernel`` is launched with every argument, constexprs included,
    as the JIT does (and the fused-softmax tutorial); older versions want the non-constexpr ones
    only. There, this module keeps to the JIT entry point."""
    import triton

    major, minor = (int(part) for part in triton.__version__.split(".")[:2])
    return (major, minor) >= (3, 2)


def _spec_key(args: Sequence[Any], plain: frozenset[int]) -> tuple:
    """Everything Triton specialises a launch on, for the runtime arguments ``args``.

    Tensors: dtype, device and 16-byte alignment of the data pointer. Integers: 32-bit range and,
    unless the kernel marks them ``do_not_specialize`` (indices in ``plain``), ``== 1`` and
    ``% 16 == 0``. The key may be finer than Triton's own; it must never be coarser.
    """
    key: list[Any] = []
    for index, arg in enumerate(args):
        if isinstance(arg, int):
            in32 = _INT32[0] <= arg < _INT32[1]
            key.append(in32 if index in plain else (in32, arg == 1, arg % 16 == 0))
        elif hasattr(arg, "data_ptr"):
            key.append((arg.dtype, arg.get_device(), arg.data_ptr() % 16 == 0))
        else:
            key.append(arg)
    return tuple(key)


class Launcher:
    """One jit kernel with fixed launch options. Its constexpr parameters must come last in the
    signature, in the order ``const_names`` lists them; the launch passes their values positionally
    to the compiled kernel, as Triton's own JIT path does."""

    def __init__(
        self, fn: Any, const_names: Sequence[str], options: dict[str, int], plain: Sequence[str] = ()
    ):
        names = list(fn.arg_names)
        if names[len(names) - len(const_names):] != list(const_names):
            raise ValueError(f"{fn.__name__}: constexprs {const_names} must close the signature {names}")
        self.fn = fn
        self.const_names = tuple(const_names)
        self.options = dict(options)
        self.plain = frozenset(names.index(name) for name in plain)
        self.compiled: dict[tuple, Any] = {}
        self.direct = (
            not _is_interpreted(fn)
            and _compiled_launch_takes_every_argument()
            and os.environ.get(DIRECT_LAUNCH_ENV, "1") != "0"
        )

    def _kwargs(self, consts: Sequence[Any]) -> dict[str, Any]:
        return {**dict(zip(self.const_names, consts)), **self.options}

    def __call__(self, grid: tuple[int, ...], args: Sequence[Any], consts: Sequence[Any]) -> None:
        """Enqueue on torch's current stream (Triton's launcher asks torch for it)."""
        grid = (*grid, 1, 1)[:3]  # a CompiledKernel reads grid[0], grid[1] and grid[2]
        if not self.direct:
            self.fn[grid](*args, **self._kwargs(consts))
            return
        key = (tuple(consts), _spec_key(args, self.plain))
        kernel = self.compiled.get(key)
        if kernel is not None:
            kernel[grid](*args, *consts)
            return
        kernel = self.fn[grid](*args, **self._kwargs(consts))
        if kernel is not None:
            self.compiled[key] = kernel

    def compile(self, args: Sequence[Any], consts: Sequence[Any]) -> tuple[Any, float]:
        """Compile (or fetch from Triton's caches) without launching; returns (kernel, seconds)."""
        started = time.perf_counter()
        kernel = self.fn.warmup(*args, grid=(1,), **self._kwargs(consts))
        kernel._init_handles()  # loads the module: n_regs, n_spills and the function handle exist after this
        self.compiled[(tuple(consts), _spec_key(args, self.plain))] = kernel
        return kernel, time.perf_counter() - started


@lru_cache(maxsize=None)
def launcher_for(fn: Any, const_names: tuple[str, ...], num_warps: int, num_stages: int) -> Launcher:
    """The one launcher (and compile cache) per kernel and launch options; ``M`` is never specialised."""
    return Launcher(fn, const_names, {"num_warps": num_warps, "num_stages": num_stages}, plain=("M",))


class TiledRowVariant(TritonVariant):
    """A kernel that walks each row in tiles of BLOCK, so it serves any N. Its signature is
    ``(x_ptr, y_ptr, M, N, BLOCK, STAGES, ALIGNED)``; configs are rows of ``table``:
    (block, num_warps, num_stages, per_sm). ``per_sm`` 0 launches one program per row, k > 0 launches
    k programs per SM looping over rows, which bounds the rows in flight (and so their L2 footprint)."""

    kernel: ClassVar[Any]
    table: ClassVar[tuple[tuple[int, int, int, int], ...]]

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=b, num_warps=w, num_stages=s, per_sm=p) for b, w, s, p in self.table]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        """The smallest block serves every N; a larger one only rows of at least half its size."""
        block = int(config["block"])
        return {"n_min": 1 if block <= min(row[0] for row in self.table) else block // 2 + 1}

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        options = config_options(config)
        launcher = launcher_for(type(self).kernel, ("BLOCK", "STAGES", "ALIGNED"), **options)
        block, stages, per_sm = int(config["block"]), options["num_stages"], int(config["per_sm"])
        consts = (block, stages, n % 16 == 0)
        kernels = [] if interpreting() else [launcher.compile((probe_tensor(dtype),) * 2 + (2, n), consts)]
        resources = resources_of(kernels, options["num_warps"])

        def launch(x: Any, out: Any) -> None:
            m, n_cols = x.shape
            if m == 0:
                return
            programs = m if per_sm == 0 else min(m, per_sm * sm_count(x))
            launcher((programs,), (x, out, m, n_cols), (block, stages, n_cols % 16 == 0))

        return Build(self.name, config, dtype, launch, resources)


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


def sm_count(x: Any) -> int:
    """SMs of the device holding tensor ``x`` (cached per device)."""
    return device_facts(None if interpreting() else x.get_device()).sms


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
