// One-pass softmax with the row cached in registers and shared memory (seed 004 "medium" and
// "extreme"): one block per row, the row read from global memory once and written once.
//
// Body vector b of the row (16-byte, smx::row_split) goes to thread b % THREADS: its first REGS
// vectors (b < REGS * THREADS) stay in registers in the input type, the rest are copied straight
// into dynamic shared memory slot b - REGS * THREADS with cp.async (no register staging, so every
// load of the row is in flight at once). The < 2 * VEC head/tail scalars sit in one float register
// of the first threads. Each thread reads back only the slots it copied, which cp.async.wait_all
// makes visible to it: no block barrier is needed before the statistics.
//
// Dynamic shared memory: max(0, N / VEC - REGS * THREADS) * 16 bytes (the host sizes it from N;
// "medium" configs stay within 48 KB, "extreme" ones go up to the device's opt-in limit).
// Statistics: thread max over its cache, then the sum of exp(x - max) (no rescaling), then one
// MaxSum block reduction. fp32 accumulation; edge rows as torch.softmax.
#include "softmax_common.cuh"

namespace smem_cache {

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

}  // namespace smem_cache

template <typename T, int THREADS, int REGS, int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
    softmax_smem_cache(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    constexpr int VEC = 16 / sizeof(T);
    using P = smx::Pack<T, VEC>;
    extern __shared__ uint4 cache[];  // body vectors REGS * THREADS and up
    __shared__ smx::MaxSum scratch[THREADS / 32];
    const long long offset = static_cast<long long>(blockIdx.x) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit rs = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const T* __restrict__ xb = xr + rs.head;
    const int tid = static_cast<int>(threadIdx.x);
    const int extras = rs.head + rs.tail;

    P fill;
#pragma unroll
    for (int j = 0; j < VEC; ++j) fill.v[j] = smx::neg_inf<T>();
    P reg[REGS];
#pragma unroll
    for (int i = 0; i < REGS; ++i) {
        const int b = tid + i * THREADS;
        reg[i] = b < rs.vecs ? smx::ldg_pack<T, VEC>(xb + static_cast<long long>(b) * VEC) : fill;
    }
    for (int b = tid + REGS * THREADS; b < rs.vecs; b += THREADS)
        smem_cache::cp_async16(&cache[b - REGS * THREADS], xb + static_cast<long long>(b) * VEC);
    const float extra = tid < extras ? smx::to_float<T>(xr[smx::extra_index<VEC>(rs, tid)]) : SOFTMAX_NEG_INF;

    float m = extra;
#pragma unroll
    for (int i = 0; i < REGS; ++i)
#pragma unroll
        for (int j = 0; j < VEC; ++j) m = fmaxf(m, smx::to_float<T>(reg[i].v[j]));
    smem_cache::cp_async_wait_all();
    for (int b = tid + REGS * THREADS; b < rs.vecs; b += THREADS) {
        const P p = *reinterpret_cast<const P*>(&cache[b - REGS * THREADS]);
#pragma unroll
        for (int j = 0; j < VEC; ++j) m = fmaxf(m, smx::to_float<T>(p.v[j]));
    }
    const float base = smx::exp_base(m);
    float s = smx::exp_from(extra, base);
#pragma unroll
    for (int i = 0; i < REGS; ++i)
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += smx::exp_from(smx::to_float<T>(reg[i].v[j]), base);
    for (int b = tid + REGS * THREADS; b < rs.vecs; b += THREADS) {
        const P p = *reinterpret_cast<const P*>(&cache[b - REGS * THREADS]);
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += smx::exp_from(smx::to_float<T>(p.v[j]), base);
    }
    const smx::MaxSum row = smx::block_merge<THREADS>(smx::MaxSum{m, s}, scratch);
    const float inv = 1.0f / row.s;

    // Output: exp(x - row max) / sum, from the cache. y may sit at another 16-byte phase than x.
    const bool vec_ok = smx::same_alignment<T, VEC>(xr, yr);
    T* __restrict__ yb = yr + rs.head;
    auto emit = [&](int b, const P& in) {
        P out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) out.v[j] = smx::from_float<T>(smx::exp_from(smx::to_float<T>(in.v[j]), row.m) * inv);
        T* p = yb + static_cast<long long>(b) * VEC;
        if (vec_ok) {
            smx::st_pack<T, VEC>(p, out);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) p[j] = out.v[j];
        }
    };
#pragma unroll
    for (int i = 0; i < REGS; ++i) {
        const int b = tid + i * THREADS;
        if (b < rs.vecs) emit(b, reg[i]);
    }
    for (int b = tid + REGS * THREADS; b < rs.vecs; b += THREADS)
        emit(b, *reinterpret_cast<const P*>(&cache[b - REGS * THREADS]));
    if (tid < extras) yr[smx::extra_index<VEC>(rs, tid)] = smx::from_float<T>(smx::exp_from(extra, row.m) * inv);
}
