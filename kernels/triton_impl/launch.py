"""Launching the Triton variants' jit kernels: a launcher per jit kernel with its compile cache, and
the description of a launch for the native launch module (``Launcher.native``).

Launch cost matters here: small softmaxes take about 5 us on the GPU, and the JIT entry point
(``kernel[grid](...)``) spends microseconds binding and hashing arguments on every call. ``Launcher``
therefore keeps the ``CompiledKernel`` handles that the JIT returns, keyed by everything Triton
specialises a launch on (dtype and 16-byte alignment of every pointer; ``== 1``, ``% 16`` and 32-bit
range of every integer; the constexpr values), and launches through the handle directly when the key
was seen before. A key never seen goes through the JIT once, which compiles if needed and launches.

Under ``TRITON_INTERPRET=1`` (CPU tests) the jit functions are interpreted: launches always go
through ``kernel[grid](...)``. Host plumbing, as ``kernels/cuda/launch.py`` is for the CUDA variants:
not part of a variant's source hash (``common.TritonVariant.source_files``).
"""
from __future__ import annotations

import time
import weakref
from functools import lru_cache
from typing import Any, Sequence

from kernels.settings import settings
from kernels.triton_impl.device import interpreting

_INT32 = (-(2**31), 2**31)
# Set to 0 to launch through Triton's JIT entry point every time (slower; a fallback should the
# compiled-kernel launch ever disagree with a Triton version).
DIRECT_LAUNCH_ENV = "AUTOTUNER_TRITON_DIRECT_LAUNCH"
_UNSEEN = object()  # Launcher.native: a kernel not compiled yet


def _int_class(value: int) -> int:
    """What Triton may specialise an int argument on: 32-bit range, == 1, divisible by 16."""
    return (-2147483648 <= value < 2147483648) * 4 + (value == 1) * 2 + (not value & 15)


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
    """Everything Triton specialises a launch on, for the runtime arguments ``args``: the plain
    statement of what ``_make_binder`` generates per kernel (tests hold the two against each other).

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


def _make_binder(names: Sequence[str], plain: frozenset[int]) -> Any:
    """``bind(device, args, consts) -> (key, values)`` for a kernel whose runtime parameters are
    ``names``: parameters named ``*_ptr`` are tensors, the others ints. ``values`` are the arguments
    with each tensor replaced by its data pointer (Triton's launcher takes an int as is, where a
    tensor costs a ``data_ptr()`` call and a driver query per launch); ``key`` holds everything
    Triton specialises on (see ``_spec_key``) plus the device and the constexpr values.

    Generated as straight-line code (one function per kernel signature), as Triton generates its
    own binder: a loop over the arguments costs several times more per launch."""
    lines, key, values = [], ["device", "consts"], []
    for index, name in enumerate(names):
        arg = f"a{index}"
        if name.endswith("_ptr"):
            lines.append(f"    p{index} = {arg}.data_ptr()")
            key += [f"{arg}.dtype", f"not p{index} & 15"]
            values.append(f"p{index}")
        else:
            in32 = f"-2147483648 <= {arg} < 2147483648"
            key += [in32] if index in plain else [in32, f"{arg} == 1", f"not {arg} & 15"]
            values.append(arg)
    unpack = f"    {', '.join(f'a{i}' for i in range(len(names)))}, = args" if names else ""
    source = "\n".join([
        "def bind(device, args, consts):",
        unpack,
        *lines,
        f"    return ({', '.join(key)},), ({''.join(v + ', ' for v in values)})",
    ])
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<triton binder {','.join(names)}>", "exec"), namespace)  # noqa: S102
    return namespace["bind"]


def _bind_torch() -> None:
    """Resolve torch's current-device and raw current-stream getters once (first launch)."""
    global _current_device, _raw_stream
    import torch

    get_device = getattr(torch._C, "_cuda_getDevice", None)
    _current_device = get_device if get_device is not None else torch.cuda.current_device
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _raw_stream = raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)


def hooks_idle_check() -> tuple[str, dict[str, Any]]:
    """A Python expression that is true while no launch hook is registered with Triton, and the
    names it uses (for generated code). Hooks default to None, or to an empty ``HookChain`` since
    Triton 3.4; anything else counts as a registered hook."""
    try:
        from triton import knobs

        runtime = knobs.runtime
        enter = runtime.launch_enter_hook
        runtime.launch_exit_hook  # noqa: B018 (present in this version?)
    except (ImportError, AttributeError):
        return "True", {}
    if not hasattr(enter, "calls"):
        return "(_knobs_runtime.launch_enter_hook is None and _knobs_runtime.launch_exit_hook is None)", {
            "_knobs_runtime": runtime}
    names = {"_knobs_runtime": runtime, "_HookChain": type(enter)}
    return ("(type(_knobs_runtime.launch_enter_hook) is _HookChain and not _knobs_runtime.launch_enter_hook.calls"
            " and type(_knobs_runtime.launch_exit_hook) is _HookChain and not _knobs_runtime.launch_exit_hook.calls)",
            names)


