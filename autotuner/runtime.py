"""``softmax(x, dim=-1)``: run the kernel the dispatch table picks for this GPU and shape.

Compiled builds are cached per (variant, config, dtype, N), so after the first call of a shape the
host work is one dict probe for the choice, one for the build, an output allocation and the launch.
CPU tensors are handed to ``torch.softmax`` (no kernel of ours runs there).
"""
from __future__ import annotations

import threading
import warnings
from typing import Any

from autotuner.gpu import normalize_gpu_name
from autotuner.select import select_kernel

_builds: dict[tuple[str, str, str, int], Any] = {}
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


def _softmax_impl(x: Any, dim: int) -> Any:
    """The op's body: rows to 2-D contiguous, dispatch, launch on the current stream."""
    import torch

    dtype = _validate(x, dim)
    if x.device.type != "cuda":
        return torch.softmax(x, dim=dim)
    last = dim in (-1, x.dim() - 1)
    moved = x if last else x.movedim(dim, -1)
    n = moved.shape[-1]
    rows = moved.reshape(-1, n) if moved.is_contiguous() else moved.contiguous().reshape(-1, n)
    m = rows.shape[0]
    out = torch.empty_like(rows)
    if m and n:
        choice = select_kernel(m, n, dtype, gpu=_gpu_key(torch, x.device))
        build = build_for(choice.variant, choice.config, dtype, n)
        if x.device.index == torch.cuda.current_device():
            build.launch(rows, out)
        else:
            with torch.cuda.device(x.device):
                build.launch(rows, out)
    result = out.reshape(moved.shape)
    return result if last else result.movedim(-1, dim).contiguous()


_op = None


def _registered_op() -> Any:
    """``torch.ops.autotuner.softmax``: a custom op, so torch.compile treats the launch as one opaque
    call (with a fake implementation for shape propagation) and CUDA-graph capture records it."""
    global _op
    if _op is None:
        with _lock:
            if _op is None:
                import torch

                # explicit schema: this module's annotations are strings (``from __future__``)
                @torch.library.custom_op("autotuner::softmax", mutates_args=(), schema="(Tensor x, int dim) -> Tensor")
                def autotuner_softmax(x, dim):  # noqa: ANN001, ANN202
                    return _softmax_impl(x, dim)

                @autotuner_softmax.register_fake
                def _(x, dim):  # noqa: ANN001, ANN202
                    return torch.empty_like(x, memory_format=torch.contiguous_format)

                _op = autotuner_softmax
    return _op


def softmax(x: Any, dim: int = -1) -> Any:
    """Softmax over ``dim`` with the dispatched kernel (torch.softmax for CPU tensors)."""
    import torch

    _validate(x, dim)
    if x.device.type != "cuda":
        return torch.softmax(x, dim=dim)
    if torch.compiler.is_compiling():
        return _registered_op()(x, dim)
    return _softmax_impl(x, dim)  # eager: skip the custom-op dispatcher's per-call cost
