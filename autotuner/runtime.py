"""``softmax(x, dim=-1)``: run the kernel the dispatch table picks for this GPU and shape.

Host time is the point: a small softmax takes a few microseconds of GPU time, and inference runtimes
meet new shapes on most calls, so a new shape must cost arithmetic, never a compile or a recording.

- Kernel instances: one build per (variant, config, dtype) and kind of device (``build_for``),
  compiled on first use or by ``autotuner.warmup``; a build launches every (M, N) its config admits.
- A new shape of a CUDA tensor (rows of its last dim, any rank) goes to its device and dtype's native
  plan (``kernels/native``: the index of the table ``select_kernel`` answers the GPU from, and per
  candidate the launches it was taught): one C call picks, works out the launch (``NativeRule``),
  allocates and launches (a torch_softmax pick is ``at::softmax``). Where it cannot (no launch taught
  for the pick and N's class yet, no rule), it answers its pick; the Python side picks again, takes
  the instance (``_instance``) and its launch (``Build.native``), issues it through the native
  ``run`` and teaches it to the plan. A torch_softmax pick calls ``Build.apply``.
- Recent shapes: what the plan cannot launch is kept per (device, shape, dtype), at most
  ``RECENT_SHAPES`` (the oldest quarter dropped when full), used while its device is current, on its
  stream where it holds a stream's buffer, and while its guard holds (no Triton launch hook). Entries
  hold only ints, bytes and plain tuples (``_callables`` by number): the collector does not track them.
- The Python path (no native module yet, no native description, pointers not 16-byte aligned):
  allocate with torch, call the build's ``launch``. Anything else (another dim, M or N = 0, CPU
  tensors) goes through ``_softmax_impl``; CPU tensors are ``torch.softmax``'s.

Every cache is bounded by the kernel instances (builds, GPU keys, pickers and plans per device and
dtype, a plan's launches per candidate and class of N) or by ``RECENT_SHAPES``, never by the shapes
met. ``torch.compile`` sees ``torch.ops.autotuner.softmax``, a custom op whose body is this path.
"""
from __future__ import annotations

import operator
import threading
import warnings
from itertools import islice
from typing import Any

import torch

from autotuner.domain import MAX_DIM
from autotuner.lookup import select as _select
from autotuner.lookup.gpu import normalize_gpu_name
from autotuner.lookup.select import select_kernel
from kernels import native as native_loader
from kernels.registry import native_rule, plan_rule

RECENT_SHAPES = 16384  # launches kept for repeated shapes (a bounded memo, its oldest quarter dropped when full; about 0.5 kB each)

# (variant, config items, dtype, _device_kind) -> build: bounded by the tables' candidates x kinds of device
_builds: dict[tuple[str, tuple, str, tuple], Any] = {}
# (device index, (M, N), torch dtype) -> (native launch, stream it is bound to or None, number of its
# guard or -1, number of its apply or -1): a pick with an ``apply`` (torch_softmax) keeps it alone,
# launch None. Probed with x.shape (a torch.Size hashes and compares as the plain tuple).
_recent: dict[tuple[int, Any, Any], tuple[Any, int | None, int, int]] = {}
# the guards and applies entries name by number (see _callable_number): bounded by the builds
_callables: list[Any] = []
_callable_numbers: dict[Any, int] = {}
_gpu_keys: dict[int, str] = {}
# (device index, dtype) -> what instance_for reads picks with (see _picker): bounded by devices x dtypes
_pickers: dict[tuple[int, str], list] = {}
_lock = threading.Lock()
_native_failed: list[str] = []  # the native module's first failure, after which it is not used

_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# Bound once: each attribute walk (torch.compiler.is_compiling, torch.Tensor) is a dict probe
# per call. torch.compile recognises is_compiling by identity, so the alias folds to True there.
_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor
_FLOAT32, _FLOAT16, _torch_softmax = torch.float32, torch.float16, torch.softmax
_empty_like = torch.empty_like
_current_device = getattr(torch._C, "_cuda_getDevice", None) or (lambda: torch.cuda.current_device())
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
_native_run: Any = None  # the loaded module's run(x, stream, *launch), bound once it is loaded
_dispatch: Any = None  # the loaded module's dispatch(x, dim) (softmax's first step), bound with _native_run
_module_loaded: Any = None  # the module, once loaded (reset with _native_run where it fails)


def _gpu_key(index: int) -> str:
    key = _gpu_keys.get(index)
    if key is None:
        key = _gpu_keys[index] = normalize_gpu_name(torch.cuda.get_device_name(index))
    return key


