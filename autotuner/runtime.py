"""``softmax(x, dim=-1)``: run the kernel the dispatch table picks for this GPU and shape.

Compiled builds are cached per (variant, config, dtype, N) and launch plans per (device, shape, dtype),
so after the first call of a shape the host work is one dict probe, an output allocation and the launch.
CPU tensors are handed to ``torch.softmax`` (no kernel of ours runs there).
"""
from __future__ import annotations

import threading
import warnings
from typing import Any

from autotuner.gpu import normalize_gpu_name
from autotuner.select import select_kernel

_builds: dict[tuple[str, str, str, int], Any] = {}
_plans: dict[tuple[Any, tuple[int, int], str], Any] = {}  # (device index, (m, n), dtype) -> launch
_gpu_keys: dict[int, str] = {}
_lock = threading.Lock()

_DTYPE_NAMES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}


def _gpu_key(torch: Any, device: Any) -> str:
    index = device.index if device.index is not None else torch.cuda.current_device()
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
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"softmax expects a torch.Tensor, got {type(x).__name__}")
    dtype = _DTYPE_NAMES.get(str(x.dtype))
    if dtype is None:
        raise TypeError(f"softmax supports float32, float16 and bfloat16 tensors, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("softmax needs at least one dimension")
    if not -x.dim() <= dim < x.dim():
        raise IndexError(f"dim {dim} out of range for a {x.dim()}-D tensor")
    return dtype


def _plan(x: Any, rows_shape: tuple[int, int], dtype: str) -> Any:
    """The launch function for this (device, shape, dtype), found once and then cached."""
    import torch

    key = (x.device.index, rows_shape, dtype)
    launch = _plans.get(key)
    if launch is None:
        m, n = rows_shape
        choice = select_kernel(m, n, dtype, gpu=_gpu_key(torch, x.device))
        launch = _plans[key] = build_for(choice.variant, choice.config, dtype, n).launch
    return launch


def _softmax_impl(x: Any, dim: int) -> Any:
    """The op's body: rows to 2-D contiguous, dispatch, launch on the current stream."""
    import torch

    dtype = _validate(x, dim)
    if x.device.type != "cuda":
        return torch.softmax(x, dim=dim)
    last = dim in (-1, x.dim() - 1)
    moved = x if last else x.movedim(dim, -1)
    n = moved.shape[-1]
    if x.dim() == 2 and last and x.is_contiguous():
        rows = x
    else:
        rows = moved.reshape(-1, n) if moved.is_contiguous() else moved.contiguous().reshape(-1, n)
    out = torch.empty_like(rows)
    if rows.shape[0] and n:
        launch = _plan(x, (rows.shape[0], n), dtype)
        if x.device.index == torch.cuda.current_device():
            launch(rows, out)
        else:
            with torch.cuda.device(x.device):
                launch(rows, out)
    if rows is x:
        return out
    result = out.reshape(moved.shape)
    return result if last else result.movedim(-1, dim).contiguous()


def _register_op() -> Any:
    """``torch.ops.autotuner.softmax``: a custom op, so torch.compile treats the launch as one opaque
    call (with a fake implementation for shape propagation) and CUDA-graph capture records it.
    Registered at import: torch.compile must not meet a lock on its first trace."""
    import torch

    # explicit schema: this module's annotations are strings (``from __future__``)
    @torch.library.custom_op("autotuner::softmax", mutates_args=(), schema="(Tensor x, int dim) -> Tensor")
    def autotuner_softmax(x, dim):  # noqa: ANN001, ANN202
        return _softmax_impl(x, dim)

    @autotuner_softmax.register_fake
    def _(x, dim):  # noqa: ANN001, ANN202
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return autotuner_softmax


_op = _register_op()


def softmax(x: Any, dim: int = -1) -> Any:
    """Softmax over ``dim`` with the dispatched kernel (torch.softmax for CPU tensors)."""
    import torch

    if torch.compiler.is_compiling():
        return _op(x, dim)
    return _softmax_impl(x, dim)  # eager: skip the custom-op dispatcher's per-call cost
