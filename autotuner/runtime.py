"""``softmax(x, dim=-1)``: run the kernel the dispatch table picks for this GPU and shape.

Host time is the point here: a small softmax takes a few microseconds of GPU time, so every call
path is kept short. Compiled builds are cached per (variant, config, dtype, N) and plans per
(device index, (M, N), dtype).

- Fast path: a 2-D contiguous CUDA tensor over its last dimension whose plan exists. One dict probe,
  the plan: allocate the output, check the current device, launch. Plans exist only for a validated
  dtype on a CUDA device with M, N > 0, so nothing else is checked.
- A plan replays its build's launches (``_replay_code``): when it is made, the build's
  ``launch(x, out)`` is recorded by the CUDA and Triton launch layers, and where that is safe (every
  launch recorded, no workspace pointer, no torch op, two recordings alike) the plan issues those
  launches itself with only the two data pointers and the stream filled in per call. A buffer a
  kernel keeps per stream (``cuda_grid_split``'s slots) is replayed as recorded while the current
  stream is the recorded one. Otherwise (and for pointers not 16-byte aligned, another stream there,
  or with a Triton launch hook registered) it calls ``launch``.
- Everything else (another dim or rank, a non-contiguous tensor, a first call, M or N = 0, CPU
  tensors) goes through ``_softmax_impl``: validate, lay the rows out as a 2-D contiguous tensor, make
  the plan. CPU tensors are handed to ``torch.softmax`` (no kernel of ours runs there).

``torch.compile`` sees ``torch.ops.autotuner.softmax``, a custom op whose body is the same path.
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Callable

import torch

from autotuner.lookup.gpu import normalize_gpu_name
from autotuner.lookup.select import select_kernel

_builds: dict[tuple[str, str, str, int], Any] = {}
# (device index, (m, n), torch dtype) -> plan(rows) -> out, for m > 0 and n > 0 on a CUDA device
_plans: dict[tuple[int, tuple[int, int], Any], Callable[[Any], Any]] = {}
_gpu_keys: dict[int, str] = {}
_lock = threading.Lock()

# (guards, statements, names): recorded launches as code for a generated plan (see _replay_code)
ReplayCode = tuple[list[str], list[str], dict[str, Any]]

_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# Bound once: each attribute walk (torch.compiler.is_compiling, torch.empty_like) is a dict probe
# per call. torch.compile recognises is_compiling by identity, so the alias folds to True there.
_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor
_empty_like = torch.empty_like


def _gpu_key(index: int) -> str:
    key = _gpu_keys.get(index)
    if key is None:
        key = _gpu_keys[index] = normalize_gpu_name(torch.cuda.get_device_name(index))
    return key


def build_for(variant_name: str, config: dict[str, Any], dtype: str, n: int) -> Any:
    """The cached build of one choice; compiled on first use. A choice this host cannot run (CuPy
    missing, a variant unknown to this version) is replaced by torch.softmax, with one warning."""
    from kernels import KernelConfig, get_variant

    config_obj = KernelConfig.from_dict(config)
    key = (variant_name, config_obj.key, dtype, n)
    build = _builds.get(key)
    if build is None:
        with _lock:
            build = _builds.get(key)
            if build is None:
                try:
                    variant = get_variant(variant_name)
                    support = variant.available()
                    if not support:
                        raise RuntimeError(support.reason)
                except (KeyError, RuntimeError) as exc:
                    warnings.warn(f"dispatch chose {variant_name}, which cannot run here ({exc}); "
                                  f"using torch.softmax instead", RuntimeWarning, stacklevel=3)
                    variant, config_obj = get_variant("torch_softmax"), KernelConfig()
                build = _builds[key] = variant.build(config_obj, dtype, n)
    return build


def _validate(x: Any, dim: int) -> str:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"softmax expects a torch.Tensor, got {type(x).__name__}")
    dtype = _DTYPE_NAMES.get(x.dtype)
    if dtype is None:
        raise TypeError(f"softmax supports float32, float16 and bfloat16 tensors, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("softmax needs at least one dimension")
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"dim {dim} out of range for a {x.dim()}-D tensor")
    return dtype


def _make_plan(
    device: int, launch: Callable[[Any, Any], None], replay: ReplayCode | None = None
) -> Callable[[Any], Any]:
    """``plan(rows) -> out`` for 2-D contiguous rows on ``device``: allocate, launch on the current
    stream. With ``replay`` (see ``_replay_code``) the plan issues the build's recorded launches
    itself, pre-bound, for 16-byte aligned pointers while the replay's guards hold; otherwise the
    build's ``launch`` runs. ``device`` must be current for the launch (kernel handles and stream
    are the current device's); from another current device the launch runs under a device guard.

    Generated as one function, so that a call costs the allocation, the device check, two data
    pointers, the stream and the launches, and nothing else."""
    guards, statements, names = replay if replay is not None else ([], [], {})
    condition = " and ".join(["not (xp | op) & 15", *guards])
    fast = [
        "        xp = rows.data_ptr()",
        "        op = out.data_ptr()",
        f"        if {condition}:",
        "            stream = raw_stream(DEVICE)",
        *(f"            {line}" for line in statements),
        "            return out",
    ] if replay is not None else []
    source = "\n".join([
        "def plan(rows):",
        "    out = empty_like(rows)",
        "    if current_device() == DEVICE:",
        *fast,
        "        launch(rows, out)",
        "    else:",
        "        with cuda_device(DEVICE):",
        "            launch(rows, out)",
        "    return out",
    ])
    namespace = dict(names, DEVICE=device, empty_like=_empty_like, current_device=torch._C._cuda_getDevice,
                     raw_stream=torch._C._cuda_getCurrentRawStream, cuda_device=torch.cuda.device, launch=launch)
    exec(compile(source, f"<softmax plan on cuda:{device}>", "exec"), namespace)  # noqa: S102
    plan = namespace["plan"]
    plan.replays = replay is not None
    return plan


def _recorded_launches(launch: Callable[[Any, Any], None], rows: Any, out: Any) -> list | None:
    """The kernel launches one ``launch(rows, out)`` issues, recorded by the CUDA and Triton launch
    layers; None if it also ran any torch operation (an allocation, a fill, a torch kernel: work a
    replay would skip) or a launch the layers could not record."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from kernels.launch_record import recording

    class _Ops(TorchDispatchMode):
        ran = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            self.ran = True
            return func(*args, **(kwargs or {}))

    calls: list = []
    ops = _Ops()
    with recording(calls), ops:  # CUDA and Triton launches alike
        launch(rows, out)
    if ops.ran or not calls or any(call is None for call in calls):
        return None
    return calls