def build_for(variant_name: str, config: dict[str, Any], dtype: str, n: int | None = None) -> Any:
    """The build (kernel instance) of one choice, compiled on first use and kept; ``n`` is a hint
    for a first compile (the row length its resources are reported for). A choice this host cannot
    run (CuPy missing, a variant unknown to this version) is replaced by torch.softmax, with one
    warning."""
    from kernels import KernelConfig, get_variant

    key = (variant_name, tuple(config.items()), dtype,
           _device_kind(torch.cuda.current_device() if torch.cuda.is_available() else -1))
    build = _builds.get(key)
    if build is None:
        with _lock:
            build = _builds.get(key)
            if build is None:
                config_obj = KernelConfig.from_dict(config)
                try:
                    variant = get_variant(variant_name)
                    support = variant.available()
                    if not support:
                        raise RuntimeError(support.reason)
                except (KeyError, RuntimeError) as exc:
                    warnings.warn(f"dispatch chose {variant_name}, which cannot run here ({exc}); "
                                  f"using torch.softmax instead", RuntimeWarning, stacklevel=3)
                    variant, config_obj = get_variant("torch_softmax"), KernelConfig()
                hint = n or max(1, variant.constraints(config_obj, dtype).get("n_min", 1))
                build = _builds[key] = variant.build(config_obj, dtype, hint)
    return build


def instance_for(device: int, m: int, n: int, dtype: str) -> Any:
    """The build of the kernel ``select_kernel`` picks for (m, n), m >= 1, on ``device``'s GPU: read
    from the table ``select_kernel`` answers the GPU from with ``DispatchTable.pick`` (the same index,
    without the answer's reason and cached ``KernelChoice``), each candidate's build kept in a list by
    candidate; through ``select_kernel`` where no table's view answers (the fallback)."""
    return _instance(device, m, n, dtype)[2]


def _instance(device: int, m: int, n: int, dtype: str) -> tuple[Any, int, Any]:
    """(picker or None where no table answers the GPU, the table's pick for (m, n): a candidate, -1 the
    fallback, -2 none where there is no table, its build). A plan's pick is not taken over: the
    tables may have changed since it was made (another thread), and this path is the slow one anyway."""
    store = _select._default_store or _select.default_store()
    picker = _pickers.get((device, dtype))
    if picker is None or picker[0] is not store or picker[1] != store.generation:
        picker = _picker(device, dtype, store)
    table = picker[2]
    if table is None:
        choice = select_kernel(m, n, dtype, gpu=_gpu_key(device))
        build = _builds.get((choice.variant, choice.config_items, dtype, _device_kind(device)))
        return None, -2, build or _build_on(device, choice.variant, choice.config, dtype, n)
    picked = table.pick(m, n, picker[3])
    candidate = -1 if picked is None else picked  # the last slot: the fallback's
    build = picker[4][candidate]
    if build is None:
        variant, config = ("torch_softmax", {}) if candidate < 0 else \
            (table.candidates[candidate]["variant"], table.candidates[candidate]["config"])
        build = picker[4][candidate] = _build_on(device, variant, config, dtype, n)
    return picker, candidate, build


def _picker(device: int, dtype: str, store: Any) -> list:
    """[store, its generation, the table the GPU is answered from or None, its view, builds by
    candidate and the fallback's last, the native plan or None], kept per (device, dtype) until the
    store's tables change; the plan is made once the native module is loaded (``_plan_of``)."""
    answering = store.answering_view(_gpu_key(device), dtype)
    table, view = answering if answering is not None else (None, 0)
    picker = _pickers[(device, dtype)] = [store, store.generation, table, view,
                                          [None] * (len(table.candidates) + 1 if table is not None else 0), None]
    return picker


def _plan_of(picker: list, device: int, dtype: str, module: Any) -> Any:
    """``picker``'s native plan (``kernels/native``: the table's index and the launches it learns, so that
    a new shape is picked and launched in one C call), made on first use and routed to: the module's
    ``dispatch`` takes (device, dtype) rows to it while the store is at the picker's generation."""
    plan = picker[5]
    if plan is None:
        table, view = picker[2], picker[3]
        exact, partitions = table.native_index(view)
        torch_softmax = tuple(i for i, candidate in enumerate(table.candidates) if candidate["variant"] == "torch_softmax")
        plan = picker[5] = module.plan_new(len(table.candidates), exact, partitions, torch_softmax)
        module.dispatch_route(device, dtype, plan, picker[0], picker[1])
    return plan


