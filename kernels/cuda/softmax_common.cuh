// Device helpers shared by every CUDA softmax variant. Compiled by NVRTC (through CuPy: the loader
// inlines this header) and by nvcc (CI compile check), so it uses no host or standard headers.
//
// Numerics contract: all arithmetic in fp32; exp is exp2f of (x - max) * log2(e); the online merge
// guards the (-inf, -inf) case so a row whose first elements (or a thread's masked tail) are -inf
// still gives torch's answer; NaN and +inf propagate to an all-NaN row as in torch.softmax.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define SOFTMAX_LOG2E 1.4426950408889634f
#define SOFTMAX_NEG_INF __int_as_float(0xff800000)

namespace smx {

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// exp(x - max) without the libm call: one FFMA and one MUFU.EX2.
__device__ __forceinline__ float exp_shifted(float x, float max_scaled) {
    return exp2f(fmaf(x, SOFTMAX_LOG2E, -max_scaled));
}
__device__ __forceinline__ float scaled_max(float m) { return m * SOFTMAX_LOG2E; }

// Rescale factor exp(old - new) for a running sum; 1 where both are the same infinity (the sum is
// 0 for -inf, and the NaN from an x = +inf element carries the row to NaN on its own).
__device__ __forceinline__ float rescale(float old_max, float new_max) {
    return old_max == new_max ? 1.0f : exp2f((old_max - new_max) * SOFTMAX_LOG2E);
}

// (max, sum) pair of the online softmax, and its associative merge.
struct MaxSum {
    float m;
    float s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    float m = fmaxf(a.m, b.m);
    // fmaxf drops a NaN operand: keep NaN so a NaN row stays NaN.
    if (a.m != a.m || b.m != b.m) m = __int_as_float(0x7fc00000);
    return MaxSum{m, a.s * rescale(a.m, m) + b.s * rescale(b.m, m)};
}
__device__ __forceinline__ MaxSum online_add(MaxSum acc, float x) {
    return merge(acc, MaxSum{x, 1.0f});
}

__device__ __forceinline__ float nan_max(float a, float b) {
    return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}

template <int WIDTH = 32> __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset, WIDTH));
    return v;
}
template <int WIDTH = 32> __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset, WIDTH);
    return v;
}
template <int WIDTH = 32> __device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) {
        MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, offset, WIDTH), __shfl_xor_sync(0xffffffffu, v.s, offset, WIDTH)};
        v = merge(v, other);
    }
    return v;
}

// Block-wide reductions for THREADS threads (a multiple of 32). `scratch` holds THREADS/32 values
// (MaxSum: THREADS/32 pairs); every thread gets the result. Ends with a barrier, so the scratch may
// be reused by the next call.
template <int THREADS> __device__ __forceinline__ float block_max(float v, float* scratch) {
    constexpr int WARPS = THREADS / 32;
    v = warp_max(v);
    if (WARPS == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < WARPS ? scratch[lane] : SOFTMAX_NEG_INF;
    v = warp_max(v);
    __syncthreads();
    return v;
}
template <int THREADS> __device__ __forceinline__ float block_sum(float v, float* scratch) {
    constexpr int WARPS = THREADS / 32;
    v = warp_sum(v);
    if (WARPS == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < WARPS ? scratch[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}
template <int THREADS> __device__ __forceinline__ MaxSum block_merge(MaxSum v, MaxSum* scratch) {
    constexpr int WARPS = THREADS / 32;
    v = warp_merge(v);
    if (WARPS == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < WARPS ? scratch[lane] : MaxSum{SOFTMAX_NEG_INF, 0.0f};
    v = warp_merge(v);
    __syncthreads();
    return v;
}

// Vector of VEC elements of T moved as one load/store (VEC * sizeof(T) must be 4, 8 or 16 bytes,
// or VEC == 1). Callers guarantee alignment: row starts aligned because N % VEC == 0.
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void load_pack(const T* __restrict__ p, float (&out)[VEC]) {
    Pack<T, VEC> pack = *reinterpret_cast<const Pack<T, VEC>*>(p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_float<T>(pack.v[i]);
}
template <int BYTES> struct RawVec;
template <> struct RawVec<16> { using type = uint4; };
template <> struct RawVec<8> { using type = uint2; };
template <> struct RawVec<4> { using type = unsigned int; };
template <> struct RawVec<2> { using type = unsigned short; };

// Read-only (non-coherent cache) load, for data this kernel never writes.
template <typename T, int VEC>
__device__ __forceinline__ void load_pack_nc(const T* __restrict__ p, float (&out)[VEC]) {
    using Raw = typename RawVec<sizeof(T) * VEC>::type;
    union {
        Raw raw;
        Pack<T, VEC> pack;
    } u;
    u.raw = __ldg(reinterpret_cast<const Raw*>(p));
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_float<T>(u.pack.v[i]);
}
template <typename T, int VEC>
__device__ __forceinline__ void store_pack(T* __restrict__ p, const float (&in)[VEC]) {
    Pack<T, VEC> pack;
#pragma unroll
    for (int i = 0; i < VEC; ++i) pack.v[i] = from_float<T>(in[i]);
    *reinterpret_cast<Pack<T, VEC>*>(p) = pack;
}

}  // namespace smx
