// One block per row, the row held in registers; online softmax (seeds 000, 002, 003).
//
// Each thread loads its part of the row with 16-byte vectors (all loads issued before any use),
// forms its own (max, sum of exp(x - max)) pair, and the block combines the pairs in ONE MaxSum
// reduction (smx::block_merge: one barrier pair instead of a max and then a sum reduction). The
// output is written from the registers: one read and one write of the row.
//
// Float rows keep exp(x - thread max) in place and rescale by exp(thread max - row max) / sum;
// 16-bit rows stay packed (half the registers) and recompute the exp at the store. Any N up to
// THREADS * ITEMS * VEC: rows are split at 16-byte boundaries (smx::RowSplit) and the scalar
// head/tail is held beside the vectors.
#include "softmax_common.cuh"

template <typename T, int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, ITEMS * 4))
    softmax_block_online(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ smx::MaxSum scratch[THREADS / 32];
    const long long offset = static_cast<long long>(blockIdx.x) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit split = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const unsigned zero = smx::opaque_zero();

    smx::RowTile<T, VEC, ITEMS, THREADS> tile;
    tile.load(xr, split, threadIdx.x);
    const float m = tile.max();
    const float base = smx::exp_base(m);
    float s;
    if constexpr (sizeof(T) == 4) {
        s = tile.apply_sum([&](float v) { return smx::exp_from(v, base); });
    } else {
        tile.reconvert_later(zero);
        s = tile.sum([&](float v) { return smx::exp_from(v, base); });
        tile.reconvert_later(zero);
    }

    const smx::MaxSum row = smx::block_merge<THREADS>(smx::MaxSum{m, s}, scratch);
    const float inv = 1.0f / row.s;
    const bool vec_ok = smx::same_alignment<T, VEC>(x, y);
    if constexpr (sizeof(T) == 4) {
        const float scale = smx::rescale(m, row.m) * inv;
        tile.store(yr, split, threadIdx.x, vec_ok, [&](float p) { return p * scale; });
    } else {
        const float row_base = smx::exp_base(row.m);
        tile.store(yr, split, threadIdx.x, vec_ok, [&](float v) { return smx::exp_from(v, row_base) * inv; });
    }
}