def _make_hooks_idle() -> Any:
    """``hooks_idle() -> bool``: no launch hook is registered (see ``hooks_idle_check``); then the
    fast path skips them and the launch-metadata object they would be given."""
    expression, names = hooks_idle_check()
    return eval(f"lambda: {expression}", dict(names))  # noqa: S307 (our own expression)


def _hooks_idle_first() -> bool:
    global _hooks_idle
    _hooks_idle = _make_hooks_idle()
    return _hooks_idle()


_hooks_idle: Any = _hooks_idle_first


def _current_device_first() -> int:
    _bind_torch()
    return _current_device()


def _raw_stream_first(index: int) -> int:
    _bind_torch()
    return _raw_stream(index)


_current_device: Any = _current_device_first
_raw_stream: Any = _raw_stream_first
_torch_dtypes: dict[str, Any] = {}  # dtype name -> torch dtype
_launchers: "weakref.WeakSet[Launcher]" = weakref.WeakSet()  # every Launcher made (one per kernel and options)


def all_launchers() -> list["Launcher"]:
    """Every live ``Launcher`` (their ``compiled`` dicts are caches the bounded-memory test counts)."""
    return list(_launchers)


def _torch_dtype(name: str) -> Any:
    from kernels.reference import torch_dtype

    value = _torch_dtypes[name] = torch_dtype(name)
    return value


def plan_guard(guard: Any) -> Any:
    """What a native plan checks for a build's ``guard`` (``plan_learn``, ``kernels/native``): for the
    hooks-idle guard where Triton's hooks are ``HookChain`` objects (3.4 on), ``(knobs.runtime,
    HookChain)``, which the plan reads in C as ``hooks_idle_check`` states it, without a Python call
    per launch; any other guard as it is."""
    if guard is not _hooks_idle:
        return guard
    expression, names = hooks_idle_check()
    return (names["_knobs_runtime"], names["_HookChain"]) if "_HookChain" in names else guard


def hooks_idle_guard() -> Any:
    """``guard() -> bool``: no Triton launch hook is registered (a native launch would not call it);
    the check itself, so that a kept launch pays one call for it."""
    _hooks_idle()  # binds the check on first use
    return _hooks_idle