def _replay_code(launch: Callable[[Any, Any], None], rows: Any, out: Any) -> ReplayCode | None:
    """The launches of ``launch(rows, out)`` as code for ``_make_plan``: (guards, statements, names),
    with only the input and output pointers (``xp``, ``op``) and the stream left to fill in per
    call; None where replaying them is not safe.

    Safe means: every launch went through a layer that records it (``loader.KernelLauncher``,
    Triton's ``Launcher`` fast path), no torch operation ran beside them, every pointer argument is
    the input's, the output's or a buffer of the recorded stream (``loader.register_stream_buffer``,
    then guarded on that stream; no workspace, whose address can change), and two recordings agree
    (the launches are a function of the device, shape, dtype and pointer alignment, which is what a
    plan is kept for). Both pointers must be 16-byte aligned, as they are at each replay."""
    xp, op = rows.data_ptr(), out.data_ptr()
    if (xp | op) & 15:
        return None
    first = _recorded_launches(launch, rows, out)
    second = _recorded_launches(launch, rows, out) if first else None
    if not first or not second or len(first) != len(second):
        return None
    if not all(a.same_launch(b) for a, b in zip(first, second)):
        return None
    guards: list[str] = []
    statements: list[str] = []
    names: dict[str, Any] = {}
    for index, call in enumerate(first):
        code = call.bind_code(xp, op, f"_{index}")
        if code is None:
            return None
        guard, lines, bound_names = code
        if guard is not None and guard not in guards:
            guards.append(guard)
        statements += lines
        names.update(bound_names)
    return guards, statements, names


