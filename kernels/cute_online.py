"""Seed 003 (online softmax in the CuTe DSL): one CTA per row, online (max, sum), then a normalize pass.

Optional backend: ``available()`` only when ``cutlass.cute`` (pip ``nvidia-cutlass-dsl``) imports and
torch sees a GPU. Unlike the seed, which holds D / THREADS values per thread in registers and so needs
D to be a multiple of THREADS, this kernel serves any N: each thread walks elements
``tid, tid + THREADS, ...`` (coalesced 32-bit or 16-bit accesses, predicated at the row end) twice.

Pass 1 folds each element into a per-thread running (max, sum) with the seed's merge rule, branch
free: ``m' = max(m, x); s' = s exp(m - m') + exp(x - m')``. The running max starts at -FLT_MAX, not
-inf, so ``m - m'`` is never ``-inf - (-inf)`` (the guard the online rescale needs); a -inf element
then adds exp(-inf) = 0. Threads merge their pairs with butterfly shuffles, warps through shared
memory; every thread then folds the per-warp pairs itself (no second barrier). NaN or +inf in a row
makes the sum NaN, a row of only -inf leaves (max, sum) = (-FLT_MAX, 0): both give a NaN row, as
torch.softmax does.

The kernel is compiled once per (threads, dtype) with N and M dynamic (``cute.compile`` on a probe
tensor), and launched on torch's current stream. Resources: CuTe does not expose the compiled
function's attributes through a stable API, so only threads per block is reported.
"""
# No ``from __future__ import annotations``: the CuTe DSL reads the kernels' annotations
# (``cute.Tensor``, ``cutlass.Constexpr``) and they must be objects, not strings naming
# modules that are only imported inside ``_program``.
import math
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from kernels.base import Build, KernelConfig, Resources, Support, Variant, torch_cuda_support

THREADS = (128, 256, 512, 1024)
UNROLL = 4  # loop iterations unrolled, so that each thread has several loads in flight
LOG2E = math.log2(math.e)
NEG_BIG = -3.4028234663852886e38  # -FLT_MAX


def _cute_import_error() -> Optional[str]:
    try:
        import cutlass  # noqa: F401
        import cutlass.cute  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install raising anything on import
        return f"cutlass.cute (pip nvidia-cutlass-dsl) not importable: {type(exc).__name__}: {exc}"
    return None


@lru_cache(maxsize=1)
def _program() -> Any:
    """Build the CuTe DSL kernel and its host entry lazily: importing this module needs no cutlass."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32

    @cute.jit
    def merge(m_a: Float32, s_a: Float32, m_b: Float32, s_b: Float32):
        m_c = cute.arch.fmax(m_a, m_b)
        s_c = s_a * cute.math.exp2((m_a - m_c) * LOG2E, fastmath=True) + s_b * cute.math.exp2(
            (m_b - m_c) * LOG2E, fastmath=True
        )
        return m_c, s_c

    @cute.kernel
    def softmax_kernel(mX: cute.Tensor, mY: cute.Tensor, n_threads: cutlass.Constexpr[int]):
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        n = mX.shape[1]
        gX = mX[row, None]
        gY = mY[row, None]
        n_warps = n_threads // 32
        lane = tidx % 32
        warp = tidx // 32

        m = Float32(NEG_BIG)
        s = Float32(0.0)
        for i in cutlass.range(tidx, n, n_threads, unroll=UNROLL):
            m, s = merge(m, s, gX[i].to(Float32), Float32(1.0))

        for k in cutlass.range_constexpr(5):
            offset = 16 >> k
            m_o = cute.arch.shuffle_sync_bfly(m, offset=offset)
            s_o = cute.arch.shuffle_sync_bfly(s, offset=offset)
            m, s = merge(m, s, m_o, s_o)

        smem = cutlass.utils.SmemAllocator()
        warp_m = smem.allocate_tensor(Float32, cute.make_layout(n_warps), byte_alignment=16)
        warp_s = smem.allocate_tensor(Float32, cute.make_layout(n_warps), byte_alignment=16)
        if lane == 0:
            warp_m[warp] = m
            warp_s[warp] = s
        cute.arch.barrier()
        m = Float32(NEG_BIG)
        s = Float32(0.0)
        for w in cutlass.range_constexpr(n_warps):
            m, s = merge(m, s, warp_m[w], warp_s[w])

        inv_s = Float32(1.0) / s
        for i in cutlass.range(tidx, n, n_threads, unroll=UNROLL):
            x = gX[i].to(Float32)
            gY[i] = (cute.math.exp2((x - m) * LOG2E, fastmath=True) * inv_s).to(gY.element_type)

    @cute.jit
    def softmax_launch(
        mX: cute.Tensor, mY: cute.Tensor, stream: cuda.CUstream, n_threads: cutlass.Constexpr[int]
    ):
        softmax_kernel(mX, mY, n_threads).launch(grid=[mX.shape[0], 1, 1], block=[n_threads, 1, 1], stream=stream)

    return softmax_launch


def _to_cute(tensor: Any) -> Any:
    """A cute tensor view of a contiguous (M, N) torch tensor, M and N dynamic."""
    from cutlass.cute.runtime import from_dlpack

    view = from_dlpack(tensor.detach(), assumed_align=tensor.element_size())
    return view.mark_layout_dynamic(leading_dim=1)


@lru_cache(maxsize=None)
def _compiled(n_threads: int, dtype: str) -> tuple[Any, float]:
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    import torch

    from kernels.reference import torch_dtype

    launch_fn = _program()
    probe = torch.empty(2, 64, dtype=torch_dtype(dtype), device="cuda")
    started = time.perf_counter()
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled = cute.compile(launch_fn, _to_cute(probe), _to_cute(probe), stream, n_threads)
    return compiled, time.perf_counter() - started


class CuteOnline(Variant):
    name = "cute_online"
    seed = "003"
    backend = "cute"
    description = "CuTe DSL: one CTA per row, per-thread online (max, sum), shuffle + smem merge, normalize pass"

    def available(self) -> Support:
        reason = _cute_import_error()
        if reason:
            return Support(False, reason)
        return torch_cuda_support()

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(threads=t) for t in THREADS]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        # more threads than elements leaves whole warps idle: keep at least 2 elements per thread
        threads = int(config["threads"])
        return {} if threads == THREADS[0] else {"n_min": 2 * threads}

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        import cuda.bindings.driver as cuda
        import torch

        threads = int(config["threads"])
        compiled, seconds = _compiled(threads, dtype)

        def launch(x: Any, out: Any) -> None:
            if x.shape[0] == 0:
                return
            stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
            compiled(_to_cute(x), _to_cute(out), stream)

        resources = Resources(threads_per_block=threads, compile_seconds=seconds)
        return Build(self.name, config, dtype, launch, resources)

    def source_files(self) -> list[Path]:
        return [Path(__file__)]