def plan_for(device: int, dtype: str) -> Any:
    """The native plan of ``device``'s ``dtype`` rows, made now where the module is loaded and a pick
    for them was read from the GPU's table (warm-up: making it decodes the table's index,
    milliseconds the first call would pay); None otherwise."""
    module = _module_loaded or native_module()
    picker = _pickers.get((device, dtype))
    if module is None or picker is None or picker[2] is None:
        return None
    return _plan_of(picker, device, dtype, module)


_device_kinds: dict[int, tuple[int, ...]] = {}  # device index -> _device_kind


def _device_kind(device: int) -> tuple[int, ...]:
    """What a build's launches read of its device (compute capability, SMs, threads per SM; () without
    CUDA). Builds are kept per kind: a split sized to be all resident on one GPU would wait forever
    for blocks that never start on a GPU of fewer SMs (an H100 PCIe reads the SXM's table)."""
    kind = _device_kinds.get(device)
    if kind is None:
        if device < 0 or not torch.cuda.is_available():
            return ()
        props = torch.cuda.get_device_properties(device)
        kind = _device_kinds[device] = (props.major, props.minor, props.multi_processor_count,
                                        props.max_threads_per_multi_processor)
    return kind


def _build_on(device: int, variant: str, config: dict[str, Any], dtype: str, n: int) -> Any:
    with torch.cuda.device(device):  # compile and load on the rows' device
        return build_for(variant, config, dtype, n)


def native_module() -> Any:
    """The native launch module where it is loaded and has not failed (see ``kernels.native``)."""
    global _native_run, _dispatch, _module_loaded
    if _native_failed:
        return None
    module = native_loader.load()
    if module is not None and _native_run is None:
        module.dispatch_setup(_select, _current_device, _raw_stream)
        _native_run, _dispatch, _module_loaded = module.run, module.dispatch, module
    return module


def _launch_native(device: int, rows: Any, build: Any, shape: Any, picker: Any, candidate: int) -> Any:
    """``rows``' softmax through the native module (``device`` current), or None where it cannot
    take the call. The launch is taught to the picker's plan where the build has a native rule
    (the plan then launches every shape of its class itself), else kept for the shape (``_recent``)."""
    module = _module_loaded or native_module()
    guard = build.native_guard
    if module is None or build.native is None or (guard is not None and not guard()):
        return None
    m, n = shape
    stream = _raw_stream(device)
    launch = build.native(device, stream, m, n)
    if launch is None:
        return None
    try:
        out = module.run(rows, stream, *launch)
        if out is None:
            return None
        rule = native_rule(build) if picker is not None and candidate >= 0 else None
        # a launch holding its stream's workspace is taught only under a split rule: the plan then puts its own in
        learned = rule is not None and (rule.split is not None or not build.stream_bound) and plan_rule(
            rule, build, device, stream, n)
        if learned and module.plan_learn(_plan_of(picker, device, build.dtype, module), candidate, learned,
                                         guard and _plan_guard(guard), m, n, *launch):
            return out
    except (RuntimeError, SystemError, TypeError, ValueError) as exc:  # a module built wrong: Python path
        _native_broke(exc)
        return None
    _remember((device, (m, n), rows.dtype), (launch, stream if build.stream_bound else None,
                                             -1 if guard is None else _callable_number(guard), -1))
    return out


def _plan_guard(guard: Any) -> Any:
    """What the plan checks for a build's native guard (Triton's hooks: read in C where it can)."""
    from kernels.triton_impl.launch import plan_guard  # guards are Triton's: it is imported already

    return plan_guard(guard)


def _native_broke(exc: Exception) -> None:
    """The native module failed: say so once, and take the Python path from now on."""
    global _module_loaded, _dispatch
    _native_failed.append(f"{type(exc).__name__}: {exc}")
    _module_loaded = _dispatch = None
    _recent.clear()
    warnings.warn(f"the native launch module failed ({_native_failed[0]}); softmax() takes the Python path",
                  RuntimeWarning, stacklevel=5)


def _callable_number(function: Any) -> int:
    """``function``'s number in ``_callables`` (given on first use): kept entries name guards and
    applies by number, so that they hold no object the garbage collector tracks."""
    number = _callable_numbers.get(function)
    if number is None:
        with _lock:
            number = _callable_numbers.get(function)
            if number is None:
                _callables.append(function)
                number = _callable_numbers[function] = len(_callables) - 1
    return number