class Launcher:
    """One jit kernel with fixed launch options. Its constexpr parameters must come last in the
    signature, in the order ``const_names`` lists them; the launch passes their values positionally
    to the compiled kernel, as Triton's own JIT path does. Runtime parameters named ``*_ptr`` take
    tensors, the others ints.

    Fast path (``direct``): the key of ``_make_binder`` finds the ``CompiledKernel`` kept from an
    earlier launch, and the launch goes to its ``run`` (Triton's C launcher) with the raw current
    stream, pointers as ints, and no launch-metadata object while no launch hook is registered;
    with a hook registered it goes through ``kernel[grid](...)``, which calls the hooks. A key not
    seen yet goes through the JIT once, which compiles if needed and launches."""

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
        self.runtime_names = tuple(names[: len(names) - len(const_names)])
        self._bind = _make_binder(self.runtime_names, self.plain)
        self._arg_kinds = tuple("pointer" if name.endswith("_ptr") else "plain" if index in self.plain else "int"
                                for index, name in enumerate(self.runtime_names))
        # key -> (run, function, packed metadata, CompiledKernel); bounded by the buckets launched
        self.compiled: dict[tuple, tuple] = {}
        # (device, dtype, constexprs, ints' classes) -> native launch (see native): bounded by the buckets compiled
        self._natives: dict[tuple, tuple | None] = {}
        # the runtime arguments open with the pointers (the native launch's x and out), the ints after
        names = self.runtime_names
        pointers = next((i for i, name in enumerate(names) if not name.endswith("_ptr")), len(names))
        ints_after = not any(name.endswith("_ptr") for name in names[pointers:])
        self._pointers = pointers if ints_after else None
        self._zeros = (0,) * pointers
        _launchers.add(self)
        self.direct = (
            not _is_interpreted(fn)
            and _compiled_launch_takes_every_argument()
            and settings.triton_direct_launch
        )

    def _kwargs(self, consts: Sequence[Any]) -> dict[str, Any]:
        return {**dict(zip(self.const_names, consts)), **self.options}

    @staticmethod
    def _entry(kernel: Any) -> tuple:
        """What a launch through the kept kernel needs, read once: (run, function, metadata, kernel).
        ``run`` is None where the kernel lacks these (an older Triton): it is launched as kernel[grid]."""
        try:
            return kernel.run, kernel.function, kernel.packed_metadata, kernel
        except AttributeError:
            return None, None, None, kernel

    def __call__(self, grid: tuple[int, ...], args: Sequence[Any], consts: Sequence[Any]) -> None:
        """Enqueue on torch's current stream."""
        if not self.direct:
            self.fn[(*grid, 1, 1)[:3]](*args, **self._kwargs(consts))
            return
        device = _current_device()
        key, values = self._bind(device, args, consts)
        entry = self.compiled.get(key)
        if entry is not None:
            run = entry[0]
            gx, gy, gz = grid if len(grid) == 3 else (*grid, 1, 1)[:3]
            if run is not None and _hooks_idle():
                stream = _raw_stream(device)
                run(gx, gy, gz, stream, entry[1], entry[2], None, None, None, *values, *consts)
            else:
                entry[3][(gx, gy, gz)](*args, *consts)
            return
        kernel = self.fn[(*grid, 1, 1)[:3]](*args, **self._kwargs(consts))
        if kernel is not None:
            self.compiled[key] = self._entry(kernel)

    def compile(self, args: Sequence[Any], consts: Sequence[Any]) -> tuple[Any, float]:
        """Compile (or fetch from Triton's caches) without launching; returns (kernel, seconds)."""
        started = time.perf_counter()
        kernel = self.fn.warmup(*args, grid=(1,), **self._kwargs(consts))
        kernel._init_handles()  # loads the module: n_regs, n_spills and the function handle exist after this
        if self.direct:
            self.compiled[self._bind(_current_device(), args, consts)[0]] = self._entry(kernel)
        return kernel, time.perf_counter() - started

    def native(self, device: int, dtype: str, grid: Sequence[int], args: Sequence[Any],
               consts: Sequence[Any]) -> tuple | None:
        """The launch ``self(grid, args, consts)`` would issue (``grid`` one-dimensional), as the native
        module takes it (``kernels.native``), with the tensors given as the markers ``X`` and ``OUT`` (both of
        ``dtype``, taken as 16-byte aligned: the native module checks it per call). None where
        that launch's kernel has not been compiled yet (the launch through ``self`` compiles it),
        or needs more than a plain launch (``_native_template``). Kept per (device, dtype,
        constexprs, the int arguments' classes), so a new N in a compiled bucket costs a dict probe
        and a pack."""
        if not self.direct or self._pointers is None:
            return None
        ints = args[self._pointers:]
        # what selects the compiled kernel, read without a loop over the arguments: every int's class
        # (32-bit range, == 1, % 16) whether Triton specialises it or not (a finer key, never coarser)
        key = (device, dtype, *consts, *map(_int_class, ints))
        launch = self._natives.get(key, _UNSEEN)
        if launch is _UNSEEN:
            launch = self._native_launch(key, device, dtype, args, tuple(consts))
            if launch is _UNSEEN:  # not compiled yet: asked again next time
                return None
        if launch is None:
            return None
        function, block_x, shared, pack, pick, nulls, x_slot, out_slot = launch
        return function, grid[0], block_x, shared, pack(*pick(self._zeros + ints)) + nulls, x_slot, out_slot

    def _native_launch(self, key: tuple, device: int, dtype: str, args: Sequence[Any], consts: tuple) -> Any:
        """What ``native`` keeps at ``key``, its (device, dtype, constexprs, ints' classes): (function,
        block x, shared memory, the slots' pack, the getter of the packed values from the pointers as
        0s and the ints, trailing null slots, x slot, out slot), None where the kernel needs more than
        a plain launch, ``_UNSEEN`` (kept nowhere) where it has not been compiled yet."""
        from operator import itemgetter

        entry = self.compiled.get(self._aligned_key(device, dtype, args, consts))
        if entry is None:
            return _UNSEEN
        template = self._confirmed_template(entry[3], args)
        launch = None
        if template is not None:
            slot_struct, packed, x_slot, out_slot, block_x, shared, function, nulls = template
            pick = itemgetter(*packed) if len(packed) > 1 else (lambda values, i=packed[0]: (values[i],))
            launch = (function, block_x, shared, slot_struct.pack, pick, nulls, x_slot, out_slot)
        self._natives[key] = launch
        return launch

    def _confirmed_template(self, kernel: Any, args: Sequence[Any]) -> tuple | None:
        """``_native_template`` with the null scratch pointers the driver's parameter sizes ask for
        appended (up to two), or None where the native module is not loaded or they disagree."""
        from kernels import native as native_module

        module = native_module.load()
        template = _native_template(kernel, self.runtime_names, args)
        if module is None or template is None:
            return None
        nulls = native_module.confirmed_extra_nulls(module, template[6], template[7], 2, checked=True)
        return None if nulls is None else (*template[:7], bytes(8 * nulls))

    def _aligned_key(self, device: int, dtype: str, args: Sequence[Any], consts: tuple) -> tuple:
        """The key ``_bind`` makes for ``args`` where every tensor is of ``dtype`` and 16-byte aligned."""
        tensor_dtype = _torch_dtypes.get(dtype) or _torch_dtype(dtype)
        key: list[Any] = [device, consts]
        for kind, arg in zip(self._arg_kinds, args):  # per argument: pointer, plain int or specialised int
            if kind == "pointer":
                key += (tensor_dtype, True)
            elif kind == "plain":
                key.append(-2147483648 <= arg < 2147483648)
            else:
                key += (-2147483648 <= arg < 2147483648, arg == 1, not arg & 15)
        return tuple(key)