def plan_for_build(device: int, rows: Any, build: Any) -> Callable[[Any], Any]:
    """A plan launching ``build`` for rows shaped like ``rows`` on ``device``: one warm-up launch
    (the first launch of a specialisation goes through Triton's JIT), then the recording for the
    replay (outside CUDA-graph capture only). ``plan.replays`` says whether it replays."""
    launch = build.launch
    replay = None
    with torch.cuda.device(device):
        if not torch.cuda.is_current_stream_capturing():
            out = _empty_like(rows)
            launch(rows, out)
            replay = _replay_code(launch, rows, out)
    return _make_plan(device, launch, replay)


def _plan(device: int, rows: Any, dtype: str) -> Callable[[Any], Any]:
    """The plan for rows' (device, shape, dtype), made once and then cached (m > 0 and n > 0)."""
    m, n = rows.shape
    key = (device, (m, n), rows.dtype)
    plan = _plans.get(key)
    if plan is None:
        choice = select_kernel(m, n, dtype, gpu=_gpu_key(device))
        with torch.cuda.device(device):  # compile and load on rows' device
            build = build_for(choice.variant, choice.config, dtype, n)
        plan = _plans[key] = plan_for_build(device, rows, build)
    return plan


def _softmax_impl(x: Any, dim: int) -> Any:
    """The general path: validate, rows to 2-D contiguous, plan, launch on the current stream."""
    dtype = _validate(x, dim)
    if not x.is_cuda:
        return torch.softmax(x, dim=dim)
    last = dim in (-1, x.dim() - 1)
    moved = x if last else x.movedim(dim, -1)
    n = moved.shape[-1]
    if x.dim() == 2 and last and x.is_contiguous():
        rows = x
    else:
        rows = moved.reshape(-1, n) if moved.is_contiguous() else moved.contiguous().reshape(-1, n)
    m = rows.shape[0]
    if m and n:
        out = _plan(x.get_device(), rows, dtype)(rows)
    else:
        out = torch.empty_like(rows)  # nothing to compute: M = 0 launches nothing
    if rows is x:
        return out
    result = out.reshape(moved.shape)
    return result if last else result.movedim(-1, dim).contiguous()


def _run(x: Any, dim: int) -> Any:
    """Softmax of a tensor (eager, or the custom op's body): the fast path where a plan exists."""
    if type(x) is _Tensor and (dim == -1 or dim == 1):
        shape = x.shape
        if len(shape) == 2:
            plan = _plans.get((x.get_device(), shape, x.dtype))
            if plan is not None and x.is_contiguous():
                return plan(x)
    return _softmax_impl(x, dim)


def _register_op() -> Any:
    """``torch.ops.autotuner.softmax``: a custom op, so torch.compile treats the launch as one opaque
    call (with a fake implementation for shape propagation) and CUDA-graph capture records it.
    Registered at import: torch.compile must not meet a lock on its first trace."""

    # explicit schema: this module's annotations are strings (``from __future__``)
    @torch.library.custom_op("autotuner::softmax", mutates_args=(), schema="(Tensor x, int dim) -> Tensor")
    def autotuner_softmax(x, dim):  # noqa: ANN001, ANN202
        return _run(x, dim)

    @autotuner_softmax.register_fake
    def _(x, dim):  # noqa: ANN001, ANN202
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return autotuner_softmax


_op = _register_op()


def softmax(x: Any, dim: int = -1) -> Any:
    """Softmax over ``dim`` with the dispatched kernel (torch.softmax for CPU tensors)."""
    if _is_compiling():
        return _op(x, dim)
    # eager: skip the custom-op dispatcher's per-call cost; the fast path of _run, inlined
    if type(x) is _Tensor and (dim == -1 or dim == 1):
        shape = x.shape
        if len(shape) == 2:
            plan = _plans.get((x.get_device(), shape, x.dtype))
            if plan is not None and x.is_contiguous():
                return plan(x)
    return _softmax_impl(x, dim)
