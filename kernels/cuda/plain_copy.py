"""A plain copy of a tensor's bytes (``plain_copy.cu``): the speed-of-light reference beside torch's
``copy_``. Not a softmax variant; the sweep's and the bench's copy reference time both and keep the
faster (``autotuner.tune.measure.copy_reference``).
"""
from __future__ import annotations

from typing import Any

from kernels.base import cdiv
from kernels.cuda import loader
from kernels.cuda.two_pass import MAX_GRID_X, VECTOR_BYTES

SOURCE = "plain_copy.cu"
THREADS = 256
UNROLL = 4


def plain_copy_launcher() -> Any:
    """``copy(x, out)`` for contiguous tensors of equal byte size with 16-byte aligned data pointers
    (ValueError otherwise), enqueued on torch's current stream."""
    function, _ = loader.get_function(SOURCE, f"plain_copy16<{UNROLL}>")
    kernel = loader.KernelLauncher(function, (THREADS, 1, 1), "PPqPPi")

    def copy(x: Any, out: Any) -> None:
        size = x.numel() * x.element_size()
        if not (x.is_contiguous() and out.is_contiguous()) or out.numel() * out.element_size() != size:
            raise ValueError("plain_copy needs two contiguous tensors of the same byte size")
        source, target = x.data_ptr(), out.data_ptr()
        if source % VECTOR_BYTES or target % VECTOR_BYTES:
            raise ValueError("plain_copy needs 16-byte aligned data pointers")
        vectors, tail = divmod(size, VECTOR_BYTES)
        blocks = max(1, cdiv(vectors, THREADS * UNROLL))
        if blocks > MAX_GRID_X:
            raise ValueError(f"plain_copy: {size} bytes need more than {MAX_GRID_X} blocks")
        body = vectors * VECTOR_BYTES
        kernel((blocks, 1, 1), 0, source, target, vectors, source + body, target + body, tail)

    return copy
