"""Toolchain smoke test: NVRTC with our header for every dtype, and a cluster kernel under NVRTC.

On the lent GPU (``bash bench/device/run.sh smoke``): a copy-and-exp kernel built with
``softmax_common.cuh`` for fp32, fp16 and bf16 and checked against torch, a cluster launch through
``__cluster_dims__`` and cooperative_groups, and resource queries. Prints one line per check."""
from __future__ import annotations

import sys
import traceback

import numpy as np
import torch

from kernels.cuda import loader

HEADER = (loader.SOURCE_DIR / "softmax_common.cuh").read_text()
KERNEL = HEADER + r'''
template <typename T, int VEC>
__global__ void smoke_copy_scale(const T* __restrict__ x, T* __restrict__ y, long long n) {
    long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) { float v[VEC]; smx::load_pack_nc<T, VEC>(x + i, v);
        for (int k = 0; k < VEC; ++k) v[k] = smx::exp_shifted(v[k], 0.f); smx::store_pack<T, VEC>(y + i, v); }
}
'''
CLUSTER = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(4, 1, 1) smoke_cluster(float* out) {
    __shared__ float mine;
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) mine = (float)cluster.block_rank();
    cluster.sync();
    float* peer = cluster.map_shared_rank(&mine, (cluster.block_rank() + 1) % 4);
    if (threadIdx.x == 0) out[blockIdx.x] = *peer;
    cluster.sync();
}
'''


def check(name, fn):
    try:
        print(f"OK   {name}: {fn()}")
    except Exception:
        print(f"FAIL {name}: {traceback.format_exc(limit=3)}")


def run_dtype(dtype):
    from kernels.reference import torch_dtype
    vec = 4 if dtype == "fp32" else 8
    expr = f"smoke_copy_scale<{loader.CUDA_TYPE[dtype]}, {vec}>"
    fn, secs = loader.get_function("smoke.cu", expr, code=KERNEL)
    x = torch.randn(1 << 20, device="cuda").to(torch_dtype(dtype))
    y = torch.empty_like(x)
    loader.launch(fn, ((x.numel() // vec + 255) // 256, 1, 1), (256, 1, 1),
                  (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int64(x.numel())))
    torch.cuda.synchronize()
    err = (y.float() - torch.exp(x.float())).abs().max().item()
    return f"compile {secs:.2f}s max err {err:.3g} {loader.resources_of(fn, 256)}"


def run_cluster():
    fn, secs = loader.get_function("smoke_cluster.cu", "smoke_cluster", code=CLUSTER)
    out = torch.full((8,), -1.0, device="cuda")
    loader.launch(fn, (8, 1, 1), (32, 1, 1), (np.uint64(out.data_ptr()),))
    torch.cuda.synchronize()
    return f"compile {secs:.2f}s out {out.tolist()} (expect 1,2,3,0,1,2,3,0)"


if __name__ == "__main__":
    print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), file=sys.stderr)
    import cupy, triton
    print("cupy", cupy.__version__, "triton", triton.__version__, "nvrtc", cupy.cuda.nvrtc.getVersion())
    for dtype in ("fp32", "fp16", "bf16"):
        check(f"nvrtc {dtype}", lambda d=dtype: run_dtype(d))
    check("cluster dims + cooperative_groups under NVRTC", run_cluster)