def _remember(key: tuple, entry: tuple) -> None:
    """Keep ``entry`` for a repeated shape; when ``RECENT_SHAPES`` are kept, the oldest quarter goes
    first (dicts keep insertion order), so a working set under the bound stays whole."""
    if len(_recent) >= RECENT_SHAPES:
        for old in list(islice(_recent, RECENT_SHAPES // 4)):  # one C loop: no other thread runs in it
            _recent.pop(old, None)
    _recent[key] = entry


def _launch(device: int, rows: Any, dtype: str) -> Any:
    """The softmax of 2-D contiguous ``rows`` (M, N > 0) on ``device``, on its current stream."""
    shape = rows.shape
    picker, candidate, build = _instance(device, shape[0], shape[1], dtype)
    if build.apply is not None:  # a variant with a cheaper way to a new tensor (torch_softmax: torch's own)
        _remember((device, (shape[0], shape[1]), rows.dtype), (None, None, -1, _callable_number(build.apply)))
        return build.apply(rows)
    if _current_device() != device:  # kernel handles and the stream are the current device's
        with torch.cuda.device(device):
            return _launch(device, rows, dtype)  # picked again there: a rare path
    out = _launch_native(device, rows, build, shape, picker, candidate)
    return out if out is not None else _launch_python(rows, build)


def _launch_python(rows: Any, build: Any) -> Any:
    out = _empty_like(rows)
    build.launch(rows, out)
    return out


def _validate(x: Any, dim: Any) -> tuple[str | None, int]:
    """(x's dtype name, dim as an int), or a clear error for what softmax cannot take. The name is None
    where torch.softmax answers: a floating dtype no table is of (float64 among them), a 0-d tensor
    (torch's softmax of one value is 1, its dim -1 or 0, which torch checks)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"softmax expects a torch.Tensor, got {type(x).__name__}")
    dtype = _DTYPE_NAMES.get(x.dtype)
    if dtype is None and not x.dtype.is_floating_point:
        raise TypeError(f"softmax takes floating-point tensors (float32, float16 and bfloat16 by the tuned kernels, "
                        f"others by torch.softmax), got {x.dtype}")
    if isinstance(dim, bool) or not hasattr(type(dim), "__index__"):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    dim = operator.index(dim)  # an int, or an integer of another kind (numpy's), as torch takes them
    if x.dim() == 0:
        return None, dim
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"dim {dim} out of range for a {x.dim()}-D tensor")
    return dtype, dim


def _needs_autograd(x: Any) -> bool:
    """Whether autograd would record a softmax of x (x requires grad, grad mode on): such a call is
    torch.softmax's, which autograd differentiates; the tuned kernels serve inference."""
    return x.requires_grad and torch.is_grad_enabled()


def _softmax_impl(x: Any, dim: int) -> Any:
    """The general path: validate, rows to 2-D contiguous, launch on the current stream (CPU tensors,
    dtypes no table is of and calls autograd records: torch.softmax)."""
    dtype, dim = _validate(x, dim)
    if dtype is None or not x.is_cuda or _needs_autograd(x) or x.numel() // max(x.shape[dim], 1) > MAX_DIM:
        return torch.softmax(x, dim=dim)  # (past MAX_DIM rows no table answers: torch's)
    last = dim in (-1, x.dim() - 1)
    moved = x if last else x.movedim(dim, -1)
    n = moved.shape[-1]
    if x.dim() == 2 and last and x.is_contiguous():
        rows = x
    else:
        rows = moved.reshape(-1, n) if moved.is_contiguous() else moved.contiguous().reshape(-1, n)
    if rows.shape[0] and n:
        out = _launch(x.get_device(), rows, dtype)
    else:
        out = torch.empty_like(rows)  # nothing to compute: M = 0 launches nothing
    if rows is x:
        return out
    result = out.reshape(moved.shape)
    return result if last else result.movedim(-1, dim).contiguous()


def _register_op() -> Any:
    """``torch.ops.autotuner.softmax``: a custom op, so torch.compile treats the launch as one opaque
    call (with a fake implementation for shape propagation) and CUDA-graph capture records it.
    Registered at import: torch.compile must not meet a lock on its first trace."""

    # explicit schema: this module's annotations are strings (``from __future__``)
    @torch.library.custom_op("autotuner::softmax", mutates_args=(), schema="(Tensor x, int dim) -> Tensor")
    def autotuner_softmax(x, dim):  # noqa: ANN001, ANN202
        # softmax's own path. While a compile is in progress (a backend running a graph on real
        # tensors) softmax would hand the call back to this op, so there it takes the general path.
        return _softmax_impl(x, dim) if _is_compiling() else softmax(x, dim)

    @autotuner_softmax.register_fake
    def _(x, dim):  # noqa: ANN001, ANN202
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return autotuner_softmax


_op = _register_op()


def softmax(x: Any, dim: int = -1, dtype: Any = None) -> Any:
    """Softmax over ``dim`` with the dispatched kernel, ``torch.softmax``'s arguments and results.
    ``dtype``: x is cast to it first, as torch does (fp16 to fp32 on the GPU: torch's own kernel,
    which does both in one pass). ``torch.softmax`` itself takes CPU tensors,
    floating dtypes other than float32, float16 and bfloat16, and calls autograd records (x requires
    grad, grad mode on), so gradients are torch's."""
    if dtype is not None and isinstance(x, torch.Tensor):
        if dtype is _FLOAT32 and x.dtype is _FLOAT16 and x.is_cuda:
            # torch's own kernel reads fp16 and writes fp32 in one pass (attention's usual call), where a
            # cast and then a tuned fp32 softmax move 14 bytes an element instead of 6
            return _torch_softmax(x, dim, dtype)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype (torch.float32, say), as torch.softmax takes it; "
                            f"got {dtype!r}")
        x = x.to(dtype)
    if _is_compiling():
        return torch.softmax(x, dim) if _needs_autograd(x) else _op(x, dim)
    # eager: the native module's dispatch (the rows of x's last dim, of any rank, whose device and dtype
    # have a plan: picked and launched in one C call), else a repeated shape's kept launch, without
    # the custom-op dispatcher's per-call cost
    if _dispatch is not None:
        try:  # the softmax; None (no plan takes x) or the candidate a plan picked but cannot launch: on
            got = _dispatch(x, dim)
        except (RuntimeError, SystemError, TypeError, ValueError) as exc:
            _native_broke(exc)
            got = None
        if got is not None and type(got) is not int:
            return got
    if type(x) is _Tensor and (dim == -1 or dim == 1) and not _needs_autograd(x):
        shape = x.shape
        if len(shape) == 2 and x.is_contiguous():
            device = x.get_device()
            entry = _recent.get((device, shape, x.dtype))
            if entry is not None and _current_device() == device:
                launch, bound, guard, apply = entry
                if apply >= 0:
                    return _callables[apply](x)
                stream = _raw_stream(device)
                if (bound is None or bound == stream) and (guard < 0 or _callables[guard]()):
                    out = _native_run(x, stream, *launch)
                    if out is not None:
                        return out
            dtype = _DTYPE_NAMES.get(x.dtype)
            if dtype is not None and shape[0] and shape[1] and x.is_cuda:  # a new shape: no validation to redo
                return _launch(device, x, dtype)
    return _softmax_impl(x, dim)


def plan_stats() -> dict[str, int]:
    """The native plans' figures summed (``plan_stats`` of each; ``kernels/native``): how many plans,
    the calls they launched themselves and declined, the launches and split workspaces they keep. Zeros
    without plans."""
    plans = [picker[5] for picker in _pickers.values() if picker[5] is not None]
    module = native_loader.load() if plans else None  # the module that made them, even after it failed
    stats = [module.plan_stats(plan) for plan in plans] if module is not None else []
    return {"plans": len(stats), **{key: sum(stat[key] for stat in stats)
                                    for key in ("launches", "declined", "launches_kept", "workspaces")}}


def cache_sizes() -> dict[str, int]:
    """Entries of every cache on softmax()'s path (this module's, the native plans' launches kept per
    candidate and class of N, the lookup's answers, the CUDA layer's launchers, the Triton launchers'
    kernels and native launches kept per class of arguments): for benches and the bounded-memory test."""
    from autotuner.lookup.select import default_store
    from kernels.cuda import launch as cuda_launch
    from kernels.triton_impl import launch as triton_launch

    launchers = triton_launch.all_launchers()
    plans = plan_stats()
    return {"builds": len(_builds), "recent_shapes": len(_recent), "gpu_keys": len(_gpu_keys), "pickers": len(_pickers),
            "plans": plans["plans"], "plan_launches_kept": plans["launches_kept"], "plan_workspaces": plans["workspaces"],
            "lookup_answers": len(default_store()._cache), "cuda_generic_launchers": len(cuda_launch._generic),
            "triton_compiled_kernels": sum(len(launcher.compiled) for launcher in launchers),
            "triton_native_launches": sum(len(launcher._natives) for launcher in launchers)}
