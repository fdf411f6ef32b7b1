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

template <typename T, int THREADS, int REGS>
__global__ void __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, 4 * REGS, 32))
    softmax_smem_cache(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int IN_REGS = REGS * THREADS;  // body vectors held in registers; the rest in `cache`
    extern __shared__ uint4 cache[];
    __shared__ smx::MaxSum scratch[THREADS / 32];
    const long long offset = static_cast<long long>(blockIdx.x) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit rs = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const T* __restrict__ xb = xr + rs.head;
    const smx::RowSplit front{0, min(rs.vecs, IN_REGS), 0};  // the register part, as a row of its own
    const int tid = static_cast<int>(threadIdx.x);
    __builtin_assume(tid >= 0);  // lets the empty head/tail slot of smx::RowTile fold away
    const int extras = rs.head + rs.tail;

    smx::RowTile<T, VEC, REGS, THREADS> tile;
    tile.load(xb, front, tid);
    for (int b = tid + IN_REGS; b < rs.vecs; b += THREADS)
        smx::cp_async16(&cache[b - IN_REGS], xb + static_cast<long long>(b) * VEC);
    const float extra = tid < extras ? smx::to_float<T>(xr[smx::extra_index<VEC>(rs, tid)]) : SOFTMAX_NEG_INF;

    float m = fmaxf(tile.max(), extra);
    smx::cp_async_wait_all();
    for (int b = tid + IN_REGS; b < rs.vecs; b += THREADS)
        smx::for_each_in<T>(cache[b - IN_REGS], [&](float v) { m = fmaxf(m, v); });
    const float base = smx::exp_base(m);
    if constexpr (sizeof(T) == 2) tile.reconvert_later(smx::opaque_zero());
    float s = smx::exp_from(extra, base);
    tile.for_each([&](float v) { s += smx::exp_from(v, base); });
    for (int b = tid + IN_REGS; b < rs.vecs; b += THREADS)
        smx::for_each_in<T>(cache[b - IN_REGS], [&](float v) { s += smx::exp_from(v, base); });
    const smx::MaxSum row = smx::block_merge<THREADS>(smx::MaxSum{m, s}, scratch);

    const float inv = 1.0f / row.s;
    auto out = [&](float v) { return smx::exp_from(v, row.m) * inv; };
    const bool vec_ok = smx::same_alignment<T, VEC>(xr, yr);
    T* __restrict__ yb = yr + rs.head;
    if constexpr (sizeof(T) == 2) tile.reconvert_later(smx::opaque_zero());
    tile.store(yb, front, tid, vec_ok, out);
    for (int b = tid + IN_REGS; b < rs.vecs; b += THREADS)
        smx::store_vec<T>(yb + static_cast<long long>(b) * VEC, smx::map_vec<T>(cache[b - IN_REGS], out), vec_ok);
    if (tid < extras) yr[smx::extra_index<VEC>(rs, tid)] = smx::from_float<T>(out(extra));
}