# --- the native launch module's view ---------------------------------------------------------------

# Triton scalar types -> the parameter kind (``kernels.cuda.packing``) a launch packs them as
_SCALAR_KINDS = {"i1": "b", "i8": "b", "u8": "B", "i16": "h", "u16": "H", "i32": "i", "u32": "I",
                 "i64": "q", "u64": "Q", "fp32": "f", "fp64": "d"}
X, OUT = "x", "out"  # the two pointers ``Launcher.native`` takes as markers: patched per call


def _native_template(kernel: Any, runtime_names: Sequence[str], args: Sequence[Any]) -> tuple | None:
    """What every native launch of one ``CompiledKernel`` shares, from its signature (constexprs and
    values Triton specialised to constants dropped) and metadata: (struct of the argument slots,
    indexes of ``args`` packed, x slot, out slot, block x, shared memory, function, byte sizes). None
    where the kernel needs more than a plain launch (clusters, cooperative or PDL launch, scratch
    memory), its signature is not at hand, or its pointer arguments are other than one x and one out."""
    import struct

    from kernels.cuda.packing import KIND_SIZES, slot_format

    metadata = getattr(kernel, "metadata", None)
    signature = getattr(getattr(kernel, "src", None), "signature", None)
    if metadata is None or not isinstance(signature, dict) or getattr(kernel, "function", None) is None:
        return None
    if getattr(metadata, "num_ctas", 1) != 1 or getattr(metadata, "launch_cooperative_grid", False) \
            or getattr(metadata, "launch_pdl", False) or getattr(metadata, "global_scratch_size", 0) \
            or getattr(metadata, "profile_scratch_size", 0):
        return None
    types = list(signature.values())[: len(runtime_names)]
    if len(types) != len(runtime_names):
        return None
    kinds, packed, x_slots, out_slots = [], [], [], []
    for index, (kind, value) in enumerate(zip(types, args)):
        if kind == "constexpr":
            continue
        if kind.startswith("*"):
            if value not in (X, OUT):
                return None
            (x_slots if value == X else out_slots).append(len(kinds))
            kinds.append("P")
        elif kind in _SCALAR_KINDS:
            kinds.append(_SCALAR_KINDS[kind])
        else:
            return None
        packed.append(index)
    if len(x_slots) != 1 or len(out_slots) != 1:
        return None
    kinds_text = "".join(kinds)
    sizes = tuple(KIND_SIZES[kind] for kind in kinds_text)
    return (struct.Struct(slot_format(kinds_text)), tuple(packed), x_slots[0], out_slots[0],
            32 * metadata.num_warps, int(metadata.shared), int(kernel.function), sizes)


@lru_cache(maxsize=None)
def launcher_for(fn: Any, const_names: tuple[str, ...], num_warps: int, num_stages: int) -> Launcher:
    """The one launcher (and compile cache) per kernel and launch options; ``M`` is never specialised."""
    return Launcher(fn, const_names, {"num_warps": num_warps, "num_stages": num_stages}, plain=("M",))

