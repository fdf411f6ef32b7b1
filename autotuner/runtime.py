"""``softmax(x, dim=-1)``: run the kernel the dispatch table picks for this GPU and shape.

Host time is the point here: a small softmax takes a few microseconds of GPU time, so every call
path is kept short. Compiled builds are cached per (variant, config, dtype, N) and plans per
(device index, (M, N), dtype).

- Fast path: a 2-D contiguous CUDA tensor over its last dimension whose plan exists. One dict probe,
  the plan: allocate the output, check the current device, launch. Plans exist only for a validated
  dtype on a CUDA device with M, N > 0, so nothing else is checked.
- A plan (``kernels.replay_plan``) replays its build's launches: when it is made, the build's
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
from kernels.replay_plan import plan_for_build

_builds: dict[tuple[str, str, str, int], Any] = {}
# (device index, (m, n), torch dtype) -> plan(rows) -> out, for m > 0 and n > 0 on a CUDA device
_plans: dict[tuple[int, tuple[int, int], Any], Callable[[Any], Any]] = {}
_gpu_keys: dict[int, str] = {}
_lock = threading.Lock()

_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# Bound once: each attribute walk (torch.compiler.is_compiling, torch.Tensor) is a dict probe
# per call. torch.compile recognises is_compiling by identity, so the alias folds to True there.
_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor


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


def softmax(x: Any, dim: int = -1) -> Any:
    """Softmax over ``dim`` with the dispatched kernel (torch.softmax for CPU tensors)."""
    if _is_compiling():
        return _op(x, dim)
    # eager: the fast path here, without the custom-op dispatcher's per-call cost
    if type(x) is _Tensor and (dim == -1 or dim == 1):
        shape = x.shape
        if len(shape) == 2:
            plan = _plans.get((x.get_device(), shape, x.dtype))
            if plan is not None and x.is_contiguous():
                return plan(x)
    return _softmax_impl(x, dim)
